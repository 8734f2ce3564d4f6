"""Multi-head attention (Vaswani et al. 2017, §3.2.2) with an injectable kernel.

MultiHead(Q, K, V) = Concat(head₁..head_h) Wᴼ, headᵢ = Attention(Q·Wᵢ^Q, K·Wᵢ^K, V·Wᵢ^V).

This module owns the projections and the head split; *how* the heads attend is the kernel's job
(:mod:`core.attention`). Positional schemes that act inside attention (RoPE, ALiBi) are applied here,
for self-attention only. The Q/K/V projections are stored packed in one ``qkv`` linear layer, as in
``nn.MultiheadAttention`` and timm, so self-attention is a single matmul; cross-attention uses its
Q rows on the decoder stream and its K/V rows on the encoder memory.

Shape legend: B batch, Nq query tokens, Nk key tokens, D model width, H heads, Dh = D / H.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from core.attention import AttentionKernel, RecurrentKernel, ScaledDotProductAttention
from core.decoding import KVCache
from core.masks import check_mask
from core.position import PositionalScheme
from plumbing.errors import check_positive


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention with ``heads`` heads.

    Args:
        d_model: model width D; must be divisible by ``heads``.
        heads: number of heads H.
        kernel: the attention kernel (default: the fused :class:`ScaledDotProductAttention`).
        position: a scheme applied inside self-attention (RoPE or ALiBi); ``None`` otherwise.
        bias: whether the projections have biases (the paper's do).

    ``forward(x, memory=None, mask=None, is_causal=False, cache=None)``: ``x`` is ``(B, Nq, D)``;
    ``memory`` ``(B, Nk, D)`` makes it cross-attention; ``mask`` is bool, ``True`` = may attend,
    broadcastable to ``(B, H, Nq, Nk)``. Returns ``(B, Nq, D)``. When ``record_weights`` is set (see
    :func:`record_attention`) the ``(B, H, Nq, Nk)`` weights of the last call are kept in
    ``attention_weights``; the signature never changes.
    """

    zoo_part = "attention"

    def __init__(
        self,
        d_model: int,
        heads: int,
        kernel: AttentionKernel | None = None,
        position: PositionalScheme | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        check_positive("d_model", d_model)
        check_positive("heads", heads)
        if d_model % heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by heads={heads}; pick heads among the divisors of "
                f"d_model (e.g. {[h for h in (1, 2, 4, 8, 16) if d_model % h == 0]})"
            )
        self.d_model, self.heads = d_model, heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)  # packed [W^Q; W^K; W^V]
        self.out = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.kernel = kernel if kernel is not None else ScaledDotProductAttention()
        self.position = position if position is not None and position.injection != "embedding" else None
        self.record_weights = False
        self.attention_weights: Tensor | None = None

    def project(self, x: Tensor, memory: Tensor | None, cache: KVCache | None) -> tuple[Tensor, ...]:
        """Queries from ``x``; keys/values from ``x`` (self) or ``memory`` (cross). Each ``(B, H, N, Dh)``."""
        if memory is None:
            return tuple(rearrange(self.qkv(x), "b n (three h d) -> three b h n d", three=3, h=self.heads))
        w_q, w_kv = self.qkv.weight.split([self.d_model, 2 * self.d_model])
        b_q, b_kv = (None, None) if self.qkv.bias is None else self.qkv.bias.split([self.d_model, 2 * self.d_model])
        q = rearrange(F.linear(x, w_q, b_q), "b n (h d) -> b h n d", h=self.heads)
        if cache is not None and cache.k is not None:  # the encoder memory does not change while decoding
            return q, cache.k, cache.v
        k, v = rearrange(F.linear(memory, w_kv, b_kv), "b n (two h d) -> two b h n d", two=2, h=self.heads)
        return q, k, v

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
    ) -> Tensor:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"attention input must be (B, N, d_model={self.d_model}), got {tuple(x.shape)}")
        q, k, v = self.project(x, memory, cache)  # (B, H, N, Dh)
        self_attention = memory is None
        offset = cache.length if (cache is not None and self_attention) else 0
        if self_attention and self.position is not None:
            q, k = self.position.rotate(q, offset), self.position.rotate(k, offset)
        if cache is not None and self_attention and isinstance(self.kernel, RecurrentKernel):
            return self.out(rearrange(self._recurrent_step(q, k, v, mask, cache), "b h n d -> b n (h d)"))
        if cache is not None:
            k, v = cache.update(k, v)
        batch, _, n_q, _ = q.shape
        n_k = k.shape[-2]
        mask = check_mask(mask, batch, self.heads, n_q, n_k)
        bias = self.position.score_bias(n_q, n_k, x.device) if self_attention and self.position else None
        # bool(): a Python flag even where an exporter traces sizes as tensors (SDPA takes no tensor is_causal)
        out, weights = self.kernel(q, k, v, mask, bias, is_causal and bool(n_q > 1), self.record_weights)
        self.attention_weights = weights
        return self.out(rearrange(out, "b h n d -> b n (h d)"))  # (B, Nq, D)

    def _recurrent_step(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, cache: KVCache) -> Tensor:
        """Incremental self-attention with a :class:`~core.attention.RecurrentKernel`: its ``step`` sees only the
        new positions ``(B, H, Nq, Dh)`` and folds them into ``cache.state`` (O(1) per step instead of a growing
        cache); it is causal by construction. Returns ``(B, H, Nq, Dh)``."""
        if mask is not None:
            raise ValueError(
                "a recurrent attention kernel decodes with a cache without masks: its state holds exactly the "
                "positions decoded so far; pass mask=None"
            )
        out = self.kernel.step(q, k, v, cache)
        cache.state_length += q.shape[-2]
        self.attention_weights = None
        return out


@contextmanager
def record_attention(model: nn.Module) -> Iterator[dict[str, Tensor]]:
    """Record the attention weights of every :class:`MultiHeadAttention` in ``model``.

    Inside the ``with`` block the kernels also return their weights (the fused kernel falls back to the
    reference math for this); after each forward the yielded dict maps module names to the
    ``(B, H, Nq, Nk)`` weights of their last call.
    """
    maps: dict[str, Tensor] = {}
    modules = {n: m for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)}
    handles = []
    for name, module in modules.items():
        module.record_weights = True
        hook = module.register_forward_hook(lambda m, args, out, name=name: maps.__setitem__(name, m.attention_weights))
        handles.append(hook)
    try:
        yield maps
    finally:
        for handle in handles:
            handle.remove()
        for module in modules.values():
            module.record_weights = False
            module.attention_weights = None
