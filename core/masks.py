"""Attention masks: one convention for the whole package.

A mask is a boolean tensor, ``True`` = the query may attend to that key, broadcastable to
``(B, H, Nq, Nk)``. This is the convention of ``torch.nn.functional.scaled_dot_product_attention``
(and the opposite of ``nn.MultiheadAttention``'s ``key_padding_mask``, where ``True`` means *blocked*).
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Key mask from token ids: ``(B, N)`` ids -> ``(B, 1, 1, N)``, ``True`` where the token is not padding."""
    return (ids != pad_id)[:, None, None, :]


def causal_mask(n_q: int, n_k: int | None = None, device: torch.device | None = None) -> Tensor:
    """Lower-triangular mask ``(Nq, Nk)``, aligned bottom-right.

    With a key/value cache the queries are the *last* ``Nq`` of ``Nk`` positions, so query ``i`` may
    attend keys ``j <= i + (Nk - Nq)``. With ``Nq == Nk`` this is the usual triangle.
    """
    n_k = n_q if n_k is None else n_k
    return torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril(diagonal=n_k - n_q)


def check_mask(mask: Tensor | None, batch: int, heads: int, n_q: int, n_k: int) -> Tensor | None:
    """Validate a boolean mask and return it with 4 dimensions, broadcastable to ``(B, H, Nq, Nk)``.

    Raises TypeError for a non-boolean mask and ValueError for a shape that does not broadcast, naming
    the shape that was expected. A silently broadcast wrong-shaped mask is one of the classic bugs.
    """
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a bool tensor or None, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must have dtype torch.bool (True = may attend), got {mask.dtype}; "
            "for an additive float bias use the `bias` argument"
        )
    if mask.dim() > 4:
        raise ValueError(f"mask has {mask.dim()} dimensions {tuple(mask.shape)}; at most 4 (B, H, Nq, Nk)")
    mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    for got, want, name in zip(mask.shape, (batch, heads, n_q, n_k), ("B", "H", "Nq", "Nk")):
        if got not in (1, want):
            allowed = "1" if want == 1 else f"1 or {want}"
            raise ValueError(
                f"mask shape {tuple(mask.shape)} does not broadcast to (B, H, Nq, Nk) = "
                f"{(batch, heads, n_q, n_k)}: dimension {name} is {got}, expected {allowed}"
            )
    return mask


def merge_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of the masks that are given (broadcasting); ``None`` when none is."""
    result = None
    for mask in masks:
        if mask is not None:
            result = mask if result is None else result & mask
    return result
