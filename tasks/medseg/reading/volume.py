"""The in-memory form of segmentation data every reader produces (slice files, HDF5/NPZ volumes, NIfTI
folders, the phantom): :class:`Volume`, one case, and :class:`SegData`, the splits of a dataset."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(eq=False)  # arrays have no single truth value: compare volumes by identity
class Volume:
    """One case: a 3D image (one channel, or C channels such as T1 and T2) and its label map.

    Shape:
        image: (D, H, W) or (C, D, H, W) float32; label: (D, H, W) uint8 with values in [0, num_classes).
    """

    case: str  # e.g. "case0001", "patient001_frame01"
    image: np.ndarray = field(repr=False)
    label: np.ndarray = field(repr=False)
    spacing: tuple[float, float, float] | None = None  # (z, y, x) in mm when the files say, else None

    def __post_init__(self) -> None:
        if self.image.ndim not in (3, 4) or self.image.shape[-3:] != self.label.shape or self.label.ndim != 3:
            raise ValueError(
                f"case {self.case}: image must be (D, H, W) or (C, D, H, W) and label (D, H, W) on the same grid, "
                f"got {self.image.shape} and {self.label.shape}"
            )
        if self.image.dtype != np.float32 or self.label.dtype != np.uint8:
            raise ValueError(f"case {self.case}: expected float32 image and uint8 label, got "
                             f"{self.image.dtype} and {self.label.dtype}")

    @property
    def shape(self) -> tuple[int, int, int]:
        """(D, H, W)."""
        return self.label.shape

    @property
    def channels(self) -> int:
        """C: 1 for a (D, H, W) image."""
        return 1 if self.image.ndim == 3 else self.image.shape[0]

    def first_channel(self) -> np.ndarray:
        """The (D, H, W) image of channel 0 (what overlays show)."""
        return self.image if self.image.ndim == 3 else self.image[0]


@dataclass
class SegData:
    """A segmentation dataset in memory: whole volumes per split."""

    name: str  # "phantom", "synapse", "acdc", or a NIfTI dataset's own name (dataset.json's, else the folder's)
    source: str  # the folder read
    class_names: list[str]  # index 0 is "background"
    train: list[Volume]  # training cases (2D slices of one case stacked in slice order)
    test: list[Volume]
    valid: list[Volume] = field(default_factory=list)  # a validation split given by the layout (ACDC), else []
    nifti: Any = None  # the NiftiData of a NIfTI folder (geometry, files, preprocessing, fingerprint), else None

    @property
    def num_classes(self) -> int:
        """Number of classes including the background."""
        return len(self.class_names)

    @property
    def num_channels(self) -> int:
        """Image channels C (the model's in_channels)."""
        volumes = self.train or self.test
        return volumes[0].channels if volumes else 1
