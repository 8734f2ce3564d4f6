"""The Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words"), built from core blocks.

ViT is the classic Transformer *encoder* run on image patches. What it changes from the classic model is
declared once, in ``CHANGES`` (:mod:`zoo.vit`); ``zoo diff vit`` renders it with the measured deltas.

The patches are projected by :class:`zoo.vision.PatchEmbedding`; the encoder layers, multi-head attention,
kernels and FFN are the core's; nothing is copied.

Shape legend: B batch, C channels, H×W image, P patch, h×w = (H/P)×(W/P) patch grid, N = h·w patches,
T = N + extra tokens ([CLS]), D width, K classes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from core.attention import build_kernel
from core.ffn import build_ffn
from core.init import init_weights
from core.layers import Encoder, EncoderLayer, norm_factory
from core.multihead import MultiHeadAttention
from core.position import LearnedPosition, build_position
from zoo.vision import PatchEmbedding, PatchVocabularyEmbedding, build_readout, check_images, drop_path_rates
from zoo.vit.config import ViTConfig


def resample_positions(table: Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int], prefix: int) -> Tensor:
    """Resample a learned position table to another patch grid (bicubic, antialiased; timm's rule).

    The first ``prefix`` rows (the [CLS] token's) have no place on the grid and are kept as they are.

    Shape: ``(prefix + old_h·old_w, D) -> (prefix + new_h·new_w, D)``.
    """
    if tuple(old_grid) == tuple(new_grid):
        return table
    head, grid = table[:prefix], table[prefix:]  # (prefix, D), (h·w, D)
    grid = rearrange(grid.float(), "(h w) d -> 1 d h w", h=old_grid[0])  # interpolate wants float32
    grid = F.interpolate(grid, size=tuple(new_grid), mode="bicubic", antialias=True)  # (1, D, h', w')
    return torch.cat((head, rearrange(grid, "1 d h w -> (h w) d").to(table.dtype)), dim=0)  # (prefix + h'·w', D)


class VisionTransformer(nn.Module):
    """ViT: patch tokens -> [CLS] -> positions -> core Transformer encoder -> read-out -> linear head.

    Args:
        config: a :class:`ViTConfig`; its choice fields also build the classic counterpart of each part.

    ``forward`` takes any image size divisible by ``patch_size``; with a learned position table built for
    ``image_size``, another size gets the table resampled on the fly (:meth:`resize_image` makes it stick).

    Shape:
        ``(B, C, H, W)`` float images -> ``(B, K)`` logits.
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        c = self.config = config
        if c.tokens == "patch":
            self.tokens: nn.Module = PatchEmbedding(c.patch_size, c.in_channels, c.d_model)
        else:
            self.tokens = PatchVocabularyEmbedding(c.patch_size, c.d_model)
        self.readout = self.make_readout(c)
        self.extra_tokens = self.readout.extra_tokens  # [CLS] (and any other prepended token) rows of the table
        self.position = build_position(c.position, c.d_model, c.heads, max_len=self.extra_tokens + c.grid**2)
        self.dropout = nn.Dropout(c.dropout)
        norm = norm_factory(c.norm, c.norm_eps)

        def attention() -> MultiHeadAttention:
            kernel = build_kernel(c.kernel, c.attention_dropout, **c.kernel_options)
            return MultiHeadAttention(c.d_model, c.heads, kernel)

        def ffn(layer: int) -> nn.Module:  # the core's PositionwiseFFN unless a variant registered another type
            return build_ffn(c.ffn, c.d_model, c.d_ff, c.activation, c.dropout, layer, **c.ffn_options)

        self.encoder = Encoder(
            [
                EncoderLayer(c.d_model, attention(), ffn(i), c.dropout, c.norm_first, norm, rate)
                for i, rate in enumerate(drop_path_rates(c.drop_path, c.depth))
            ],
            norm(c.d_model) if c.norm_first else None,
        )
        self.head = nn.Linear(c.d_model, c.num_classes)
        self.head.zoo_part = "head"
        init_weights(self, "normal")  # N(0, 0.02²) linears, zero biases: ViT's (timm's) initialisation

    def make_readout(self, c: ViTConfig) -> nn.Module:
        """The read-out: the tokens it prepends (``prepend``, ``extra_tokens``) and how it summarises the
        encoder output for the head. The one hook a variant overrides to read the class another way (DeiT adds
        a distillation token beside [CLS]); it runs before the position table is sized."""
        # The decoder read-out (the classic topology) follows the model's norm placement and activation.
        return build_readout(c.readout, c.d_model, c.heads, c.d_ff, layers=c.decoder_layers,
                             activation=c.activation, norm_first=c.norm_first, dropout=c.dropout)

    @property
    def grid(self) -> tuple[int, int]:
        """The patch grid the learned position table is built for."""
        return (self.config.grid, self.config.grid)

    def image_grid(self, x: Tensor) -> tuple[int, int]:
        """The patch grid of images ``x``; a clear error when the patch size does not divide them."""
        p = self.config.patch_size
        height, width = x.shape[-2:]
        if height % p or width % p:
            raise ValueError(
                f"image size {height}×{width} is not divisible by patch_size={p}; resize or pad the images "
                f"to a multiple of {p}"
            )
        return height // p, width // p

    def add_position(self, x: Tensor, grid: tuple[int, int]) -> Tensor:
        """Add the positions of a ``grid`` of patches (after the [CLS] token) to ``x``: ``(B, T, D)``."""
        if isinstance(self.position, LearnedPosition) and grid != self.grid:
            return x + resample_positions(self.position.weight, self.grid, grid, self.extra_tokens)
        return self.position.embed(x)  # sinusoids extend to any length; (B, T, D)

    def embed(self, images: Tensor) -> Tensor:
        """Images -> the encoder's input tokens. Shape: ``(B, C, H, W) -> (B, T, D)``."""
        check_images(images, self.config.in_channels)
        grid = self.image_grid(images)
        x = self.tokens(images)  # (B, N, D)
        x = self.readout.prepend(x)  # (B, T, D)
        return self.dropout(self.add_position(x, grid))  # (B, T, D)

    def forward_features(self, images: Tensor, return_layers: Sequence[int] | None = None) -> Tensor | list[Tensor]:
        """The encoder's output tokens, or the outputs of the chosen layers.

        Args:
            images: ``(B, C, H, W)`` float.
            return_layers: indices of encoder layers (0-based; negative counts from the end). ``None``: return
                the final tokens (after the final norm in a Pre-LN model).

        Returns:
            ``(B, T, D)`` final tokens; or, with ``return_layers``, a list of the ``(B, T, D)`` outputs of those
            layers (before any final norm), in the order asked. Token 0 is [CLS] when ``readout="cls"``.
        """
        x = self.embed(images)  # (B, T, D)
        if return_layers is None:
            return self.encoder(x)
        depth = len(self.encoder.layers)
        wanted = []
        for i in return_layers:
            if isinstance(i, bool) or not isinstance(i, int) or not -depth <= i < depth:
                raise ValueError(f"return_layers holds {i!r}; layer indices must be ints in [{-depth}, {depth})")
            wanted.append(i % depth)
        outputs = []
        for layer in self.encoder.layers[: max(wanted, default=-1) + 1]:  # no layer past the last one asked
            x = layer(x)  # (B, T, D)
            outputs.append(x)
        return [outputs[i] for i in wanted]

    def forward(self, images: Tensor) -> Tensor:
        tokens = self.forward_features(images)  # (B, T, D)
        return self.head(self.readout(tokens))  # (B, D) -> (B, K)

    def resize_state(self, name: str, tensor: Tensor) -> Tensor | None:
        """A checkpoint's ``name`` adapted to this model (:func:`zoo.weights.transfer.load_pretrained`): a learned
        position table of a square patch grid resampled to ours; None for anything else."""
        if name != "position.weight" or not isinstance(self.position, LearnedPosition) or tensor.dim() != 2:
            return None
        side = math.isqrt(tensor.shape[0] - self.extra_tokens)
        if side * side != tensor.shape[0] - self.extra_tokens:
            return None  # not a square grid after the prefix rows: the caller reports the shapes
        return resample_positions(tensor, (side, side), self.grid, self.extra_tokens)  # (prefix + h·w, D)

    @torch.no_grad()
    def resize_image(self, image_size: int) -> None:
        """Rebuild for ``image_size``: resample the learned position table once, update ``config``."""
        config = dataclasses.replace(self.config, image_size=image_size)  # validates the new geometry
        if isinstance(self.position, LearnedPosition):
            old_grid = self.grid
            table = resample_positions(self.position.weight, old_grid, (config.grid, config.grid), self.extra_tokens)
            self.position.weight = nn.Parameter(table, requires_grad=self.position.weight.requires_grad)
            self.position.max_len = table.shape[0]
        self.config = config
