"""nnU-Net's rule for a 3D U-Net's geometry: kernel sizes, strides and the patch, from the voxel spacing.

nnU-Net (Isensee et al. 2021) plans its 3d_fullres network from the dataset's fingerprint, and MONAI's ``DynUNet``
takes the plan as arguments. :func:`plan_dynunet` makes the decisions of nnU-Net v2's ``get_pool_and_conv_props``
(``nnunetv2/experiment_planning/experiment_planners/network_topology.py``, v2.8.1, called by the default planner
with a smallest feature map of 4 and no limit on the poolings per axis); ``tests/zoo/test_dynunet_plan.py`` checks
it against that function's outputs on the geometries of real datasets. Stage by stage, from the patch at full
resolution:

* **which axes are halved**: only an axis whose feature map is still at least ``2 * min_size`` voxels may be halved;
  among those, the ones whose spacing is less than twice the finest spacing *of those axes* (a ratio of exactly 2
  is coarse: 2 mm slices against 1 mm pixels wait one stage) are halved, and their spacing doubles. An odd side
  halves upwards (9 voxels become 5), as a padded convolution of stride 2 does. When a single axis is left it is
  halved only while it has at least ``3 * min_size`` voxels (it keeps at least 1.5 × ``min_size`` after);
  planning stops when nothing is halved, or at ``max_stages`` when one is given (nnU-Net sets no such limit);
* **the kernels**: a stage's kernel is 3 along every axis whose spacing is less than twice the finest spacing of all
  axes at that stage, and 1 along a coarser one (the slices of an anisotropic MRI: 3.6 mm against 0.62 mm), so that
  early layers do not mix voxels that lie far apart; once 3, an axis's kernel stays 3. The bottleneck, the stage
  after the last halving, always has kernels 3 × 3 × 3;
* **the patch**: each side is rounded up to a multiple of the product of its axis's strides (nnU-Net pads its patch
  the same way); the plan reports the padded patch, and the network accepts only patches that are already padded;
* **the widths** start at ``base`` and double per stage, up to ``cap`` (nnU-Net: 32 and 320; a CPU default here is
  16).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DynUNetPlan:
    """The arguments MONAI's ``DynUNet`` takes: one kernel and one stride per stage (the first stride is 1), the
    transposed convolutions' kernels (the strides they undo) and the widths; and the patch the strides divide (the
    requested one, padded)."""

    kernel_sizes: tuple[tuple[int, int, int], ...]
    strides: tuple[tuple[int, int, int], ...]
    filters: tuple[int, ...]
    patch: tuple[int, int, int]

    @property
    def upsample_kernel_sizes(self) -> tuple[tuple[int, int, int], ...]:
        return self.strides[1:]

    @property
    def divisor(self) -> tuple[int, int, int]:
        """What each patch side must be a multiple of: the product of that axis's strides."""
        return _divisor(self.strides)


def plan_dynunet(patch: Sequence[int], spacing: Sequence[float], *, min_size: int = 4, max_stages: int | None = None,
                 base: int = 16, cap: int = 320) -> DynUNetPlan:
    """nnU-Net v2's plan of a 3D U-Net for ``patch`` (D, H, W) voxels of ``spacing`` (D, H, W) mm (the rule is in
    this module's docstring). ``plan.patch`` is ``patch`` padded to what the strides divide.

    Raises:
        ValueError: a size or spacing is not positive, or the patch is too small to be halved once.
    """
    sizes, spacings = [int(p) for p in patch], [float(s) for s in spacing]
    if len(sizes) != 3 or len(spacings) != 3 or min(sizes) < 1 or min(spacings) <= 0:
        raise ValueError(f"plan_dynunet needs a patch of three positive sizes and three positive spacings, got "
                         f"patch {tuple(patch)} and spacing {tuple(spacing)}")
    if max_stages is not None and max_stages < 2:
        raise ValueError(f"max_stages must be at least 2 (a U-Net downsamples once) or None (no limit, as nnU-Net), "
                         f"got {max_stages}")
    kernel = [1, 1, 1]
    kernels: list[tuple[int, int, int]] = []
    strides: list[tuple[int, int, int]] = [(1, 1, 1)]
    while max_stages is None or len(strides) < max_stages:
        halve = _axes_to_halve(sizes, spacings, min_size)
        if not halve:
            break
        finest = min(spacings)
        kernel = [3 if k == 3 or s / finest < 2 else 1 for k, s in zip(kernel, spacings)]
        kernels.append(_triple(kernel))
        strides.append(_triple(2 if axis in halve else 1 for axis in range(3)))
        for axis in halve:
            sizes[axis], spacings[axis] = math.ceil(sizes[axis] / 2), spacings[axis] * 2
    if len(strides) < 2:
        raise ValueError(f"patch {tuple(patch)} is too small to downsample once (halving needs {2 * min_size} voxels "
                         f"along two axes of similar spacing, or {3 * min_size} along one); use a larger patch")
    kernels.append((3, 3, 3))  # the bottleneck's
    padded = _triple(math.ceil(int(p) / d) * d for p, d in zip(patch, _divisor(strides)))
    return DynUNetPlan(tuple(kernels), tuple(strides), tuple(min(base * 2**i, cap) for i in range(len(strides))),
                       padded)


def _axes_to_halve(sizes: Sequence[int], spacings: Sequence[float], min_size: int) -> list[int]:
    """The axes the next stage halves: those with room for it whose spacing is within twice the finest spacing among
    them; a single such axis only while it keeps room for one more stage (nnU-Net's rule)."""
    room = [axis for axis in range(3) if sizes[axis] >= 2 * min_size]
    if not room:
        return []
    finest = min(spacings[axis] for axis in room)  # an axis that can no longer be halved does not hold the others
    halve = [axis for axis in room if spacings[axis] / finest < 2]
    if len(halve) == 1 and sizes[halve[0]] < 3 * min_size:
        return []
    return halve


def _divisor(strides: Sequence[tuple[int, int, int]]) -> tuple[int, int, int]:
    return _triple(math.prod(s[axis] for s in strides) for axis in range(3))


def _triple(values: Iterable[int]) -> tuple[int, int, int]:
    a, b, c = values
    return a, b, c
