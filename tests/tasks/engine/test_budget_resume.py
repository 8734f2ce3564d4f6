"""A budgeted run pre-empted (SIGTERM) and resumed stops where the uninterrupted run stops, and reports the costs of
all its sessions (tasks.engine.budget, tasks.engine.sessions); a --deterministic run leaves the process as it was.

On the toy task (8 optimizer steps an epoch, tests/tasks/engine/test_budget.py). A time budget is made exact by
a fake clock that advances 1 s per training forward (one per step), and by nothing else.
"""

import json
import os
import signal
from types import SimpleNamespace

import pytest
import torch

import tasks.engine.trainer as trainer_module
from tasks.engine.budget import EpochBudget, FlopBudget, TimeBudget
from tasks.engine.checkpoint import load_checkpoint
from tasks.engine.trainer import PreemptedError
from tests.tasks.engine.test_budget import STEP_FLOPS, _trainer
from tests.toy_task import ToyTask

BUDGETS = {"epochs": lambda: EpochBudget(3), "flops": lambda: FlopBudget(13.5 * STEP_FLOPS),
           "time": lambda: TimeBudget(13.5)}  # the flop and time budgets end mid-epoch 2, after step 14


@pytest.fixture
def one_second_per_step(monkeypatch):
    """The trainer's clock, advanced 1 s by each training forward of the toy task."""
    clock = [0.0]
    monkeypatch.setattr(trainer_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    original = ToyTask.loss

    def loss(self, model, rows):
        clock[0] += 1.0
        return original(self, model, rows)

    monkeypatch.setattr(ToyTask, "loss", loss)


def _sigterm_during_step(monkeypatch, step: int) -> None:
    """Send SIGTERM to this process in the middle of optimizer step ``step`` of the next run (as a scheduler does)."""
    original, forwards = ToyTask.loss, [0]

    def loss(self, model, rows):
        forwards[0] += torch.is_grad_enabled()  # training forwards only (a FLOP budget's planning runs one without)
        if forwards[0] == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, model, rows)

    monkeypatch.setattr(ToyTask, "loss", loss)


def _without_times(history):
    return [{k: v for k, v in row.items() if k != "elapsed_s"} for row in history]


@pytest.mark.usefixtures("one_second_per_step")
@pytest.mark.parametrize("kind", list(BUDGETS))
@pytest.mark.parametrize("signal_step, resume_budget", [(5, "same"), (5, "none"), (14, "same")])
def test_a_resumed_run_stops_where_the_uninterrupted_run_stops(tmp_path, monkeypatch, kind, signal_step,
                                                               resume_budget):
    """Every budget kind; resumed with the same --budget or none (the requeue command `zoo train` prints has no
    --budget: the checkpoint's is used); the signal mid-run, or at the very step that spends the budget."""
    full = _trainer(tmp_path, "full", BUDGETS[kind](), epochs=3)
    expected = full.fit()
    unpatched = ToyTask.loss
    _sigterm_during_step(monkeypatch, signal_step)
    with pytest.raises(PreemptedError, match=f"optimizer step {signal_step}"):
        _trainer(tmp_path, "split", BUDGETS[kind](), epochs=3).fit()
    monkeypatch.setattr(ToyTask, "loss", unpatched)
    resumed = _trainer(tmp_path, "split", BUDGETS[kind]() if resume_budget == "same" else None, epochs=3, resume=True)
    summary = resumed.fit()

    steps = 24 if kind == "epochs" else 14
    assert [row["step"] for row in summary["history"]][-1] == steps == resumed.optimizer_steps_done()
    assert _without_times(summary["history"]) == _without_times(expected["history"])  # same steps, same metrics
    spent, expected_spent = ({k: v for k, v in s["budget"].items() if k != "counting_seconds"}  # a real clock's
                             for s in (summary, expected))
    assert spent == expected_spent  # the same FLOPs and (fake) seconds, stopped alike
    for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)  # bit for bit on CPU
    assert summary["utilisation"]["train_flops"] == expected["utilisation"]["train_flops"] == steps * STEP_FLOPS


@pytest.mark.usefixtures("one_second_per_step")
def test_the_costs_are_totals_over_every_session(tmp_path, monkeypatch):
    full = _trainer(tmp_path, "full", epochs=2).fit()
    unpatched = ToyTask.loss
    _sigterm_during_step(monkeypatch, 5)
    with pytest.raises(PreemptedError):
        _trainer(tmp_path, "split", epochs=2).fit()
    saved = load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")["sessions"]
    assert [(s["first_step"], s["steps"], s["items"], s["step_seconds"], s["flops"]) for s in saved] == [
        (0, 5, 40.0, 5.0, 5 * STEP_FLOPS)]  # 8 items and 1 (fake) second a step
    monkeypatch.setattr(ToyTask, "loss", unpatched)
    _trainer(tmp_path, "split", epochs=2, resume=True).fit()

    metrics = json.loads((tmp_path / "split" / "metrics.json").read_text())
    sessions = metrics["sessions"]
    assert [(s["first_step"], s["steps"]) for s in sessions] == [(0, 5), (5, 11)]
    assert sessions[0] == saved[0]
    assert metrics["train_seconds"] == sum(s["train_seconds"] for s in sessions)
    assert metrics["items_per_s"] == sum(s["items"] for s in sessions) / sum(s["step_seconds"] for s in sessions)
    assert metrics["items_per_s"] == full["items_per_s"] == 8.0
    section = metrics["utilisation"]
    assert (section["train_flops"], section["steps"], section["step_seconds"]) == (16 * STEP_FLOPS, 16, 16.0)
    assert section["train_flop_per_s"] == full["utilisation"]["train_flop_per_s"] == STEP_FLOPS
    assert metrics["history"][-1]["elapsed_s"] == metrics["train_seconds"]  # the run's time, not the session's


def test_another_budget_on_resume_is_refused(tmp_path, monkeypatch):
    _sigterm_during_step(monkeypatch, 5)
    with pytest.raises(PreemptedError):
        _trainer(tmp_path, "split", FlopBudget(13.5 * STEP_FLOPS), epochs=3).fit()
    with pytest.raises(ValueError, match=r"--budget time=60.0 differs from the budget \(flops=51840.0\) .* resume "
                                         r"with --budget flops=51840.0 or without --budget"):
        _trainer(tmp_path, "split", TimeBudget(60.0), epochs=3, resume=True).fit()


@pytest.mark.parametrize("before", [False, True])
def test_a_deterministic_run_restores_the_process_setting(tmp_path, before):
    previous = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(before)
    seen = []

    class Watch:  # a callback: what the setting is during training
        def __getattr__(self, hook):
            return lambda *args: seen.append(torch.are_deterministic_algorithms_enabled())

        def section(self, trainer):
            return ""

    try:
        trainer = _trainer(tmp_path, "run", epochs=1, deterministic=True)
        trainer.callbacks.append(Watch())
        trainer.fit()
        assert seen and all(seen)  # on while it trains
        assert torch.are_deterministic_algorithms_enabled() is before  # and as it was afterwards
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
