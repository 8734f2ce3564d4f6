"""Multi-head attention against torch.nn.MultiheadAttention, KV cache, recorded weights, validation."""

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from core.attention import ReferenceAttention
from core.decoding import KVCache
from core.masks import padding_mask
from core.multihead import MultiHeadAttention, record_attention
from tests.numerics import FP64, REFERENCE_FP64, assert_close_fp64, float64


def copy_from_torch(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        ours.qkv.weight.copy_(ref.in_proj_weight)
        ours.qkv.bias.copy_(ref.in_proj_bias)
        ours.out.weight.copy_(ref.out_proj.weight)
        ours.out.bias.copy_(ref.out_proj.bias)


@pytest.mark.parametrize("kernel", [None, ReferenceAttention()], ids=["sdpa", "reference"])
@float64()
def test_self_attention_equals_torch(kernel):
    ref = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    ours = MultiHeadAttention(16, 4, kernel=kernel).eval()
    copy_from_torch(ours, ref)
    x = torch.randn(3, 6, 16)
    ids = torch.tensor([[1, 2, 3, 0, 0, 0], [1, 2, 3, 4, 5, 6], [1, 2, 0, 0, 0, 0]])
    tolerance = FP64 if kernel is None else REFERENCE_FP64
    expected, _ = ref(x, x, x, key_padding_mask=ids == 0, need_weights=False)
    assert_close_fp64(ours(x, mask=padding_mask(ids, 0)), expected, tolerance)
    causal = nn.Transformer.generate_square_subsequent_mask(6)
    expected, _ = ref(x, x, x, attn_mask=causal, need_weights=False)
    assert_close_fp64(ours(x, is_causal=True), expected, tolerance)


@float64()
def test_cross_attention_equals_torch():
    ref = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    ours = MultiHeadAttention(16, 2).eval()
    copy_from_torch(ours, ref)
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    expected, _ = ref(x, memory, memory, need_weights=False)
    assert_close_fp64(ours(x, memory=memory), expected)


@float64()
def test_recorded_weights_equal_torch_weights():
    ref = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    ours = MultiHeadAttention(16, 4).eval()
    copy_from_torch(ours, ref)
    x = torch.randn(2, 5, 16)
    _, expected = ref(x, x, x, need_weights=True, average_attn_weights=False)
    with record_attention(ours) as maps:
        ours(x)
    assert_close_fp64(maps[""], expected, REFERENCE_FP64)  # recording runs the reference kernel
    assert ours.attention_weights is None and not ours.record_weights  # switched off afterwards


@pytest.mark.parametrize("position", [None, "rope", "alibi"])
@float64()
def test_kv_cache_equals_full_pass(position):
    from core.position import build_position

    pos = None if position is None else build_position(position, 16, 4)
    attn = MultiHeadAttention(16, 4, position=pos).eval()
    x = torch.randn(2, 6, 16)
    full = attn(x, is_causal=True)
    cache = KVCache()
    steps = [attn(x[:, t : t + 1], is_causal=True, cache=cache) for t in range(6)]
    assert_close_fp64(torch.cat(steps, dim=1), full)
    assert cache.length == 6


def test_static_cache_reuses_memory():
    attn = MultiHeadAttention(8, 2).eval()
    x, memory = torch.randn(1, 1, 8), torch.randn(1, 4, 8)
    cache = KVCache(static=True)
    first = attn(x, memory=memory, cache=cache)
    second = attn(x, memory=torch.zeros_like(memory), cache=cache)  # ignored: keys/values are cached
    assert_close(first, second)


def test_heads_must_divide_d_model():
    with pytest.raises(ValueError, match="d_model=10 is not divisible by heads=4"):
        MultiHeadAttention(10, 4)


def test_wrong_input_and_mask_shapes():
    attn = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"\(B, N, d_model=8\)"):
        attn(torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match="does not broadcast"):
        attn(torch.randn(2, 3, 8), mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="torch.bool"):
        attn(torch.randn(2, 3, 8), mask=torch.ones(2, 1, 1, 3))
