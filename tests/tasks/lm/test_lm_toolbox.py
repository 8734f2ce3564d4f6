"""The package's toolbox on the lm task, on tiny runs (preset tiny, a 20,000-character corpus, a FLOP budget of
about nine steps): zoo compare and ablate (paired per scored window), diff and check (with its decoder probes), the
doctor on a run and on a variant at initialisation (and the zero-filled mask it must find), a FLOP budget, exports
(hf; onnx checked by onnxruntime, and zoo predict through it), a sweep with the local launcher (its two runs in
subprocesses, reused when run again), and the site's lm pages."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from core.generation import generate
from tasks.cli.main import main
from tasks.doctor.runs import doctor_variant
from tasks.lm.corpus import embedded_corpus
from tasks.runs.onnx_runtime import OnnxDecoder
from zoo.analysis.doctor import Batch
from zoo.registry import get_variant

FLOPS = "flops=1e9"  # about nine optimizer steps of the tiny model at context 64 (1.2e8 training FLOPs a step)
TASK_SET = ["--set", "preset=tiny", "--set", "num_threads=1", "--set", "sample_tokens=0", "--set", "progress=false"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """20,000 characters of the embedded training plays as one text file (split 0.9 / 0.05 / 0.05)."""
    path = tmp_path_factory.mktemp("lm-toolbox") / "plays.txt"
    path.write_text(embedded_corpus()["train"][:20_000])
    return path


@pytest.fixture(scope="module")
def compared(tmp_path_factory, corpus) -> Path:
    """``zoo compare lm --variants classic,rope`` under a FLOP budget: the comparison folder and its two runs."""
    out = tmp_path_factory.mktemp("lm-compare") / "compare"
    assert main(["compare", "lm", "--variants", "classic,rope", "--budget", FLOPS, "--epochs", "1", "--quiet",
                 "--set", f"data={corpus}", *TASK_SET, "--out", str(out)]) == 0
    return out


def _run(compared: Path, variant: str) -> Path:
    (run,) = compared.glob(f"{variant}-seed0-*")
    return run


def _final(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())["final"]


def test_compare_pairs_the_runs_window_by_window(compared):
    """The paired metrics of tasks/lm/paired.py: each variant's mean is its run's own test loss (the windows'
    summed nats over their tokens), and rope gets a paired verdict against classic."""
    results = json.loads((compared / "results.json").read_text())
    assert results["task"] == "lm" and results["headline"] == "loss"
    assert set(results["metrics"]) == {"loss", "bits_per_char"}
    rows = {row["variant"]: row for row in results["rows"]}
    for variant in ("classic", "rope"):
        final = _final(_run(compared, variant))["test"]
        assert rows[variant]["metrics"]["loss"]["mean"] == pytest.approx(final["loss"], rel=1e-9)
        assert rows[variant]["metrics"]["bits_per_char"]["mean"] == pytest.approx(final["bits_per_char"], rel=1e-9)
    rope = rows["rope"]
    assert rope["verdict"] in ("better", "worse", "no difference") and 0.0 <= rope["p_value"] <= 1.0
    assert rope["delta_ci95"][0] <= rope["delta"] <= rope["delta_ci95"][1]
    records = (_run(compared, "rope") / "predictions" / "test.jsonl").read_text().splitlines()
    assert {"nll", "tokens", "chars"} <= set(json.loads(records[0]))  # what the pairing resamples


def test_a_flop_budget_stops_the_run_at_its_flops(compared):
    """--budget flops=1e9 stops each run after the first step that reaches 1e9 training FLOPs."""
    for variant in ("classic", "rope"):
        run = _run(compared, variant)
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        per_step = json.loads((compared / "results.json").read_text())["rows"][0]["GFLOPs"] * 1e9 * 3 * 12
        assert steps[-1] == pytest.approx(1e9 / per_step, abs=1.5)  # budget / (3 x forward FLOPs x batch 12)
        assert steps[-1] < 24  # the whole epoch of the 18,000 training characters would be 24 steps


def test_ablate_reverts_an_lm_variants_change(tmp_path, corpus):
    out = tmp_path / "ablate"
    assert main(["ablate", "moe", "--task", "lm", "--budget", FLOPS, "--epochs", "1", "--quiet",
                 "--set", f"data={corpus}", *TASK_SET, "--out", str(out)]) == 0
    rows = {row["variant"]: row for row in json.loads((out / "results.json").read_text())["rows"]}
    assert set(rows) == {"moe", "without ffn"}
    assert rows["without ffn"]["params"] < rows["moe"]["params"]  # the dense FFN back in place of the experts
    assert rows["without ffn"]["verdict"] in ("better", "worse", "no difference")


def test_diff_and_check_measure_lm_variants_at_the_tasks_shape(capsys):
    assert main(["diff", "rope", "--task", "lm", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["task"] == "lm"
    assert "position" in json.dumps(report) and "one window of 64 tokens" in json.dumps(report)
    assert main(["check", "t5-bias", "--task", "lm", "--preset", "tiny", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "t5-bias on lm:" in out and "PASS" in out and "revert position" in out
    for row in ("causal (train)", "causal (eval)", "batch (eval)", "kv cache"):  # probed as a decoder, not n/a
        assert re.search(rf"tiny\s+{re.escape(row)}\s+PASS", out), row
    assert "no autoregressive decoder" not in out


def test_zoo_checks_decoder_probes_fail_a_leaking_mask_and_a_cache_that_loses_positions():
    """The probes on a decoder-only model catch what they exist for: a kernel that ignores is_causal (both causal
    rows) and a position scheme that drops the cache's offset (the cached logits then differ)."""
    from tasks.doctor.mistakes import ignore_mask
    from tasks.plugins.check import _Preset

    subject = _Preset(get_variant("classic", "lm"), "lm", "tiny")
    rows = {row.check: row for row in subject.decoder()}
    assert all(rows[name].ok for name in ("causal (train)", "causal (eval)", "batch (eval)", "kv cache"))
    subject.model = ignore_mask(subject.model)
    rows = {row.check: row for row in subject.decoder()}
    assert rows["causal (train)"].ok is False and rows["causal (eval)"].ok is False
    assert "earlier outputs move when later ids change" in rows["causal (eval)"].reason

    subject = _Preset(get_variant("classic", "lm"), "lm", "tiny")
    embed = subject.model.position.embed
    subject.model.position.embed = lambda x, offset=0: embed(x, 0)  # every cached step at position 0
    rows = {row.check: row for row in subject.decoder()}
    assert rows["causal (eval)"].ok and rows["kv cache"].ok is False
    assert "cached decoding differs from recomputation" in rows["kv cache"].reason


