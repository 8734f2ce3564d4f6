"""Multi-head attention (Vaswani et al. 2017, §3.2.2) with an injectable kernel and a key/value cache.

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

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from core.attention import AttentionKernel, RecurrentKernel, ScaledDotProductAttention
from core.errors import check_positive
from core.masks import check_mask
from core.position import PositionalScheme


class KVCache:
    """Keys and values already computed by one attention layer during incremental decoding.

    For self-attention each step appends the new positions; for cross-attention (``static=True``) the
    encoder memory's keys and values are computed at the first step and reused afterwards. A
    :class:`~core.attention.RecurrentKernel` (e.g. linear attention) stores no keys/values: it keeps a fixed-size
    summary of the past in ``state`` (a tuple of batch-first tensors) and ``state_length`` counts its positions.

    The appended keys/values are written into a preallocated buffer that doubles when full, so a decode of
    L tokens copies O(L) key/value rows in all (appending by concatenation copies the whole cache at every
    step: O(L²)). ``k`` and ``v`` are views of the buffer's filled part.

    Args:
        static: store the first keys/values and return them at every later step (cross-attention).
        capacity: positions to allocate at the first append (at least as many as it brings); the buffer
            doubles whenever an append would overflow it.

    Shape: ``k``, ``v`` ``(B, H, N, Dh)`` with N = :attr:`length` positions cached so far.
    """

    def __init__(self, static: bool = False, capacity: int = 64) -> None:
        check_positive("capacity", capacity)
        self.static, self.capacity = static, capacity
        self._k: Tensor | None = None  # (B, H, C, Dh) buffer, C >= length; static: exactly the stored keys
        self._v: Tensor | None = None
        self._length = 0
        self.state: tuple[Tensor, ...] | None = None
        self.state_length = 0

    @property
    def k(self) -> Tensor | None:
        return self._k if self._k is None or self.static else self._k[..., : self._length, :]

    @property
    def v(self) -> Tensor | None:
        return self._v if self._v is None or self.static else self._v[..., : self._length, :]

    @property
    def length(self) -> int:
        return self.state_length if self._k is None else self._length

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store (static) or append (self-attention) the new keys/values ``(B, H, n, Dh)``; return all cached."""
        n = k.shape[-2]
        if self.static:
            self._k, self._v, self._length = k, v, n
            return k, v
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            return self._concatenate(k, v)
        if self._k is None:
            self._k, self._v = self._allocate(k, n), self._allocate(v, n)
        elif self._length + n > self._k.shape[-2]:
            self._k, self._v = self._grow(self._k, self._length + n), self._grow(self._v, self._length + n)
        end = self._length + n
        self._k[..., self._length : end, :], self._v[..., self._length : end, :] = k, v
        self._length = end
        return self.k, self.v

    def _concatenate(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append by concatenation, for a decode that autograd records: its backward needs the keys/values
        each step attended unchanged, and a write into the shared buffer would modify them in place."""
        self._k, self._v = (k, v) if self._k is None else (torch.cat((self.k, k), -2), torch.cat((self.v, v), -2))
        self._length = self._k.shape[-2]
        return self._k, self._v

    def _allocate(self, like: Tensor, n: int) -> Tensor:
        return like.new_empty(*like.shape[:-2], max(n, self.capacity), like.shape[-1])  # (B, H, C, Dh)

    def _grow(self, buffer: Tensor, needed: int) -> Tensor:
        """A buffer of max(needed, twice the old size) positions holding the filled part of ``buffer``."""
        bigger = buffer.new_empty(*buffer.shape[:-2], max(needed, 2 * buffer.shape[-2]), buffer.shape[-1])
        bigger[..., : self._length, :] = buffer[..., : self._length, :]
        return bigger

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows in ``index`` (beam search reorders hypotheses every step).

        Only the filled part is copied; with as many rows as before, the buffer is rewritten in place.
        """
        if self._k is not None:
            if self.static or self._k.requires_grad or index.numel() != self._k.shape[0]:
                self._k, self._v = self._k.index_select(0, index), self._v.index_select(0, index)
            else:
                for buffer in (self._k, self._v):
                    buffer[..., : self._length, :] = buffer[..., : self._length, :].index_select(0, index)
        if self.state is not None:
            self.state = tuple(t.index_select(0, index) for t in self.state)


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
        out, weights = self.kernel(q, k, v, mask, bias, is_causal and n_q > 1, self.record_weights)
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
