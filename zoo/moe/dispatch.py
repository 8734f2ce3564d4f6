"""Dispatch of a mixture of experts: which row of which expert's input each token→expert assignment takes.

A token routed to ``k`` experts makes ``k`` *assignments*. :func:`plan_dispatch` gives each one a row
in the experts' inputs (concatenated, expert after expert), or marks it *not processed* (dropped over
capacity, or padding). Two layouts (the policy and its reasons are in :mod:`zoo.moe.layer`):

* **capacity** (training): each expert's input is a fixed buffer of ``C`` rows per sequence (GShard's
  dispatch tensor), so its matmul has a shape fixed by the input's shape alone. An assignment's place in
  its expert's queue is counted within its own sequence, in priority order: position first, then choice
  (a token's first choice before its second); the first ``C`` are processed, the rest dropped. So only
  earlier tokens of the same sequence can take a token's slot.
* **dropless** (evaluation, or ``dropless=True``): every assignment is processed; each expert's input
  holds exactly its assignments, rounded up to a multiple of ``block`` rows (see :func:`blockwise`).

Padding (``real`` False) is never routed: it takes no row, and counts in no statistic.

Shape legend: T tokens, k experts per token, E experts, D model width, R rows of a block.
"""

from __future__ import annotations

from itertools import accumulate
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from core.ffn import PositionwiseFFN


class Dispatch(NamedTuple):
    """Where the ``T·k`` assignments go."""

    slot: Tensor  # (T, k) long: row in the concatenated expert inputs; sum(rows) = not processed
    rows: list[int]  # (E,) input rows of each expert
    routed: Tensor  # (E,) long: assignments of real tokens routed to each expert (before capacity)
    kept: Tensor  # (E,) long: of those, processed


def plan_dispatch(experts: Tensor, n_experts: int, seq_len: int, real: Tensor | None = None,
                  capacity: int | None = None, block: int = 1) -> Dispatch:
    """Rows of the ``experts`` ``(T, k)`` choices of T tokens, in sequences of ``seq_len`` consecutive tokens.

    With ``capacity`` (assignments each expert takes per sequence) the capacity layout, otherwise the
    dropless one with blocks of ``block`` rows. ``real`` ``(T,)`` bool marks the tokens that are not padding.
    """
    T, k = experts.shape
    seq_len = max(seq_len, 1)
    choice = F.one_hot(experts, n_experts)  # (T, k, E)
    if real is not None:
        choice = choice * real.view(T, 1, 1)
    served = torch.ones_like(experts, dtype=torch.bool) if real is None else real[:, None].expand(T, k)
    sequences = T // seq_len
    # Place in the expert's queue: assignments before it (in (position, choice) order) that chose the same
    # expert, counted within its sequence (capacity) or over the whole call (dropless). Pads count nowhere.
    queues = choice.view(max(sequences, 1) if capacity is not None else 1, -1, n_experts)  # (S or 1, N·k, E)
    before = queues.cumsum(dim=1).view(T, k, n_experts)  # (T, k, E)
    rank = before.gather(-1, experts.unsqueeze(-1)).squeeze(-1) - 1  # (T, k)
    routed = choice.sum(dim=(0, 1))  # (E,)
    if capacity is not None:
        rows = [sequences * capacity] * n_experts
        served = served & (rank < capacity)
        sequence = torch.arange(T, device=experts.device) // seq_len  # (T,)
        slot = experts * rows[0] + sequence[:, None] * capacity + rank  # (T, k)
        kept = (choice * served.unsqueeze(-1)).sum(dim=(0, 1))  # (E,)
    else:
        counts = routed.tolist()  # the one host sync: the size of each expert's input
        rows = [-(-count // block) * block for count in counts]
        start = torch.tensor([0, *accumulate(rows)][:-1], device=experts.device)  # (E,)
        slot, kept = start[experts] + rank, routed  # (T, k)
    return Dispatch(slot.masked_fill(~served, sum(rows)), rows, routed, kept)


def blockwise(ffn: PositionwiseFFN, blocks: Tensor) -> Tensor:
    """``ffn`` applied to ``(n, R, D)`` blocks of rows as ``n`` matmuls of one ``(R, D)`` shape.

    BLAS libraries choose their kernel, and with it the order of the sums, by matrix shape (MKL computes
    a 1-row product as a matrix-vector product): ``ffn`` on a slice of rows whose length depends on the
    routing gives a token a result that differs in the last bits with how many other tokens share its
    expert. A batch of same-shape blocks makes each token's result independent of them (checked with
    one thread; with several, a library may still split a lone block's matmul differently).

    Shape: ``(n, R, D) -> (n, R, D)``.
    """
    n = blocks.shape[0]
    hidden = torch.baddbmm(ffn.fc1.bias, blocks, ffn.fc1.weight.t().expand(n, -1, -1))  # (n, R, d_ff)
    hidden = ffn.dropout(ffn.act(hidden))
    return torch.baddbmm(ffn.fc2.bias, hidden, ffn.fc2.weight.t().expand(n, -1, -1))  # (n, R, D)
