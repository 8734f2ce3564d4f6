"""A training run as ``zoo train`` makes it: the trainer, plus the callbacks that write the run folder.

:func:`train` is what ``zoo train``, ``zoo compare``, ``zoo ablate`` and ``zoo cv`` call. The
:class:`~tasks.engine.trainer.Trainer` trains and checkpoints; :class:`RunFolder` writes what makes the run
usable and readable afterwards — ``config.json``, the task's artefacts (tokenizer, classes) and ``run.json``
before the first step (what :func:`tasks.runs.run.load_run` rebuilds the model from, with the precision it
trained in), and ``metrics.json``, ``curves.png`` and ``report.md`` (the task's section, the layers' statistics,
the delta analysis of the trained variant) at the end; with ``--init-from``, ``init_from.md`` (where each
tensor's starting value came from) and its record in ``run.json``; with ``--doctor`` the doctor watches the run
(:class:`zoo.analysis.doctor.training.TrainingDoctor`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.sidechannels import layer_statistics
from plumbing.atomic import write_json_atomic, write_text_atomic
from plumbing.tables import markdown_table
from tasks.engine.callbacks import Callback
from tasks.engine.task import Task
from tasks.engine.trainer import Trainer
from tasks.runs.report import plot_curves, write_report
from tasks.runs.run import RUN_FILE, run_info
from tasks.runs.tracking import trackers

log = logging.getLogger(__name__)
INIT_FILE = "init_from.md"  # --init-from's per-tensor table (tasks.engine.pretrained)


def train(task_class: type[Task], config, budget=None, callbacks: Sequence = ()) -> dict[str, Any]:
    """Train ``task_class`` with ``config`` into ``config.out_dir``; the final summary (also ``metrics.json``).

    ``budget`` may stop the run after any optimizer step (:mod:`tasks.engine.budget`); ``callbacks`` run after
    the run folder's own (:mod:`tasks.engine.callbacks`).
    """
    return Trainer(task_class, config, budget, callbacks_for(config, callbacks)).fit()


def callbacks_for(config, extra: Sequence = ()) -> list:
    """The callbacks of a run with ``config``: its folder, the trackers of ``--track``
    (:mod:`tasks.runs.tracking`), the doctor with ``--doctor``, then ``extra``."""
    found = [RunFolder(), *trackers(config.track)]
    if config.doctor:  # examines the model before the first step (leaving weights, gradients and RNG as they were)
        from zoo.analysis.doctor.training import TrainingDoctor

        found.append(TrainingDoctor())
    return [*found, *extra]


class RunFolder(Callback):
    """Writes the run folder around the checkpoints (see the module docstring)."""

    def on_start(self, trainer, step: int) -> None:
        task, out = trainer.task, trainer.out
        trainer.config.save(out / "config.json")
        task.save_artifacts(out)
        # what `zoo.load_run` rebuilds the model from; `zoo evaluate` evaluates in the precision recorded here
        start = _initialisation(trainer)
        write_json_atomic(out / RUN_FILE, {**run_info(task), "precision": trainer.precision_used, **start})

    def section(self, trainer) -> str:
        sections = (initialisation_section(trainer.out), statistics_section(trainer.model), delta_section(trainer))
        return "\n\n".join(s for s in sections if s)

    def on_finish(self, trainer, summary: dict[str, Any], sections: list[str]) -> None:
        out = trainer.out
        (out / "metrics.json").write_text(json.dumps(summary, indent=2) + "\n")
        if trainer.config.figures:
            plot_curves(trainer.history, trainer.task.main_metric, out / "curves.png")
        write_report(out / "report.md", trainer.config, summary, "\n\n".join(sections))


def _initialisation(trainer) -> dict[str, Any]:
    """``run.json``'s record of ``--init-from`` and ``--freeze``; writes ``init_from.md`` (the per-tensor table).

    A resumed run loaded no weights from ``--init-from`` this time: it keeps the record its first start wrote.
    """
    c, out = trainer.config, trainer.out
    record: dict[str, Any] = {}
    if trainer.initialisation is not None:
        record["init_from"] = trainer.initialisation.to_dict()
        write_text_atomic(out / INIT_FILE, trainer.initialisation.table() + "\n")
    elif c.init_from and (out / RUN_FILE).is_file():
        record["init_from"] = json.loads((out / RUN_FILE).read_text()).get("init_from")
    if c.freeze:
        record["frozen"] = {"parts": c.freeze, "values": trainer.frozen}
    return record


def initialisation_section(out: Path) -> str:
    """``report.md``'s table of where the weights came from (``--init-from``)."""
    file = out / INIT_FILE
    return f"## Initial weights\n\n{file.read_text().strip()}" if file.is_file() else ""


def statistics_section(model) -> str:
    """What the model's layers report about the last evaluation batch (e.g. MoE routing: load per expert, drops,
    router entropy), one row per layer."""
    stats = layer_statistics(model)
    if not stats:
        return ""
    rows = [{"layer": name, **{key: " ".join(f"{x:.2f}" for x in value) if isinstance(value, list) else value
                               for key, value in layer.items()}} for name, layer in stats.items()]
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return "## Layer statistics (last evaluation batch)\n\n" + markdown_table(rows, columns)


def delta_section(trainer) -> str:
    """The "what changed" analysis of the trained variant, at the size it was trained."""
    from zoo.analysis.delta import measure
    from zoo.analysis.report import render_markdown

    c, task = trainer.config, trainer.task
    if c.variant in getattr(task, "reference_models", ()):
        return "## What changed\n\nA reference model outside the zoo (not a Transformer patch): no delta analysis."
    if task.delta_shape is None:
        return f"## What changed\n\nThe {task.name} task declares no input shape to measure at: no delta analysis."
    variant, overrides = task.variant or c.variant, task.delta_overrides()
    key = json.dumps([getattr(variant, "name", variant), repr(task.delta_shape), c.preset, overrides],
                     sort_keys=True, default=repr)
    if key not in _DELTA_SECTIONS:
        try:
            report = measure(variant, task.delta_shape, c.preset, overrides=overrides)
        except Exception as error:  # a reporting failure must not cost the finished training run
            log.warning("delta analysis failed: %s", error)
            return f"## What changed\n\nThe delta analysis failed: {error}"
        _DELTA_SECTIONS[key] = render_markdown(report, heading="##")
    return _DELTA_SECTIONS[key]


# The delta analysis of a (variant, input shape, preset, model overrides) depends on nothing else — not the seed,
# the data or the training — so a process that trains many runs (a serial sweep, a local launcher's reused worker)
# builds the variant and its classic counterpart once per model, not once per run.
_DELTA_SECTIONS: dict[str, str] = {}
