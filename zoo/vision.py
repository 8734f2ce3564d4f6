"""Parts shared by the vision variants (ViT, Swin): image tokenizers, read-outs, dummy inputs.

The classic Transformer reads a sequence of *symbols*, each looked up in a vocabulary, and produces its
output with a decoder. Vision variants change both ends:

* **embedding** — :class:`PatchEmbedding` projects each P×P patch linearly (a strided convolution);
  its classic counterpart :class:`PatchVocabularyEmbedding` turns each patch into one symbol of a
  vocabulary (its mean intensity quantised to ``vocab`` levels) and looks it up, with the same number
  of tokens. The comparison shows what a discrete vocabulary throws away.
* **stacking** — the output is read from a learned [CLS] token (:class:`ClassTokenReadout`, ViT) or by
  averaging the tokens (:class:`MeanReadout`, Swin); the classic counterpart keeps the encoder–decoder
  topology: :class:`DecoderReadout` decodes the label as a one-token sequence, a learned BOS query
  cross-attending the encoder output through core decoder layers.

Shape legend: B batch, C channels, H×W image, P patch, N tokens, D width, K classes.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import Tensor, nn

from core.embedding import TokenEmbedding
from core.ffn import PositionwiseFFN
from core.layers import Decoder, DecoderLayer, layer_norm
from core.multihead import MultiHeadAttention
from plumbing.errors import check_positive, unknown_name


def drop_path_rates(max_rate: float, depth: int) -> list[float]:
    """Stochastic-depth rate of each layer: linear from 0 at the first layer to ``max_rate`` at the last (timm)."""
    return [max_rate * i / (depth - 1) if depth > 1 else 0.0 for i in range(depth)]


def check_image_geometry(image_size: int, patch_size: int, in_channels: int) -> None:
    """Validate that ``patch_size`` divides ``image_size``; clear errors otherwise."""
    check_positive("image_size", image_size)
    check_positive("patch_size", patch_size)
    check_positive("in_channels", in_channels)
    if image_size % patch_size:
        divisors = [p for p in range(1, image_size + 1) if image_size % p == 0 and p <= 32]
        raise ValueError(
            f"patch_size={patch_size} does not divide image_size={image_size}; "
            f"use a patch size among {divisors} or resize the images"
        )


def check_images(x: Tensor, in_channels: int, image_size: int | None = None) -> None:
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise TypeError(f"images must be a float tensor (B, C, H, W), got {getattr(x, 'dtype', type(x))}")
    if x.dim() != 4 or x.shape[1] != in_channels:
        raise ValueError(f"images must have shape (B, {in_channels}, H, W), got {tuple(x.shape)}")
    if image_size is not None and tuple(x.shape[-2:]) != (image_size, image_size):
        raise ValueError(
            f"this model was built for {image_size}×{image_size} images, got {tuple(x.shape[-2:])}; "
            "resize the images or build the model with image_size=..."
        )


class PatchEmbedding(nn.Module):
    """Split the image into non-overlapping P×P patches and project each to D (Dosovitskiy et al. 2021, §3.1).

    Shape: ``(B, C, H, W) -> (B, N, D)`` with N = (H/P)·(W/P).
    """

    zoo_part = "embedding"

    def __init__(self, patch_size: int, in_channels: int, d_model: int) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)  # linear per patch

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] % self.patch_size or x.shape[-2] % self.patch_size:
            raise ValueError(f"image size {tuple(x.shape[-2:])} is not divisible by patch_size={self.patch_size}")
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, N, D)


class PatchVocabularyEmbedding(nn.Module):
    """The classic embedding applied to images: each patch becomes one symbol looked up in a vocabulary.

    The symbol is the patch's mean value quantised into ``vocab`` equal bins over [``low``, ``high``]
    (normalised pixel values), then embedded by the core :class:`TokenEmbedding` (scaled by √D).

    Shape: ``(B, C, H, W) -> (B, N, D)``.
    """

    zoo_part = "embedding"

    def __init__(self, patch_size: int, d_model: int, vocab: int = 256, low: float = -3.0, high: float = 3.0) -> None:
        super().__init__()
        self.patch_size, self.vocab, self.low, self.high = patch_size, vocab, low, high
        self.embed = TokenEmbedding(vocab, d_model)

    def forward(self, x: Tensor) -> Tensor:
        means = nn.functional.avg_pool2d(x.mean(dim=1, keepdim=True), self.patch_size)  # (B, 1, H/P, W/P)
        ids = ((means.flatten(1) - self.low) / (self.high - self.low) * self.vocab).long()
        return self.embed(ids.clamp(0, self.vocab - 1))  # (B, N, D)


class ClassTokenReadout(nn.Module):
    """A learned [CLS] token prepended to the sequence; its final state is the image's summary (BERT, ViT)."""

    zoo_part = "stacking"
    extra_tokens = 1

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        nn.init.normal_(self.cls_token, std=1e-6)

    def prepend(self, x: Tensor) -> Tensor:
        return torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)  # (B, 1 + N, D)

    def forward(self, x: Tensor) -> Tensor:
        return x[:, 0]  # (B, D)


