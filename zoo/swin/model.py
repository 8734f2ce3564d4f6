"""The Swin Transformer (Liu et al. 2021, "Hierarchical Vision Transformer using Shifted Windows"), from core blocks.

Swin is the classic Transformer encoder made into a hierarchical backbone. What it changes from the classic
model is declared once, in ``CHANGES`` (:mod:`zoo.swin`); ``zoo diff swin`` renders it with the measured deltas.

Where the changed parts live: :class:`~zoo.swin.attention.WindowAttention` is a kernel of the core multi-head
attention, :class:`~zoo.swin.relative_position.RelativePositionBias` holds the learned relative bias, and
:class:`~zoo.swin.merging.PatchMerging` joins the stages. The blocks are core :class:`~core.layers.EncoderLayer`
s, the stack is a core :class:`~core.layers.Encoder` holding the patch merges between its stages; nothing is
copied.

Shape legend: B batch, C channels, H×W image, P patch, Nᵢ tokens of stage i, Dᵢ its width, K classes.
"""

from __future__ import annotations

import functools

from torch import Tensor, nn

from core.attention import build_kernel
from core.ffn import PositionwiseFFN
from core.init import init_weights
from core.layers import Encoder, EncoderLayer, NormFactory, layer_norm
from core.multihead import MultiHeadAttention
from core.parts import tag
from core.position import build_position
from zoo.swin.attention import WindowAttention
from zoo.swin.config import Stage, SwinConfig
from zoo.swin.merging import PatchMerging
from zoo.swin.relative_position import RelativePositionBias
from zoo.vision import PatchEmbedding, PatchVocabularyEmbedding, build_readout, check_images, drop_path_rates


class SwinTransformer(nn.Module):
    """Swin: patch tokens -> stages of (shifted-)window encoder layers with patch merging -> pool -> head.

    Args:
        config: a :class:`~zoo.swin.config.SwinConfig`; its choice fields also build the classic
            counterpart of each part.

    Shape:
        ``(B, C, H, W)`` float images of ``config.image_size`` -> ``(B, K)`` logits.
    """

    def __init__(self, config: SwinConfig) -> None:
        super().__init__()
        c = self.config = config
        stages = c.stages()
        if c.tokens == "patch":
            self.tokens: nn.Module = PatchEmbedding(c.patch_size, c.in_channels, c.embed_dim)
            # timm's patch_norm: part of Swin's tokenizer, so it goes when the tokenizer is reverted
            self.patch_norm = tag(nn.LayerNorm(c.embed_dim, eps=c.norm_eps), "embedding")
        else:
            self.tokens, self.patch_norm = PatchVocabularyEmbedding(c.patch_size, c.embed_dim), None
        self.position = build_position("sinusoidal", c.embed_dim, c.heads[0]) if c.position == "sinusoidal" else None
        self.dropout = nn.Dropout(c.dropout)
        norm = functools.partial(layer_norm, eps=c.norm_eps)
        rates = iter(drop_path_rates(c.drop_path, sum(s.depth for s in stages)))
        layers: list[nn.Module] = []
        for previous, stage in zip([None, *stages], stages):
            if previous is not None:  # timm's order: each stage after the first starts by merging
                layers.append(PatchMerging(previous.resolution, previous.dim, c.norm_eps))
            layers += [self._block(stage, block, next(rates), norm) for block in range(stage.depth)]
        last = stages[-1]
        self.encoder = Encoder(layers, norm(last.dim) if c.norm_first else None)
        decoder = dict(activation=c.activation, norm_first=c.norm_first, dropout=c.dropout)
        self.readout = build_readout(c.readout, last.dim, last.heads, c.d_ff(last.dim),
                                     **(decoder if c.readout == "decoder" else {}))
        self.head = tag(nn.Linear(last.dim, c.num_classes), "head")
        init_weights(self, "normal")  # N(0, 0.02²) linears, zero biases: Swin's (timm's) initialisation

    def _block(self, stage: Stage, block: int, drop_path: float, norm: NormFactory) -> EncoderLayer:
        """One core encoder layer of ``stage``; odd blocks shift their windows."""
        c = self.config
        kernel = build_kernel(c.kernel, c.attention_dropout)
        relative = None
        if c.position == "relative":
            relative = RelativePositionBias(stage.window or stage.resolution, stage.heads)
        if stage.window is None:  # global attention; a relative bias then spans the whole map
            attention = MultiHeadAttention(stage.dim, stage.heads, kernel, relative)
        else:
            window = WindowAttention(stage.resolution, stage.window, stage.block_shift(block), relative, kernel)
            attention = MultiHeadAttention(stage.dim, stage.heads, window)
        ffn = PositionwiseFFN(stage.dim, c.d_ff(stage.dim), c.activation, c.dropout)
        return EncoderLayer(stage.dim, attention, ffn, c.dropout, c.norm_first, norm, drop_path)

    def embed(self, images: Tensor) -> Tensor:
        """Images -> stage 1's tokens. Shape: ``(B, C, H, W) -> (B, N₁, D₁)``."""
        check_images(images, self.config.in_channels, self.config.image_size)
        x = self.tokens(images)  # (B, N₁, D₁)
        if self.patch_norm is not None:
            x = self.patch_norm(x)
        if self.position is not None:
            x = self.position.embed(x)
        return self.dropout(x)

    def forward_features(self, images: Tensor) -> Tensor:
        """The last stage's tokens, after the final norm of a Pre-LN model. Shape: ``(B, N_last, D_last)``."""
        return self.encoder(self.embed(images))

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.readout(self.forward_features(images)))  # (B, D_last) -> (B, K)

    def no_weight_decay(self) -> set[str]:
        """Parameter names kept out of weight decay: the relative position tables (as Swin and timm do)."""
        return {f"{name}.table" for name, m in self.named_modules() if isinstance(m, RelativePositionBias)}
