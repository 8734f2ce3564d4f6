"""Training budgets (tasks.engine.budget) through the shared trainer, on the toy regression task.

The toy model is Linear(4, 16) -> ReLU -> Dropout -> Linear(16, 1) on batches of 8 (64 examples: 8 steps an
epoch): a batch's forward costs 2·8·(4·16 + 16·1) = 1280 FLOPs, a training step 3 × 1280 = 3840.
"""

import json

import pytest
import torch

from tasks.engine.budget import EpochBudget, FlopBudget, TimeBudget, parse_budget
from tasks.engine.trainer import Trainer
from tasks.runs.training import callbacks_for
from tests.toy_task import ToyConfig, ToyTask

STEP_FLOPS = 3 * 2 * 8 * (4 * 16 + 16 * 1)


def _trainer(tmp_path, name, budget=None, **kw):
    config = ToyConfig(out=str(tmp_path / name), progress=False, **kw)
    return Trainer(ToyTask, config, budget, callbacks_for(config))


def test_flop_budget_stops_mid_epoch_checkpoints_and_evaluates(tmp_path):
    trainer = _trainer(tmp_path, "flops", FlopBudget(5 * STEP_FLOPS), epochs=3)
    summary = trainer.fit()
    assert [row["step"] for row in summary["history"]] == [5]  # stopped after 5 of the first epoch's 8 steps
    assert "mse" in summary["history"][0] and summary["final"] == {}  # evaluated as at an epoch end
    spent = json.loads((tmp_path / "flops" / "metrics.json").read_text())["budget"]
    assert spent["kind"] == "flops" and spent["stopped_by_budget"] and spent["steps"] == 5
    assert spent["train_flops"] == 5 * STEP_FLOPS
    assert (tmp_path / "flops" / "checkpoints" / "last.pt").is_file()


def test_flop_budget_plans_the_schedule_for_the_steps_it_buys(tmp_path):
    trainer = _trainer(tmp_path, "plan", FlopBudget(5.5 * STEP_FLOPS), epochs=3)
    trainer.task.setup()
    trainer.model = trainer.task.build_model()
    calls = trainer.task.calls
    assert trainer.budget.planned_steps(trainer, 24) == 6  # ceil(5.5)
    assert trainer.task.calls == calls + 1  # one batch built; the forward itself was never run
    assert FlopBudget(1e30).planned_steps(trainer, 24) == 24  # never beyond the epochs


def test_counting_flops_does_not_change_the_training(tmp_path):
    plain = _trainer(tmp_path, "plain", epochs=2)
    plain.fit()
    counted = _trainer(tmp_path, "counted", FlopBudget(1e30), epochs=2)
    summary = counted.fit()
    assert summary["budget"]["train_flops"] == 16 * STEP_FLOPS and not summary["budget"]["stopped_by_budget"]
    for (name, a), b in zip(plain.model.state_dict().items(), counted.model.state_dict().values()):
        assert torch.equal(a, b), name  # the same dropout masks: the counter left the random streams alone


def test_time_and_epoch_budgets(tmp_path):
    summary = _trainer(tmp_path, "time", TimeBudget(1e-9), epochs=3).fit()
    assert [row["step"] for row in summary["history"]] == [1]  # any step takes longer than a nanosecond
    assert summary["budget"]["train_seconds"] > 0
    summary = _trainer(tmp_path, "epochs", EpochBudget(2), epochs=2).fit()
    assert [row["step"] for row in summary["history"]] == [8, 16] and not summary["budget"]["stopped_by_budget"]


@pytest.mark.parametrize("text, message", [
    ("time", "--budget must be KIND=VALUE"),
    ("steps=3", "unknown budget kind 'steps'"),
    ("time=abc", "needs a number, got 'abc'"),
    ("flops=-1", "must be a finite number > 0"),
    ("time=inf", "must be a finite number > 0"),
    ("epochs=2.5", "whole number of epochs"),
])
def test_bad_budgets_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        parse_budget(text)


def test_budgets_parse_and_describe():
    assert parse_budget("epochs=3").describe() == "3 epoch(s) per run"
    assert "120 s of training" in parse_budget("time=120").describe()
    flops = parse_budget("flops=2e12")
    assert isinstance(flops, FlopBudget) and flops.value == 2e12 and "3 × forward FLOPs" in flops.describe()
