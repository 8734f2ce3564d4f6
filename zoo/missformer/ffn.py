"""ReMix-FFN, the paper's "Enhanced Mix-FFN" (MISSFormer §3.2): a feed-forward network that sees its neighbours.

The classic position-wise FFN treats every token alone, so a Transformer without positional encodings
knows nothing of where a token sits. SegFormer's Mix-FFN puts a depth-wise 3×3 convolution on the hidden
tokens: local context, and — through the zero padding at the borders — positional information, with no
position table that would have to be resampled at another image size. MISSFormer's version adds a skip
around the convolution and a LayerNorm before the activation, which it reports trains better:

    ReMixFFN(x) = W₂ · GELU(LN(DWConv₃ₓ₃(W₁x) + W₁x))

It is not registered with :func:`core.ffn.register_ffn`: the core FFNs act on ``(..., D)`` tokens one
position at a time, while this one needs the token map (``(B, h, w, C)``, channels last; ``(B, d, h, w, C)`` with a
3×3×3 convolution in the 3D model).

Shape legend: B batch, h×w token map, C width, F hidden width (4C in the paper).
"""

from __future__ import annotations

from torch import Tensor, nn

from core.ffn import ACTIVATIONS, PositionwiseFFN
from plumbing.errors import check_positive, check_probability, unknown_name
from zoo.missformer.maps import channels_first, channels_last, convolution


class ReMixFFN(nn.Module):
    """Linear C→F, depth-wise 3×3 conv with a skip, LayerNorm(F), activation, dropout, linear F→C.

    Args:
        dim: width C.
        hidden: hidden width F.
        activation: ``"gelu"`` (the paper's) or ``"relu"``.
        dropout: on the hidden activations (the paper uses none).
        eps: epsilon of the LayerNorm.
        dims: the map's spatial dimensions, 2 or 3 (a 3×3×3 depth-wise convolution).

    Shape: ``(B, h, w, C) -> (B, h, w, C)``; in 3D ``(B, d, h, w, C) -> (B, d, h, w, C)``.
    """

    zoo_part = "ffn"

    def __init__(self, dim: int, hidden: int, activation: str = "gelu", dropout: float = 0.0, eps: float = 1e-5,
                 dims: int = 2) -> None:
        super().__init__()
        check_positive("dim", dim)
        check_positive("hidden", hidden)
        check_probability("dropout", dropout)
        if activation not in ACTIVATIONS:
            raise unknown_name("activation", activation, ACTIVATIONS)
        self.fc1 = nn.Linear(dim, hidden)
        self.dims = dims
        self.dwconv = convolution(dims, hidden, hidden, kernel_size=3, padding=1, groups=hidden)
        self.norm = nn.LayerNorm(hidden, eps=eps)  # untagged: part of the FFN change, not of "norm"
        self.act = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != self.dims + 2:
            shape = "(B, h, w, C)" if self.dims == 2 else "(B, d, h, w, C)"
            raise ValueError(f"ReMixFFN expects a {shape} token map, got {tuple(x.shape)}")
        hidden = self.fc1(x)  # (B, h, w, F)
        mixed = channels_last(self.dwconv(channels_first(hidden)))  # (B, h, w, F)
        return self.fc2(self.dropout(self.act(self.norm(mixed + hidden))))  # (B, h, w, C)


def stage_ffn(dim: int, config) -> nn.Module:
    """The FFN of a width-``dim`` block: ReMix-FFN, or the classic position-wise FFN when ``config.ffn`` is
    reverted to ``"dense"`` (``config``: a :class:`~zoo.missformer.config.MISSFormerConfig`)."""
    c = config
    if c.ffn == "remix":
        return ReMixFFN(dim, c.d_ff(dim), c.activation, c.dropout, c.norm_eps, c.spatial_dims)
    return PositionwiseFFN(dim, c.d_ff(dim), c.activation, c.dropout)
