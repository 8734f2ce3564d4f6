"""Patch merging (Swin §3.1): halve the token map and double the width between stages.

The classic Transformer keeps one sequence length and one width from the first layer to the last. Swin
builds a hierarchy, as a convolutional network does: each 2×2 group of neighbouring tokens is concatenated
(4C channels), normalised, and projected to 2C. The map shrinks 4× in tokens per stage, so later stages
see coarser, wider features.

Shape legend: B batch, Hr×Wr token map (even sides), C channels.
"""

from __future__ import annotations

from einops import rearrange
from torch import Tensor, nn

from plumbing.errors import check_positive


class PatchMerging(nn.Module):
    """Concatenate each 2×2 group of tokens, LayerNorm(4C), then Linear(4C -> 2C, no bias).

    The four neighbours are concatenated in timm's (and the official code's) channel order: (row 0, col 0),
    (row 1, col 0), (row 0, col 1), (row 1, col 1), so weights copy across unchanged.

    Tagged ``stacking``: the merge exists because of the hierarchy, so its norm and projection count there.

    Args:
        resolution: the input token map side Hr = Wr; must be even.
        dim: input width C.
        eps: epsilon of the LayerNorm.

    Shape: ``(B, Hr·Wr, C) -> (B, (Hr/2)·(Wr/2), 2C)``.
    """

    zoo_part = "stacking"

    def __init__(self, resolution: int, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        check_positive("resolution", resolution)
        check_positive("dim", dim)
        if resolution % 2:
            raise ValueError(
                f"patch merging halves the token map, but its side is odd ({resolution}); choose image_size and "
                "patch_size so that every stage before the last has an even side"
            )
        self.resolution, self.dim = resolution, dim
        self.norm = nn.LayerNorm(4 * dim, eps=eps)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        # ``mask`` only so that a core Encoder can hold merges between its layers; a merge takes none.
        if mask is not None:
            raise ValueError("PatchMerging takes no attention mask")
        if x.dim() != 3 or x.shape[1:] != (self.resolution**2, self.dim):
            raise ValueError(
                f"PatchMerging expects (B, {self.resolution ** 2}, {self.dim}) tokens of a "
                f"{self.resolution}×{self.resolution} map, got {tuple(x.shape)}"
            )
        x = rearrange(x, "b (h h2 w w2) c -> b (h w) (w2 h2 c)", h2=2, w2=2, h=self.resolution // 2)  # (B, N/4, 4C)
        return self.reduction(self.norm(x))  # (B, N/4, 2C)

    def extra_repr(self) -> str:
        return f"resolution={self.resolution}, dim={self.dim}"
