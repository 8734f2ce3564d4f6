"""MISSFormer's hierarchical encoder (MiT-like, as in SegFormer): overlapping patch embeddings and four stages.

Stage 1 reads the image through a 7×7 convolution of stride 4 (padding 3), so neighbouring patches
overlap and share pixels; each later stage starts with a 3×3 convolution of stride 2 that halves the map
and widens it (64 → 128 → 320 → 512 channels in the paper). Each stage then runs core
:class:`~core.layers.EncoderLayer` s — efficient self-attention and a ReMix-FFN injected, Pre-LN — and
ends with a LayerNorm. There is no positional encoding: the FFN's zero-padded depth-wise convolution
gives position away.

The tokens stay a channels-last map ``(B, h, w, C)`` from block to block (see :mod:`~zoo.missformer.attention`).

Shape legend: B batch, C channels, H×W image, hᵢ×wᵢ stage i's map (H/4 / 2^i), Cᵢ its width.
"""

from __future__ import annotations

import functools

from torch import Tensor, nn

from core.attention import build_kernel
from core.layers import Encoder, EncoderLayer, layer_norm
from core.parts import tag
from zoo.missformer.attention import EfficientSelfAttention
from zoo.missformer.config import MISSFormerBase, Stage
from zoo.missformer.ffn import stage_ffn
from zoo.missformer.maps import channels_first, channels_last, convolution
from zoo.vision import drop_path_rates


class OverlapPatchEmbedding(nn.Module):
    """Conv2d(kernel k, stride s, padding k//2), then LayerNorm: patches that overlap by k − s pixels (Conv3d and
    voxels for ``dims=3``).

    Shape: ``(B, C, H, W) -> (B, H/s, W/s, D)``; in 3D ``(B, C, Z, H, W) -> (B, Z/s, H/s, W/s, D)``.
    """

    def __init__(self, in_channels: int, dim: int, kernel: int, stride: int, eps: float = 1e-5,
                 dims: int = 2) -> None:
        super().__init__()
        self.proj = convolution(dims, in_channels, dim, kernel_size=kernel, stride=stride, padding=kernel // 2)
        self.norm = nn.LayerNorm(dim, eps=eps)  # untagged: it belongs to the tokenizer's part

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(channels_last(self.proj(x)))  # (B, H/s, W/s, D)


def transformer_block(config: MISSFormerBase, stage: Stage, drop_path: float = 0.0) -> EncoderLayer:
    """MISSFormer's Transformer block: a core encoder layer with efficient attention and ReMix-FFN injected.

    With the classic choices (``spatial_reduction=False``, ``ffn="dense"``) the same call builds the classic
    layer: global attention and a position-wise FFN. Encoder, bridge-free decoder and classic share it.
    """
    c = config
    kernel = build_kernel(c.kernel, c.attention_dropout)
    attention = EfficientSelfAttention(stage.dim, stage.heads, stage.sr if c.spatial_reduction else 1, kernel,
                                       c.norm_eps, c.spatial_dims)
    ffn = stage_ffn(stage.dim, c)
    norm = functools.partial(layer_norm, eps=c.norm_eps)
    return EncoderLayer(stage.dim, attention, ffn, c.dropout, c.norm_first, norm, drop_path)


class HierarchicalEncoder(nn.Module):
    """Stages of Transformer blocks, each after the first opened by an overlapping stride-2 patch embedding.

    Stage 1's tokenizer belongs to the model (it is the ``embedding`` part); the later patch embeddings are
    tagged ``stacking``: they exist because of the hierarchy, as Swin's patch merging does.

    Args:
        config: the model's config; ``config.stages()`` gives the stages.

    Shape: ``(B, h₁, w₁, C₁)`` -> a list of the stage maps ``(B, hᵢ, wᵢ, Cᵢ)``, after each stage's final
    LayerNorm (Pre-LN only).
    """

    def __init__(self, config: MISSFormerBase) -> None:
        super().__init__()
        stages = config.stages()
        rates = iter(drop_path_rates(config.drop_path, sum(s.depth for s in stages)))
        norm = functools.partial(layer_norm, eps=config.norm_eps)
        self.downsamples = nn.ModuleList(
            tag(OverlapPatchEmbedding(previous.dim, stage.dim, 3, 2, config.norm_eps, config.spatial_dims), "stacking")
            for previous, stage in zip(stages, stages[1:])
        )
        self.stages = nn.ModuleList(
            Encoder([transformer_block(config, stage, next(rates)) for _ in range(stage.depth)],
                    norm(stage.dim) if config.norm_first else None)
            for stage in stages
        )

    def forward(self, x: Tensor) -> list[Tensor]:
        maps = []
        for i, stage in enumerate(self.stages):  # a loop over the (four) stages, not over tokens
            if i:
                x = self.downsamples[i - 1](channels_first(x))  # (B, hᵢ, wᵢ, Cᵢ)
            x = stage(x)  # (B, hᵢ, wᵢ, Cᵢ)
            maps.append(x)
        return maps
