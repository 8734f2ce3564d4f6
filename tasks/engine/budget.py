"""Training budgets: when a run of ``zoo compare`` / ``zoo ablate`` stops.

The same number of epochs is not the same compute: a variant twice as expensive per step gets twice the
FLOPs. A budget makes the comparison say which resource it holds equal:

* ``epochs=N`` — N passes over the training data (the default, and what ``zoo train`` does);
* ``time=SECONDS`` — training time (optimizer steps, not evaluation or checkpoints) of all the run's sessions;
* ``flops=X`` — training FLOPs. Each optimizer step costs **3 × the forward FLOPs of its micro-batches**
  (the usual convention: the backward pass costs about twice the forward), the forward FLOPs counted by
  the counter ``zoo diff`` uses (:func:`zoo.analysis.delta.module_flops`: ``torch.utils.flop_counter``, math attention
  backend, 2·MACs of matmuls and convolutions) on the step's real inputs, once per input shape.

The trainer (:class:`tasks.engine.trainer.Trainer`) consults a budget after each optimizer step; when it is spent,
the run stops there, checkpoints and evaluates as at an epoch end. With a time or FLOP budget, ``epochs``
is the most a run may take. A FLOP budget also sizes the learning-rate schedule: the task's schedule is
planned for the steps the budget buys (from the FLOPs of the first step; exact when every step has the
same shape, as in cifar and medseg), where a time budget plans it over ``epochs``.

The counting is :class:`TrainingFlopCounter`'s; every run has one (a FLOP budget's, or the trainer's own), so
that metrics.json reports the run's training FLOP/s and MFU (:mod:`tasks.engine.mfu`) in the same FLOPs.

A budget survives a pre-emption: the checkpoint records the budget, the planned steps and each session's seconds
and FLOPs (:mod:`tasks.engine.sessions`), so a run resumed with ``--resume`` (with the same ``--budget`` or none)
counts on from where it stopped and ends at the step the uninterrupted run ends at.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import torch

KINDS = ("epochs", "time", "flops")
BACKWARD_FACTOR = 3  # training FLOPs per step = 3 × forward FLOPs (forward + a backward of about twice)
FLOP_CONVENTION = (f"training FLOPs = {BACKWARD_FACTOR} × forward FLOPs of each step's batches, counted by "
                   "zoo diff's counter (2·MACs of matmuls/convolutions/attention, math attention backend)")


class Budget:
    """When a run stops. Subclasses: :class:`EpochBudget`, :class:`TimeBudget`, :class:`FlopBudget`."""

    kind = ""

    def __init__(self, value: float) -> None:
        self.value = value

    def describe(self) -> str:
        """The budget as the report states it."""
        raise NotImplementedError

    def planned_steps(self, trainer, default: int) -> int:
        """The optimizer steps the learning-rate schedule is planned for (``default``: epochs × steps/epoch)."""
        return default

    def start(self, trainer) -> None:
        """Called once before the first step (e.g. to watch the model's inputs)."""

    def exhausted(self, trainer, seconds: float) -> bool:
        """After each optimizer step: has the run spent its budget? ``seconds``: training time so far, every
        session's."""
        return False

    def spent(self) -> dict[str, Any]:
        """What was spent, for metrics.json (``budget``)."""
        return {"kind": self.kind, "value": self.value}


class EpochBudget(Budget):
    kind = "epochs"

    def describe(self) -> str:
        return f"{int(self.value)} epoch(s) per run"


class TimeBudget(Budget):
    kind = "time"

    def __init__(self, value: float) -> None:
        super().__init__(value)
        self.seconds = 0.0

    def describe(self) -> str:
        return f"{self.value:g} s of training per run (optimizer steps; evaluation not counted)"

    def exhausted(self, trainer, seconds: float) -> bool:
        self.seconds = seconds
        return seconds >= self.value

    def spent(self) -> dict[str, Any]:
        return {**super().spent(), "train_seconds": self.seconds}


class TrainingFlopCounter:
    """Training FLOPs of the optimizer steps a trainer runs: :data:`BACKWARD_FACTOR` × the forward FLOPs of every
    training forward of the model (train mode, gradients on; evaluation is not counted), each input shape
    measured once with ``zoo diff``'s counter.

    Shared by :class:`FlopBudget` (which stops a run when the count reaches its value) and the trainer's FLOP/s
    and MFU (:mod:`tasks.engine.mfu`), so both mean the same FLOPs. The hook only notes each forward's input shape;
    the trainer calls :meth:`update` after every optimizer step, outside the step's timed part, to turn the notes
    into FLOPs: the count always covers whole steps, the ones a checkpoint records.
    """

    def __init__(self) -> None:
        self.flops = 0.0  # a resumed run starts it at its earlier sessions' FLOPs
        self.counting_seconds = 0.0  # time spent in update() (outside the training time)
        self._cache: dict[tuple, int] = {}  # input shapes -> forward FLOPs
        self._pending: dict[tuple, list] = {}  # input shapes -> [example inputs, forwards not yet counted]
        self._world = 1

    def start(self, trainer) -> TrainingFlopCounter:
        """Watch ``trainer.model``'s training forwards from now on."""
        self._world = trainer.dist.world if trainer.dist.enabled else 1

        def watch(module, args):
            if module.training and torch.is_grad_enabled():  # a training forward, not an evaluation
                self._pending.setdefault(_shape_key(args), [args, 0])[1] += 1

        trainer.model.register_forward_pre_hook(watch)
        return self

    def update(self, model: torch.nn.Module) -> float:
        """Count the forwards seen since the last call; returns the training FLOPs so far (all ranks)."""
        tic = time.perf_counter()
        forward = sum(count * self.forward_flops(model, args) for args, count in self._pending.values())
        self._pending.clear()
        self.flops += BACKWARD_FACTOR * forward * self._world  # every rank ran a shard of the same shape
        self.counting_seconds += time.perf_counter() - tic
        return self.flops

    def forward_flops(self, model: torch.nn.Module, args: tuple) -> int:
        """Forward FLOPs of ``model`` on ``args``, measured once per input shape (eval mode, no grad)."""
        from tasks.engine.checkpoint import rng_state, set_rng_state
        from zoo.analysis.delta import module_flops

        key = _shape_key(args)
        if key not in self._cache:
            was_training, rng = model.training, rng_state()
            try:
                self._cache[key] = module_flops(model, args)[1]
            finally:
                model.train(was_training)
                set_rng_state(rng)
        return self._cache[key]


def _shape_key(args: tuple) -> tuple:
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else repr(a) for a in args)


