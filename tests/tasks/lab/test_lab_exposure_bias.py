"""Lesson `exposure-bias`: the schedule, the two-pass mixing, the per-position counts, the verdict from the
numbers both ways, and a reduced run."""

import json

import pytest
import torch

from tasks.lab import LabSettings, run_lesson
from tasks.lab.exposure_bias import (
    DIFFICULTY,
    Checkpoint,
    Run,
    ScheduledSampling,
    evaluate,
    findings_of,
    mix_probability,
    stages,
    train_run,
    verdict_of,
)
from tasks.lab.toolkit import batch, small_transformer, translation_data
from tests.numerics import float64
from tests.tasks.lab.zh_checks import assert_chinese, assert_same_numbers


def test_mix_probability_waits_then_rises_linearly_to_p_max():
    values = [mix_probability(step, 101, p_max=0.4, start=0.2) for step in range(101)]
    assert values[:21] == [0.0] * 21 and values[-1] == pytest.approx(0.4)
    assert values[60] == pytest.approx(0.2)  # halfway from step 20 to step 100
    assert all(a <= b for a, b in zip(values, values[1:]))
    with pytest.raises(ValueError, match="p_max=1.5 is not a probability"):
        mix_probability(0, 10, p_max=1.5)
    with pytest.raises(ValueError, match="start=1.0"):
        mix_probability(0, 10, start=1.0)


@pytest.fixture(scope="module")
def tiny():
    data = translation_data(300)
    src, tgt = batch(data, data.pairs["train"][:16])
    return data, src, tgt[:, :-1]


def test_scheduled_sampling_at_p0_and_in_eval_is_the_plain_model(tiny):
    data, src, tgt_in = tiny
    model = small_transformer(data)
    wrapper = ScheduledSampling(model, lambda step: 0.0).train()
    assert torch.equal(wrapper(src, tgt_in), model(src, tgt_in))  # the same computation: bit for bit
    wrapper = ScheduledSampling(model, lambda step: 1.0).eval()
    assert torch.equal(wrapper(src, tgt_in), model(src, tgt_in)) and not wrapper.replaced


def test_mixing_at_p1_feeds_the_models_own_guesses_after_bos(tiny):
    data, src, tgt_in = tiny
    pad = data.tokenizer.pad_id
    model = small_transformer(data).eval()
    mixed = ScheduledSampling(model, lambda step: 1.0).mix(src, tgt_in, 1.0)
    guess = model(src, tgt_in).argmax(-1)  # (B, T): the prediction for the next input position
    assert torch.equal(mixed[:, 0], tgt_in[:, 0])  # BOS stays
    real = tgt_in[:, 1:] != pad
    own = torch.where(guess[:, :-1] != pad, guess[:, :-1], tgt_in[:, 1:])  # a predicted pad is not fed back
    assert torch.equal(mixed[:, 1:][real], own[real]) and torch.equal(mixed[:, 1:][~real], tgt_in[:, 1:][~real])
    assert not torch.equal(mixed, tgt_in)  # an untrained model's guesses differ from the reference somewhere
    wrapper = ScheduledSampling(model, lambda step: 0.3, seed=0)
    share = wrapper.mix(src, tgt_in, 0.3).ne(tgt_in)[:, 1:][real].float().mean()
    assert 0.05 < share <= wrapper.replaced[-1] + 1e-9 < 0.6  # replaced: swapped for a (maybe equal) guess


@float64()
def test_per_position_counts_are_consistent(tiny):
    data, _, _ = tiny
    model = small_transformer(data)  # untrained: plenty of errors to count
    rows = data.pairs["test"][:24]
    c = evaluate(model, data, rows, step=0)
    assert model.training  # evaluate restores the mode it found
    lengths = [len(t) + 1 for _, t in rows]  # with EOS
    assert c.count == [sum(n > t for n in lengths) for t in range(max(lengths))]
    assert all(k <= g <= n for k, g, n in zip(c.on_track, c.greedy_correct, c.count))
    assert all(a >= b for a, b in zip(c.on_track, c.on_track[1:]))  # once off the reference, always off
    # position 0 sees only BOS on both paths: greedy's first token is the teacher-forced arg-max (float64: no ties)
    assert c.greedy_correct[0] == c.tf_correct[0] == c.on_track[0]
    assert c.tf_accuracy == pytest.approx(sum(c.tf_correct) / sum(c.count))


