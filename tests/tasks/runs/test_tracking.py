"""--track tensorboard and --track mlflow on the real packages: the numbers in the event files and the MLflow store
are those of metrics.jsonl and metrics.json; a resumed run continues the same MLflow run; bad names are refused."""

from __future__ import annotations

import json

import pytest

from tasks.engine.trainer import Trainer
from tasks.runs.training import callbacks_for
from tests.preemption import preempted_after
from tests.toy_task import ToyConfig, ToyTask


@pytest.fixture(autouse=True)
def final_scores(monkeypatch):
    """The toy task reports no test scores of its own: give it some, numbers and text, nested as tasks do."""
    def final_report(self, model, out_dir, splits=None):
        return {"test": {"mse": self.score(self.evaluate(model, "test"), "test")["mse"], "note": "text"}}, ""

    monkeypatch.setattr(ToyTask, "final_report", final_report)


def _train(tmp_path, name="run", **kw):
    config = ToyConfig(out=str(tmp_path / name), progress=False, **kw)
    return Trainer(ToyTask, config, callbacks=callbacks_for(config)).fit()


def test_tensorboard_event_files_hold_the_runs_numbers(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    summary = _train(tmp_path, epochs=2, track="tensorboard")
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == list(range(1, 17))  # 8 steps per epoch
    valid = events.Scalars("epoch/mse")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(e.step, e.value) for e in valid] == [(r["step"], pytest.approx(r["mse"], rel=1e-6)) for r in rows]
    assert events.Scalars("final/test/mse")[0].value == pytest.approx(summary["final"]["test"]["mse"], rel=1e-6)


def test_mlflow_run_holds_the_numbers_and_a_resume_continues_it(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with preempted_after(8):  # the end of epoch 1 of 2 (a resume keeps its epochs: tasks.engine.same_run)
        _train(tmp_path, epochs=2, track="mlflow")
    _train(tmp_path, epochs=2, track="mlflow", resume=True)
    run_id = json.loads((tmp_path / "run" / "tracking.json").read_text())["mlflow_run_id"]
    client = mlflow.tracking.MlflowClient(tracking_uri=(tmp_path / "run" / "mlruns").as_uri())
    history = client.get_metric_history(run_id, "mse")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(m.step, m.value) for m in history] == [(r["step"], pytest.approx(r["mse"], rel=1e-6)) for r in rows]
    run = client.get_run(run_id)
    assert run.data.params["epochs"] == "2" and run.info.status == "FINISHED"
    final = json.loads((tmp_path / "run" / "metrics.json").read_text())["final"]["test"]["mse"]
    assert run.data.metrics["final.test.mse"] == pytest.approx(final, rel=1e-6)


def test_unknown_tracker_is_refused_naming_the_choices(tmp_path):
    with pytest.raises(ValueError, match=r"unknown tracker \(--track\) .wandb.*Known: mlflow, tensorboard"):
        ToyConfig(out=str(tmp_path / "x"), track="tensorboard,wandb")
