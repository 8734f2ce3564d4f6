"""MISSFormer's U-shaped decoder (§3.4, as in Swin-Unet): patch expanding, skip concatenation, blocks, ×4 head.

From the deepest (bridged) map upwards, each decoder stage

1. doubles the resolution and halves the width of the map below it (:class:`PatchExpand`: a linear layer
   to 2C, then each position's 2C channels rearranged into a 2×2 block of C/2 — a pixel shuffle — and a
   LayerNorm);
2. concatenates the skip map of its scale and projects the concatenation to the stage's width;
3. runs ``decoder_depth`` Transformer blocks (efficient attention + ReMix-FFN, the encoder's block).

The last stage, at 1/4 of the image, hands over to :class:`SegmentationHead`: a ×4 patch expansion to full
resolution and a 1×1 convolution to the class logits.

Shape legend: B batch, hᵢ×wᵢ stage i's map, Cᵢ its width, K classes, H×W = 4h₁×4w₁ the image.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from core.layers import Encoder
from zoo.missformer.config import MISSFormerBase, Stage
from zoo.missformer.encoder import transformer_block
from zoo.missformer.maps import CONVOLUTIONS, channels_first, convolution, pixel_shuffle


class PatchExpand(nn.Module):
    """Linear(C -> s²·C_out, no bias), pixel shuffle ×s, LayerNorm(C_out) (s³·C_out and an s×s×s block for
    ``dims=3``).

    Shape: ``(B, h, w, C) -> (B, s·h, s·w, C_out)``; in 3D ``(B, d, h, w, C) -> (B, s·d, s·h, s·w, C_out)``.
    """

    def __init__(self, dim: int, out_dim: int, scale: int = 2, eps: float = 1e-5, dims: int = 2) -> None:
        super().__init__()
        self.scale = scale
        self.expand = nn.Linear(dim, scale**dims * out_dim, bias=False)
        self.norm = nn.LayerNorm(out_dim, eps=eps)  # untagged: it belongs to the expansion's part

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(pixel_shuffle(self.expand(x), self.scale))  # (B, s·h, s·w, C_out)


class DecoderStage(nn.Module):
    """Concatenate the expanded map with the skip, project to the stage width, blocks, then expand (×2).

    Args:
        config: the model's config.
        stage: the encoder stage whose scale this decoder stage works at.
        up_dim: width of the expanded map coming from below.
        expand: whether to expand at the end (every stage but the one at 1/4, which the head expands).

    Shape: ``forward(x, skip)``: ``(B, h, w, up_dim)``, ``(B, h, w, C)`` -> ``(B, 2h, 2w, C/2)``
    (``(B, h, w, C)`` without ``expand``).
    """

    def __init__(self, config: MISSFormerBase, stage: Stage, up_dim: int, expand: bool) -> None:
        super().__init__()
        self.concat = nn.Linear(up_dim + stage.dim, stage.dim)
        self.blocks = Encoder([transformer_block(config, stage) for _ in range(config.decoder_depth)])
        self.expand = PatchExpand(stage.dim, stage.dim // 2, 2, config.norm_eps, config.spatial_dims) \
            if expand else None

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        x = self.blocks(self.concat(torch.cat((x, skip), dim=-1)))  # (B, h, w, C)
        return x if self.expand is None else self.expand(x)


class UShapedDecoder(nn.Module):
    """The deepest map expanded, then one :class:`DecoderStage` per shallower scale, skips from the bridge.

    Tagged ``stacking``: the decoder is the topology that turns the hierarchy into a dense prediction.

    Shape: the stage maps ``(B, hᵢ, wᵢ, Cᵢ)`` -> ``(B, h₁, w₁, C₁)``.
    """

    zoo_part = "stacking"

    def __init__(self, config: MISSFormerBase) -> None:
        super().__init__()
        stages = config.stages()
        self.bottom = PatchExpand(stages[-1].dim, stages[-1].dim // 2, 2, config.norm_eps, config.spatial_dims)
        self.stages = nn.ModuleList(
            DecoderStage(config, stage, below.dim // 2, expand=stage.index > 0)
            for stage, below in zip(stages[-2::-1], stages[:0:-1])
        )
        xavier_init(self)  # the official decoder's initialisation

    def forward(self, maps: list[Tensor]) -> Tensor:
        x = self.bottom(maps[-1])  # (B, 2h_S, 2w_S, C_S/2)
        for stage, skip in zip(self.stages, maps[-2::-1]):  # deepest first
            x = stage(x, skip)
        return x  # (B, h₁, w₁, C₁)


class SegmentationHead(nn.Module):
    """×4 patch expansion of the 1/4-scale map to full resolution, then a 1×1 convolution to K logits.

    Shape: ``(B, h, w, C) -> (B, K, 4h, 4w)``; in 3D ``(B, d, h, w, C) -> (B, K, 4d, 4h, 4w)``.
    """

    zoo_part = "head"

    def __init__(self, dim: int, num_classes: int, eps: float = 1e-5, dims: int = 2) -> None:
        super().__init__()
        self.expand = PatchExpand(dim, dim, 4, eps, dims)
        self.classifier = convolution(dims, dim, num_classes, kernel_size=1)
        xavier_init(self)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(channels_first(self.expand(x)))  # (B, K, 4h, 4w)


def xavier_init(module: nn.Module) -> None:
    """Xavier-uniform weights and zero biases for every linear and convolution (the official decoder's init)."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, *CONVOLUTIONS.values())):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
