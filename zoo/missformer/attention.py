"""Efficient self-attention (PVT / SegFormer, used by MISSFormer §3.1): keys and values from a reduced map.

Global self-attention over the N = h·w tokens of a feature map costs O(N²): at 1/4 of a 224×224 image that
is 3136² scores per head. Efficient self-attention keeps every token as a query but computes keys and values
from the map shrunk R× per side by a convolution with kernel = stride = R, followed by a LayerNorm:
O(N²/R²). MISSFormer uses R = 8, 4, 2, 1 in its four stages.

Only *what the keys and values are computed from* changes. The projections, the head split, the softmax and
the output projection are the core :class:`~core.multihead.MultiHeadAttention`'s, called as cross-attention
on the reduced map (``memory``); with R = 1 it is plain self-attention. The kernel that computes the softmax
(fused SDPA or the reference math) is injected.

The blocks keep their tokens as a channels-last map ``(B, h, w, C)`` (``(B, d, h, w, C)`` in the 3D model, see
:mod:`~zoo.missformer.maps`): LayerNorm, residuals and linear layers act on the last axis unchanged, and the
sublayers that need the grid (this reduction, the ReMix-FFN's depth-wise convolution) can see it.

Shape legend: B batch, h×w token map (d×h×w in 3D), N = h·w, C width, R reduction ratio, M = (h/R)·(w/R).
"""

from __future__ import annotations

from torch import Tensor, nn

from core.attention import AttentionKernel
from core.multihead import MultiHeadAttention
from plumbing.errors import check_positive
from zoo.missformer.maps import as_map, channels_first, convolution, tokens


class SpatialReduction(nn.Module):
    """Conv2d(C, C, kernel = stride = R) (Conv3d for a 3D map), then LayerNorm: the reduced map keys and values are
    computed from.

    Shape: ``(B, h, w, C) -> (B, M, C)`` with M = (h/R)·(w/R); in 3D ``(B, d, h, w, C) -> (B, M, C)``.
    """

    def __init__(self, dim: int, ratio: int, eps: float = 1e-5, dims: int = 2) -> None:
        super().__init__()
        check_positive("ratio", ratio)
        self.ratio = ratio
        self.conv = convolution(dims, dim, dim, kernel_size=ratio, stride=ratio)
        self.norm = nn.LayerNorm(dim, eps=eps)  # untagged: it belongs to the attention part, not "norm"

    def forward(self, x: Tensor) -> Tensor:
        reduced = self.conv(channels_first(x))  # (B, C, h/R, w/R)
        return self.norm(reduced.flatten(2).transpose(1, 2))  # (B, M, C)


class EfficientSelfAttention(nn.Module):
    """Multi-head self-attention whose keys and values come from the map reduced ``ratio``× per side.

    Args:
        dim: width C; divisible by ``heads``.
        heads: number of heads.
        ratio: reduction ratio R; ``1`` (or ``None``) means global self-attention, with no reduction module.
        kernel: the core attention kernel (default: fused SDPA).
        eps: epsilon of the reduction's LayerNorm.
        dims: the map's spatial dimensions, 2 or 3.

    ``forward(x, mask=None)`` takes no mask (every token may attend every key); the argument only lets a core
    :class:`~core.layers.EncoderLayer` call it.

    Shape: ``(B, h, w, C) -> (B, h, w, C)``; in 3D ``(B, d, h, w, C) -> (B, d, h, w, C)``.
    """

    zoo_part = "attention"

    def __init__(self, dim: int, heads: int, ratio: int | None = 1, kernel: AttentionKernel | None = None,
                 eps: float = 1e-5, dims: int = 2) -> None:
        super().__init__()
        self.dims = dims
        self.attention = MultiHeadAttention(dim, heads, kernel)
        self.reduction = SpatialReduction(dim, ratio, eps, dims) if ratio and ratio > 1 else None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if mask is not None:
            raise ValueError("EfficientSelfAttention takes no mask: every token of the map attends every key")
        if x.dim() != self.dims + 2:
            shape = "(B, h, w, C)" if self.dims == 2 else "(B, d, h, w, C)"
            raise ValueError(f"EfficientSelfAttention expects a {shape} token map, got {tuple(x.shape)}")
        memory = None if self.reduction is None else self.reduction(x)  # (B, M, C), None: keys from x itself
        out = self.attention(tokens(x), memory=memory)  # (B, N, C)
        return as_map(out, x.shape[1:-1])
