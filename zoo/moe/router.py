"""The top-k router of a mixture of experts: which experts each token visits, and with which weights.

Switch Transformer (Fedus et al. 2021) routes each token to its top-1 expert; GShard (Lepikhin et al.
2020) to its top-2, with the two gates renormalised to sum to 1. Following the Switch recipe, the router
logits are computed in float32 even under mixed precision (the softmax over experts is sensitive to
rounding), and training may multiply the router input by uniform noise in [1 − ε, 1 + ε] ("jitter").

Shape legend: T tokens, D model width, E experts, k experts per token.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.errors import check_positive


class Routing(NamedTuple):
    """What the router decided for ``T`` tokens (all float tensors are float32)."""

    experts: Tensor  # (T, k) long: the chosen experts, best first
    gates: Tensor  # (T, k): combine weights (top-1: the expert's probability; k > 1: renormalised over the k)
    probs: Tensor  # (T, E): softmax of the logits
    logits: Tensor  # (T, E)


def check_top_k(k: object, n_experts: int) -> None:
    """Raise unless ``1 <= k <= n_experts``."""
    check_positive("k", k)
    if k > n_experts:
        raise ValueError(
            f"k={k} experts per token is more than n_experts={n_experts}; use k <= n_experts "
            "(k=1: Switch, k=2: GShard) or add experts"
        )


class TopKRouter(nn.Module):
    """A linear map from a token to one logit per expert, then the top-k experts by probability.

    Args:
        d_model: token width D.
        n_experts: number of experts E.
        k: experts per token, ``1 <= k <= E`` (1: Switch Transformer, 2: GShard).
        jitter: ε of the multiplicative input noise applied in training only (0 disables it).

    Shape: ``(T, D)`` -> :class:`Routing` (``experts`` and ``gates`` ``(T, k)``, ``probs`` and
    ``logits`` ``(T, E)``).
    """

    zoo_part = "ffn"  # the router is part of the FFN replacement

    def __init__(self, d_model: int, n_experts: int, k: int = 1, jitter: float = 0.0) -> None:
        super().__init__()
        check_positive("d_model", d_model)
        check_positive("n_experts", n_experts)
        check_top_k(k, n_experts)
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0.0 <= jitter < 1.0:
            raise ValueError(f"jitter must be a float in [0, 1) (the ε of the noise range [1-ε, 1+ε]), got {jitter!r}")
        self.n_experts, self.k, self.jitter = n_experts, k, float(jitter)
        self.proj = nn.Linear(d_model, n_experts, bias=False)  # W_r: one logit per expert

    def forward(self, x: Tensor) -> Routing:
        if self.training and self.jitter > 0:
            x = x * torch.empty_like(x).uniform_(1.0 - self.jitter, 1.0 + self.jitter)
        # float32 logits even inside autocast, which would otherwise run this matmul in bf16/fp16
        with torch.autocast(x.device.type, enabled=False):
            logits = F.linear(x.float(), self.proj.weight.float())  # (T, E)
        probs = logits.softmax(dim=-1)  # (T, E)
        gates, experts = probs.topk(self.k, dim=-1)  # (T, k), best first
        if self.k > 1:
            gates = gates / gates.sum(dim=-1, keepdim=True)  # GShard: the k gates sum to 1
        return Routing(experts, gates, probs, logits)

    def extra_repr(self) -> str:
        return f"n_experts={self.n_experts}, k={self.k}, jitter={self.jitter}"
