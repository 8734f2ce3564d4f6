"""nnU-Net's rule for a 3D U-Net's geometry: kernel sizes and strides from the voxel spacing and the patch size.

nnU-Net (Isensee et al. 2021) plans its 3d_fullres network from the dataset's fingerprint, and MONAI's ``DynUNet``
takes the plan as arguments. The rule, stage by stage, from the patch at full resolution:

* an axis whose spacing is at most twice the finest current spacing is "in plane" with it: its kernel is 3; a
  coarser axis (the slices of an anisotropic CT: 3 mm against 0.8 mm) gets kernel 1, so that early layers do not
  mix voxels that lie far apart;
* the next stage halves (stride 2) every in-plane axis whose feature map stays at least ``min_size`` voxels, and
  its spacing doubles; the coarse axis joins once the others have caught up with it;
* planning stops when no axis can be halved, or at ``max_stages``; widths start at ``base`` and double per stage,
  up to ``cap`` (nnU-Net: 32 and 320; a CPU default here is 16).

The patch must divide by the strides' product along each axis; :func:`plan_dynunet` says which size would.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DynUNetPlan:
    """The arguments MONAI's ``DynUNet`` takes: one kernel and one stride per stage (the first stride is 1), the
    transposed convolutions' kernels (the strides they undo) and the widths."""

    kernel_sizes: tuple[tuple[int, int, int], ...]
    strides: tuple[tuple[int, int, int], ...]
    filters: tuple[int, ...]

    @property
    def upsample_kernel_sizes(self) -> tuple[tuple[int, int, int], ...]:
        return self.strides[1:]

    @property
    def divisor(self) -> tuple[int, int, int]:
        """What each patch side must be a multiple of: the product of that axis's strides."""
        d, h, w = (math.prod(s[axis] for s in self.strides) for axis in range(3))
        return d, h, w


def plan_dynunet(patch: Sequence[int], spacing: Sequence[float], *, min_size: int = 4, max_stages: int = 6,
                 base: int = 16, cap: int = 320) -> DynUNetPlan:
    """The nnU-Net plan of a 3D U-Net for ``patch`` (D, H, W) voxels of ``spacing`` (D, H, W) mm.

    Raises:
        ValueError: a size or spacing is not positive, or the patch does not divide by the strides.
    """
    sizes, spacings = [int(p) for p in patch], [float(s) for s in spacing]
    if len(sizes) != 3 or len(spacings) != 3 or min(sizes) < 1 or min(spacings) <= 0:
        raise ValueError(f"plan_dynunet needs a patch of three positive sizes and three positive spacings, got "
                         f"patch {tuple(patch)} and spacing {tuple(spacing)}")
    if max_stages < 2:
        raise ValueError(f"max_stages must be at least 2 (a U-Net downsamples once), got {max_stages}")
    kernels: list[tuple[int, int, int]] = []
    strides: list[tuple[int, int, int]] = [(1, 1, 1)]
    while True:
        finest = min(spacings)
        in_plane = [s <= 2 * finest for s in spacings]
        kernels.append(_triple(3 if ok else 1 for ok in in_plane))
        if len(strides) == max_stages:
            break
        halve = [ok and size // 2 >= min_size for ok, size in zip(in_plane, sizes)]
        if not any(halve):
            break
        strides.append(_triple(2 if h else 1 for h in halve))
        sizes = [size // 2 if h else size for size, h in zip(sizes, halve)]
        spacings = [s * 2 if h else s for s, h in zip(spacings, halve)]
    if len(strides) < 2:
        raise ValueError(f"patch {tuple(patch)} is too small to downsample once (each side must be at least "
                         f"{2 * min_size} voxels along an axis of the finest spacing); use a larger patch")
    plan = DynUNetPlan(tuple(kernels), tuple(strides), tuple(min(base * 2**i, cap) for i in range(len(strides))))
    bad = [axis for axis in range(3) if int(patch[axis]) % plan.divisor[axis]]
    if bad:
        fit = tuple(math.ceil(int(p) / d) * d for p, d in zip(patch, plan.divisor))
        raise ValueError(f"patch {tuple(patch)} does not divide by the plan's strides (multiples of "
                         f"{plan.divisor} along D, H, W); use {','.join(map(str, fit))}")
    return plan


def _triple(values) -> tuple[int, int, int]:
    a, b, c = values
    return a, b, c
