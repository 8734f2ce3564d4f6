"""Token maps of 2 or 3 spatial dimensions: what lets one set of MISSFormer parts build the 2D and the 3D model.

MISSFormer's blocks keep their tokens as a channels-last map, ``(B, h, w, C)`` in 2D and ``(B, d, h, w, C)`` in
3D: LayerNorms, residuals and linear layers act on the last axis whatever the map's dimension, and the sublayers
that need the grid (the reductions' and the ReMix-FFN's convolutions, the patch embeddings) take a convolution of the
map's dimension and move the channels to the front for it. ``dims`` is 2 or 3 throughout.

Shape legend: B batch, S… the map's spatial sides (h, w or d, h, w), N = ∏ S, C channels.
"""

from __future__ import annotations

from torch import Tensor, nn

CONVOLUTIONS: dict[int, type[nn.Module]] = {2: nn.Conv2d, 3: nn.Conv3d}


def convolution(dims: int, *args, **kwargs) -> nn.Module:
    """``nn.Conv2d`` or ``nn.Conv3d`` (``dims``) with the given arguments."""
    if dims not in CONVOLUTIONS:
        raise ValueError(f"a token map has 2 or 3 spatial dimensions, got dims={dims!r}")
    return CONVOLUTIONS[dims](*args, **kwargs)


def channels_first(x: Tensor) -> Tensor:
    """Shape: ``(B, S…, C) -> (B, C, S…)``, as a convolution takes it."""
    return x.movedim(x.dim() - 1, 1)  # positive axes: the ONNX exporter mistranslates a negative one


def channels_last(x: Tensor) -> Tensor:
    """Shape: ``(B, C, S…) -> (B, S…, C)``, the blocks' layout."""
    return x.movedim(1, x.dim() - 1)


def tokens(x: Tensor) -> Tensor:
    """The map as a sequence. Shape: ``(B, S…, C) -> (B, N, C)``."""
    return x.flatten(1, -2)


def as_map(x: Tensor, sides: tuple[int, ...]) -> Tensor:
    """A sequence back as a map of ``sides``. Shape: ``(B, N, C) -> (B, S…, C)``."""
    return x.reshape(x.shape[0], *sides, x.shape[-1])


def pixel_shuffle(x: Tensor, scale: int) -> Tensor:
    """Each position's ``scale^dims · C`` channels spread over a ``scale``-sided block of ``C`` (the channels split
    as (p₁, p₂[, p₃], C), the first block axis outermost, as ``b h w (p1 p2 c) -> b (h p1) (w p2) c``).

    Shape: ``(B, S…, s^dims·C) -> (B, s·S…, C)``.
    """
    b, *sides, channels = x.shape
    dims = len(sides)
    c = channels // scale**dims
    x = x.reshape(b, *sides, *([scale] * dims), c)  # (B, S…, p…, C)
    order = [0] + [axis for i in range(dims) for axis in (1 + i, 1 + dims + i)] + [1 + 2 * dims]
    return x.permute(order).reshape(b, *(s * scale for s in sides), c)  # (B, s·S…, C)
