"""A mixture-of-experts FFN (Shazeer et al. 2017; GShard 2020; Switch Transformer, Fedus et al. 2021).

The classic layer sends every token through one dense FFN, so compute grows with parameters. Here a
router sends each token to ``k`` of ``E`` expert FFNs: parameters grow with ``E``, compute per token
stays that of ``k`` FFNs. Each expert *is* a core :class:`~core.ffn.PositionwiseFFN`.

Shape legend: B batch, N tokens per sequence, T = B·N tokens, D model width, E experts, k experts per token.
"""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import accumulate

import torch
from torch import Tensor, nn

from core.errors import check_positive, unknown_name
from core.ffn import PositionwiseFFN
from zoo.moe.router import Routing, TopKRouter


class MoEFFN(nn.Module):
    """Top-k routed experts in place of the position-wise FFN; tensor in, tensor out.

    Each token's output is ``Σ_i gate_i · expert_i(x)`` over its ``k`` chosen experts (see
    :class:`~zoo.moe.router.TopKRouter` for the gates).

    **Capacity.** An expert processes at most ``capacity = ceil(capacity_factor · k · T / E)``
    token assignments per forward call (T = all tokens of the batch, padding included: the FFN has no
    mask). Assignments beyond that are *dropped*: they contribute 0, so a token dropped by all its
    experts leaves the FFN as 0 and passes through the residual connection unchanged. Priority is by
    choice, then position (GShard): every token's first choice is served before any second choice, and
    within a choice the earlier token (in ``(B, N)`` row-major order) wins. ``dropless=True`` processes
    every assignment (no capacity).

    **Dispatch.** One stable argsort groups the ``T·k`` assignments by expert (keeping that priority
    order), each expert runs once on its contiguous slice (a Python loop over experts, not tokens), and
    ``index_add_`` sums the gated outputs back per token. Every expert is called even on an empty slice,
    so all parameters are in the graph (an idle expert gets a zero gradient, not ``None``, and DDP needs
    no ``find_unused_parameters``).

    **Side outputs** of the last forward call are kept on the module, never returned:
    ``balance_loss`` (Switch: ``E · Σ_e f_e · P_e``, f_e the fraction of tokens whose top-1 expert is
    e, P_e the mean router probability of e; 1 at perfect balance, E when collapsed), ``z_loss``
    (mean over tokens of ``logsumexp(logits)²``) and ``stats`` (detached: ``load`` per expert as a
    fraction of the T·k assignments before capacity, ``dropped`` fraction of assignments, mean router
    ``entropy`` in nats). :mod:`zoo.moe.auxiliary` collects them over a model.

    Args:
        d_model: token width D.
        d_ff: hidden width of each expert.
        n_experts: number of experts E.
        k: experts per token (1: Switch, 2: GShard).
        capacity_factor: slack of the capacity over a perfectly balanced load (> 0).
        dropless: process every token (ignore the capacity).
        activation: of the experts, ``"relu"`` or ``"gelu"``.
        dropout: on the experts' hidden activations.
        jitter: ε of the router's multiplicative input noise in training.

    Shape: ``(B, N, D) -> (B, N, D)`` (any ``(..., D)``).
    """

    zoo_part = "ffn"

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        n_experts: int = 8,
        k: int = 2,
        capacity_factor: float = 1.25,
        dropless: bool = False,
        activation: str = "relu",
        dropout: float = 0.0,
        jitter: float = 0.0,
    ) -> None:
        super().__init__()
        if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, (int, float)) or capacity_factor <= 0:
            raise ValueError(
                f"capacity_factor must be a number > 0 (1.0: exactly a balanced share per expert; Switch uses "
                f"1.0-1.25), got {capacity_factor!r}; use dropless=True to never drop tokens"
            )
        self.d_model, self.n_experts, self.k = d_model, n_experts, k
        self.capacity_factor, self.dropless = float(capacity_factor), bool(dropless)
        self.router = TopKRouter(d_model, n_experts, k, jitter)  # validates d_model, n_experts, k, jitter
        # each expert validates d_ff, activation and dropout
        self.experts = nn.ModuleList(PositionwiseFFN(d_model, d_ff, activation, dropout) for _ in range(n_experts))
        self.balance_loss: Tensor | None = None
        self.z_loss: Tensor | None = None
        self.stats: dict[str, Tensor | float | list[float]] = {}

    def capacity(self, tokens: int) -> int:
        """Assignments one expert may process in a call on ``tokens`` tokens: ceil(cf · k · T / E)."""
        exact = Fraction(str(self.capacity_factor))  # 0.1 · 30 is 3, not float's 3.0000000000000004
        return math.ceil(exact * self.k * tokens / self.n_experts)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.d_model:
            raise ValueError(f"MoEFFN input must be (..., d_model={self.d_model}), got {tuple(x.shape)}")
        tokens = x.reshape(-1, self.d_model)  # (T, D)
        routing = self.router(tokens)
        out, counts, kept = self.dispatch(tokens, routing)  # (T, D)
        self.record(routing, counts, kept)
        return out.view(x.shape)  # (B, N, D)

    def dispatch(self, tokens: Tensor, routing: Routing) -> tuple[Tensor, list[int], list[int]]:
        """Run each expert on its tokens; returns the combined ``(T, D)`` output and, per expert, the
        number of assignments routed to it and the number it processed."""
        T = tokens.shape[0]
        # Assignment a = choice·T + token, so first choices come before second choices.
        expert_of = routing.experts.t().reshape(-1)  # (k·T,)
        order = torch.argsort(expert_of, stable=True)  # (k·T,) grouped by expert, priority order kept
        counts = torch.bincount(expert_of, minlength=self.n_experts).tolist()  # the one host sync
        kept = counts if self.dropless else [min(c, self.capacity(T)) for c in counts]
        if kept != counts:  # keep the first `kept` assignments of each expert's group
            starts = accumulate(counts, initial=0)
            order = torch.cat([order[s : s + n] for s, n in zip(starts, kept)])  # (kept,)
        token = order % T  # (kept,) the token of each processed assignment
        gate = routing.gates.t().reshape(-1).index_select(0, order)  # (kept,)
        inputs = tokens.index_select(0, token).split(kept)  # E slices of (kept_e, D)
        y = torch.cat([expert(chunk) for expert, chunk in zip(self.experts, inputs)])  # (kept, D)
        y = y * gate.to(y.dtype).unsqueeze(-1)
        out = y.new_zeros(T, self.d_model).index_add_(0, token, y)  # (T, D); dropped tokens stay 0
        return out, counts, kept

    def record(self, routing: Routing, counts: list[int], kept: list[int]) -> None:
        """Keep the auxiliary losses and routing statistics of this call on the module."""
        probs, logits = routing.probs, routing.logits  # (T, E)
        T = max(probs.shape[0], 1)  # sums / T rather than means: an empty input gives 0, not NaN
        top1 = torch.bincount(routing.experts[:, 0], minlength=self.n_experts).float() / T  # f_e
        self.balance_loss = self.n_experts * (top1 * probs.sum(dim=0) / T).sum()  # E · Σ f_e · P_e
        self.z_loss = logits.logsumexp(dim=-1).square().sum() / T
        entropy = -(probs * probs.clamp_min(1e-9).log()).sum() / T
        assignments = max(sum(counts), 1)
        self.stats = {"load": [c / assignments for c in counts], "dropped": (sum(counts) - sum(kept)) / assignments,
                      "entropy": entropy.detach()}

    def active_parameters(self) -> int:
        """Parameters one token uses: the router and ``k`` experts."""
        router = sum(p.numel() for p in self.router.parameters())
        return router + self.k * sum(p.numel() for p in self.experts[0].parameters())

    def extra_repr(self) -> str:
        return f"capacity_factor={self.capacity_factor}, dropless={self.dropless}"


MOE_OPTIONS = {"n_experts": 8, "k": 2, "capacity_factor": 1.25, "dropless": False, "every": 2, "jitter": 0.0}


def moe_ffn(d_model: int, d_ff: int, activation: str, dropout: float, layer: int, **options) -> nn.Module:
    """The ``"moe"`` FFN type: an :class:`MoEFFN` in every ``every``-th layer (layers 1, 3, 5, ... for the
    default ``every=2``, as in Switch and GShard), the dense core FFN elsewhere. Experts have ``d_ff``."""
    for name in options:
        if name not in MOE_OPTIONS:
            raise unknown_name("ffn option of 'moe'", name, MOE_OPTIONS)
    options = {**MOE_OPTIONS, **options}
    every = options.pop("every")
    check_positive("every", every)
    if (layer + 1) % every:
        return PositionwiseFFN(d_model, d_ff, activation, dropout)
    return MoEFFN(d_model, d_ff, activation=activation, dropout=dropout, **options)
