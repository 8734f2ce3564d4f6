"""Each side at its own learning rate: the choice over a grid, on the validation split only.

``--tune lr=A,B,C`` trains every side of every cell once (seed 0) at each rate of the grid and keeps, per cell and
side, the rate whose run scored best on the validation split (``best_valid`` of its ``metrics.json``: the best
epoch's validation value of the task's main metric, read in the task's direction). Nothing of the test split is read
by the choice: the test metric of a tuning run is never looked at here, and the tuned regime's verdict is then
measured on fresh seeds beside the chosen seed-0 run. Ties go to the first rate of the grid. Every tuning run counts
in the study's cost (:mod:`tasks.study.study`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plumbing.errors import check_number
from tasks.engine.registry import task_class
from tasks.study.plan import Side, run_spec
from tasks.sweeps.plan import RunSpec

TUNING_SEED = 0


def parse_tune(text: str | None) -> list[float]:
    """``lr=A,B,C`` as the learning rates to try (at least two, each positive, none twice); ``None``: no tuning."""
    if text is None:
        return []
    name, _, values = text.partition("=")
    if name.strip() != "lr" or not values.strip():
        raise ValueError(f"--tune {text!r}: expected lr=A,B,C (the learning rates each side tries), e.g. "
                         "--tune lr=3e-4,1e-3,3e-3; only the learning rate is tuned")
    try:
        lrs = [float(v) for v in values.split(",")]
    except ValueError:
        raise ValueError(f"--tune {text!r}: each learning rate must be a number, e.g. lr=3e-4,1e-3") from None
    for lr in lrs:
        check_number("a learning rate of --tune", lr, 0, low_open=True, hint="e.g. 1e-3")
    if len(lrs) < 2 or len(set(lrs)) != len(lrs):
        raise ValueError(f"--tune {text!r}: give at least two different learning rates, got {lrs}")
    return lrs


def tuning_runs(sides: list[Side], lrs: list[float], budget: str, settings: dict[str, Any]
                ) -> dict[tuple[str, str], list[RunSpec]]:
    """``(cell label, side label) -> one run per rate of the grid`` at the tuning seed."""
    return {(s.cell.label, s.label): [run_spec(s, TUNING_SEED, lr, budget, settings) for lr in lrs] for s in sides}


def validation_hash(spec: RunSpec) -> str | None:
    """The hash of the validation split ``spec``'s run chooses on (the task set up without training), checked to
    differ from the test split's: a task that validates on its test split (translation data without ``valid``,
    cifar with ``valid_fraction=0``) would let the test split choose, and is refused."""
    import torch

    from tasks.engine.config import config_from_dict
    from tasks.engine.distributed import DistInfo

    cls = task_class(spec.task)
    config = config_from_dict(cls.config_class, {k: v for k, v in spec.config.items() if k != "task"})
    runner = cls(config, torch.device("cpu"), DistInfo())
    runner.setup()
    valid, test = runner.data_hash("valid"), runner.data_hash("test")
    if valid is not None and valid == test:
        raise ValueError(f"--tune on {spec.task}: its validation split is its test split, so the choice would read "
                         "the test split; give data with a validation split (translation: valid.* files; cifar: --set "
                         "cifar.valid_fraction=0.1)")
    return valid


@dataclass(frozen=True)
class Choice:
    """One side's learning rate: the validation value at each rate tried and the one kept."""

    cell: str
    side: str
    valid: dict[float, float]
    chosen: float
    metric: str  # the validation metric's name (the task's main metric)
    higher_is_better: bool
    valid_hash: str | None = None  # the validation split's (Task.data_hash("valid"), at the tuning seed)

    def to_dict(self) -> dict[str, Any]:
        return {"cell": self.cell, "side": self.side, "metric": self.metric, "higher_is_better": self.higher_is_better,
                "valid": {f"{lr:g}": v for lr, v in self.valid.items()}, "chosen": self.chosen,
                "valid_hash": self.valid_hash}


def validation_value(folder: Path) -> float:
    """A finished run's best validation value (``metrics.json`` ``best_valid``); a run without one is an error."""
    metrics = json.loads((Path(folder) / "metrics.json").read_text())
    value = metrics.get("best_valid")
    if value is None or not math.isfinite(value):
        raise ValueError(f"{folder} has no validation value (best_valid {value!r}); a tuned study needs a "
                         "validation split: check the task's validation settings (cifar: --set valid_fraction=0.1)")
    return float(value)


def choose(cell: str, side: str, runs: list[RunSpec], folders: dict[str, Path],
           valid_hash: str | None = None) -> Choice:
    """The rate of ``runs`` (one side's, one task's) whose run scored best on validation, in the task's direction;
    ``valid_hash`` (of :func:`validation_hash`) is recorded with it."""
    cls = task_class(runs[0].task)
    valid = {float(spec.config["lr"]): validation_value(folders[spec.name]) for spec in runs}
    sign = 1 if cls.higher_is_better else -1
    chosen = max(valid, key=lambda lr: sign * valid[lr])  # max keeps the first of equal values: grid order
    return Choice(cell, side, valid, chosen, cls.main_metric, cls.higher_is_better, valid_hash)
