"""The attention kernels: reference math vs the fused SDPA path, masks, fully masked rows."""

import math

import pytest
import torch
from torch.testing import assert_close

from core.attention import ReferenceAttention, ScaledDotProductAttention, reference_attention
from core.masks import causal_mask, check_mask, padding_mask
from tests.numerics import REFERENCE_FP64, assert_close_fp64, float64


def qkv(b=2, h=3, nq=5, nk=7, d=8, requires_grad=False):
    return [torch.randn(b, h, n, d, requires_grad=requires_grad) for n in (nq, nk, nk)]


def test_reference_is_the_formula():
    q, k, v = qkv()
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    out, w = ReferenceAttention()(q, k, v, need_weights=True)
    assert_close(w, weights)
    assert_close(out, weights @ v)


@pytest.mark.xfail(strict=True, reason="issue 12: reference_attention takes its softmax in float32 for float64 too")
@float64()
def test_reference_kernel_keeps_float64():
    q, k, v = qkv()
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    out, w = ReferenceAttention()(q, k, v, need_weights=True)
    assert_close_fp64(w, weights)
    assert_close_fp64(out, weights @ v)


@pytest.mark.parametrize("case", ["none", "padding", "causal", "padding+causal", "bias", "fully-masked"])
@float64()
def test_fast_path_equals_reference(case):
    q, k, v = qkv(nq=6, nk=6, requires_grad=True)
    ids = torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 4]])
    mask, bias, causal = None, None, False
    if "padding" in case:
        mask = padding_mask(ids, pad_id=0)
    if "causal" in case:
        causal = True
    if case == "bias":
        bias = torch.randn(3, 6, 6)
    if case == "fully-masked":
        mask = torch.ones(2, 1, 6, 6, dtype=torch.bool)
        mask[0, 0, 2] = False  # query 2 of sample 0 may attend nothing
        mask[1, 0, :, 3] = False
        bias = torch.randn(1, 3, 6, 6)
    ref, _ = ReferenceAttention()(q, k, v, mask, bias, causal)
    fast, _ = ScaledDotProductAttention()(q, k, v, mask, bias, causal)
    assert not fast.isnan().any() and not ref.isnan().any()
    assert_close_fp64(fast, ref, REFERENCE_FP64)
    grads_ref = torch.autograd.grad(ref.sum(), (q, k, v))
    grads_fast = torch.autograd.grad(fast.sum(), (q, k, v))
    for gr, gf in zip(grads_ref, grads_fast):
        assert not gf.isnan().any()
        assert_close_fp64(gf, gr, REFERENCE_FP64)
    if case == "fully-masked":
        assert torch.equal(fast[0, :, 2], torch.zeros_like(fast[0, :, 2]))


def test_masked_scores_get_no_weight():
    q, k, v = qkv(nq=4, nk=4)
    _, w = reference_attention(q, k, v, is_causal=True)
    assert torch.all(w.triu(diagonal=1) == 0)  # -inf before the softmax, never 0
    assert_close(w.sum(-1), torch.ones(w.shape[:-1]))


def test_fully_masked_row_is_zero_not_nan():
    q, k, v = qkv(b=1, h=1, nq=2, nk=3)
    mask = torch.tensor([[True, False, True], [False, False, False]])
    out, w = reference_attention(q, k, v, mask)
    assert not out.isnan().any()
    assert torch.equal(out[0, 0, 1], torch.zeros(8))
    assert torch.equal(w[0, 0, 1], torch.zeros(3))


def test_causal_mask_is_bottom_right_aligned():
    assert torch.equal(causal_mask(3), torch.ones(3, 3, dtype=torch.bool).tril())
    m = causal_mask(1, 4)  # one new query after 3 cached positions sees all 4
    assert m.all()
    m = causal_mask(2, 4)
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]


@float64()
def test_causal_rectangular_fast_equals_reference():
    q, k, v = qkv(nq=2, nk=5)
    ref, _ = ReferenceAttention()(q, k, v, is_causal=True)
    fast, _ = ScaledDotProductAttention()(q, k, v, is_causal=True)
    assert_close_fp64(fast, ref, REFERENCE_FP64)


def test_need_weights_on_fast_kernel_returns_weights():
    q, k, v = qkv()
    out, w = ScaledDotProductAttention()(q, k, v, need_weights=True)
    assert w is not None and w.shape == (2, 3, 5, 7)


def test_check_mask_validates():
    assert check_mask(torch.ones(4, 5, dtype=torch.bool), 2, 3, 4, 5).shape == (1, 1, 4, 5)
    with pytest.raises(TypeError, match="torch.bool"):
        check_mask(torch.ones(4, 5), 2, 3, 4, 5)
    with pytest.raises(ValueError, match="does not broadcast"):
        check_mask(torch.ones(2, 1, 5, 4, dtype=torch.bool), 2, 3, 4, 5)
    with pytest.raises(ValueError, match="at most 4"):
        check_mask(torch.ones(1, 1, 1, 4, 5, dtype=torch.bool), 2, 3, 4, 5)
