"""Exercise of the lesson ``scale`` (``zoo lab scale``): an attention kernel whose softmax is saturated.

Symptom: at initialisation, with queries and keys of unit variance, most rows of this kernel's attention weights
are already nearly one-hot (their entropy is close to 0 nats), and the wider the heads (d_k), the worse it gets;
rows that saturate pass almost no gradient back to W^Q and W^K. Run this file to see the largest weight of a
few rows. Find the line that causes it, fix it, and check your fix with ``zoo lab --check FOLDER``.

Interface of :class:`core.attention.AttentionKernel`. Shape: q ``(B, H, Nq, Dh)``, k ``(B, H, Nk, Dh)``,
v ``(B, H, Nk, Dv)``; ``mask`` boolean, ``True`` = may attend, broadcastable to ``(B, H, Nq, Nk)``.
"""

import torch

from core.attention import ReferenceAttention
from core.masks import causal_mask, merge_masks


class Attention(ReferenceAttention):
    """softmax(scores) V, written out step by step."""

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        scores = q @ k.transpose(-2, -1)  # (B, H, Nq, Nk)
        if bias is not None:
            scores = scores + bias
        if is_causal:
            mask = merge_masks(mask, causal_mask(q.shape[-2], k.shape[-2], device=q.device))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, H, Nq, Nk)
        if mask is not None:  # a row that may attend nothing gets zeros, not NaN
            weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        out = self.dropout(weights) @ v  # (B, H, Nq, Dv)
        return out, (weights if need_weights else None)


if __name__ == "__main__":
    q, k, v = torch.randn(3, 1, 1, 6, 64).unbind(0)  # one sequence, one head, 6 tokens, d_k 64
    _, weights = Attention()(q, k, v, need_weights=True)
    print("largest attention weight of each row:", [round(w, 3) for w in weights.amax(-1).flatten().tolist()])
