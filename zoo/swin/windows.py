"""Windows over a token map: partition, reverse, cyclic shift, and the mask of shifted windows (Swin §3.2).

Swin attends inside non-overlapping W×W windows of the Hr×Wr token map. Every other block shifts the map by
⌊W/2⌋ tokens first, so that windows straddle the previous block's window borders. The shift is *cyclic*
(``torch.roll``): the map keeps its size and the number of windows, but the windows on the bottom and right
edges now hold tokens that came round from the opposite edge. Those tokens were not neighbours in the
image, and :func:`shifted_window_mask` keeps them from attending to each other.

Tokens are kept as a row-major sequence ``(..., Hr·Wr, D)`` (token ``r·Wr + c`` is at row ``r``, column
``c``), the layout the core attention works in; no function here loops over windows.

Shape legend: Hr×Wr token map, N = Hr·Wr tokens, W window side, nW = (Hr/W)·(Wr/W) windows, D channels.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor


def window_partition(x: Tensor, resolution: tuple[int, int], window: int) -> Tensor:
    """Split a row-major token map into W×W windows, windows in row-major order, tokens row-major inside.

    Shape: ``(..., Hr·Wr, D) -> (..., nW, W·W, D)``.
    """
    height, width = resolution
    return rearrange(x, "... (nh wh nw ww) d -> ... (nh nw) (wh ww) d",
                     nh=height // window, wh=window, nw=width // window, ww=window)


def window_reverse(windows: Tensor, resolution: tuple[int, int], window: int) -> Tensor:
    """Put windows back into the row-major token map; the inverse of :func:`window_partition`.

    Shape: ``(..., nW, W·W, D) -> (..., Hr·Wr, D)``.
    """
    height, width = resolution
    return rearrange(windows, "... (nh nw) (wh ww) d -> ... (nh wh nw ww) d",
                     nh=height // window, wh=window, nw=width // window, ww=window)


def cyclic_shift(x: Tensor, resolution: tuple[int, int], shift: int) -> Tensor:
    """Roll the token map by ``shift`` rows and columns (negative: towards the top-left, as Swin does first).

    Shape: ``(..., Hr·Wr, D) -> (..., Hr·Wr, D)``.
    """
    if shift == 0:
        return x
    x = x.unflatten(-2, resolution)  # (..., Hr, Wr, D)
    return torch.roll(x, shifts=(shift, shift), dims=(-3, -2)).flatten(-3, -2)  # (..., Hr·Wr, D)


def shifted_window_mask(resolution: tuple[int, int], window: int, shift: int, device=None) -> Tensor | None:
    """Which tokens of a window may attend to which, after the map was rolled by ``-shift``.

    After ``torch.roll(x, -shift)`` the last ``shift`` rows (and columns) of the map are the image's first
    rows (columns), wrapped round. Two tokens of one window are image neighbours exactly when both wrapped
    along an axis or neither did; the mask allows those pairs and blocks the rest. ``shift == 0``: ``None``.

    Returns:
        bool ``(nW, W·W, W·W)``, ``True`` = may attend (the package convention).
    """
    if shift == 0:
        return None
    height, width = resolution
    wrapped_row = torch.arange(height, device=device) >= height - shift  # (Hr,)
    wrapped_col = torch.arange(width, device=device) >= width - shift  # (Wr,)
    region = (2 * wrapped_row[:, None] + wrapped_col[None, :]).flatten()  # (Hr·Wr,): 4 regions, one per wrap
    region = window_partition(region[:, None], resolution, window)[..., 0]  # (nW, W·W)
    return region[:, :, None] == region[:, None, :]  # (nW, W·W, W·W)


def window_token_index(resolution: tuple[int, int], window: int, shift: int, device=None) -> Tensor:
    """The map position of the token in each window slot: ``(nW, W·W)`` indices into the ``Hr·Wr`` tokens.

    Used to scatter per-window attention weights back onto the full ``(Hr·Wr)×(Hr·Wr)`` map.
    """
    tokens = torch.arange(resolution[0] * resolution[1], device=device)[:, None]  # (Hr·Wr, 1)
    return window_partition(cyclic_shift(tokens, resolution, -shift), resolution, window)[..., 0]  # (nW, W·W)
