"""Model FLOPs utilisation (tasks.engine.mfu): the matmul-peak probe and its cache, the MFU arithmetic, and the
training FLOP/s and MFU a run reports (toy task: 8 steps an epoch of 3 × 1280 training FLOPs, as in
``test_budget.py``). Nothing here asserts a timing: the probe's clock is faked or its result only bounded."""

import json

import pytest
import torch

import tasks.engine.mfu as mfu
from tasks.engine.budget import FlopBudget
from tasks.runs.report import summary_lines
from tasks.runs.training import train
from tests.toy_task import ToyConfig, ToyTask

STEP_FLOPS = 3 * 2 * 8 * (4 * 16 + 16 * 1)


def _fake_probe(value):
    def probe(device, precision, size=None):
        return {"flop_per_s": value, "size": size, "repeats": 1, "seconds": [1.0], "measured": "now"}
    return probe


def test_probe_arithmetic_on_a_fake_clock():
    ticks = iter(range(100))
    result = mfu.probe_matmul("cpu", "fp32", size=8, repeats=3, clock=lambda: 0.5 * next(ticks))
    assert result["seconds"] == [0.5, 0.5, 0.5]  # each sample reads the clock twice, 0.5 s apart
    assert result["flop_per_s"] == 2 * 8**3 / 0.5  # 2·n³ FLOPs per product


def test_probe_is_cached_per_machine_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    first = mfu.matmul_peak("cpu", "fp32", size=32)  # a real probe, on a tiny matrix
    files = list((tmp_path / "matmul-peak").glob("*.json"))
    assert len(files) == 1 and first > 0
    entry = json.loads(files[0].read_text())
    assert entry["key"] == mfu.machine_key("cpu") and entry["peaks"]["fp32"]["size"] == 32

    def no_probe(*args, **kwargs):
        raise AssertionError("probed although the peak is cached")

    monkeypatch.setattr(mfu, "probe_matmul", no_probe)
    assert mfu.matmul_peak("cpu", "fp32") == first  # read back, not measured
    monkeypatch.setattr(mfu, "probe_matmul", _fake_probe(123.0))
    assert mfu.matmul_peak("cpu", "fp32", refresh=True) == 123.0
    assert mfu.matmul_peak("cpu", "fp32") == 123.0  # the refreshed value was written
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)  # another thread count is another machine key: a probe of its own
        monkeypatch.setattr(mfu, "probe_matmul", _fake_probe(456.0))
        assert mfu.matmul_peak("cpu", "fp32") == 456.0
    finally:
        torch.set_num_threads(threads)
    assert len(list((tmp_path / "matmul-peak").glob("*.json"))) == 2


def test_a_corrupt_or_foreign_cache_file_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    monkeypatch.setattr(mfu, "probe_matmul", _fake_probe(1e9))
    mfu.matmul_peak("cpu", "fp32")
    path = next((tmp_path / "matmul-peak").glob("*.json"))
    path.write_text("{not json")
    monkeypatch.setattr(mfu, "probe_matmul", _fake_probe(2e9))
    assert mfu.matmul_peak("cpu", "fp32") == 2e9
    entry = json.loads(path.read_text())
    entry["key"]["torch"] = "0.0"  # written by another torch
    path.write_text(json.dumps(entry))
    monkeypatch.setattr(mfu, "probe_matmul", _fake_probe(3e9))
    assert mfu.matmul_peak("cpu", "fp32") == 3e9


def test_bf16_without_native_products_has_no_peak(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    monkeypatch.setattr(mfu, "native_bf16", lambda device: False)
    assert mfu.matmul_peak("cpu", "bf16") is None
    section = mfu.training_utilisation(1e9, 1.0, 10, "cpu", "bf16")
    assert section["mfu"] is None and "no bf16 matmul peak" in mfu.utilisation_line(section)


def test_mfu_arithmetic_on_known_numbers():
    assert mfu.utilisation(3e9, 1.2e10) == 0.25
    assert mfu.utilisation(3e9, None) is None
    section = mfu.training_utilisation(6e9, 2.0, 3, "cpu", "fp32", devices=2, peak=1e9)
    assert section["train_flop_per_s"] == 3e9 and section["flops_per_step"] == 2e9
    assert section["peak_flop_per_s"] == 2e9 and section["mfu"] == 1.5  # two devices: twice one device's peak
    line = mfu.utilisation_line(section)
    assert "3 GFLOP/s" in line and "MFU 1.5e+02 %" in line and "2 devices" in line


@pytest.mark.parametrize("call, message", [
    (lambda: mfu.utilisation(-1.0, 1.0), "achieved=-1.0"),
    (lambda: mfu.utilisation(1.0, 0.0), "peak=0.0"),
    (lambda: mfu.matmul_peak("cpu", "fp16"), "precision must be one of fp32, bf16, got 'fp16'"),
    (lambda: mfu.probe_matmul("cpu", "fp32", size=0), "size=0"),
])
def test_bad_values_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def _fit(tmp_path, monkeypatch, name, budget=None, **kw):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(mfu, "PROBE_SIZE", {"cpu": 256})  # a short real probe: the test bounds, never times
    config = ToyConfig(out=str(tmp_path / name), progress=False, **kw)
    return train(ToyTask, config, budget)


def test_a_training_run_reports_its_flop_rate_and_mfu(tmp_path, monkeypatch):
    summary = _fit(tmp_path, monkeypatch, "run", epochs=2)
    section = summary["utilisation"]
    assert section["train_flops"] == 16 * STEP_FLOPS and section["steps"] == 16  # the budget's counter
    assert section["flops_per_step"] == STEP_FLOPS and section["precision"] == "fp32"
    assert section["train_flop_per_s"] > 0 and section["peak_flop_per_s"] > 0
    assert 0 < section["mfu"] < 1.5  # a 1.3 kFLOP step is far below any matmul peak
    assert section["mfu"] == pytest.approx(section["train_flop_per_s"] / section["peak_flop_per_s"])
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["utilisation"] == section
    assert "training FLOP/s" in (tmp_path / "run" / "report.md").read_text()
    assert any(line.startswith("training ") and "MFU" in line for line in summary_lines(summary))


def test_a_flop_budget_and_the_mfu_share_one_count(tmp_path, monkeypatch):
    summary = _fit(tmp_path, monkeypatch, "budget", FlopBudget(5 * STEP_FLOPS), epochs=3)
    assert summary["utilisation"]["train_flops"] == summary["budget"]["train_flops"] == 5 * STEP_FLOPS
    assert summary["utilisation"]["steps"] == 5