def test_doctor_examines_an_lm_run_and_an_lm_variant_at_initialisation(compared, tmp_path):
    run = _run(compared, "rope")
    assert main(["doctor", str(run), "--out", str(tmp_path / "run"), "--no-figures", "--fail-on", "never"]) == 0
    report = json.loads((tmp_path / "run" / "doctor.json").read_text())
    text = json.dumps(report)
    assert "causal_lm batch" in text and "attention" in text and "curve" in text
    assert main(["doctor", "--variant", "nope", "--task", "lm", "--preset", "tiny", "--out", str(tmp_path / "init"),
                 "--no-figures", "--fail-on", "never"]) == 0
    assert "at initialisation" in (tmp_path / "init" / "doctor.md").read_text()
    init = json.loads((tmp_path / "init" / "doctor.json").read_text())
    assert "causal_leak" in json.dumps(init)  # the mask check ran on the decoder-only model


def test_doctor_finds_the_zero_filled_causal_mask_of_an_lm(tmp_path):
    """The issue's mask pitfall: a decoder-only model whose causal mask is filled with 0 instead of -inf is a
    critical causal leak entering at the first layer; the correct model's earlier outputs do not move at all."""
    healthy = doctor_variant("classic", "lm", "tiny")
    (mask,) = [check for check in healthy.checks if check.name == "mask"]
    assert mask.status == "ok" and set(mask.measured["causal_leak"].values()) == {0.0}
    broken = doctor_variant("classic", "lm", "tiny", mistake="zero-mask")
    (finding, *_) = broken.at_least("critical")
    assert finding.check == "mask" and "causal leak" in finding.problem and finding.statistic > 100 * finding.threshold
    assert finding.where == "decoder.layers.0"


def test_hf_export_restores_and_continues_the_same_text(compared, tmp_path, capsys):
    run = _run(compared, "classic")
    export = tmp_path / "hf"
    assert main(["export", str(run), "--format", "hf", "--out", str(export)]) == 0
    assert json.loads((export / "config.json").read_text())["task"] == "lm"
    texts = []
    for folder in (run, export):
        capsys.readouterr()
        assert main(["predict", str(folder), "--prompt", "Ham.\n", "--max-new-tokens", "12", "--seed", "3"]) == 0
        texts.append(capsys.readouterr().out.split("generated")[0])
    assert texts[0] == texts[1] and texts[0].startswith("Ham.\n")


