"""Batched per-image augmentation: random crop after zero padding, and random horizontal flip.

``torchvision.transforms.v2.RandomCrop`` applied to a batch tensor draws *one* crop for the whole batch;
the standard CIFAR recipe needs one crop and one flip per image. Here both are a single gather: each
image's row and column indices are shifted by its own offsets, and reversed where it is flipped.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def draw_crop_flip(n: int, padding: int, flip: bool = True, generator: torch.Generator | None = None,
                   device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """Random parameters for ``n`` images: crop offsets in ``[0, 2·padding]`` and flip decisions.

    ``generator=None`` uses torch's global generator.

    Shape:
        offsets (n, 2) long (top, left); flips (n,) bool.
    """
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    offsets = torch.randint(0, 2 * padding + 1, (n, 2), generator=generator)
    flips = torch.rand(n, generator=generator) < 0.5 if flip else torch.zeros(n, dtype=torch.bool)
    return offsets.to(device), flips.to(device)


def crop_flip(images: Tensor, padding: int, offsets: Tensor, flips: Tensor) -> Tensor:
    """Zero-pad every image by ``padding``, crop it back to its size at its own offset, flip where asked.

    Args:
        images: a batch of images (any dtype).
        padding: pixels of zeros added on each side before cropping.
        offsets: per image (top, left) of the crop in the padded image, each in ``[0, 2·padding]``.
        flips: per image, whether to mirror it left–right.

    Shape:
        images (B, C, H, W), offsets (B, 2), flips (B,) -> (B, C, H, W).
    """
    if images.dim() != 4:
        raise ValueError(f"images must be (B, C, H, W), got shape {tuple(images.shape)}")
    b, c, h, w = images.shape
    if offsets.shape != (b, 2) or flips.shape != (b,):
        raise ValueError(f"offsets must be ({b}, 2) and flips ({b},) for {b} images, "
                         f"got {tuple(offsets.shape)} and {tuple(flips.shape)}")
    if len(offsets) and (offsets.min() < 0 or offsets.max() > 2 * padding):
        raise ValueError(f"crop offsets must lie in [0, {2 * padding}] for padding {padding}")
    padded = F.pad(images, (padding,) * 4) if padding else images  # (B, C, H + 2p, W + 2p)
    offsets, flips = offsets.to(images.device), flips.to(images.device)
    rows = offsets[:, :1] + torch.arange(h, device=images.device)  # (B, H)
    cols = offsets[:, 1:] + torch.arange(w, device=images.device)  # (B, W)
    cols = torch.where(flips[:, None], cols.flip(-1), cols)  # a flip reads the columns right to left
    batch = torch.arange(b, device=images.device)[:, None, None, None]
    channel = torch.arange(c, device=images.device)[None, :, None, None]
    return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]  # (B, C, H, W)


def random_crop_flip(images: Tensor, padding: int, flip: bool = True,
                     generator: torch.Generator | None = None) -> Tensor:
    """:func:`crop_flip` with parameters drawn per image by :func:`draw_crop_flip`.

    Shape:
        (B, C, H, W) -> (B, C, H, W).
    """
    offsets, flips = draw_crop_flip(len(images), padding, flip, generator)
    return crop_flip(images, padding, offsets, flips)
