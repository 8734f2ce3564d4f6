"""Pre-empt a training run after a chosen optimizer step, as a scheduler's SIGTERM does, for tests that resume it.

A run resumes only with the config it began with (:mod:`tasks.engine.same_run`: other epochs are another learning-rate
schedule), so a test that splits a run in two stops it midway instead of training fewer epochs first.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest

from tasks.engine.trainer import PreemptedError, Trainer


@contextmanager
def preempted_after(step: int) -> Iterator[None]:
    """Within the block, a training run stops after optimizer step ``step`` as on a stop signal: it saves
    ``last.pt`` and raises :class:`~tasks.engine.trainer.PreemptedError`, which the block must raise."""
    asked = Trainer._stop_requested

    def stop_requested(trainer: Trainer) -> bool:
        if trainer.optimizer_steps_done() == step:
            trainer.stop_signal = trainer.stop_signal or f"a test's pre-emption after step {step}"
        return asked(trainer)

    with mock.patch.object(Trainer, "_stop_requested", stop_requested), pytest.raises(PreemptedError):
        yield
