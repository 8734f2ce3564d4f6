"""3D training patches, as nnU-Net and MONAI's BTCV SwinUNETR sample them: random crops of ``patch`` voxels, a share
``foreground`` of them centred on a labelled (non-background) voxel, the rest anywhere, then 3D augmentation.

A case smaller than the patch along an axis is padded with zeros (label: background) to the patch size first, as
nnU-Net does. The foreground and background voxel indices of each case are computed once (MONAI's
``FgBgToIndicesd``), so that drawing a patch costs a crop and not a scan of the volume. Patch ``i`` of epoch ``e`` is a
function of (seed, e, i) alone (:meth:`PatchSampler.sample`), so that a resumed run draws the patches an
uninterrupted one would.

Augmentation (MONAI dictionary transforms, geometry on image and label alike, the label by nearest neighbour):
rotation about the D axis (in the H × W plane, as the 2D slices are rotated), zoom, intensity shift and scale, and
flips along ``flip_axes`` only when asked for (``--flip-prob``, off by default; the axes: every one but the left-right
one, :func:`~tasks.medseg.training.examples.trained_flip_axes`, which ``--tta mirror`` flips
too).

Shape legend: ``C`` channels, ``D, H, W`` a case's slices, rows and columns; ``P = (pd, ph, pw)`` the patch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from zoo.vision import patch_sides


@dataclass(frozen=True)
class Augmentation:
    """What :class:`PatchSampler` does to a patch after cropping (0 disables a step)."""

    rotate_degrees: float = 15.0  # about the D axis, ± degrees, probability 0.5
    zoom: float = 0.1  # in [1 − zoom, 1 + zoom], probability 0.5
    intensity: float = 0.1  # shift and scale by ± intensity, probability 0.5 each
    flip_prob: float = 0.0  # probability of a flip along each of flip_axes, drawn per axis (nnU-Net: 0.5)
    # axes of the (D, H, W) grid flipped; a 2D slice has only H and W. Mirroring at test time flips the same ones.
    flip_axes: tuple[int, ...] = ()


class PatchSampler:
    """Random ``patch``-sized crops of a set of cases, a share ``foreground`` centred on a labelled voxel.

    Args:
        images: one ``(C, D, H, W)`` float array per case.
        labels: one ``(D, H, W)`` integer array per case, of the same shape.
        patch: the patch size ``(pd, ph, pw)``.
        foreground: the probability that a patch is centred on a foreground voxel (nnU-Net: 0.33). A case
            without foreground gets centres anywhere.
        augmentation: the transforms after the crop (``None``: none).
    """

    def __init__(self, images: Sequence[np.ndarray], labels: Sequence[np.ndarray], patch: Sequence[int],
                 foreground: float = 0.33, augmentation: Augmentation | None = None) -> None:
        import monai.transforms as T

        self.patch = patch_sides(patch, "patch")
        if not 0 <= foreground <= 1:
            raise ValueError(f"foreground must be a share in [0, 1], got {foreground}")
        if len(images) != len(labels) or not images:
            raise ValueError(f"PatchSampler needs one label per image and at least one case, got {len(images)} "
                             f"images and {len(labels)} labels")
        pad = T.SpatialPadd(("image", "label"), spatial_size=self.patch)
        indices = T.FgBgToIndicesd("label", output_shape=None)
        self.cases = []
        for image, label in zip(images, labels):
            if image.ndim != 4 or label.shape != image.shape[1:]:
                raise ValueError(f"a case must be an image (C, D, H, W) and a label (D, H, W) of its shape, got "
                                 f"{image.shape} and {label.shape}")
            case = pad({"image": torch.as_tensor(image, dtype=torch.float32),
                        "label": torch.as_tensor(label[None], dtype=torch.float32)})
            self.cases.append(indices(case))
        self.foreground = float(foreground)
        # RandCropByPosNegLabeld draws a foreground centre with probability pos / (pos + neg)
        self.crop = T.RandCropByPosNegLabeld(("image", "label"), "label", self.patch, pos=self.foreground,
                                             neg=1.0 - self.foreground, num_samples=1,
                                             fg_indices_key="label_fg_indices", bg_indices_key="label_bg_indices",
                                             allow_smaller=False)
        self.augment = augmentation_transform(augmentation, dims=3) if augmentation is not None else None

    def __len__(self) -> int:
        return len(self.cases)

    def sample(self, case: int, seed: int) -> tuple[Tensor, Tensor]:
        """One patch of case ``case``, drawn and augmented from ``seed`` alone.

        Shape:
            -> image (C, pd, ph, pw) float32, label (1, pd, ph, pw) int64.
        """
        self.crop.set_random_state(seed=seed % 2**32)
        patch = self.crop(self.cases[case])[0]
        patch = {"image": patch["image"], "label": patch["label"]}
        if self.augment is not None:
            self.augment.set_random_state(seed=(seed * 7 + 1) % 2**32)
            patch = self.augment(patch)
        return _plain(patch["image"]).float(), _plain(patch["label"]).round().long()


def _plain(x) -> Tensor:
    """A MONAI ``MetaTensor`` (or array) as a plain tensor: its metadata would follow it into the batch."""
    return x.as_tensor() if hasattr(x, "as_tensor") else torch.as_tensor(x)


def augmentation_transform(a: Augmentation, dims: int):
    """MONAI's dictionary transforms for ``a`` on a 2D slice or a 3D patch (``dims``): geometry on image and label
    alike, the label by nearest neighbour; rotation about the first axis (in the H × W plane), a flip along each of
    ``a.flip_axes`` (of the (D, H, W) grid: a slice's H and W are its axes 0 and 1) drawn on its own."""
    import monai.transforms as T

    keys, steps = ("image", "label"), []
    if a.rotate_degrees:
        steps.append(T.RandRotated(keys, range_x=np.deg2rad(a.rotate_degrees), prob=0.5, keep_size=True,
                                   mode=("bilinear", "nearest"), padding_mode="zeros"))
    if a.zoom:
        steps.append(T.RandZoomd(keys, prob=0.5, min_zoom=1 - a.zoom, max_zoom=1 + a.zoom, keep_size=True,
                                 mode=("trilinear" if dims == 3 else "bilinear", "nearest"), padding_mode="constant"))
    bad = [axis for axis in a.flip_axes if axis not in (0, 1, 2) or (dims == 2 and axis == 0)]
    if bad:
        raise ValueError(f"flip axes are axes of the (D, H, W) grid, and a 2D slice has only H (1) and W (2); got "
                         f"{bad} for {dims}D")
    if a.flip_prob:
        steps += [T.RandFlipd(keys, prob=a.flip_prob, spatial_axis=axis - (3 - dims)) for axis in a.flip_axes]
    if a.intensity:
        steps.append(T.RandShiftIntensityd("image", offsets=a.intensity, prob=0.5))
        steps.append(T.RandScaleIntensityd("image", factors=a.intensity, prob=0.5))
    return T.Compose(steps)


def default_patch(shapes: Sequence[Sequence[int]], cap: Sequence[int] = (32, 64, 64), multiple: int = 16,
                  min_side: int = 16) -> tuple[int, int, int]:
    """A CPU-sized patch for cases of ``shapes``: per axis the median size, rounded up to ``multiple`` (what the
    networks' downsampling needs), at most ``cap``, at least ``min_side`` (what the network needs)."""
    median = np.median(np.asarray([tuple(s)[-3:] for s in shapes]), axis=0)
    sizes = [max(min_side, min(int(c), max(multiple, int(np.ceil(m / multiple)) * multiple)))
             for m, c in zip(median, cap)]
    return sizes[0], sizes[1], sizes[2]


def check_patch(patch: Sequence[int], shapes: Sequence[Sequence[int]], multiple: int = 16) -> None:
    """Refuse a patch larger, along an axis, than every case padded to the next multiple of ``multiple`` (the
    padding a network that divides by it needs): no case would fill any patch."""
    largest = np.max(np.asarray([tuple(s)[-3:] for s in shapes]), axis=0)
    for axis, (p, big) in enumerate(zip(patch, largest)):
        padded = int(np.ceil(big / multiple)) * multiple
        if p > padded:
            fitting = tuple(min(int(q), int(np.ceil(b / multiple)) * multiple) for q, b in zip(patch, largest))
            raise ValueError(f"--patch-size {','.join(map(str, patch))} is larger than every training case along "
                             f"axis {axis} ({'DHW'[axis]}: largest {int(big)} voxels after resampling, {padded} "
                             f"padded to a multiple of {multiple}), so every patch would be mostly padding: use at "
                             f"most {','.join(map(str, fitting))}")
