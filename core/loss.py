"""Label-smoothed cross-entropy that ignores padding (Szegedy et al. 2016; the paper's ε_ls = 0.1, §5.4)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from plumbing.errors import check_probability


class LabelSmoothedCrossEntropy(nn.Module):
    """Cross-entropy over non-pad target tokens (mean, or sum with ``reduction="sum"``), label-smoothed.

    This is ``F.cross_entropy(..., label_smoothing=ε, ignore_index=pad_id)``: the target distribution
    puts 1 − ε on the right token and spreads ε uniformly over the whole vocabulary.

    Shape: logits ``(B, T, V)``, target ``(B, T)`` -> scalar.
    """

    zoo_part = "objective"

    def __init__(self, smoothing: float = 0.1, pad_id: int = 0, reduction: str = "mean") -> None:
        super().__init__()
        check_probability("smoothing", smoothing)
        if reduction not in ("mean", "sum"):
            raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        self.smoothing, self.pad_id, self.reduction = smoothing, pad_id, reduction

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        if logits.shape[:-1] != target.shape:
            raise ValueError(f"logits {tuple(logits.shape)} and target {tuple(target.shape)} disagree on (B, T)")
        return F.cross_entropy(
            logits.flatten(0, -2).float(),
            target.flatten(),
            ignore_index=self.pad_id,
            label_smoothing=self.smoothing,
            reduction=self.reduction,
        )
