"""``zoo train ... --doctor``: the doctor inside the training loop, as a trainer callback.

Before the first step it examines the model at initialisation on a batch of the validation data
(``RUN/doctor/init/doctor.md``, ``doctor.json`` and figures); after every epoch it runs the training-curve
check on the history so far and the per-step log it keeps (``RUN/doctor/steps.jsonl``: step, loss, learning
rate). A finding is logged as a warning the moment it appears (once) and written to ``report.md`` at once (the
run's report is rewritten at the end with the same section). The examination leaves the model, its
gradients and the random state as they were, so a run trains identically with and without ``--doctor``.

What it asks of the task is the task's own business: ``task.doctor_batch(split)`` (None: no examination, the
curve check still runs), ``task.target_entropy()`` (the plateau of a model that reads nothing), ``main_metric``
and ``higher_is_better``. It follows the trainer's callback protocol (:class:`tasks.engine.callbacks.Callback`)
without importing it: the analysis sits below the task layer.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from plumbing.tables import markdown_table
from zoo.analysis.doctor.curve import curve_checks
from zoo.analysis.doctor.examine import examine, is_post_ln
from zoo.analysis.doctor.findings import Diagnosis, Finding
from zoo.analysis.doctor.render import write_diagnosis

log = logging.getLogger(__name__)

STEPS_FILE = "steps.jsonl"  # under RUN/doctor/: the per-step log of `zoo train --doctor`


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file; a torn last line (a run killed mid-write) is left out."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def eval_split(task) -> str:
    """The held-out split a task validates on (``valid`` where the task evaluates one, else ``test``)."""
    return "valid" if "valid" in task.eval_splits else "test"


class TrainingDoctor:
    """The trainer calls :meth:`on_start` once the model is built (and resumed), :meth:`on_step` after every
    optimizer step, :meth:`on_epoch_end` after every epoch and :meth:`section` for ``report.md``."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.found: list[tuple[str, Finding]] = []
        self.seen: set[tuple[str, str]] = set()
        self.note = ""
        self.plateau: float | None = None
        self.out: Path | None = None
        self.report: Path | None = None
        self.title = ""

    def on_start(self, trainer, step: int) -> None:
        """Examine the model at initialisation (a resumed run: reload the per-step log instead)."""
        task = trainer.task
        self.out, self.report = trainer.out / "doctor", trainer.out / "report.md"
        self.title = f"# {task.name} · {trainer.config.variant}"
        self.out.mkdir(parents=True, exist_ok=True)
        self.plateau = task.target_entropy()
        if step > 0:
            self.steps = [r for r in read_jsonl(self.out / STEPS_FILE) if r.get("step", 0) <= step]
            (self.out / STEPS_FILE).write_text("".join(json.dumps(r) + "\n" for r in self.steps))  # no repeats
            self.note = "resumed: the initialisation was examined when the run started"
            return
        (self.out / STEPS_FILE).write_text("")
        batch = task.doctor_batch(eval_split(task))
        if batch is None:
            self.note = f"no model examination for {task.name} (the curve check still runs)"
            return
        diagnosis = examine(trainer.model, batch, trained=False, warmup_steps=trainer.config.warmup)
        diagnosis.context["source"] = "zoo train --doctor, before the first step"
        write_diagnosis(diagnosis, self.out / "init")
        self._report(diagnosis, "before the first step")

    def on_step(self, trainer, step: int, loss: float, lr: float) -> None:
        row = {"step": step, "loss": loss, "lr": lr}
        self.steps.append(row)
        with (self.out / STEPS_FILE).open("a") as f:
            f.write(json.dumps(row) + "\n")

    def on_epoch_end(self, trainer, history: list[dict[str, Any]]) -> None:
        task = trainer.task
        check = curve_checks(history, self.steps, is_post_ln(trainer.model), trainer.config.warmup,
                             task.main_metric, task.higher_is_better, plateau=self.plateau)
        self._report(Diagnosis([check]), f"after epoch {len(history)}")

    def on_finish(self, trainer, summary: dict[str, Any], sections: list[str]) -> None:
        """Nothing more: the run's report takes :meth:`section`."""

    def _report(self, diagnosis: Diagnosis, when: str) -> None:
        new = [f for f in diagnosis.findings if (f.check, f.problem) not in self.seen]
        for finding in new:
            self.seen.add((finding.check, finding.problem))
            self.found.append((when, finding))
            log.warning("doctor (%s): %s: %s; likely cause: %s; fix: %s", when, finding.problem, finding.evidence,
                        finding.cause, finding.fix)
        if new:
            self._write_report()

    def _write_report(self) -> None:
        """Put the doctor's section into ``report.md`` now (before the run's whole report is written)."""
        text = self.report.read_text() if self.report.is_file() else f"{self.title}\n"
        head = text.split("\n## Doctor\n")[0].rstrip("\n")
        self.report.write_text(f"{head}\n\n{self.section()}\n")

    def section(self, trainer=None) -> str:
        """The ``## Doctor`` section of ``report.md``: each finding with when it appeared, or "nothing found"."""
        lines = ["## Doctor", ""]
        if self.found:
            lines.append(markdown_table([{"when": when, "severity": f.severity, "problem": f.problem,
                                          "evidence": f.evidence, "fix": f.fix} for when, f in self.found]))
        else:
            lines.append("Nothing found: the model at initialisation and the training curve after every epoch "
                         "passed every check.")
        if self.note:
            lines += ["", self.note]
        if self.out is not None and (self.out / "init" / "doctor.md").is_file():
            lines += ["", "The examination at initialisation, with its numbers: [doctor/init/doctor.md]"
                          "(doctor/init/doctor.md); `zoo doctor RUN` examines the trained model."]
        return "\n".join(lines)
