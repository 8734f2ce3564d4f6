"""The context bridge (MISSFormer §3.3): the tokens of all four stages attended jointly before the decoder.

A U-Net's skip connections hand each decoder stage the encoder features of its own scale only. MISSFormer
fuses the scales first: each stage's map is flattened and its channels cut into tokens of stage 1's width
C₁ (stage i gives kᵢ = Cᵢ/C₁ tokens per position), and all of them are concatenated into one sequence —
3136 + 1568 + 980 + 392 = 6076 tokens of width 64 at 224×224. A bridge layer is a Pre-LN Transformer
layer over that sequence:

* attention: every token queries keys and values computed from all stages at once, each stage's map
  reduced Rᵢ× per side by its own convolution (Rᵢ = 8, 4, 2, 1) and cut back into width-C₁ tokens, then one
  shared LayerNorm: 784 keys at 224×224;
* FFN: the sequence is cut back into the stage maps and each gets its own ReMix-FFN at its own width.

The official code hard-codes the 224×224 splits. Here :class:`BridgeLayout` derives them from the stage
maps it is given, so any input size whose sides are multiples of 32 works; at 224×224 they are the
official constants. The cuts reproduce the official memory layouts exactly, so weights copy across.

The 3D model fuses its stages' d×h×w maps the same way (every formula below with one more side).

Shape legend: B batch, hᵢ×wᵢ stage i's map, Cᵢ its width, kᵢ = Cᵢ/C₁, T = Σ hᵢ·wᵢ·kᵢ fused tokens,
Rᵢ reduction ratio, M = Σ (hᵢ/Rᵢ)·(wᵢ/Rᵢ)·kᵢ keys.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from core.attention import build_kernel
from core.layers import EncoderLayer, layer_norm
from core.multihead import MultiHeadAttention
from zoo.missformer.config import MISSFormerBase
from zoo.missformer.ffn import stage_ffn
from zoo.missformer.maps import as_map, channels_first, convolution, tokens


@dataclass(frozen=True)
class BridgeLayout:
    """Where each stage's tokens sit in the fused sequence: map sizes ``(hᵢ, wᵢ)`` (``(dᵢ, hᵢ, wᵢ)`` in 3D) and groups
    ``kᵢ = Cᵢ/C₁``."""

    shapes: tuple[tuple[int, ...], ...]
    groups: tuple[int, ...]

    @classmethod
    def of(cls, maps: list[Tensor]) -> BridgeLayout:
        """The layout of channels-last stage maps ``(B, hᵢ, wᵢ, Cᵢ)``."""
        base = maps[0].shape[-1]
        return cls(tuple(tuple(m.shape[1:-1]) for m in maps), tuple(m.shape[-1] // base for m in maps))

    @property
    def lengths(self) -> list[int]:
        """Fused tokens per stage, hᵢ·wᵢ·kᵢ (3136, 1568, 980, 392 for the paper's model at 224×224)."""
        return [math.prod(sides) * k for sides, k in zip(self.shapes, self.groups)]

    def fuse(self, maps: list[Tensor]) -> Tensor:
        """Stage maps -> one sequence; each position's Cᵢ channels become kᵢ consecutive tokens of width C₁."""
        return torch.cat([tokens(m).reshape(m.shape[0], -1, m.shape[-1] // k) for m, k in zip(maps, self.groups)],
                         dim=1)  # (B, T, C₁): b h w (k c) -> b (h w k) c

    def split(self, x: Tensor) -> list[Tensor]:
        """The inverse of :meth:`fuse`: ``(B, T, C₁)`` -> the stage maps ``(B, hᵢ, wᵢ, Cᵢ)``."""
        return [as_map(part.reshape(part.shape[0], -1, k * part.shape[-1]), sides)  # b (h w k) c -> b h w (k c)
                for part, sides, k in zip(x.split(self.lengths, dim=1), self.shapes, self.groups)]


class BridgeAttention(nn.Module):
    """Attention over the fused tokens, keys and values from every stage's map reduced by its own ratio.

    A stage with ratio Rᵢ > 1 is reduced by Conv2d(Cᵢ, Cᵢ, kernel = stride = Rᵢ) and its output channels cut
    into kᵢ tokens of width C₁ (channel c·kᵢ + j goes to token j, the official layout); a stage with Rᵢ = 1
    gives its fused tokens as they are. One LayerNorm(C₁) normalises all the keys' sources. With
    ``reduce=False`` keys and values are the fused tokens themselves (global attention).

    Shape: ``forward(x, layout)``: ``(B, T, C₁) -> (B, T, C₁)``.
    """

    def __init__(self, widths: tuple[int, ...], ratios: tuple[int, ...], heads: int, config: MISSFormerBase,
                 reduce: bool = True) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(widths[0], heads, build_kernel(config.kernel, config.attention_dropout))
        self.ratios = tuple(r if reduce else 1 for r in ratios)
        self.reductions = nn.ModuleList(convolution(config.spatial_dims, w, w, r, r)
                                        for w, r in zip(widths, self.ratios) if r > 1)
        self.norm = nn.LayerNorm(widths[0], eps=config.norm_eps) if len(self.reductions) else None

    def keys_source(self, x: Tensor, layout: BridgeLayout) -> Tensor:
        """The reduced, normalised sequence keys and values are computed from: ``(B, T, C₁) -> (B, M, C₁)``."""
        convs = iter(self.reductions)
        parts = []
        for stage_tokens, stage_map, k, ratio in zip(x.split(layout.lengths, dim=1), layout.split(x), layout.groups,
                                               self.ratios):  # a loop over the stages
            if ratio == 1:
                parts.append(stage_tokens)  # (B, hᵢ·wᵢ·kᵢ, C₁)
                continue
            reduced = next(convs)(channels_first(stage_map)).flatten(2)  # (B, Cᵢ, (hᵢ/Rᵢ)(wᵢ/Rᵢ))
            b, channels, m = reduced.shape  # channel c·kᵢ + j goes to token j: b (c k) m -> b (k m) c
            parts.append(reduced.reshape(b, channels // k, k, m).permute(0, 2, 3, 1).reshape(b, k * m, -1))
        return self.norm(torch.cat(parts, dim=1))  # (B, M, C₁)

    def forward(self, x: Tensor, layout: BridgeLayout) -> Tensor:
        memory = None if self.norm is None else self.keys_source(x, layout)
        return self.attention(x, memory=memory)  # (B, T, C₁)


class BridgeFFN(nn.Module):
    """The fused sequence cut back into stage maps, one FFN per stage at its own width, fused again.

    Shape: ``forward(x, layout)``: ``(B, T, C₁) -> (B, T, C₁)``.
    """

    def __init__(self, widths: tuple[int, ...], config: MISSFormerBase) -> None:
        super().__init__()
        self.ffns = nn.ModuleList(stage_ffn(w, config) for w in widths)

    def forward(self, x: Tensor, layout: BridgeLayout) -> Tensor:
        return layout.fuse([ffn(m) for ffn, m in zip(self.ffns, layout.split(x))])  # (B, T, C₁)


class BridgeLayer(EncoderLayer):
    """A core encoder layer whose two sublayers also receive the :class:`BridgeLayout` of the fused sequence.

    Only ``forward`` is overridden, to pass the layout; the residuals, norms and their placement are the
    core layer's.
    """

    def forward(self, x: Tensor, layout: BridgeLayout) -> Tensor:  # type: ignore[override]
        x = self.residual(x, self.norm1, lambda h: self.self_attn(h, layout))  # (B, T, C₁)
        return self.residual(x, self.norm2, lambda h: self.ffn(h, layout))  # (B, T, C₁)


class ContextBridge(nn.Module):
    """``bridge_depth`` bridge layers over the fused tokens of all stages; returns the stage maps.

    Tagged ``stacking``: the bridge is a topology change, so its attention and FFNs count there.

    Args:
        config: the model's config (stage widths, ratios, ``bridge_depth``, ``bridge_heads``, choices).

    Shape: a list of stage maps ``(B, hᵢ, wᵢ, Cᵢ)`` -> a list of the same shapes.
    """

    zoo_part = "stacking"

    def __init__(self, config: MISSFormerBase) -> None:
        super().__init__()
        c = config
        stages = c.stages()
        widths, ratios = tuple(s.dim for s in stages), tuple(s.sr for s in stages)
        norm = functools.partial(layer_norm, eps=c.norm_eps)
        self.layers = nn.ModuleList(
            BridgeLayer(widths[0], BridgeAttention(widths, ratios, c.bridge_heads, c, c.spatial_reduction),
                        BridgeFFN(widths, c), c.dropout, c.norm_first, norm)
            for _ in range(c.bridge_depth)
        )

    def forward(self, maps: list[Tensor]) -> list[Tensor]:
        layout = BridgeLayout.of(maps)
        x = layout.fuse(maps)  # (B, T, C₁)
        for layer in self.layers:
            x = layer(x, layout)  # (B, T, C₁)
        return layout.split(x)