class MeanReadout(nn.Module):
    """Global average pooling over the tokens (Swin, and ViT's ``global_pool='avg'``)."""

    zoo_part = "stacking"
    extra_tokens = 0

    def prepend(self, x: Tensor) -> Tensor:
        return x

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=1)  # (B, D)


class DecoderReadout(nn.Module):
    """The classic topology kept: a decoder generates the label as a one-token sequence.

    A learned BOS query runs through ``layers`` core :class:`DecoderLayer` s (self-attention over itself,
    cross-attention over the encoder output, FFN); its final state feeds the classifier.
    """

    zoo_part = "stacking"
    extra_tokens = 0

    def __init__(self, d_model: int, heads: int, d_ff: int, layers: int = 1, activation: str = "relu",
                 norm_first: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.bos = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)
        self.decoder = Decoder(
            [
                DecoderLayer(d_model, MultiHeadAttention(d_model, heads), MultiHeadAttention(d_model, heads),
                             PositionwiseFFN(d_model, d_ff, activation, dropout), dropout, norm_first)
                for _ in range(layers)
            ],
            layer_norm(d_model) if norm_first else None,
        )

    def prepend(self, x: Tensor) -> Tensor:
        return x

    def forward(self, x: Tensor) -> Tensor:
        # repeat, not expand: an expanded view of a parameter under no_grad has no grad_fn, which trips
        # torch's FlopCounterMode module tracker.
        query = self.bos.repeat(x.shape[0], 1, 1)  # (B, 1, D)
        return self.decoder(query, x, is_causal=False)[:, 0]  # (B, D)


READOUTS = ("cls", "mean", "decoder")


def build_readout(kind: str, d_model: int, heads: int, d_ff: int, **decoder: Any) -> nn.Module:
    if kind == "cls":
        return ClassTokenReadout(d_model)
    if kind == "mean":
        return MeanReadout()
    if kind == "decoder":
        return DecoderReadout(d_model, heads, d_ff, **decoder)
    raise unknown_name("readout", kind, READOUTS)


def patch_sides(value: object, name: str = "patch_size") -> tuple[int, int, int]:
    """A 3D patch ``(D, H, W)`` in voxels, as a tuple of ints, from any form a patch arrives in: the flag's text
    ``"32,64,64"`` (``--patch-size``, and the ``config.json`` of runs written before the config held a tuple), a
    JSON list ``[32, 64, 64]`` (``config.json``, ``run.json``) or a tuple.

    The one parser of a patch: the medseg config, a restored run, the patch sampler and the 3D model configs all
    call it, so that everything after it holds the same tuple and refuses a bad patch with the same message.

    Raises:
        ValueError: not three positive integers; TypeError: neither text nor a sequence. Both messages name the
            value and the form to use.
    """
    wanted = f"{name} must be three positive integers D,H,W in voxels, e.g. --patch-size 32,64,64 or (32, 64, 64)"
    if isinstance(value, str):
        parts: list[object] = [part.strip() for part in value.split(",")]
    elif isinstance(value, tuple | list):
        parts = list(value)
    else:
        raise TypeError(f"{wanted}; got {type(value).__name__} {value!r}")
    sides = []
    for part in parts:
        try:  # the text of an int, or an int (numpy's too); never a bool, a float or "1.5"
            side = int(part) if isinstance(part, str) else operator.index(part)
        except (TypeError, ValueError):
            side = 0
        if isinstance(part, bool) or side < 1:
            raise ValueError(f"{wanted}; got {value!r}")
        sides.append(side)
    if len(sides) != 3:
        raise ValueError(f"{wanted}; got {value!r} ({len(sides)} sides)")
    return sides[0], sides[1], sides[2]


def volume_patch(patch_size: Any, image_size: int | None) -> tuple[int, int, int]:
    """A 3D model's input patch ``(D, H, W)`` (read by :func:`patch_sides`), its in-plane sides replaced by
    ``image_size`` when given (the delta analysis and ``zoo check`` measure every medseg model at the task's side
    and grow it); ValueError otherwise."""
    sides = patch_sides(patch_size)
    if image_size is None:
        return sides
    check_positive("image_size", image_size)
    return sides[0], image_size, image_size


def volume_inputs(config: Any, shape: dict[str, int]) -> tuple[Tensor]:
    """Random volumes of a 3D model's patch (``config.patch_size``): ``(B, C, D, H, W)``."""
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(shape["batch"], config.in_channels, *config.patch_size, generator=gen),)


def image_inputs(config: Any, shape: dict[str, int]) -> tuple[Tensor]:
    """Random normalised images of the task's size: ``(B, C, H, W)``."""
    gen = torch.Generator().manual_seed(0)
    size = shape["image_size"]
    return (torch.randn(shape["batch"], shape["in_channels"], size, size, generator=gen),)
