"""A kernel that declares :class:`core.attention.RecurrentKernel` decodes through its ``step`` with no change to the
core: here a toy kernel (each query averages the values of the keys it may see) plugs into multi-head attention."""

from __future__ import annotations

import torch
from einops import rearrange
from torch.testing import assert_close

from core.attention import AttentionKernel, RecurrentKernel
from core.decoding import KVCache
from core.multihead import MultiHeadAttention


class RunningMean(RecurrentKernel):
    """out_i = mean of v_j over the keys j that query i may see; its RNN state is (Σ v, count)."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        if not is_causal:
            return v.mean(-2, keepdim=True).expand(*q.shape[:-1], v.shape[-1]), None
        count = torch.arange(1, v.shape[-2] + 1, dtype=v.dtype).unsqueeze(-1)  # (Nk, 1)
        return (v.cumsum(-2) / count)[..., -q.shape[-2]:, :], None  # bottom-right aligned

    def step(self, q, k, v, cache):
        total, count = cache.state or (v.new_zeros(*v.shape[:2], v.shape[-1]), v.new_zeros(v.shape[0]))
        sums = total.unsqueeze(-2) + v.cumsum(-2)  # (B, H, n, Dv)
        seen = count.view(-1, 1, 1, 1) + torch.arange(1, v.shape[-2] + 1, dtype=v.dtype).view(1, 1, -1, 1)
        cache.state = (sums[..., -1, :], count + v.shape[-2])
        return sums / seen


def test_a_declared_recurrent_kernel_decodes_through_its_step():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, RunningMean()).eval()
    x = torch.randn(3, 7, 16)
    cache = KVCache()
    pieces = [x[:, :1], x[:, 1:4], x[:, 4:5], x[:, 5:]]  # one or several positions per step
    steps = torch.cat([mha(piece, is_causal=True, cache=cache) for piece in pieces], dim=1)
    assert_close(steps, mha(x, is_causal=True))
    assert cache.k is None and cache.length == 7  # a fixed-size state, the positions counted by the caller
    with torch.no_grad():
        v = rearrange(mha.qkv(x), "b n (three h d) -> three b h n d", three=3, h=2)[2]  # (B, H, N, Dh)
    cache.reorder(torch.tensor([2, 0, 1]))  # beam search reorders the state along the batch
    assert_close(cache.state[0], v.sum(-2)[[2, 0, 1]])
    assert_close(cache.state[1], torch.full((3,), 7.0))


def test_a_kernel_that_does_not_declare_it_keeps_a_key_value_cache():
    class Plain(AttentionKernel):
        def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
            return RunningMean().forward(q, k, v, is_causal=is_causal)

    mha = MultiHeadAttention(16, 2, Plain()).eval()
    cache = KVCache()
    mha(torch.randn(1, 3, 16), is_causal=True, cache=cache)
    assert cache.k.shape == (1, 2, 3, 8) and cache.state is None
