"""``zoo train ... --doctor``: the doctor inside the training loop.

Before the first step it examines the model at initialisation on a batch of the validation data
(``RUN/doctor/init/doctor.md``, ``doctor.json`` and figures); after every epoch it runs the training-curve
check on ``metrics.jsonl`` so far and the per-step log it keeps (``RUN/doctor/steps.jsonl``: step, loss, learning
rate). A finding is logged as a warning the moment it appears (once) and written to ``report.md`` at once (the
trainer rewrites ``report.md`` at the end with the same section). The examination leaves the model, its
gradients and the random state as they were, so a run trains identically with and without ``--doctor``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from tasks.doctor.data import SUPPORTED, task_batch, unigram_plateau
from tasks.doctor.runs import STEPS_FILE, eval_split, read_jsonl
from tasks.runs.report import markdown_table
from zoo.analysis.doctor import Diagnosis, Finding, curve_checks, examine
from zoo.analysis.doctor.examine import is_post_ln

log = logging.getLogger(__name__)


class TrainingDoctor:
    """Hooks the trainer calls: :meth:`start` once the model is built (and resumed), :meth:`on_step` after every
    optimizer step, :meth:`after_epoch` after every epoch, :meth:`section` for ``report.md``."""

    def __init__(self, trainer) -> None:
        self.trainer = trainer
        self.out = trainer.out / "doctor"
        self.steps: list[dict[str, Any]] = []
        self.found: list[tuple[str, Finding]] = []
        self.seen: set[tuple[str, str]] = set()
        self.note = ""
        self.plateau: float | None = None

    def start(self, step: int) -> None:
        """Examine the model at initialisation (a resumed run: reload the per-step log instead)."""
        self.out.mkdir(parents=True, exist_ok=True)
        task = self.trainer.task
        self.plateau = unigram_plateau(task)
        if step > 0:
            self.steps = [r for r in read_jsonl(self.out / STEPS_FILE) if r.get("step", 0) <= step]
            (self.out / STEPS_FILE).write_text("".join(json.dumps(r) + "\n" for r in self.steps))  # no repeats
            self.note = "resumed: the initialisation was examined when the run started"
            return
        (self.out / STEPS_FILE).write_text("")
        if task.name not in SUPPORTED:
            self.note = f"no model examination for {task.name} (the curve check still runs)"
            return
        diagnosis = examine(self.trainer.model, task_batch(task, eval_split(task)), task.name, trained=False,
                            warmup_steps=self.trainer.config.warmup)
        diagnosis.context["source"] = "zoo train --doctor, before the first step"
        diagnosis.write(self.out / "init")
        self._report(diagnosis, "before the first step")

    def on_step(self, step: int, loss: float, lr: float) -> None:
        row = {"step": step, "loss": loss, "lr": lr}
        self.steps.append(row)
        with (self.out / STEPS_FILE).open("a") as f:
            f.write(json.dumps(row) + "\n")

    def after_epoch(self, history: list[dict[str, Any]]) -> None:
        task = self.trainer.task
        check = curve_checks(history, self.steps, is_post_ln(self.trainer.model), self.trainer.config.warmup,
                             task.main_metric, task.higher_is_better, plateau=self.plateau)
        self._report(Diagnosis([check]), f"after epoch {len(history)}")

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
        """Put the doctor's section into ``report.md`` now (before the trainer writes the whole report)."""
        path = self.trainer.out / "report.md"
        text = path.read_text() if path.is_file() else f"# {self.trainer.task.name} · {self.trainer.config.variant}\n"
        head = text.split("\n## Doctor\n")[0].rstrip("\n")
        path.write_text(f"{head}\n\n{self.section()}\n")

    def section(self) -> str:
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
        if (self.out / "init" / "doctor.md").is_file():
            lines += ["", "The examination at initialisation, with its numbers: [doctor/init/doctor.md]"
                          "(doctor/init/doctor.md); `zoo doctor RUN` examines the trained model."]
        return "\n".join(lines)
