"""The top-k router of a mixture of experts: which experts each token visits, and with which weights.

Switch Transformer (Fedus et al. 2021) routes each token to its top-1 expert; GShard (Lepikhin et al.
2020) to its top-2, with the two gates renormalised to sum to 1. Following the Switch recipe, the router
logits are computed in float32 even under mixed precision (the softmax over experts is sensitive to
rounding), and training may multiply the router input by uniform noise in [1 − ε, 1 + ε] ("jitter").

In evaluation a token's logits do not depend on the other tokens of the call, to the last bit: each token
is its own ``(1, D) @ (D, E)`` product (a batched matmul of one shape, however many tokens there are). One
``(T, D) @ (D, E)`` matmul lets the BLAS pick its kernel, and with it the order of each dot product's sum,
by T: the logits of a freshly initialised router moved by 1e-7 (D = 8) to 1e-6 (D = 512) between a 1-token
and a 37-token call, enough to flip a near-tie of two experts between KV-cache decoding and recomputation.
That costs at most 0.2 ms per 1,280 tokens on one CPU thread (7 % of a D = 32 MoE layer in evaluation, 1 % or
less from D = 128). Training keeps the one matmul: its backward through per-token products took 20-30× as
long, and in training a token's output depends on its batch's shape anyway (:mod:`zoo.moe.layer`).

Shape legend: T tokens, D model width, E experts, k experts per token.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plumbing.errors import check_positive


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
            x, weight = x.float(), self.proj.weight.float()
            if self.training:
                logits = F.linear(x, weight)  # (T, E)
            else:  # one product per token: its logits do not depend on the other tokens (module docstring)
                logits = torch.bmm(x.unsqueeze(1), weight.t().expand(x.shape[0], -1, -1)).squeeze(1)  # (T, E)
        probs = logits.softmax(dim=-1)  # (T, E)
        gates, experts = probs.topk(self.k, dim=-1)  # (T, k), best first
        if self.k > 1:
            gates = gates / gates.sum(dim=-1, keepdim=True)  # GShard: the k gates sum to 1
        return Routing(experts, gates, probs, logits)

    def extra_repr(self) -> str:
        return f"n_experts={self.n_experts}, k={self.k}, jitter={self.jitter}"