def test_onnx_export_is_checked_and_zoo_predict_runs_it_through_onnxruntime(compared, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    run = _run(compared, "rope")
    export = tmp_path / "onnx"
    assert main(["export", str(run), "--format", "onnx", "--out", str(export)]) == 0
    check = json.loads((export / "run.json").read_text())["onnx_check"]["decoder"]
    assert check["max_abs_diff"] <= check["limit"] and check["traced"] != check["examples"]  # dynamic B and N
    texts = []
    for folder, runtime in ((run, "torch"), (export, "onnxruntime")):
        for temperature in ("0", "0.8"):  # greedy, and sampled under one seed
            capsys.readouterr()
            assert main(["predict", str(folder), "--runtime", runtime, "--prompt", "Ham.\n", "--max-new-tokens",
                         "16", "--temperature", temperature, "--seed", "5"]) == 0
            texts.append(capsys.readouterr().out.split("generated")[0])
    assert texts[:2] == texts[2:]


def test_a_sweep_file_runs_lm_with_the_local_launcher_and_reuses_its_runs(tmp_path, corpus):
    out = tmp_path / "sweep"
    file = tmp_path / "sweep.json"
    file.write_text(json.dumps({"kind": "compare", "task": "lm", "variants": ["classic", "nope"], "budget": FLOPS,
                                "epochs": 1, "out": str(out), "launcher": "local", "jobs": 2,
                                "set": {"preset": "tiny", "data": str(corpus), "sample_tokens": 0}}))
    assert main(["sweep", str(file)]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [row["variant"] for row in rows] == ["classic", "nope"]
    written = {run: run.stat().st_mtime_ns for run in out.glob("*-seed0-*/metrics.json")}
    assert len(written) == 2
    assert main(["sweep", str(file)]) == 0  # again: both runs found, none retrained
    assert {run: run.stat().st_mtime_ns for run in written} == written


def test_site_shows_the_lm_variants_and_an_lm_comparison(compared, tmp_path):
    """An lm-only variant gets its page; a name registered for translation and lm (rope) gets one page per
    registration, the lm one measured at the lm task's shape; the index links each."""
    site = tmp_path / "site"
    assert main(["site", "--out", str(site), "--runs", str(compared), "--variants", "nope,rope", "--no-check",
                 "--quiet"]) == 0
    index = (site / "index.html").read_text()
    assert "t5-bias" in index and ">lm<" in index
    for folder in ("nope", "rope", "rope-lm"):
        assert f"<a href='variants/{folder}/index.html'>" in index, folder
    page = (site / "variants" / "nope" / "index.html").read_text()
    assert "one window of 64 tokens" in page and "NoPosition" in page
    rope = (site / "variants" / "rope-lm" / "index.html").read_text()
    assert "tasks: lm" in rope and "one window of 64 tokens" in rope and "RotaryPosition" in rope
    assert "tasks: translation" in (site / "variants" / "rope" / "index.html").read_text()
    (comparison,) = (site / "comparisons").iterdir()
    assert "zoo compare lm" in (comparison / "index.html").read_text()


def test_the_onnx_decoders_prefix_cache_generates_as_the_kv_cache_and_keeps_the_learned_tables_limit():
    """OnnxDecoder's stand-in cache (the prefix, recomputed through the graph) against the model's own KV cache, in
    float64 with the graph replaced by the PyTorch model: the same tokens and the same last logits; a learned
    table's limit comes from the meta-device build, with the model's own message."""
    variant = get_variant("learned-pos", "lm")
    config = variant.config("tiny", vocab_size=40, max_len=24)
    torch.manual_seed(0)
    model = variant.build(config).double().eval()
    with torch.device("meta"):
        limits = variant.build(config)
    graph = OnnxDecoder(lambda ids: [model(ids)], config, limits.check_length)
    prompt = torch.randint(0, 40, (2, 5), generator=torch.Generator().manual_seed(1))
    for temperature in (0.0, 1.0):
        tokens = [generate(m, prompt, 12, temperature, generator=torch.Generator().manual_seed(2))
                  for m in (model, graph)]
        assert torch.equal(tokens[0], tokens[1])
    cache = graph.new_cache()
    graph(prompt, cache)
    step = graph(tokens[0][:, 5:6], cache)  # (B, 1, V): the new position's logits only
    torch.testing.assert_close(step, model(tokens[0][:, :6])[:, -1:], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="needs 30 positions but the learned position table has max_len=24"):
        generate(graph, prompt, 26)


def test_a_causal_lm_doctor_batch_of_the_wrong_shape_is_refused():
    ids = torch.zeros(2, 8, dtype=torch.long)
    Batch((ids,), ids, "causal_lm")  # labels of the ids' shape: accepted
    with pytest.raises(ValueError, match=r"a causal_lm batch needs inputs \(ids,\).*labels \(2, 7\)"):
        Batch((ids,), ids[:, 1:], "causal_lm")
