"""Class probabilities of a whole volume: MONAI's sliding window for 3D models, mirroring, and fold ensembles.

nnU-Net and MONAI's BTCV SwinUNETR predict a volume the same way, and so does this module:

1. **Sliding window** (:func:`window_logits`): a 3D model built for a patch sees the volume through overlapping
   windows of that patch size (MONAI's :func:`~monai.inferers.sliding_window_inference`; ``overlap`` of a window
   with the next, 0.5 in both; ``mode`` ``"gaussian"`` weights each window's voxels by a Gaussian centred on it,
   so borders count less, ``"constant"`` averages them). A volume smaller than the patch is padded and cropped
   back by MONAI.
2. **Mirroring** (:func:`mirrored_probabilities`): the softmax averaged over every combination of flips along
   ``mirror_axes`` (2^n passes, nnU-Net's test-time augmentation), each flipped back before averaging. As in
   nnU-Net, only the axes training flipped are mirrored, and those are the axes that do not swap left and right
   organs (:func:`default_mirror_axes`).
3. **Ensembles** (:func:`ensemble_probabilities`): the mean of several models' probabilities (the folds of a
   ``zoo cv`` folder), each computed as above: probabilities are averaged, never logits, as nnU-Net does.

Shape legend: ``C`` channels, ``K`` classes, ``D, H, W`` the volume's slices, rows and columns.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from plumbing.errors import check_number, check_positive, unknown_name
from zoo.vision import patch_sides

SW_MODES = ("gaussian", "constant")


def check_overlap(overlap: float) -> float:
    """``overlap`` if it is in [0, 1), else a ValueError saying why."""
    check_number("overlap", overlap, 0, 1, high_open=True,
                 hint="the share of a window that the next one covers again: 0 (tiled) up to below 1")
    return float(overlap)


def check_mode(mode: str) -> str:
    if mode not in SW_MODES:
        raise unknown_name("sliding-window weighting (--sw-mode)", mode, SW_MODES)
    return mode


@torch.no_grad()
def window_logits(model: nn.Module, image: Tensor, patch: Sequence[int], overlap: float = 0.5,
                  mode: str = "gaussian", sw_batch_size: int = 2, device: torch.device | str = "cpu") -> Tensor:
    """Logits of a whole volume from a 3D model that takes ``patch``-sized windows.

    Windows go to ``device`` ``sw_batch_size`` at a time (the memory of inference grows with it, not with the
    volume); their logits are stitched on the CPU.

    Shape:
        image (C, D, H, W) -> (K, D, H, W) float32.
    """
    from monai.inferers import sliding_window_inference

    if image.ndim != 4:
        raise ValueError(f"window_logits takes one volume (C, D, H, W), got shape {tuple(image.shape)}")
    patch = patch_sides(patch, "the window (patch)")
    check_overlap(overlap)
    check_positive("sw_batch_size", sw_batch_size)
    logits = sliding_window_inference(image[None].float(), patch, sw_batch_size, model, overlap=overlap,
                                      mode=check_mode(mode), sw_device=torch.device(device),
                                      device=torch.device("cpu"))  # (1, K, D, H, W)
    return torch.as_tensor(logits)[0].float()


def mirror_sets(axes: Sequence[int]) -> list[tuple[int, ...]]:
    """Every subset of ``axes``, the empty one first: the flips one mirrored prediction averages over."""
    axes = tuple(sorted(set(axes)))
    return [flip for n in range(len(axes) + 1) for flip in itertools.combinations(axes, n)]


def mirrored_probabilities(probabilities: Callable[[Tensor], Tensor], image: Tensor,
                           axes: Sequence[int] = ()) -> Tensor:
    """The mean over every flip along ``axes`` (spatial axes 0, 1, 2 = D, H, W) of ``probabilities`` of the flipped
    image, flipped back. ``axes`` empty: one plain pass.

    Shape:
        image (C, D, H, W); probabilities: (C, D, H, W) -> (K, D, H, W); returns (K, D, H, W).
    """
    bad = [a for a in axes if a not in (0, 1, 2)]
    if bad:
        raise ValueError(f"mirror axes are the volume's spatial axes 0 (D), 1 (H), 2 (W); got {bad}")
    total = None
    flips = mirror_sets(axes)
    for flip in flips:
        dims = [a + 1 for a in flip]  # past the channel axis
        out = probabilities(image.flip(dims) if dims else image)
        out = out.flip(dims) if dims else out
        total = out if total is None else total + out
    return total / len(flips)


def ensemble_probabilities(members: Sequence[Callable[[Tensor], Tensor]], image: Tensor) -> Tensor:
    """The mean of the members' probabilities of ``image`` (each a function image -> probabilities).

    Shape:
        image (C, D, H, W) -> (K, D, H, W).
    """
    if not members:
        raise ValueError("an ensemble needs at least one model")
    total = None
    for member in members:
        out = member(image)
        total = out if total is None else total + out
    return total / len(members)


def default_mirror_axes(spatial_dims: int, left_right_axis: int | None) -> tuple[int, ...]:
    """The axes training flips (``--flip-prob``) and so mirroring may flip: all three for a 3D model, H and W for a
    2D one (a slice model sees every slice alone, so flipping D changes nothing), without the axis that runs from
    left to right (a flip along it would turn the left kidney into a right one without changing its label)."""
    axes = (0, 1, 2) if spatial_dims == 3 else (1, 2)
    return tuple(a for a in axes if a != left_right_axis)


def parse_axes(text: str | Sequence[int] | None) -> tuple[int, ...] | None:
    """``"0,1"`` (or a sequence) as sorted spatial axes; None stays None."""
    if text is None:
        return None
    if isinstance(text, str):
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"mirror axes must be comma-separated spatial axes 0 (D), 1 (H), 2 (W), e.g. 0,1; got "
                             f"{text!r}") from None
    else:
        values = [int(v) for v in text]
    bad = [v for v in values if v not in (0, 1, 2)]
    if bad or not values:
        raise ValueError(f"mirror axes must be spatial axes 0 (D), 1 (H), 2 (W), e.g. 0,1; got {text!r}")
    return tuple(sorted(set(values)))
