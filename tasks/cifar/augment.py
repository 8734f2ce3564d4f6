"""Batched per-image augmentation: random crop after zero padding, random horizontal flip, and DeiT's recipe.

``torchvision.transforms.v2.RandomCrop`` applied to a batch tensor draws *one* crop for the whole batch;
the standard CIFAR recipe needs one crop and one flip per image. Here both are a single gather: each
image's row and column indices are shifted by its own offsets, and reversed where it is flipped.

DeiT's recipe (Touvron et al. 2021) adds a per-image policy (torchvision's RandAugment or TrivialAugmentWide,
one call per image under that image's own seed) and MixUp / CutMix. torchvision's ``v2.MixUp`` / ``v2.CutMix``
draw one λ per batch and pair each image with its neighbour in the batch, so what an image becomes would depend
on how a batch is cut across ranks; here each image draws its own partner (any training image) and λ from its
seed, :func:`augment_seed` of (seed, epoch, image): resumed and distributed runs stay exact.
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


# --- DeiT's recipe: a per-image policy, MixUp / CutMix, each image's randomness from (seed, epoch, image) -------
POLICIES = ("none", "randaugment", "trivialaugment")
_MASK = 2**63 - 1


def augment_seed(seed: int, epoch: int, index: int, repeat: int = 0, stream: int = 0) -> int:
    """The seed of image ``index``'s randomness in ``epoch`` (its ``repeat``-th copy, one ``stream`` per kind of
    augmentation): a function of these numbers alone, so a resumed or distributed run augments every image as an
    uninterrupted single-process run does, whatever batch or rank the image lands in."""
    key = seed
    for part in (epoch, index, repeat, stream):  # an LCG step per component (Knuth's MMIX constants)
        key = (key * 6364136223846793005 + 1442695040888963407 + part) & _MASK
    return key


def policy_transform(policy: str, ops: int = 2, magnitude: int = 9):
    """torchvision's RandAugment (Cubuk et al. 2020; ``ops`` operations of strength ``magnitude`` of 30) or
    TrivialAugmentWide (Müller & Hutter 2021; one operation of random strength) for uint8 images; ``None`` for
    ``"none"``."""
    from torchvision.transforms import v2

    if policy not in POLICIES:
        from plumbing.errors import unknown_name

        raise unknown_name("augmentation policy", policy, POLICIES)
    if policy == "randaugment":
        return v2.RandAugment(num_ops=ops, magnitude=magnitude)
    return v2.TrivialAugmentWide() if policy == "trivialaugment" else None


def apply_policy(images: Tensor, seeds: list[int], transform) -> Tensor:
    """``transform`` applied to each image alone, torch's generator seeded with that image's seed (then restored).

    torchvision's policies draw their operations from torch's global generator and apply one draw to a whole
    batch; one call per image gives every image its own operations, reproducibly.

    Shape:
        (B, C, H, W) uint8, ``len(seeds) == B`` -> (B, C, H, W) uint8, on the CPU.
    """
    if len(seeds) != len(images):
        raise ValueError(f"apply_policy needs one seed per image, got {len(seeds)} for {len(images)}")
    images = images.cpu()
    out = torch.empty_like(images)
    with torch.random.fork_rng(devices=[]):
        for j, seed in enumerate(seeds):
            torch.manual_seed(seed)
            out[j] = transform(images[j])  # (C, H, W)
    return out


def draw_mix(seeds: list[int], n: int, mixup: float, cutmix: float, size: int) -> dict[str, Tensor]:
    """Per image: a partner among ``n`` training images, a mixing weight λ ~ Beta(α, α), and whether CutMix
    (α = ``cutmix``) or MixUp (α = ``mixup``) mixes them (each half of the time when both are on; an α of 0 turns
    one off). For CutMix, the pasted box (top, left, height, width) of a ``size``×``size`` image, and λ is then
    the share of the image the box leaves (Yun et al. 2019).

    Shape:
        ``partner`` (B,) long, ``lam`` (B,) float, ``cut`` (B,) bool, ``box`` (B, 4) long.
    """
    import numpy as np

    if mixup < 0 or cutmix < 0 or not (mixup or cutmix):
        raise ValueError(f"draw_mix needs mixup >= 0 and cutmix >= 0, one of them > 0; got {mixup}, {cutmix}")
    partner, lam, cut, box = [], [], [], []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        use_cut = bool(cutmix) and (not mixup or rng.random() < 0.5)
        weight = float(rng.beta(cutmix, cutmix) if use_cut else rng.beta(mixup, mixup))
        partner.append(int(rng.integers(n)))
        top = left = h = w = 0
        if use_cut:  # a box of area (1 − λ), centred uniformly, clipped at the borders
            side = size * (1.0 - weight) ** 0.5
            cy, cx = rng.integers(size, size=2)
            top, bottom = int(np.clip(cy - side / 2, 0, size)), int(np.clip(cy + side / 2, 0, size))
            left, right = int(np.clip(cx - side / 2, 0, size)), int(np.clip(cx + side / 2, 0, size))
            h, w = bottom - top, right - left
            weight = 1.0 - h * w / size**2
        lam.append(weight)
        cut.append(use_cut)
        box.append((top, left, h, w))
    return {"partner": torch.tensor(partner, dtype=torch.long), "lam": torch.tensor(lam),
            "cut": torch.tensor(cut, dtype=torch.bool), "box": torch.tensor(box, dtype=torch.long).reshape(-1, 4)}


def mix_images(images: Tensor, partners: Tensor, mix: dict[str, Tensor]) -> Tensor:
    """MixUp (λ·x + (1 − λ)·x') or CutMix (x' pasted into x's box) of each image with its partner, as drawn by
    :func:`draw_mix`.

    Shape:
        images and partners (B, C, H, W) float -> (B, C, H, W).
    """
    lam = mix["lam"].to(images.device, images.dtype)[:, None, None, None]  # (B, 1, 1, 1)
    out = torch.where(mix["cut"].to(images.device)[:, None, None, None], images, lam * images + (1 - lam) * partners)
    for j in torch.nonzero(mix["cut"]).flatten().tolist():
        top, left, h, w = mix["box"][j].tolist()
        out[j, :, top : top + h, left : left + w] = partners[j, :, top : top + h, left : left + w]
    return out


def mix_targets(labels: Tensor, partner_labels: Tensor, lam: Tensor, num_classes: int) -> Tensor:
    """The mixed images' soft targets: λ·onehot(y) + (1 − λ)·onehot(y').

    Shape:
        labels, partner_labels (B,) long, lam (B,) -> (B, K) float.
    """
    lam = lam.to(labels.device)[:, None]  # (B, 1)
    return lam * F.one_hot(labels, num_classes) + (1 - lam) * F.one_hot(partner_labels, num_classes)
