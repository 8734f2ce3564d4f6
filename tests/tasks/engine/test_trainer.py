"""The shared training loop: outputs, exact resume, checkpoint errors, NaN guard, Ctrl-C, torchrun."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tasks.engine.checkpoint import load_checkpoint, save_checkpoint
from tasks.engine.same_run import CHANGING
from tasks.engine.trainer import NonFiniteLossError, PreemptedError, Trainer
from tasks.runs.training import callbacks_for
from tests.numerics import assert_close_fp64
from tests.preemption import preempted_after
from tests.toy_task import ToyConfig, ToyTask


def run(tmp_path, name="run", **kw):
    config = ToyConfig(out=str(tmp_path / name), progress=False, **kw)
    trainer = Trainer(ToyTask, config, callbacks=callbacks_for(config))
    return trainer, trainer.fit()


def test_training_writes_outputs_and_learns(tmp_path):
    trainer, summary = run(tmp_path, epochs=4)
    out = tmp_path / "run"
    for name in ("config.json", "metrics.jsonl", "metrics.json", "report.md", "curves.png",
                 "checkpoints/last.pt", "checkpoints/best.pt"):
        assert (out / name).exists(), name
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4]
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    assert summary["best_valid"] == min(r["mse"] for r in rows)
    assert json.loads((out / "config.json").read_text())["epochs"] == 4


def test_resume_equals_uninterrupted_run(tmp_path):
    full, full_summary = run(tmp_path, "full", epochs=4)
    with preempted_after(16):  # the end of epoch 2 of 4 (8 steps an epoch)
        run(tmp_path, "split", epochs=4)
    resumed, resumed_summary = run(tmp_path, "split", epochs=4, resume=True)
    for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)  # bit for bit on CPU
    assert [r["mse"] for r in full_summary["history"]] == [r["mse"] for r in resumed_summary["history"]]


def test_existing_run_without_resume_is_refused(tmp_path):
    run(tmp_path, epochs=1)
    with pytest.raises(ValueError, match="--resume"):
        run(tmp_path, epochs=1)


def test_mismatched_checkpoint_is_refused(tmp_path):
    run(tmp_path, epochs=1)
    with pytest.raises(ValueError, match=r"lr: checkpoint 0.01 vs now 0.02"):
        run(tmp_path, epochs=1, resume=True, lr=0.02)


@pytest.mark.parametrize("changed", [{"compile": True}, {"deterministic": False}, {"device": "cpu"}])
def test_resume_refuses_every_setting_that_changes_the_result(tmp_path, changed):
    """The one definition of the same run (tasks.engine.same_run): compile, device and deterministic change what a
    run computes, so a checkpoint does not continue under another value (before issue 35 compile and device did)."""
    run(tmp_path, epochs=1)
    (field, value), = changed.items()
    with pytest.raises(ValueError, match=rf"{field}: checkpoint .* vs now {value!r} \({re.escape(CHANGING[field])}\)"):
        run(tmp_path, epochs=1, resume=True, **changed)
    run(tmp_path, epochs=1, resume=True, num_threads=1, checkpoint_every=5, doctor=True)  # these change nothing


def test_resume_with_other_epochs_is_refused_naming_both_and_the_fixes(tmp_path):
    """The schedule of the steps already taken was planned over the old total: a longer resume would equal neither
    run (issue 35). A finished run resumed with its own epochs still finishes."""
    run(tmp_path, epochs=1)
    expected = (r"epochs: checkpoint 1 vs now 2 \(the learning-rate schedule is planned over .*\); resume with "
                r"--epochs 1 \(the run as planned\), or train 2 epochs into a new --out folder")
    with pytest.raises(ValueError, match=expected):
        run(tmp_path, epochs=2, resume=True)
    with pytest.raises(ValueError, match=r"--epochs 1 and the other recorded settings"):
        run(tmp_path, epochs=2, resume=True, lr=0.5)
    _, summary = run(tmp_path, epochs=1, resume=True)
    assert summary["epochs"] == 1


def test_corrupt_and_truncated_checkpoints(tmp_path):
    run(tmp_path, epochs=1)
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"last\.pt is corrupt or truncated"):
        load_checkpoint(last)
    last.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="corrupt"):
        run(tmp_path, epochs=2, resume=True)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")


def test_checkpoint_loads_with_weights_only(tmp_path):
    run(tmp_path, epochs=1)
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True)
    assert {"model", "optimizer", "scheduler", "scaler", "rng", "epoch", "step", "config",
            "package_version"} <= set(state)


def test_atomic_save_keeps_old_file_on_failure(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, {"model": {}, "config": {}, "value": 1})

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        save_checkpoint(path, {"model": {}, "config": {}, "value": Unpicklable()})
    assert load_checkpoint(path)["value"] == 1
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    with preempted_after(9):  # in epoch 2 of 3, whose end (and checkpoint) the NaN comes before
        run(tmp_path, epochs=3)
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    before = last.read_bytes()
    original = ToyTask.loss

    def nan_at_third_call(self, model, rows):
        loss, items = original(self, model, rows)
        return (loss * float("nan") if self.calls == 3 else loss), items

    monkeypatch.setattr(ToyTask, "loss", nan_at_third_call)
    with pytest.raises(NonFiniteLossError, match="last good checkpoint"):
        run(tmp_path, epochs=3, resume=True)
    assert last.read_bytes() == before


def test_keyboard_interrupt_saves_and_resumes_exactly(tmp_path, monkeypatch):
    full, _ = run(tmp_path, "full", epochs=2)
    original = ToyTask.loss

    def interrupt_at_step_11(self, model, rows):
        if self.calls == 10:
            raise KeyboardInterrupt
        return original(self, model, rows)

    monkeypatch.setattr(ToyTask, "loss", interrupt_at_step_11)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, "split", epochs=2)
    state = load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")
    assert (state["epoch"], state["batch_in_epoch"], state["step"]) == (1, 2, 10)
    monkeypatch.setattr(ToyTask, "loss", original)
    resumed, _ = run(tmp_path, "split", epochs=2, resume=True)
    for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)


def test_gradient_accumulation_equals_large_batch(tmp_path):
    # Two consecutive batches of 8 hold the same examples as one batch of 16 (same per-epoch order); the sums
    # differ in rounding only, so both run in float64.
    big, _ = run(tmp_path, "big", epochs=2, batch_size=16, dropout=0.0, dtype="float64")
    acc, _ = run(tmp_path, "acc", epochs=2, batch_size=8, accumulate=2, dropout=0.0, dtype="float64")
    assert acc.optimizer_steps_done() == big.optimizer_steps_done() == 8
    for a, b in zip(big.model.state_dict().values(), acc.model.state_dict().values()):
        assert_close_fp64(b, a)


def test_bad_device_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="device"):
        run(tmp_path, device="tpu")


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="torchrun on CPU is exercised on Linux")
def test_two_processes_match_one_process_on_the_combined_batch(tmp_path):
    # run as the module tests.ddp_worker: a script's own folder (tests/) would come first on sys.path, and its
    # tests/tasks package would hide the real tasks package
    repo = Path(__file__).parents[3]
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    single = tmp_path / "single.pt"
    subprocess.run([sys.executable, "-m", "tests.ddp_worker", str(tmp_path / "one"), str(single)], check=True,
                   env=env, cwd=repo, timeout=240)
    double = tmp_path / "double.pt"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                    "-m", "tests.ddp_worker", str(tmp_path / "two"), str(double)], check=True, env=env, cwd=repo,
                   timeout=240)
    one, two = torch.load(single, weights_only=True), torch.load(double, weights_only=True)
    for key in one["model"]:  # float64 (see ddp_worker.py): the all-reduce sums in another order
        assert_close_fp64(two["model"][key], one["model"][key])
    assert one["history"][-1]["train_loss"] == pytest.approx(two["history"][-1]["train_loss"], rel=1e-10)


def test_the_trainer_trains_and_leaves_the_run_folder_to_its_callbacks(tmp_path):
    """Without callbacks the trainer writes only its checkpoints and metrics.jsonl; each callback sees every hook,
    in order, and its report section reaches on_finish."""
    from tasks.engine.callbacks import Callback

    class Recorder(Callback):
        def __init__(self):
            self.calls = []

        def on_start(self, trainer, step):
            self.calls.append(("start", step))

        def on_step(self, trainer, step, loss, lr):
            self.calls.append(("step", step))

        def on_epoch_end(self, trainer, history):
            self.calls.append(("epoch", len(history)))

        def section(self, trainer):
            return "## Recorded"

        def on_finish(self, trainer, summary, sections):
            self.calls.append(("finish", sections[-1]))

    recorder = Recorder()
    config = ToyConfig(out=str(tmp_path / "bare"), progress=False, epochs=2, n_examples=16)
    Trainer(ToyTask, config, callbacks=[recorder]).fit()
    out = tmp_path / "bare"
    assert (out / "checkpoints" / "last.pt").is_file() and (out / "metrics.jsonl").is_file()
    assert not any((out / name).exists() for name in ("run.json", "report.md", "metrics.json", "config.json"))
    assert recorder.calls[0] == ("start", 0) and recorder.calls[-1] == ("finish", "## Recorded")
    assert [c for c in recorder.calls if c[0] == "epoch"] == [("epoch", 1), ("epoch", 2)]
    steps = [c[1] for c in recorder.calls if c[0] == "step"]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) == 2 * 2  # 16 examples in batches of 8, 2 epochs
    first_epoch_end = recorder.calls.index(("epoch", 1))
    assert [c[0] for c in recorder.calls[1:first_epoch_end]] == ["step", "step"]


def _same_weights(a, b) -> None:
    for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()):
        assert torch.equal(x, y)  # bit for bit on CPU


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGUSR1"])
def test_a_stop_signal_checkpoints_after_the_step_and_resumes_exactly(tmp_path, monkeypatch, signal_name):
    import signal

    full, full_summary = run(tmp_path, "full", epochs=2)
    before = signal.getsignal(getattr(signal, signal_name))
    original = ToyTask.loss

    def signal_during_step_11(self, model, rows):
        if self.calls == 10:  # the scheduler's signal arrives in the middle of the 11th step
            os.kill(os.getpid(), getattr(signal, signal_name))
        return original(self, model, rows)

    monkeypatch.setattr(ToyTask, "loss", signal_during_step_11)
    with pytest.raises(PreemptedError, match=f"{signal_name} received: checkpoint saved at optimizer step 11"):
        run(tmp_path, "split", epochs=2)
    assert signal.getsignal(getattr(signal, signal_name)) == before  # the previous handler is put back
    state = load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")
    assert (state["epoch"], state["batch_in_epoch"], state["step"]) == (1, 3, 11)  # the step finished, then saved
    monkeypatch.setattr(ToyTask, "loss", original)
    resumed, resumed_summary = run(tmp_path, "split", epochs=2, resume=True)
    _same_weights(full, resumed)
    assert resumed_summary["history"] == [{**row, "elapsed_s": resumed_row["elapsed_s"]} for row, resumed_row in
                                          zip(full_summary["history"], resumed_summary["history"])]
    rows = [json.loads(line) for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [r["train_loss"] for r in rows] == [r["train_loss"] for r in full_summary["history"]]


def test_checkpoint_every_bounds_what_a_kill_costs(tmp_path, monkeypatch):
    full, _ = run(tmp_path, "full", epochs=2)
    original = ToyTask.loss

    def killed_in_step_14(self, model, rows):  # a SIGKILL or power loss: no handler runs, nothing is saved
        if self.calls == 14:
            raise SystemExit("killed")
        return original(self, model, rows)

    monkeypatch.setattr(ToyTask, "loss", killed_in_step_14)
    with pytest.raises(SystemExit):
        run(tmp_path, "split", epochs=2, checkpoint_every=3)
    state = load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")
    assert (state["epoch"], state["batch_in_epoch"], state["step"]) == (1, 4, 12)  # the last multiple of 3
    monkeypatch.setattr(ToyTask, "loss", original)
    resumed, _ = run(tmp_path, "split", epochs=2, resume=True, checkpoint_every=3)
    _same_weights(full, resumed)


def test_resume_without_a_checkpoint_starts_from_the_beginning(tmp_path, caplog):
    full, full_summary = run(tmp_path, "full", epochs=2)
    folder = tmp_path / "early"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text('{"epoch": 1, "left": "by a run killed before its checkpoint"}\n')
    with caplog.at_level("WARNING"):
        fresh, summary = run(tmp_path, "early", epochs=2, resume=True)
    assert "holds no checkpoint yet; training from the beginning" in caplog.text
    _same_weights(full, fresh)
    assert len((folder / "metrics.jsonl").read_text().splitlines()) == 2