def _run(name: str, tf: list[float], greedy: list[float], bleu: float) -> Run:
    n = 100
    checkpoint = Checkpoint(50, 1.0, sum(tf) / len(tf), sum(greedy) / len(greedy), bleu, 0.1,
                            [round(a * n) for a in tf], [round(g * n) for g in greedy],
                            [round(g * n / 2) for g in greedy], [n] * len(tf))
    return Run(name, [1.0] * 50, [0.0] * 50, [checkpoint])


def test_the_verdict_follows_the_numbers_both_ways():
    flat, falling = [0.8] * 9, [0.8, 0.75, 0.7, 0.6, 0.55, 0.5, 0.4, 0.35, 0.3]
    base = _run("teacher forcing", flat, falling, 40.0)
    f = findings_of({"teacher forcing": base, "scheduled sampling": _run("scheduled sampling", flat, flat, 45.0)},
                    50, 100)
    assert f["holds"] and all(f["checks"].values()) and f["mitigation"] == "helped"
    early = stages(base.final.per_position())["early"]
    assert early["gap"] == pytest.approx(0.8 - 0.75) and early["positions"] == "0–2"
    first, second = verdict_of(f)
    assert "the gap grows along the output" in first and "+5% at positions 0–2 to +45% at 6–8" in first
    assert "helped here: greedy BLEU 45.0 vs 40.0" in second
    first_zh, second_zh = verdict_of(f, "zh")
    assert "随输出位置变大" in first_zh and "有帮助" in second_zh and "BLEU 45.0 对 40.0" in second_zh
    assert_same_numbers((first, second), (first_zh, second_zh))
    f = findings_of({"teacher forcing": _run("teacher forcing", flat, flat, 40.0),
                     "scheduled sampling": _run("scheduled sampling", flat, falling, 30.0)}, 50, 100)
    assert not f["holds"] and f["mitigation"] == "hurt"
    first, second = verdict_of(f)
    assert "does NOT grow" in first and "hurt here" in second
    assert "并没有随输出位置变大" in verdict_of(f, "zh")[0] and "反而有害" in verdict_of(f, "zh")[1]
    f = findings_of({"teacher forcing": base, "scheduled sampling": _run("scheduled sampling", flat, falling, 40.5)},
                    50, 100)
    assert "made no clear difference here" in verdict_of(f)[1]
    f = findings_of({"teacher forcing": _run("teacher forcing", flat, flat, 40.0),
                     "scheduled sampling": _run("scheduled sampling", flat, falling, 45.0)}, 50, 100)
    assert f["mitigation"] == "made no clear difference"  # BLEU up, greedy token accuracy down: no call


def test_teacher_forced_accuracy_overstates_greedy_and_more_so_late_in_the_output(tmp_path):
    # the lesson's baseline at half the quick budget, one evaluation at the end (the lesson evaluates 9 times)
    data = translation_data(3000, seed=0, difficulty=DIFFICULTY)
    settings = LabSettings(tmp_path, quick=True, progress=False)
    run = train_run("teacher forcing", data, settings, 200, 200, data.pairs["test"][:200], None, 64)
    c = run.final
    late, early = (stages(c.per_position())[name] for name in ("late", "early"))
    # Measured, native / ATEN_CPU_CAPABILITY=default / MKL+oneDNN at AVX2 (one thread): TF minus greedy token
    # accuracy 0.282 / 0.288 / 0.277 (kernels move it by 0.011, the threshold is 0.17 below the smallest);
    # late minus early gap 0.386 / 0.442 / 0.361 (moved by 0.08: the late positions are few and mid-training
    # greedy output is sensitive; the threshold is 0.26 below the smallest, over 3 times that spread).
    assert c.tf_accuracy - c.greedy_accuracy > 0.1, (c.tf_accuracy, c.greedy_accuracy)
    assert late["gap"] - early["gap"] > 0.1, (late, early)


def test_reduced_lesson_writes_its_numbers_and_figures(tmp_path):
    result = run_lesson("exposure-bias", LabSettings(tmp_path, quick=True, scale=0.05, progress=False))
    f = result.findings
    assert f["steps"] == 20 and f["held_out"] == 50
    assert len(f["teacher_forcing"]["curve"]) == len(f["scheduled_sampling"]["curve"]) == 11  # steps 0, 2, …, 18 and 20
    assert 0 < f["replaced_share_last_steps"] <= 0.25
    assert result.holds == all(f["checks"].values())
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["findings"]["mitigation"] in ("helped", "hurt", "made no clear difference")
    for name in ("lesson.md", "exposure_training.png", "exposure_positions.png"):
        assert (tmp_path / name).exists()
    assert_chinese("exposure-bias", result, tmp_path)
