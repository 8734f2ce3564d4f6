"""Learned relative position bias (Swin §3.2, "Relative position bias").

Inside a W×W window, the offset between two tokens is (Δrow, Δcol) with each in [−(W−1), W−1]: (2W−1)²
possible offsets. Swin learns one scalar per offset and head, and adds it to the attention score:
softmax(QKᵀ/√d + B) V, with B[h, i, j] = table[index[i, j], h]. The classic Transformer's absolute sinusoids
say *where* a token is; this bias says how far apart two tokens are, and is the same in every window.

The table and the index buffer are laid out exactly as timm's ``relative_position_bias_table`` and
``relative_position_index``, so weights copy across unchanged.

Shape legend: W window side, H heads.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from core.position import PositionalScheme
from plumbing.errors import check_positive


def relative_position_index(window: int, device=None) -> Tensor:
    """``index[i, j]`` = row of the table for the offset from token ``j`` to token ``i`` of a W×W window.

    The offset (Δrow, Δcol) is shifted to [0, 2W−2]² and flattened row-major: Δrow'·(2W−1) + Δcol'.

    Shape: ``(W·W, W·W)`` long.
    """
    rows, cols = torch.meshgrid(torch.arange(window, device=device), torch.arange(window, device=device),
                                indexing="ij")
    coords = torch.stack((rows.flatten(), cols.flatten()))  # (2, W·W)
    offset = coords[:, :, None] - coords[:, None, :] + (window - 1)  # (2, W·W, W·W), in [0, 2W − 2]
    return offset[0] * (2 * window - 1) + offset[1]  # (W·W, W·W)


class RelativePositionBias(PositionalScheme):
    """One learned bias per head and relative offset inside a W×W window, added to the attention scores.

    A positional scheme that injects into the ``"scores"``: called, it returns the ``(H, W·W, W·W)`` bias.
    :class:`~zoo.swin.attention.WindowAttention` adds it inside every window; given to a core
    :class:`~core.multihead.MultiHeadAttention` as its ``position``, it biases global attention over a map
    of exactly one window.

    Args:
        window: window side W.
        heads: number of heads H.
    """

    injection = "scores"

    def __init__(self, window: int, heads: int) -> None:
        super().__init__()
        check_positive("window", window)
        check_positive("heads", heads)
        self.window, self.heads = window, heads
        self.table = nn.Parameter(torch.empty((2 * window - 1) ** 2, heads))  # ((2W−1)², H)
        nn.init.trunc_normal_(self.table, std=0.02)  # Swin's (and timm's) initialisation
        self.register_buffer("index", relative_position_index(window), persistent=False)  # (W·W, W·W)

    def forward(self) -> Tensor:
        return self.table[self.index].permute(2, 0, 1)  # (W·W, W·W, H) -> (H, W·W, W·W)

    def score_bias(self, n_q: int, n_k: int, device: torch.device) -> Tensor:
        area = self.window**2
        if n_q != area or n_k != area:
            raise ValueError(
                f"a relative position bias for {self.window}×{self.window} windows covers {area} tokens, got "
                f"{n_q} queries and {n_k} keys; build it with the window side of the map it attends over"
            )
        return self()  # (H, W·W, W·W)

    def extra_repr(self) -> str:
        return f"window={self.window}, heads={self.heads}"
