"""Attention kernels: softmax(Q Kᵀ / √d_k) V, the computation at the heart of the Transformer.

A *kernel* maps already-projected, already-split heads ``q, k, v`` to the attended values. It is an
injectable object: multi-head attention owns the projections and calls whatever kernel it was given,
so a variant that changes only how attention is computed (linear attention, windows) swaps the kernel
and nothing else.

Two kernels compute the same thing:

* :class:`ReferenceAttention` writes the math out and can return the attention weights;
* :class:`ScaledDotProductAttention` calls ``torch.nn.functional.scaled_dot_product_attention``
  (fused, never materialises the Nq×Nk weights unless asked to return them).

Both follow the package mask convention (``True`` = may attend), put ``-inf`` on masked scores
before the softmax, and return zeros — not NaN — for a query that may attend nothing.

A kernel that can also run as an RNN (linear attention) subclasses :class:`RecurrentKernel` and adds
``step``; multi-head attention then decodes with it from a fixed-size state instead of a key/value cache.

Shape legend: B batch, H heads, Nq queries, Nk keys, Dh head width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.masks import causal_mask, merge_masks


class AttentionKernel(nn.Module):
    """Interface of an attention kernel.

    Args (of ``forward``):
        q: ``(B, H, Nq, Dh)``; k: ``(B, H, Nk, Dh)``; v: ``(B, H, Nk, Dv)``.
        mask: bool, broadcastable to ``(B, H, Nq, Nk)``, ``True`` = may attend; already validated.
        bias: float, broadcastable to ``(B, H, Nq, Nk)``, added to the scaled scores (ALiBi, Swin's
            relative position bias).
        is_causal: also apply a causal mask (aligned bottom-right when ``Nq < Nk``).
        need_weights: also return the ``(B, H, Nq, Nk)`` attention weights.

    Returns:
        ``(out, weights)``: ``out`` is ``(B, H, Nq, Dv)``; ``weights`` is ``None`` unless requested.
    """

    zoo_part = "attention"

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError


class RecurrentKernel(AttentionKernel):
    """An attention kernel that can also run as an RNN during incremental decoding (e.g. linear attention).

    When :class:`~core.multihead.MultiHeadAttention` decodes self-attention with a cache and its kernel is a
    ``RecurrentKernel``, it calls :meth:`step` instead of growing a key/value cache; ``forward`` (the parallel
    form, used for training and for whole sequences) must give the same outputs as consecutive steps.
    """

    def step(self, q: Tensor, k: Tensor, v: Tensor, cache) -> Tensor:
        """Attend the new positions causally, given and updating the fixed-size summary of the past.

        Args:
            q, k, v: the new positions only, ``(B, H, n, Dh)`` (``Dv`` for ``v``); the first step starts the
                sequence. Position schemes acting on q and k (RoPE) are already applied.
            cache: the layer's :class:`~core.decoding.KVCache`; read and replace ``cache.state`` (a tuple of
                batch-first tensors, ``None`` before the first step, reordered along the batch by beam search).
                Its keys/values stay empty and the caller counts the positions.

        Returns:
            ``(B, H, n, Dv)``: each new query attends every earlier position and the new ones up to itself.
        """
        raise NotImplementedError


def _full_mask(q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor | None:
    if not is_causal:
        return mask
    return merge_masks(mask, causal_mask(q.shape[-2], k.shape[-2], device=q.device))


def reference_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ · scale + bias, masked with -inf) · V, written out. Returns ``(out, weights)``."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, Nq, Nk)
    if bias is not None:
        scores = scores + bias
    mask = _full_mask(q, k, mask, is_causal)
    if mask is not None:
        # -inf, never 0: a 0-filled score still gets weight exp(0) after the softmax.
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)  # (B, H, Nq, Nk)
    if mask is not None:
        # A row with every key masked is softmax(-inf, ..., -inf) = NaN; it attends nothing, so 0.
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights  # (B, H, Nq, Dv)


class ReferenceAttention(AttentionKernel):
    """The explicit math path; always materialises the weights. Use it to read, test and visualise."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        out, weights = reference_attention(q, k, v, mask, bias, is_causal)
        if self.training and self.dropout.p > 0:
            out = self.dropout(weights) @ v  # dropout on the weights, as in the paper's code
        return out, (weights if need_weights else None)


class ScaledDotProductAttention(AttentionKernel):
    """The fast path: ``F.scaled_dot_product_attention`` (flash / memory-efficient / fused kernels).

    Falls back to :func:`reference_attention` only when the weights are requested, since the fused
    kernels never build them.
    """

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = dropout

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        if need_weights:
            out, weights = reference_attention(q, k, v, mask, bias, is_causal)
            return out, weights
        p = self.dropout if self.training else 0.0
        if mask is None and bias is None:
            # SDPA's own causal flag is top-left aligned: only use it for square attention.
            square = bool(q.shape[-2] == k.shape[-2])  # a Python flag under an exporter's tracing too
            attn_mask = None if (not is_causal or square) else causal_mask(q.shape[-2], k.shape[-2], q.device)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask, p, is_causal=is_causal and square)
            return out, None
        mask = _full_mask(q, k, mask, is_causal)
        attn_mask = mask
        if bias is not None:
            attn_mask = bias.to(q.dtype)
            if mask is not None:
                attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask, p)  # (B, H, Nq, Dv)
        if mask is not None:
            out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # fully masked rows -> 0
        return out, None


KERNELS: dict[str, type[AttentionKernel]] = {"sdpa": ScaledDotProductAttention, "reference": ReferenceAttention}


def register_kernel(name: str, kernel_class: type[AttentionKernel]) -> None:
    """Make an attention kernel available by name to every config with a ``kernel`` field (``kernel="name"``).

    Part of the public registration API, with :func:`zoo.registry.register` and :func:`core.ffn.register_ffn`:
    variants (``zoo/linear``) and plugins (:mod:`tasks.plugins.loader`) call it when their module is imported.

    Args:
        name: the name configs select it by; registering a name again replaces the earlier kernel (plugins
            are refused that: ``tasks.plugins.loader`` keeps the existing one and names the plugin file).
        kernel_class: a subclass of :class:`AttentionKernel` following its ``forward`` contract (bool ``mask``,
            ``True`` = may attend, ``-inf`` before a softmax; ``bias`` added to the scores; ``is_causal``;
            returns ``(out, weights or None)``), or of :class:`RecurrentKernel` to decode as an RNN.
            :func:`build_kernel` constructs it as ``kernel_class(dropout=..., **kernel_options)``.
    """
    KERNELS[name] = kernel_class


def build_kernel(name: str, dropout: float = 0.0, **options) -> AttentionKernel:
    """The kernel called ``name``, with attention-weight ``dropout`` and kernel-specific ``options``."""
    if name not in KERNELS:
        from plumbing.errors import unknown_name

        raise unknown_name("attention kernel", name, KERNELS)
    return KERNELS[name](dropout=dropout, **options)
