"""Lesson "mask": the 0-filling kernel against hand computations, wrong-shaped masks, and a reduced lesson run."""

import math

import pytest
import torch
from torch.testing import assert_close

from core.attention import ReferenceAttention, ScaledDotProductAttention
from core.decoding import greedy_decode
from core.masks import causal_mask, check_mask
from core.multihead import MultiHeadAttention
from tasks.lab import LabSettings, run_lesson
from tasks.lab.mask import ZeroFilledMaskAttention, plain_attention, use_zero_fill
from tasks.lab.toolkit import batch, small_transformer, translation_data
from tests.numerics import float64
from tests.tasks.lab.zh_checks import assert_chinese


def _weights(kernel, q, k, **kwargs):
    v = torch.eye(k.shape[-2]).expand(*k.shape[:-1], -1)  # (B, H, Nk, Nk): the output is the weights
    return kernel(q, k, v, need_weights=True, **kwargs)[1]


def test_zero_fill_gives_the_future_weight_exp0_where_minus_inf_gives_none():
    # d_k = 1, so the scores are q·k: query 0 sees scores (0, ln 3), query 1 the same; key 1 is query 0's future.
    q = torch.ones(1, 1, 2, 1)
    k = torch.tensor([0.0, math.log(3.0)]).view(1, 1, 2, 1)
    zero = _weights(ZeroFilledMaskAttention(), q, k, is_causal=True)[0, 0]
    right = _weights(ReferenceAttention(), q, k, is_causal=True)[0, 0]
    # Query 0: its future score ln 3 is replaced by 0, not removed, so exp(0) / (exp(0) + exp(0)) = 1/2 leaks.
    assert_close(zero, torch.tensor([[0.5, 0.5], [0.25, 0.75]]))
    assert_close(right, torch.tensor([[1.0, 0.0], [0.25, 0.75]]))
    assert right[0, 1].item() == 0.0  # exactly, not approximately
    fused = _weights(ScaledDotProductAttention(), q, k, is_causal=True)[0, 0]
    assert fused.triu(1).abs().max().item() == 0.0


def test_zero_fill_treats_an_explicit_mask_like_is_causal_and_matches_the_core_without_a_mask():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=gen) for _ in range(3))
    kernel = ZeroFilledMaskAttention()
    by_flag = kernel(q, k, v, is_causal=True, need_weights=True)
    by_mask = kernel(q, k, v, mask=causal_mask(5), need_weights=True)
    assert_close(by_flag[0], by_mask[0])
    assert by_flag[1].triu(1).sum(-1).mean() > 0.1  # uniform-ish scores: a large share leaks
    # No mask (a decoding step with a cache): nothing to fill, so it is the core kernel.
    assert_close(kernel(q, k, v)[0], ReferenceAttention()(q, k, v)[0])


@float64()  # greedy tokens of two kernels are compared: no float32 near-tie may decide them
def test_zero_fill_switch_touches_only_decoder_self_attention_and_decoding_is_unchanged():
    data = translation_data(300)
    right = small_transformer(data, seed=0).eval()
    zero = use_zero_fill(small_transformer(data, seed=0)).eval()
    kernels = {n: type(m.kernel) for n, m in zero.named_modules() if isinstance(m, MultiHeadAttention)}
    assert {n for n, t in kernels.items() if t is ZeroFilledMaskAttention} == {
        f"decoder.layers.{i}.self_attn" for i in range(len(zero.decoder.layers))}
    src, tgt = batch(data, data.pairs["test"][:6])
    # Greedy decoding feeds one token at a time: the future does not exist, so the bug is invisible there ...
    assert torch.equal(greedy_decode(right, src, max_len=8), greedy_decode(zero, src, max_len=8))
    # ... while teacher forcing, where the whole target is in the input, sees different logits.
    assert not torch.allclose(right(src, tgt[:, :-1]), zero(src, tgt[:, :-1]))


def test_wrong_shape_mask_is_broadcast_silently_by_torch_but_rejected_by_the_core():
    gen = torch.Generator().manual_seed(0)
    B, H, S, Dh = 4, 2, 4, 8
    pad = torch.arange(S)[None, :] < torch.tensor([4, 3, 2, 1])[:, None]  # (B, S), meant as (B, 1, 1, S)
    q = torch.randn(B, H, 1, Dh, generator=gen)  # one decoding step
    kv = torch.randn(B, H, S, Dh, generator=gen)
    right = plain_attention(q, kv, kv, pad[:, None, None, :])  # (B, H, 1, Dh)
    wrong = plain_attention(q, kv, kv, pad)  # masked_fill grows the scores to (B, H, B, S): no error
    assert right.shape == (B, H, 1, Dh) and wrong.shape == (B, H, B, Dh)
    assert not torch.allclose(wrong[..., -1:, :], right)
    with pytest.raises(ValueError, match=r"does not broadcast to \(B, H, Nq, Nk\)"):
        check_mask(pad, B, H, 1, S)
    mha = MultiHeadAttention(H * Dh, H)
    x, memory = torch.randn(B, 1, H * Dh), torch.randn(B, S, H * Dh)
    with pytest.raises(ValueError, match="dimension Nq is 4, expected 1"):
        mha(x, memory, mask=pad)
    assert mha(x, memory, mask=pad[:, None, None, :]).shape == (B, 1, H * Dh)


def test_reduced_lesson_run(tmp_path):
    result = run_lesson("mask", LabSettings(tmp_path, quick=True, scale=0.1, progress=False))
    right, zero = result.findings["right"], result.findings["zero_filled"]
    assert right["leak_init"] == right["leak_trained"] == 0.0
    assert zero["leak_init"] > 0.3 and zero["leak_trained"] > 0.3
    assert zero["inference_loss"] > zero["test_loss"]  # the train/inference gap
    first = result.findings["wrong_shape"][0]
    assert first["masked_fill_silent_wrong"] and first["core_raises"]
    assert result.holds
    assert (tmp_path / "lesson.md").exists() and (tmp_path / "result.json").exists()
    assert all((tmp_path / name).exists() for name in result.figures) and result.figures
    assert_chinese("mask", result, tmp_path)
