"""What a run cost, session by session.

A run pre-empted and requeued with ``--resume`` trains in several processes (sessions). Each is recorded in the
checkpoint and in metrics.json (``sessions``), and a run's costs are the totals over them (:func:`totals`):
``train_seconds``, ``items_per_s``, the training FLOP/s and MFU (:mod:`tasks.engine.mfu`), and the time a
``--budget time=`` has spent (:mod:`tasks.engine.budget`). Work a killed session did after its last checkpoint is
not recorded: the resumed session does it again and counts it, so the totals are those of the uninterrupted run.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

# the numbers that add up over sessions (``started`` and ``first_step`` say where a session began)
SUMMED = ("steps", "items", "step_seconds", "train_seconds", "flops")


@dataclass
class Session:
    """One process's share of a run."""

    started: str  # when the session began (UTC, ISO 8601)
    first_step: int  # optimizer steps done before it
    steps: int = 0  # optimizer steps it completed
    items: float = 0.0  # training items of those steps (all ranks)
    # time inside optimizer steps only (evaluation, checkpoints and FLOP counting excluded): what a time budget
    # spends, and what items/s, FLOP/s and MFU divide by
    step_seconds: float = 0.0
    train_seconds: float = 0.0  # the training loop's wall time, evaluation and checkpoints included
    flops: float = 0.0  # training FLOPs (tasks.engine.budget.TrainingFlopCounter)

    @classmethod
    def begin(cls, first_step: int) -> Session:
        return cls(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), first_step)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def totals(sessions: list[dict[str, Any]]) -> dict[str, float]:
    """The sum of each of :data:`SUMMED` over ``sessions`` (dicts as :meth:`Session.to_dict` writes them)."""
    return {key: sum(s[key] for s in sessions) for key in SUMMED}

