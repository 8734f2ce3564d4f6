"""Lesson ``norm``: Post-LN's gradients lean towards the output at init, and a reduced run keeps the direction."""

import math
from types import SimpleNamespace

import pytest
import torch

from tasks.lab import LabSettings, norm, run_lesson
from tasks.lab.toolkit import TrainLog, small_transformer, translation_data
from tests.tasks.lab.zh_checks import assert_chinese


def _ratio(data, norm_first: bool, depth: int = 6) -> float:
    model = small_transformer(data, encoder_layers=depth, decoder_layers=depth, norm_first=norm_first, **norm.WIDTH)
    grads = norm.init_grad_norms(model, data)
    assert len(grads) == 2 * depth and all(g > 0 for g in grads)
    return grads[-1] / grads[depth]  # last decoder layer over the first


def test_post_ln_gradients_grow_towards_the_output_at_init():
    data = translation_data(3000)
    post, pre = _ratio(data, False), _ratio(data, True)
    assert post > 1.2 and pre < 1.0  # measured 1.7 and 0.57 at depth 6


def test_layer_grad_norms_is_the_norm_of_each_layers_gradient():
    data = translation_data(3000)
    model = small_transformer(data, encoder_layers=2, decoder_layers=2, **norm.WIDTH)
    for i, p in enumerate(model.parameters()):
        p.grad = torch.full_like(p, float(i % 3))
    layers = [*model.encoder.layers, *model.decoder.layers]
    expected = [torch.cat([p.grad.flatten() for p in layer.parameters()]).norm().item() for layer in layers]
    assert norm.layer_grad_norms(model) == pytest.approx(expected)


def test_unigram_plateau_is_the_entropy_of_target_tokens_with_eos():
    data = SimpleNamespace(pairs={"train": [([5], [3, 3]), ([6], [4])]}, tokenizer=SimpleNamespace(eos_id=2))
    p = [2 / 5, 1 / 5, 2 / 5]  # tokens 3, 4, eos
    assert norm.unigram_plateau(data) == pytest.approx(-sum(q * math.log(q) for q in p))


def test_status_tells_diverged_stuck_and_training_runs_apart():
    plateau = 3.76
    assert norm.status(TrainLog([5.5], [0.01], [1.0], diverged=True), plateau) == "diverged"
    assert norm.status(TrainLog([5.5] + [3.8] * 10, [], []), plateau) == "stuck"  # on the plateau
    assert norm.status(TrainLog([3.0] + [3.2] * 10, [], []), plateau) == "stuck"  # above its first loss
    assert norm.status(TrainLog([5.5] + [2.0] * 10, [], []), plateau) == "trains"


def test_reduced_lesson_keeps_the_direction(tmp_path, monkeypatch):
    monkeypatch.setattr(norm, "DEPTHS", (2, 6))  # the full lesson runs 6, 12 and 24
    result = run_lesson("norm", LabSettings(tmp_path, quick=True, scale=0.15, progress=False))
    f = result.findings
    assert len(f["runs"]) == 8
    for depth in ("2", "6"):
        assert f["init_grad_ratio"]["Post-LN"][depth] > f["init_grad_ratio"]["Pre-LN"][depth]
    deepest = {p: f["runs"][f"{p} depth 6 constant"]["final_loss"] for p in norm.PLACEMENTS}
    assert deepest["Pre-LN"] < deepest["Post-LN"]  # by 0.055; the same to 1e-6 under AVX2, AVX-512, 1 or 2 threads
    assert result.holds
    assert (tmp_path / "lesson.md").exists() and (tmp_path / "result.json").exists()
    assert result.figures == ["norm_loss.png", "norm_grads.png"]
    assert all((tmp_path / name).stat().st_size > 0 for name in result.figures)
    assert_chinese("norm", result, tmp_path)