class FlopBudget(Budget):
    kind = "flops"

    def __init__(self, value: float) -> None:
        super().__init__(value)
        self.counter = TrainingFlopCounter()

    @property
    def flops(self) -> float:
        return self.counter.flops

    def describe(self) -> str:
        return f"{self.value:.3g} training FLOPs per run ({FLOP_CONVENTION})"

    def planned_steps(self, trainer, default: int) -> int:
        """Steps the budget buys at the first step's cost (its inputs captured without running the model)."""
        from tasks.engine.checkpoint import rng_state, set_rng_state
        from tasks.engine.distributed import shard

        c, task = trainer.config, trainer.task
        group = task.train_batches(0)[: c.accumulate]
        captured: list[tuple] = []

        def capture(module, args):
            captured.append(args)
            raise _CapturedError

        rng = rng_state()  # building the batch may draw random numbers: leave the stream as it was
        handle = trainer.model.register_forward_pre_hook(capture)
        try:
            with torch.no_grad():
                for rows in group:
                    with contextlib.suppress(_CapturedError):
                        task.loss(trainer.model, shard(list(rows), trainer.dist))
        finally:
            handle.remove()
            set_rng_state(rng)
        step = BACKWARD_FACTOR * sum(self.counter.forward_flops(trainer.model, args) for args in captured)
        step *= trainer.dist.world if trainer.dist.enabled else 1
        return default if step <= 0 else min(default, max(1, math.ceil(self.value / step)))

    def start(self, trainer) -> None:
        self.counter.start(trainer)

    def exhausted(self, trainer, seconds: float) -> bool:
        return self.counter.update(trainer.model) >= self.value

    def spent(self) -> dict[str, Any]:
        return {**super().spent(), "train_flops": self.flops, "counting_seconds": self.counter.counting_seconds,
                "convention": FLOP_CONVENTION}


class _CapturedError(Exception):
    """Raised by the capturing hook: the inputs are known, the forward need not run."""


BUDGETS = {"epochs": EpochBudget, "time": TimeBudget, "flops": FlopBudget}


def parse_budget(text: str) -> Budget:
    """``"epochs=3"``, ``"time=120"`` (seconds) or ``"flops=2e13"`` -> a :class:`Budget`."""
    from plumbing.errors import unknown_name

    if not isinstance(text, str) or "=" not in text:
        raise ValueError(f"--budget must be KIND=VALUE with KIND one of {', '.join(KINDS)} (e.g. time=600), "
                         f"got {text!r}")
    kind, raw = (part.strip() for part in text.split("=", 1))
    if kind not in BUDGETS:
        raise unknown_name("budget kind", kind, KINDS)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"--budget {kind}= needs a number, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"--budget {kind} must be a finite number > 0, got {raw}")
    if kind == "epochs" and value != int(value):
        raise ValueError(f"--budget epochs= must be a whole number of epochs, got {raw}; use time= or flops= for a "
                         "budget that ends mid-epoch")
    return BUDGETS[kind](int(value) if kind == "epochs" else value)
