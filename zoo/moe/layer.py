"""A mixture-of-experts FFN (Shazeer et al. 2017; GShard 2020; Switch Transformer, Fedus et al. 2021).

The classic layer sends every token through one dense FFN, so compute grows with parameters. Here a
router sends each token to ``k`` of ``E`` expert FFNs: parameters grow with ``E``, compute per token
stays that of ``k`` FFNs. Each expert *is* a core :class:`~core.ffn.PositionwiseFFN`.

**The capacity policy.** An expert with a bounded capacity drops what exceeds it, and *who* competes for
its slots decides what a token's output may depend on. Ranking every assignment of a call together
(GShard's first-choices-first over the whole batch) makes a token's output depend on later tokens (a
leak of the future under teacher forcing), on the other sentences of its batch, on its padding, and on
how many tokens a call holds (so KV-cache decoding, one token per call, differs from recomputation).
This layer's policy:

* **training** (``module.training`` and not ``dropless``): the capacity is counted *per sequence*,
  ``C = ceil(capacity_factor · k · N / E)`` for N tokens per sequence (the padded length: a function of
  the input's shape, never of its content), and a sequence's assignments are served in position order,
  then choice order. Only earlier tokens of the same sequence can take a token's slot, so the layer is
  causal in a decoder and one sequence never takes another's capacity; padding (``token_mask``) is
  never routed, so it takes no slot either. As in Switch/GShard, the expert inputs are buffers of a
  fixed size (``C`` rows per sequence), so every matmul's shape is fixed by the input's shape. ``C``
  follows the padded length, so more padding gives *more* capacity to everyone (a batch's shape, not its
  content, can change a training output); a capacity growing with each prefix would not depend on N at
  all, but it drops 2-3× as many assignments at sentence lengths (random top-2 routing over 8 experts,
  10 tokens: 14% instead of 4%), since early tokens cannot be given slots reserved for later ones;
* **evaluation** (not training): *dropless*, as inference-time MoE systems run: every assignment is
  processed, so a token's output depends on that token alone — batch-invariant, causal, and the same
  with a KV cache as with full recomputation. The router scores each token as its own product
  (:class:`~zoo.moe.router.TopKRouter`) and each expert's rows run in blocks of :data:`BLOCK`
  (:func:`~zoo.moe.dispatch.blockwise`), so a token's output does not change even in the last bit with the
  other tokens (at about 1.5× the CPU time of one matmul per expert);
* ``dropless=True`` also trains without capacity (causal as well, but the experts' matmul sizes
  follow the routing, so the last bits of a token's output may vary with the other tokens).

Shape legend: B batch, N tokens per sequence, T = B·N tokens, D model width, E experts, k experts per token.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.ffn import PositionwiseFFN
from plumbing.errors import check_positive, unknown_name
from zoo.moe.dispatch import Dispatch, blockwise, plan_dispatch
from zoo.moe.router import Routing, TopKRouter

BLOCK = 4  # rows of each expert matmul in evaluation: few wasted rows, still a matrix product


class MoEFFN(nn.Module):
    """Top-k routed experts in place of the position-wise FFN; tensor in, tensor out.

    Each token's output is ``Σ_i gate_i · expert_i(x)`` over its ``k`` chosen experts (see
    :class:`~zoo.moe.router.TopKRouter` for the gates) that processed it (module docstring: capacity
    policy). A token dropped by all its experts leaves the FFN as 0 and passes through the residual
    connection unchanged; a padding token (``token_mask`` False) is not routed and leaves it as 0.

    **Dispatch** (:mod:`zoo.moe.dispatch`): each assignment gets a row of its expert's input, each expert
    runs once on its rows (a Python loop over experts, not tokens), and each token gathers its ``k``
    gated outputs back. Every expert is called even on an empty input, so all parameters are in the graph
    (an idle expert gets a zero gradient, not ``None``, and DDP needs no ``find_unused_parameters``).

    **Side outputs** of the last forward call are kept on the module, never returned, all over the real
    (non-padding) tokens: ``balance_loss`` (Switch: ``E · Σ_e f_e · P_e``, f_e the fraction of tokens
    whose top-1 expert is e, P_e the mean router probability of e; 1 at perfect balance, E when
    collapsed), ``z_loss`` (mean over tokens of ``logsumexp(logits)²``) and ``stats`` (detached:
    ``load`` per expert as a fraction of the assignments before capacity, ``dropped`` fraction of
    assignments over capacity, mean router ``entropy`` in nats). They are offered through the protocols
    of :mod:`core.sidechannels` (``auxiliary_losses``, ``statistics``, ``active_parameters``), which
    :mod:`zoo.moe.auxiliary` and the training loop collect over a model.

    Args:
        d_model: token width D.
        d_ff: hidden width of each expert.
        n_experts: number of experts E.
        k: experts per token (1: Switch, 2: GShard).
        capacity_factor: slack of the per-sequence capacity over a perfectly balanced load (> 0).
        dropless: process every token in training too (ignore the capacity).
        activation: of the experts, ``"relu"`` or ``"gelu"``.
        dropout: on the experts' hidden activations.
        jitter: ε of the router's multiplicative input noise in training.

    ``forward(x, token_mask=None)``: ``token_mask`` bool of ``x``'s shape without D, ``True`` = real token.

    Shape: ``(B, N, D) -> (B, N, D)`` (any ``(..., N, D)``; a ``(T, D)`` input is one sequence).
    """

    zoo_part = "ffn"
    takes_token_mask = True  # the core.ffn protocol: the layers pass which tokens are padding
    probe_blocks = (BLOCK,)  # zoo.analysis.probes: probe past a block of expert rows

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
        self.stats: dict[str, Tensor] = {}

    def capacity(self, tokens: int) -> int:
        """Assignments one expert takes from one sequence of ``tokens`` tokens in training: ceil(cf · k · N / E)."""
        exact = Fraction(str(self.capacity_factor))  # 0.1 · 30 is 3, not float's 3.0000000000000004
        return math.ceil(exact * self.k * tokens / self.n_experts)

    def forward(self, x: Tensor, token_mask: Tensor | None = None) -> Tensor:
        self._check(x, token_mask)
        seq_len = x.shape[-2] if x.dim() > 1 else 1
        tokens = x.reshape(-1, self.d_model)  # (T, D)
        real = None if token_mask is None else token_mask.reshape(-1)  # (T,)
        routing = self.router(tokens)
        capped = self.training and not self.dropless
        plan = plan_dispatch(routing.experts, self.n_experts, seq_len, real,
                             self.capacity(seq_len) if capped else None, 1 if self.training else BLOCK)
        outputs = self.run_experts(tokens, plan)  # (rows + 1, D)
        gathered = outputs.index_select(0, plan.slot.view(-1)).view(*plan.slot.shape, self.d_model)  # (T, k, D)
        out = (gathered * routing.gates.to(gathered.dtype).unsqueeze(-1)).sum(dim=1)  # (T, D); in choice order
        self.record(routing, real, plan)
        return out.view(x.shape)  # (B, N, D)

    def _check(self, x: Tensor, token_mask: Tensor | None) -> None:
        if x.shape[-1] != self.d_model:
            raise ValueError(f"MoEFFN input must be (..., d_model={self.d_model}), got {tuple(x.shape)}")
        if token_mask is None:
            return
        if not isinstance(token_mask, Tensor) or token_mask.dtype != torch.bool:
            got = getattr(token_mask, "dtype", type(token_mask).__name__)
            raise TypeError(f"token_mask must be a bool tensor (True = real token), got {got}")
        if token_mask.shape != x.shape[:-1]:
            raise ValueError(f"token_mask must have the input's shape without D, {tuple(x.shape[:-1])}, "
                             f"got {tuple(token_mask.shape)}")

    def run_experts(self, tokens: Tensor, plan: Dispatch) -> Tensor:
        """Every expert on its input rows; returns their outputs concatenated, plus one row of zeros (the
        output of every assignment not processed): ``(sum(plan.rows) + 1, D)``."""
        T, k = plan.slot.shape
        total = sum(plan.rows)
        owner = torch.arange(T, device=tokens.device).repeat_interleave(k)  # (T·k,) the token of each assignment
        # the token whose input fills each row (T: an empty row, zeros); unprocessed assignments go to row `total`
        source = torch.full((total + 1,), T, device=tokens.device).scatter_(0, plan.slot.view(-1), owner)[:total]
        inputs = torch.cat((tokens, tokens.new_zeros(1, self.d_model))).index_select(0, source)  # (rows, D)
        if self.training:
            outputs = [expert(chunk) for expert, chunk in zip(self.experts, inputs.split(plan.rows))]
        else:
            outputs = [blockwise(expert, chunk.view(-1, BLOCK, self.d_model)).view(-1, self.d_model)
                       for expert, chunk in zip(self.experts, inputs.split(plan.rows))]
        return torch.cat([*outputs, outputs[0].new_zeros(1, self.d_model)])

    def record(self, routing: Routing, real: Tensor | None, plan: Dispatch) -> None:
        """Keep the auxiliary losses and routing statistics of this call, over its real tokens, on the module."""
        probs, logits = routing.probs, routing.logits  # (T, E)
        weight = probs.new_ones(probs.shape[0]) if real is None else real.to(probs.dtype)  # (T,) 1 = real token
        tokens = weight.sum().clamp_min(1)  # sums / tokens rather than means: no real token gives 0, not NaN
        top1 = (F.one_hot(routing.experts[:, 0], self.n_experts).to(probs.dtype) * weight[:, None]).sum(0)  # (E,)
        mean_probs = (probs * weight[:, None]).sum(0) / tokens  # P_e
        self.balance_loss = self.n_experts * (top1 / tokens * mean_probs).sum()  # E · Σ f_e · P_e
        self.z_loss = (logits.logsumexp(dim=-1).square() * weight).sum() / tokens
        entropy = (-(probs * probs.clamp_min(1e-9).log()).sum(-1) * weight).sum() / tokens
        routed = plan.routed.float()
        assignments = routed.sum().clamp_min(1)
        self.stats = {"load": routed / assignments, "dropped": (routed.sum() - plan.kept.sum()) / assignments,
                      "entropy": entropy.detach()}

    # --- the side-channel protocols of core.sidechannels -------------------------------------------------
    def auxiliary_losses(self) -> dict[str, Tensor] | None:
        """``balance`` and ``z`` of the last forward (weights: Switch's α = 1e-2, ST-MoE's 1e-3)."""
        return None if self.balance_loss is None else {"balance": self.balance_loss, "z": self.z_loss}

    def statistics(self) -> dict[str, float | list[float]] | None:
        """``load`` per expert, ``dropped``, router ``entropy``, ``balance_loss``, ``z_loss`` of the last forward."""
        if self.balance_loss is None:
            return None
        return {"load": self.stats["load"].tolist(), "dropped": self.stats["dropped"].item(),
                "entropy": self.stats["entropy"].item(), "balance_loss": self.balance_loss.detach().item(),
                "z_loss": self.z_loss.detach().item()}

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
