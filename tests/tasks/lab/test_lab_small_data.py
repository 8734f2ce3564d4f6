"""Lesson `small-data`: nested subsets, the FLOP-matched CNN, the verdict from the numbers, and a reduced run."""

import json

import pytest
import torch

from tasks.cifar.reference import matched_width, resnet18_flops
from tasks.lab import LabSettings, run_lesson
from tasks.lab.small_data import (
    FRACTIONS,
    LESSON_VIT,
    _body,
    _findings,
    _verdict,
    load,
    nested_subsets,
    per_image_flops,
)
from tests.tasks.lab.zh_checks import assert_chinese, assert_same_numbers


def test_subsets_are_nested_and_stratified():
    labels = load().train_y
    subsets = nested_subsets(labels, FRACTIONS, seed=0)
    small, mid, full = (set(subsets[f].tolist()) for f in FRACTIONS)
    assert small < mid < full and len(full) == len(labels)
    counts = torch.bincount(labels[subsets[0.1]], minlength=10)
    assert counts.min() == counts.max() == len(labels) // 100  # the embedded subset is balanced: 50 per class
    assert torch.equal(nested_subsets(labels, FRACTIONS, seed=0)[0.1], subsets[0.1])
    assert not torch.equal(nested_subsets(labels, FRACTIONS, seed=1)[0.1], subsets[0.1])


@pytest.mark.parametrize("vit", [LESSON_VIT, {}])  # the quick ViT and the cpu preset of the full run
def test_the_cnn_is_matched_to_the_vits_training_flops_within_20_percent(vit):
    target = per_image_flops("vit", vit, 0)
    width, flops = matched_width(target)
    assert flops == resnet18_flops(width) and 0.8 < flops / target < 1.2
    assert abs(resnet18_flops(width + 1) - target) >= abs(flops - target) <= abs(resnet18_flops(width - 1) - target)


def _synthetic(vit, cnn, deit):
    accuracy = {"ViT": dict(zip(FRACTIONS, vit)), "CNN": dict(zip(FRACTIONS, cnn)), "DeiT": dict(zip(FRACTIONS, deit))}
    flops = {"ViT": 1e8, "CNN": 1e8, "DeiT": 1e8}
    subsets = {f: torch.arange(int(5000 * f)) for f in FRACTIONS}
    return _findings(accuracy, flops, 6, 100, subsets, {name: {f: [1.0] for f in FRACTIONS} for name in accuracy})


def test_the_verdict_follows_the_numbers_both_ways():
    held = _synthetic(vit=(0.60, 0.75, 0.85), cnn=(0.80, 0.85, 0.88), deit=(0.75, 0.82, 0.87))
    assert held["holds"] and all(held["checks"].values())
    first, second = _verdict(held)
    assert "loses to" in first and "80.0 %" in first and "+20.0 points" in first and "shrinks by 17.0" in first
    assert "largely relieves" in second and "75% of the gap closed" in second and "held here" in second
    first_zh, second_zh = _verdict(held, "zh")
    assert "输给了" in first_zh and "缩小了 17.0" in first_zh and "基本弥补了" in second_zh and "成立" in second_zh
    assert_same_numbers((first, second), (first_zh, second_zh))
    assert "| 最小数据上 ViT 输给 CNN | ✓ |" in _body(held, "zh")
    missed = _synthetic(vit=(0.60, 0.75, 0.85), cnn=(0.80, 0.85, 0.88), deit=(0.62, 0.76, 0.85))
    assert not missed["holds"] and "does not largely relieve" in _verdict(missed)[1]
    assert "没能基本弥补" in _verdict(missed, "zh")[1] and "不成立" in _verdict(missed, "zh")[1]
    reversed_ = _synthetic(vit=(0.82, 0.85, 0.88), cnn=(0.80, 0.85, 0.88), deit=(0.83, 0.85, 0.88))
    assert not reversed_["holds"] and "does not lose to" in _verdict(reversed_)[0]


@pytest.mark.slow
def test_reduced_lesson_measures_the_cnns_lead_and_writes(tmp_path):
    result = run_lesson("small-data", LabSettings(tmp_path, quick=True, scale=0.2, progress=False))
    f = result.findings
    assert set(f["accuracy"]) == {"ViT", "CNN", "DeiT"}
    assert 0.8 < f["cnn_to_vit_flops"] < 1.2
    # even a few steps show the direction: the CNN's locality prior learns the smallest subset far faster
    assert f["cnn_lead"][0.1] > 0.1, f["accuracy"]
    assert result.verdict[0].startswith("ViT loses to a CNN")
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["findings"]["images"] == {"0.1": 500, "0.3": 1500, "1.0": 5000}
    for name in ("lesson.md", "result.json", "small_data.png"):
        assert (tmp_path / name).exists()
    assert_chinese("small-data", result, tmp_path)
