"""zoo.analysis.doctor: the lab's mistakes (and three of the doctor's own) are its patients.

Each patient is the tiny lab model with one mistake injected exactly as ``zoo doctor --lab-mistake`` injects it
(:mod:`tasks.doctor.mistakes`, which reuses the lab's switches); the doctor must rank the right finding first,
past its threshold by at least 2×, while the correct model of the pair gets no finding of that kind and its
statistics stay at least 2× inside the thresholds. The trained patients share one model trained for 150 steps.
Thresholds are not tuned to these numbers: each module documents why its limits are where they are.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

import zoo
from tasks.cli.main import main
from tasks.doctor.mistakes import MISTAKES, get_mistake
from tasks.lab.toolkit import batch, small_transformer, train, translation_data
from zoo.analysis.doctor import Batch, CheckResult, Finding, curve_checks, examine, seq2seq_batch
from zoo.analysis.doctor.depth import init_checks
from zoo.analysis.doctor.findings import Diagnosis
from zoo.analysis.doctor.render import write_diagnosis

MARGIN = math.log(2.0)  # a patient's statistic is at least 2× past its threshold


@pytest.fixture(scope="module")
def data():
    return translation_data(600, seed=0)


def heldout(data, n: int = 24) -> Batch:
    src, tgt = batch(data, data.pairs["valid"][:n])
    return seq2seq_batch(src, tgt, data.tokenizer.pad_id)


def patient(data, name: str | None = None, **overrides) -> torch.nn.Module:
    mistake = get_mistake(name) if name else None
    model = small_transformer(data, seed=0, **{**(mistake.overrides if mistake else {}), **overrides})
    return mistake.apply(model) if mistake and mistake.apply else model


# --------------------------------------------------------------------------------------- at initialisation
PATIENTS = {  # mistake -> (check that must rank first, words of its problem)
    "unscaled": ("score_scale", "kernel scales the scores"),
    "zero-mask": ("mask", "causal leak"),
    "no-positions": ("position", "no position information (encoder and decoder)"),
    "swapped-positions": ("position", "differs from the declared sinusoid"),
    "unscaled-embeddings": ("position", "drowns the token embeddings"),
    "qkv-std-1": ("init", "Q/K/V initialisation"),
    "ignore-mask": ("mask", "causal leak"),
    "zero-decoder-positions": ("position", "no position information (decoder)"),
}


def test_a_healthy_model_gets_nothing_found_and_its_numbers_sit_inside_the_thresholds(data):
    d = examine(patient(data), heldout(data))
    assert d.healthy, d.table()
    assert d.table().startswith("nothing found")
    assert all(c.status == "ok" for c in d.checks)
    scale, mask, position, init = (d.check(n).measured for n in ("score_scale", "mask", "position", "init"))
    assert all(abs(math.log(s)) < 1e-3 for s in scale["effective_scales"].values())  # 1 to rounding
    assert scale["max_score_variance"] < 10 / 2
    assert max(mask["causal_leak"].values()) < 1e-4 / 100 and mask["padding_leak"] < 1e-4 / 100
    assert min(position["encoder_permutation_gap"], position["decoder_position_gap"]) > 2 * 1e-4
    assert position["ratio"] < 3 / 2
    assert all(1 / 1.5 < r["ratio"] < 1.5 for r in init["weights"])
    assert max(init["grad_ratio"].values()) < 10 / 2
    assert max(max(s["saturation"]) for s in d.check("attention").measured["layers"].values()) < 0.5 / 2


REGISTERED = [(name, task) for task in ("translation", "cifar") for name in zoo.list_variants(task)]


@pytest.mark.parametrize("name, task", REGISTERED, ids=[f"{n}-{t}" for n, t in REGISTERED])
def test_every_registered_variant_is_healthy_at_initialisation(data, name, task):
    torch.manual_seed(0)
    if task == "translation":
        tok = data.tokenizer
        model = zoo.create(name, "tiny", task, src_vocab=tok.vocab_size, pad_id=tok.pad_id, bos_id=tok.bos_id,
                           eos_id=tok.eos_id, dropout=0.0)
        d = examine(model, heldout(data, 16))
    else:
        model = zoo.create(name, "tiny", task)
        c = model.config
        images = torch.randn(8, c.in_channels, c.image_size, c.image_size, generator=torch.Generator().manual_seed(0))
        d = examine(model, (images, torch.arange(8) % c.num_classes), kind="classification")
    assert d.healthy, d.table()
    assert {c.name for c in d.checks if c.status == "ok"} >= {"attention", "score_scale", "init"}


@pytest.mark.parametrize("name", list(PATIENTS))
def test_each_mistake_is_diagnosed_first_and_past_its_threshold(data, name):
    check, words = PATIENTS[name]
    d = examine(patient(data, name), heldout(data), warmup_steps=get_mistake(name).warmup)
    first = d.findings[0] if d.findings else None
    assert first is not None and first.check == check and words in first.problem, d.table()
    assert first.excess > MARGIN, (first.statistic, first.threshold)
    assert first.evidence and first.cause and first.fix


def test_post_ln_at_depth_24_without_warmup_is_diagnosed_and_pre_ln_is_not(data):
    small = heldout(data, 8)
    d = examine(patient(data, "post-ln-deep"), small, warmup_steps=0)
    first = d.findings[0]
    assert first.check == "init" and "gradients grow toward the output" in first.problem, d.table()
    assert "no warm-up" in first.problem and first.severity == "error" and first.excess > MARGIN
    assert first.where.startswith("decoder.layers")
    twin = init_checks(patient(data, "post-ln-deep", norm_first=True), small, trained=False, warmup_steps=0)
    assert twin.status == "ok" and max(twin.measured["grad_ratio"].values()) < 10 / 2


def test_a_zeroed_position_table_is_no_position_information(data):
    model = patient(data, position="learned")
    with torch.no_grad():
        model.position.weight.zero_()
    first = examine(model, heldout(data)).findings[0]
    assert first.problem == "no position information (encoder and decoder)", first


def test_symptoms_point_at_their_root_cause(data):
    d = examine(patient(data, "qkv-std-1"), heldout(data))
    kinds = [f.check for f in d.findings]
    assert kinds[0] == "init" and {"attention", "score_scale"} <= set(kinds)
    for f in d.findings[1:]:
        assert "Q/K/V initialisation" in f.cause


def test_leaks_are_localised_to_the_layer_where_they_enter(data):
    model = patient(data)
    from tasks.lab.mask import ZeroFilledMaskAttention

    model.decoder.layers[1].self_attn.kernel = ZeroFilledMaskAttention()  # only the second decoder layer leaks
    d = examine(model, heldout(data))
    causal = d.findings[0]
    assert causal.check == "mask" and causal.where == "decoder.layers.1", d.table()
    assert d.check("mask").measured["causal_leak_by_layer"]["decoder.layers.0"] == 0.0


# ------------------------------------------------------------------------------------------------- trained
@pytest.fixture(scope="module")
def trained(data):
    model = patient(data)
    train(model, data, 150, lr=3e-3, progress=False)
    return model


def test_a_trained_healthy_model_gets_nothing_found(data, trained):
    src, tgt = batch(data, data.pairs["train"][:24])
    d = examine(trained, heldout(data), trained=True, train_batch=(src, tgt))
    assert d.healthy, d.table()
    losses = d.check("score_scale").measured["temperature_losses"]
    assert min(losses, key=losses.get) == "1.0"  # trained at its own score scale
    generation = d.check("generation").measured
    assert generation["teacher_forced_accuracy"] > 0.5 and generation["early_divergence_share"] == 0.0


def test_qk_weights_scaled_after_training_are_found(data, trained):
    model = get_mistake("qk-scaled").apply(copy.deepcopy(trained))
    d = examine(model, heldout(data), trained=True)
    first = d.findings[0]
    assert first.check == "score_scale" and "too large" in first.problem and first.excess > MARGIN, d.table()
    losses = d.check("score_scale").measured["temperature_losses"]
    assert min(losses, key=losses.get) == "0.0625"  # Q and K ×4: the scores ×16, undone by τ = 1/16


def test_examining_leaves_the_model_and_the_random_state_as_they_were(data, trained):
    model = copy.deepcopy(trained).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    examine(model, heldout(data), trained=True)
    assert model.training and all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(rng, torch.get_rng_state())


# --------------------------------------------------------------------------------------------------- curve
def _rows(losses):
    return [{"loss": v, "lr": 1e-3 * min(1.0, (i + 1) / 20)} for i, v in enumerate(losses)]


def test_curve_shapes():
    healthy = [4.0 * math.exp(-i / 15) + 1.0 for i in range(200)]
    assert curve_checks(steps=_rows(healthy)).status == "ok"
    crawl = [5.0 - 0.004 * i for i in range(200)]  # a straight line that has not reached the plateau
    assert [f.problem for f in curve_checks(steps=_rows(crawl)).findings] == ["slow monotone crawl"]
    assert [f.problem for f in curve_checks(steps=_rows(crawl), plateau=4.0).findings] == ["slow monotone crawl"]
    assert curve_checks(steps=_rows(crawl), plateau=4.5).status == "ok"  # below the plateau: it learns
    teeth = [3.0 - min(i % 50, 25) / 25 for i in range(200)]  # drop, plateau, climb back: every 50 steps
    found = curve_checks(steps=_rows(teeth)).findings
    assert [f.problem for f in found] == ["saw-teeth: the loss climbs back up"] and found[0].statistic == 3
    flat = [5.5 + 0.01 * math.sin(i) for i in range(200)]
    stuck = curve_checks(steps=[{"loss": v, "lr": 1e-2} for v in flat], post_ln=True)
    assert stuck.findings[0].problem == "loss does not fall" and "Post-LN with no warm-up" in stuck.findings[0].cause
    assert curve_checks(steps=_rows(flat[:20])).measured["shape"].startswith("too short")
    settled = [3.8 + 1.7 * math.exp(-i / 10) for i in range(200)]  # falls fast, then sits on the plateau
    found = curve_checks(steps=_rows(settled), plateau=3.76).findings
    assert [f.problem for f in found] == ["loss stuck at or above the unigram plateau"]
    learnt = [1.0 + 4.5 * math.exp(-i / 10) for i in range(200)]  # settles far below the plateau: converged
    assert curve_checks(steps=_rows(learnt), plateau=3.76).status == "ok"


def test_curve_non_finite_gap_and_falling_metric():
    assert curve_checks(history=[{"train_loss": 3.0}, {"train_loss": math.nan}]).findings[0].severity == "critical"
    gap = curve_checks(gap={"train": 0.2, "valid": 1.1})
    assert gap.findings[0].problem == "validation/training gap"
    history = [{"train_loss": 3 * 0.5**i, "bleu": b} for i, b in enumerate((10.0, 30.0, 40.0, 31.0, 30.0))]
    assert "falls after its best epoch" in curve_checks(history=history, metric="bleu").findings[0].problem
    noisy = history[:-1] + [{"train_loss": 0.15, "bleu": 39.0}]  # one bad epoch is not a trend
    assert curve_checks(history=noisy, metric="bleu").status == "ok"
    cold = curve_checks(history=[{"train_loss": 3.0 - i * 0.5} for i in range(4)], post_ln=True, warmup_steps=0)
    assert [f.problem for f in cold.findings] == ["no warm-up on a Post-LN model"]


# -------------------------------------------------------------------------------------------------- output
def test_writes_markdown_strict_json_and_one_figure_per_check(data, tmp_path):
    d = examine(patient(data, "zero-mask"), heldout(data))
    files = write_diagnosis(d, tmp_path)
    record = json.loads((tmp_path / "doctor.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert record["findings"][0]["problem"].startswith("causal leak") and not record["healthy"]
    ran = [c.name for c in d.checks if c.status != "skipped"]
    assert sorted(f for f in files if f.endswith(".png")) == sorted(f"doctor_{n}.png" for n in ran)
    text = (tmp_path / "doctor.md").read_text()
    assert "## Findings" in text and "`zoo lab mask`" in text


def test_bad_inputs_get_clear_errors(data):
    model = patient(data)
    with pytest.raises(TypeError, match="batch must be"):
        examine(model, "not a batch")
    with pytest.raises(ValueError, match="unknown batch kind 'translate'"):
        examine(model, batch(data, data.pairs["valid"][:4]), kind="translate")
    with pytest.raises(ValueError, match="severity"):
        Finding("mask", "p", "e", "c", "f", "fatal", 1.0, 1.0)
    with pytest.raises(ValueError, match="Did you mean 'unscaled'"):
        get_mistake("unscaledd")
    with pytest.raises(KeyError, match="no check"):
        Diagnosis([CheckResult("mask")]).check("curve")
    with pytest.raises(ValueError, match="severity must be one of"):
        Diagnosis([CheckResult("mask")]).at_least("fatal")
    assert set(MISTAKES) >= {"unscaled", "zero-mask", "post-ln-deep", "ignore-mask", "qk-scaled"}


@pytest.mark.parametrize("argv, message", [
    ([], "give a run folder"),
    (["/nonexistent/run"], "no run folder at /nonexistent/run"),
    (["--variant", "classic", "--lab-mistake", "nope"], "unknown mistake"),
    (["--variant", "classic", "--threads", "0"], "--threads must be >= 1"),
    (["somewhere", "--variant", "classic"], "not both"),
])
def test_cli_errors_are_one_line(argv, message, capsys):
    assert main(["doctor", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo doctor: error:") and message in err and "\n" not in err


def test_cli_lists_the_mistakes(capsys):
    assert main(["doctor", "--list-mistakes"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in MISTAKES)


def test_findings_at_least_a_severity():
    found = CheckResult("mask")
    for severity in ("note", "critical", "warning", "error"):
        found.add(Finding("mask", severity, "e", "c", "f", severity, 2.0, 1.0))
    diagnosis = Diagnosis([found])
    assert [f.severity for f in diagnosis.at_least("critical")] == ["critical"]
    assert [f.severity for f in diagnosis.at_least("error")] == ["critical", "error"]
    assert [f.severity for f in diagnosis.at_least("note")] == ["critical", "error", "warning", "note"]
