"""MISSFormer (Huang et al. 2021, "An Effective Medical Image Segmentation Transformer"), from core blocks.

MISSFormer is the classic Transformer encoder made into a U-shaped segmenter. What it changes from the classic
model is declared once, in ``CHANGES`` (:mod:`zoo.missformer`); ``zoo diff missformer`` renders it with the
measured deltas.

Where the changed parts live: :class:`~zoo.missformer.attention.EfficientSelfAttention` wraps the core
multi-head attention, :class:`~zoo.missformer.ffn.ReMixFFN` is the FFN, and the stack is a
:class:`~zoo.missformer.encoder.HierarchicalEncoder`, a :class:`~zoo.missformer.bridge.ContextBridge` and a
:class:`~zoo.missformer.decoder.UShapedDecoder`.

The Transformer blocks everywhere are core :class:`~core.layers.EncoderLayer` s with the attention and FFN
injected; nothing is copied. The model computes what the official code (``networks/MISSFormer.py``)
computes, with two differences in bookkeeping only: it builds no module that the forward pass does not
call (the official deepest decoder stage builds a projection and two blocks it never uses, 6.9M
parameters, and each ReMix-FFN two unused LayerNorms), and it computes each ReMix-FFN's first linear
layer once (the official code computes it twice).

Shape legend: B batch, C channels, H×W image, hᵢ×wᵢ stage i's map, Cᵢ its width, K classes.
"""

from __future__ import annotations

from einops import rearrange
from torch import Tensor, nn

from core.parts import tag
from core.position import SinusoidalPosition
from zoo.missformer.bridge import ContextBridge
from zoo.missformer.config import PATCH, MISSFormerBase
from zoo.missformer.decoder import SegmentationHead, UShapedDecoder
from zoo.missformer.encoder import HierarchicalEncoder, OverlapPatchEmbedding
from zoo.missformer.maps import as_map, tokens
from zoo.vision import PatchEmbedding, PatchVocabularyEmbedding


class PatchTokens(nn.Module):
    """A tokenizer of non-overlapping P×P patches (linear projection + LayerNorm, or vocabulary symbols) as a map.

    Shape: ``(B, C, H, W) -> (B, H/P, W/P, D)``.
    """

    zoo_part = "embedding"

    def __init__(self, kind: str, in_channels: int, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        if kind == "patch":
            self.tokens: nn.Module = PatchEmbedding(PATCH, in_channels, dim)
            self.norm: nn.Module | None = nn.LayerNorm(dim, eps=eps)
        else:
            self.tokens, self.norm = PatchVocabularyEmbedding(PATCH, dim), None

    def forward(self, images: Tensor) -> Tensor:
        x = self.tokens(images)  # (B, N, D)
        x = x if self.norm is None else self.norm(x)
        return rearrange(x, "b (h w) d -> b h w d", h=images.shape[-2] // PATCH)


class MISSFormer(nn.Module):
    """MISSFormer: tokens -> hierarchical encoder -> context bridge -> U-shaped decoder -> ×4 head.

    Args:
        config: a :class:`~zoo.missformer.config.MISSFormerConfig` (or ``MISSFormer3DConfig``); its choice
            fields also build the classic counterpart of each part.

    A 1-channel image given to a 3-channel model is repeated to 3 channels (the official code's rule for
    grayscale CT); any other channel mismatch is a ValueError. With ``resolution_agnostic=False`` only
    ``image_size``×``image_size`` inputs are accepted (the official fixed geometry); otherwise any size
    whose sides are multiples of 32 (of 2^(stages+1)).

    Built from a :class:`~zoo.missformer.config.MISSFormer3DConfig` (``spatial_dims = 3``), the same parts work on
    volumes: 3D convolutions, d×h×w token maps, 2×2×2 patch expanding (the official code is 2D only).

    Shape:
        ``(B, C, H, W)`` float images -> ``(B, K, H, W)`` logits; in 3D ``(B, C, D, H, W) -> (B, K, D, H, W)``.
    """

    def __init__(self, config: MISSFormerBase) -> None:
        super().__init__()
        c = self.config = config
        width = c.widths[0]
        if c.tokens == "overlap":
            self.tokens: nn.Module = tag(OverlapPatchEmbedding(c.in_channels, width, 7, PATCH, c.norm_eps,
                                                               c.spatial_dims), "embedding")
        else:
            self.tokens = PatchTokens(c.tokens, c.in_channels, width, c.norm_eps)
        self.position = SinusoidalPosition(width) if c.position == "sinusoidal" else None
        self.encoder = HierarchicalEncoder(c)
        self.bridge = ContextBridge(c) if c.bridge_depth else None
        self.decoder = UShapedDecoder(c) if len(c.stages()) > 1 else None
        self.head = SegmentationHead(width, c.num_classes, c.norm_eps, c.spatial_dims)

    def check_images(self, images: Tensor) -> Tensor:
        """Validate ``images`` and repeat a single channel for a 3-channel model; returns the images to use."""
        c = self.config
        axes = "(B, C, H, W)" if c.spatial_dims == 2 else "(B, C, D, H, W)"
        if not isinstance(images, Tensor) or not images.is_floating_point():
            raise TypeError(f"images must be a float tensor {axes}, got {getattr(images, 'dtype', type(images))}")
        if images.dim() != c.spatial_dims + 2:
            raise ValueError(f"images must have shape {axes.replace('C', str(c.in_channels))}, got "
                             f"{tuple(images.shape)}")
        channels, sides = images.shape[1], tuple(images.shape[2:])
        if channels == 1 and c.in_channels == 3:
            images = images.repeat(1, 3, *[1] * c.spatial_dims)  # grayscale to 3 channels, as the official code does
        elif channels != c.in_channels:
            raise ValueError(
                f"images have {channels} channels but the model was built for in_channels={c.in_channels} "
                f"(only 1 -> 3 is converted); build it with in_channels={channels}"
            )
        if not c.resolution_agnostic and sides != c.input_sides:
            raise ValueError(
                f"this model has the official fixed geometry (resolution_agnostic=False) and accepts only "
                f"{'×'.join(map(str, c.input_sides))} images, got {'×'.join(map(str, sides))}; resize the images, or "
                "build it with resolution_agnostic=True to derive the token splits from each input"
            )
        c.check_size(sides)
        return images

    def embed(self, images: Tensor) -> Tensor:
        """Images -> stage 1's token map. Shape: ``(B, C, H, W) -> (B, H/4, W/4, C₁)``."""
        x = self.tokens(images)  # (B, h₁, w₁, C₁)
        if self.position is not None:
            x = as_map(self.position.embed(tokens(x)), x.shape[1:-1])
        return x

    def forward_features(self, images: Tensor) -> list[Tensor]:
        """The stage maps after the encoder and the bridge, shallowest first: ``(B, hᵢ, wᵢ, Cᵢ)`` each."""
        maps = self.encoder(self.embed(self.check_images(images)))
        return maps if self.bridge is None else self.bridge(maps)

    def forward(self, images: Tensor) -> Tensor:
        maps = self.forward_features(images)
        x = maps[0] if self.decoder is None else self.decoder(maps)  # (B, h₁, w₁, C₁)
        return self.head(x)  # (B, K, H, W)
