"""Exercise of the lessons ``mask`` and ``causal-mask`` (``zoo lab mask``, ``zoo lab causal-mask``): a masked
attention kernel that sees what it was told not to.

Symptom: with ``is_causal=True`` (a decoder's self-attention) a position's attention weights are not 0 on the
positions after it, and padded keys keep weight too; a decoder built with this kernel changes its outputs at
position t when only the tokens after t change. Its training loss looks fine, better than fine, while generation
(one token at a time, with no future to read) collapses. Run this file to see the weights of one causal row.
Find the line that causes it, fix it, and check your fix with ``zoo lab --check FOLDER``.

Interface of :class:`core.attention.AttentionKernel`. Shape: q ``(B, H, Nq, Dh)``, k ``(B, H, Nk, Dh)``,
v ``(B, H, Nk, Dv)``; ``mask`` boolean, ``True`` = may attend, broadcastable to ``(B, H, Nq, Nk)``.
"""

import math

import torch
from torch import nn

from core.attention import AttentionKernel
from core.masks import causal_mask, merge_masks


class MaskedAttention(AttentionKernel):
    """softmax(Q Kᵀ/√d_k) V with a mask, written out step by step."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, Nq, Nk)
        if bias is not None:
            scores = scores + bias
        if is_causal:
            mask = merge_masks(mask, causal_mask(q.shape[-2], k.shape[-2], device=q.device))
        if mask is not None:
            scores = scores.masked_fill(~mask, 0.0)
        weights = torch.softmax(scores, dim=-1)  # (B, H, Nq, Nk)
        out = self.dropout(weights) @ v  # (B, H, Nq, Dv)
        return out, (weights if need_weights else None)


if __name__ == "__main__":
    q, k, v = torch.randn(3, 1, 1, 5, 16).unbind(0)  # one sequence, one head, 5 tokens, d_k 16
    _, weights = MaskedAttention()(q, k, v, is_causal=True, need_weights=True)
    print("weights of position 0 on positions 0..4:", [round(w, 3) for w in weights[0, 0, 0].tolist()])
