"""What a study trains: in every cell, each change's two sides over the same seeds, and the base's noise floor.

For a change and a cell (:mod:`tasks.study.grid`), :meth:`zoo.changes.TravellingChange.sides` gives the two model
configs, the classic choice and the new one, from the task's base at the cell's preset. Each side is trained with
seeds ``0 … K−1``; the classic side again with seeds ``K … 2K−1``: the *noise floor*, base against base, so that
``classic(K+i) − classic(i)`` shows what a reseed alone moves the metric by. A side is written as the model overrides
that make it from the base config (``{}``: the base itself), so the base runs of changes that leave it as it is are
one set of runs, trained once.

Learning rates (:class:`Regime`): ``shared`` trains both sides at the task's default learning rate; ``tuned`` at each
side's own, chosen per cell on the validation split by :mod:`tasks.study.tune` from the runs at seed 0 over the grid
(``--tune lr=A,B,C``). Those tuning runs at the chosen rate are the tuned regime's seed 0: nothing is trained twice.

A run folder is named ``<task>-<dataset>-<preset>-<side>-lr<LR>-seed<S>-<hash>`` (:class:`tasks.sweeps.plan.RunSpec`
adds the config hash), so that a rerun of the study, on any launcher, finds its runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tasks.engine.registry import task_class
from tasks.study.grid import StudyCell
from tasks.sweeps.plan import RunSpec, slug
from zoo.changes import TravellingChange

BASE = "base"


@dataclass(frozen=True)
class Side:
    """One model a cell trains: the base, or the base with a change applied (``new``) or reverted (classic).

    ``overrides`` are the model config fields that make it from the cell's base config; ``label`` is ``base`` when
    there are none, else the change's name (new side) or ``no-<change>`` (classic side, on a base that already has
    the change, as ViT has Pre-LN).
    """

    cell: StudyCell
    overrides: dict[str, Any] = field(hash=False, compare=False)
    label: str = BASE


@dataclass(frozen=True)
class Pairing:
    """One change in one cell: its two sides, or why it does not apply there (``reason``)."""

    change: str
    cell: StudyCell
    classic: Side | None
    new: Side | None
    reason: str = ""


def _differences(config: Any, base: Any) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if getattr(config, f.name) != getattr(base, f.name)}


def pairings(changes: list[TravellingChange], cells: list[StudyCell],
             model_set: dict[str, Any] | None = None) -> list[Pairing]:
    """Each change in each cell: its classic and new :class:`Side`, or why the cell's model cannot take it.

    ``model_set``: model config fields every run sets (``--model-set``), part of the base each change applies to.
    """
    found = []
    for cell in cells:
        base = dataclasses.replace(cell.base_config(), **(model_set or {}))
        for change in changes:
            reason = change.why_not(base)
            if reason:
                found.append(Pairing(change.name, cell, None, None, reason))
                continue
            classic, new = change.sides(base)
            sides = []
            for config, label in ((classic, f"no-{change.name}"), (new, change.name)):
                overrides = _differences(config, base)
                sides.append(Side(cell, {**(model_set or {}), **overrides}, label if overrides else BASE))
            found.append(Pairing(change.name, cell, *sides))
    return found


@dataclass(frozen=True)
class Regime:
    """How a study sets the learning rate: ``shared`` (the task's default for both sides) or ``tuned``."""

    name: str
    lrs: dict[tuple[str, str], float] = field(default_factory=dict, hash=False)  # (cell label, side label) -> lr

    def lr(self, side: Side) -> float:
        if self.name == "shared":
            return default_lr(side.cell.task)
        return self.lrs[(side.cell.label, side.label)]


def default_lr(task: str) -> float:
    """The task's default peak learning rate (its config's ``lr``), the shared regime's."""
    return task_class(task).config_class().lr


def run_spec(side: Side, seed: int, lr: float, budget: str, settings: dict[str, Any]) -> RunSpec:
    """The run of ``side`` at ``seed`` and learning rate ``lr`` under ``budget`` (``epochs=N``, ``time=S``, ...).

    ``settings``: task config fields every run of the task shares (``--set``), over the cell's dataset's.
    """
    cell = side.cell
    cls = task_class(cell.task)
    config = cls.config_class(**{**cell.settings, **settings, "variant": cell.variant, "preset": cell.model_preset,
                                 "seed": seed, "lr": lr, "progress": False,
                                 "model": side.overrides})
    values = {k: v for k, v in config.to_dict().items() if k not in ("out", "resume")}
    label = f"{cell.task}-{cell.dataset}-{cell.preset}-{side.label}-lr{lr:g}"
    spec = RunSpec(cell.task, slug(label), values, budget)
    return dataclasses.replace(spec, name=f"{spec.label}-seed{seed}-{spec.key}")


def regime_runs(pairs: list[Pairing], regime: Regime, seeds: int, budget: str,
                settings: dict[str, Any]) -> dict[tuple[str, str, str], list[RunSpec]]:
    """Every run a regime's verdict reads: ``(cell label, change, role) -> runs``, role ``classic``, ``new`` (seeds
    ``0 … seeds−1``) or ``noise`` (the classic side at seeds ``seeds … 2·seeds−1``)."""
    runs = {}
    for p in pairs:
        if p.reason:
            continue
        for role, side, first in (("classic", p.classic, 0), ("new", p.new, 0), ("noise", p.classic, seeds)):
            lr = regime.lr(side)
            runs[(p.cell.label, p.change, role)] = [run_spec(side, s, lr, budget, settings)
                                                   for s in range(first, first + seeds)]
    return runs


def unique(specs: list[RunSpec]) -> list[RunSpec]:
    """``specs`` without repeats (the same run asked for by several changes), in first-seen order."""
    return list({s.name: s for s in specs}.values())
