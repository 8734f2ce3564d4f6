"""Lesson ``scale``: the unscaled kernel is exactly the missing 1/√d_k, and the lesson's direction holds."""

import math

import pytest
import torch
from torch.testing import assert_close

from core.attention import ReferenceAttention, reference_attention
from core.multihead import MultiHeadAttention
from tasks.lab import LabSettings, run_lesson
from tasks.lab.scale import UnscaledAttention, log_slope, qk_grad_norm, score_variance, softmax_gain, use_kernel
from tasks.lab.toolkit import small_transformer, translation_data
from tests.tasks.lab.zh_checks import assert_chinese


def test_unscaled_kernel_is_reference_attention_on_queries_times_sqrt_dk():
    q, k, v = torch.randn(3, 2, 3, 5, 16).unbind(0)  # (B, H, N, Dh)
    mask = torch.rand(2, 1, 5, 5) > 0.3
    bias = torch.randn(1, 3, 5, 5)
    out, weights = UnscaledAttention()(q, k, v, mask, bias, is_causal=True, need_weights=True)
    ref_out, ref_weights = reference_attention(q * math.sqrt(16), k, v, mask, bias, is_causal=True)
    assert_close(out, ref_out)
    assert_close(weights, ref_weights)
    scaled_out, _ = ReferenceAttention()(q, k, v, mask, bias, is_causal=True)
    assert not torch.allclose(out, scaled_out)  # the scale really is missing


def test_unscaled_kernel_by_hand():
    q = torch.tensor([[1.0, 2.0]]).view(1, 1, 1, 2)
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0]]).view(1, 1, 2, 2)
    v = torch.tensor([[1.0], [3.0]]).view(1, 1, 2, 1)
    out, weights = UnscaledAttention()(q, k, v, need_weights=True)
    expected = torch.softmax(torch.tensor([1.0, 2.0]), -1)  # scores q·k = (1, 2), no division by √2
    assert_close(weights.flatten(), expected)
    assert_close(out.flatten(), (expected * torch.tensor([1.0, 3.0])).sum().view(1))


def test_use_kernel_swaps_every_kernel_and_keeps_the_weights():
    data = translation_data(300)
    model = small_transformer(data, kernel="reference")
    before = {name: p.clone() for name, p in model.state_dict().items()}
    use_kernel(model, UnscaledAttention)
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attentions) == 6 and all(isinstance(m.kernel, UnscaledAttention) for m in attentions)
    assert all(torch.equal(before[name], p) for name, p in model.state_dict().items())


def test_score_variance_grows_in_proportion_to_dk():
    rows = score_variance((8, 32, 128), samples=20000)
    for row in rows:
        assert row["var_unscaled"] / row["d_k"] == pytest.approx(1.0, rel=0.06)
        assert row["var_scaled"] == pytest.approx(1.0, rel=0.06)
    ratios = [r["var_unscaled"] / r["var_scaled"] for r in rows]
    assert log_slope([8, 32, 128], ratios) == pytest.approx(1.0, abs=1e-6)  # the ratio is exactly d_k
    assert log_slope([1, 2, 4], [3, 12, 48]) == pytest.approx(2.0)


def test_softmax_gain_is_the_jacobian_norm():
    scores = torch.randn(7)
    jacobian = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, -1), scores)
    assert_close(softmax_gain(torch.softmax(scores, -1)), torch.linalg.matrix_norm(jacobian))
    onehot = torch.tensor([0.0, 1.0, 0.0])
    assert float(softmax_gain(onehot)) == pytest.approx(0.0, abs=1e-6)


def test_qk_grad_norm_reads_the_q_and_k_rows_of_qkv():
    attention = MultiHeadAttention(8, 2)
    attention(torch.randn(2, 5, 8)).pow(2).sum().backward()
    grad = attention.qkv.weight.grad  # (3·D, D): rows [W^Q; W^K; W^V]
    assert qk_grad_norm(attention) == pytest.approx(float(grad[:16].norm()), rel=1e-5)


@pytest.fixture(scope="module")
def lesson(tmp_path_factory):
    out = tmp_path_factory.mktemp("scale")
    return out, run_lesson("scale", LabSettings(out, quick=True, scale=0.05, progress=False))


def test_unscaled_scores_saturate_more_and_have_lower_entropy(lesson):
    _, result = lesson
    f = result.findings
    scaled, unscaled = f["scaled"], f["unscaled"]
    assert unscaled["saturation_init"] > scaled["saturation_init"]
    assert unscaled["entropy_init"] < scaled["entropy_init"]
    assert unscaled["saturation"] > scaled["saturation"]  # by 0.313-0.315 after training, whatever the kernels
    assert unscaled["entropy"] < scaled["entropy"]
    assert unscaled["softmax_gain"] < scaled["softmax_gain"]
    # at init the gap widens with d_k: the widest unscaled model saturates most
    sweep = f["init_sweep"]
    assert sweep[-1]["saturation_unscaled"] > sweep[0]["saturation_unscaled"]
    assert all(r["entropy_unscaled"] < r["entropy_scaled"] for r in sweep)
    assert f["variance_ratio_log_slope"] == pytest.approx(1.0, abs=0.05)
    assert result.holds


def test_lesson_writes_its_files(lesson):
    out, result = lesson
    assert result.figures == ["scale_at_init.png", "scale_training.png"]
    assert all((out / name).stat().st_size > 0 for name in result.figures)
    text = (out / "lesson.md").read_text()
    assert "1/√d_k" in text and "| unscaled |" in text
    assert (out / "result.json").exists()
    assert_chinese("scale", result, out)
