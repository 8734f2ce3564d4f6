"""Configs of the 3D segmenters taken from MONAI (``swinunetr3d``, ``unetr``, ``dynunet``) and their presets.

Every config holds the patch the network is built for (``patch_size``, D × H × W voxels), its channels and classes,
and the network's sizes; ``image_size``, when given, replaces the patch's in-plane sides (the delta analysis and
``zoo check`` measure every medseg model at the task's side and grow it). The medseg task sets ``patch_size`` from
``--patch-size`` or the data, and ``spacing`` (dynunet) from the training cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from plumbing.errors import check_int_tuple, check_positive, check_probability
from zoo.vision import volume_patch


@dataclass
class Segmenter3DConfig:
    """What every 3D segmenter's config holds; validated on construction."""

    patch_size: tuple[int, ...] = (32, 64, 64)  # (D, H, W) voxels the network is built and measured at
    image_size: int | None = None  # in-plane side when given: patch (D, image_size, image_size)
    in_channels: int = 1
    num_classes: int = 9
    dropout: float = 0.0
    multiple: ClassVar[int] = 16  # every patch side must be a multiple of this (the network's downsampling)
    min_side: ClassVar[int] = 16  # and at least this

    def __post_init__(self) -> None:
        self.patch_size = volume_patch(self.patch_size, self.image_size)
        check_positive("in_channels", self.in_channels)
        check_positive("num_classes", self.num_classes)
        check_probability("dropout", self.dropout)
        self.check_patch(self.patch_size)

    def check_patch(self, sides: tuple[int, ...]) -> None:
        """ValueError naming the nearest valid size when a side is not a multiple of :attr:`multiple`."""
        bad = [s for s in sides if s % self.multiple or s < self.min_side]
        if bad:
            fit = ",".join(str(max(self.min_side, round(s / self.multiple) * self.multiple)) for s in sides)
            raise ValueError(f"{type(self).__name__}: patch {'×'.join(map(str, sides))} is not divisible by "
                             f"{self.multiple} along every axis, or a side is below {self.min_side} (the network "
                             f"downsamples by {self.multiple}); use e.g. {fit}")


@dataclass
class SwinUNETR3DConfig(Segmenter3DConfig):
    """MONAI ``SwinUNETR`` in 3D (Hatamizadeh et al. 2022): a 3D Swin encoder, a CNN U-Net decoder."""

    feature_size: int = 12  # stage 1's width (the paper's 48); must be a multiple of 12
    depths: tuple[int, ...] = (2, 2, 2, 2)
    num_heads: tuple[int, ...] = (3, 6, 12, 24)
    window_size: int = 7
    multiple: ClassVar[int] = 32
    min_side: ClassVar[int] = 64  # five halvings leave 2 voxels a side, which its instance norms need to train

    def __post_init__(self) -> None:
        super().__post_init__()
        self.depths = check_int_tuple("depths", self.depths)
        self.num_heads = check_int_tuple("num_heads", self.num_heads)
        if len(self.depths) != 4 or len(self.num_heads) != 4:
            raise ValueError(f"SwinUNETR has four stages: depths and num_heads need four entries each, got "
                             f"{self.depths} and {self.num_heads}")
        if self.feature_size % 12:
            raise ValueError(f"feature_size must be a multiple of 12 (MONAI's SwinUNETR), got {self.feature_size}; "
                             f"try {max(12, round(self.feature_size / 12) * 12)}")
        check_positive("window_size", self.window_size)
        for i, heads in enumerate(self.num_heads):
            if (self.feature_size * 2**i) % heads:
                raise ValueError(f"stage {i + 1}'s width {self.feature_size * 2**i} is not divisible by num_heads[{i}]"
                                 f"={heads}")


@dataclass
class UNETRConfig(Segmenter3DConfig):
    """MONAI ``UNETR`` (Hatamizadeh et al. 2022): a 12-layer ViT on 16³ patches, a CNN decoder fed from its
    layers 3, 6, 9 and 12."""

    feature_size: int = 16  # the CNN decoder's width
    hidden_size: int = 192  # the ViT's width (the paper's 768)
    mlp_dim: int = 768
    num_heads: int = 4
    multiple: ClassVar[int] = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("feature_size", "hidden_size", "mlp_dim", "num_heads"):
            check_positive(name, getattr(self, name))
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}")


@dataclass
class DynUNetConfig(Segmenter3DConfig):
    """MONAI ``DynUNet`` planned by nnU-Net's rule (:mod:`zoo.monai3d.plan`) from ``spacing`` and the patch."""

    spacing: tuple[float, ...] = (1.0, 1.0, 1.0)  # (D, H, W) mm of the voxels: the plan's kernels and strides
    base_filters: int = 16  # stage 1's width (nnU-Net: 32), doubling per stage
    max_filters: int = 320
    min_size: int = 4  # the smallest feature-map side the plan halves to
    max_stages: int | None = None  # None: as many as nnU-Net's rule gives (its prostate plan has 7)
    multiple: ClassVar[int] = 1  # the plan says what the patch must divide by
    min_side: ClassVar[int] = 1

    def __post_init__(self) -> None:
        self.spacing = tuple(float(s) for s in self.spacing)
        if len(self.spacing) != 3 or min(self.spacing) <= 0:
            raise ValueError(f"spacing must be three positive sizes (D, H, W) in mm, got {self.spacing}")
        for name in ("base_filters", "max_filters", "min_size"):
            check_positive(name, getattr(self, name))
        super().__post_init__()
        plan = self.plan()
        if plan.patch != self.patch_size:
            raise ValueError(f"patch {self.patch_size} does not divide by the plan's strides (multiples of "
                             f"{plan.divisor} along D, H, W); use {','.join(map(str, plan.patch))}, the patch "
                             f"padded as nnU-Net pads it")

    def plan(self):
        from zoo.monai3d.plan import plan_dynunet

        return plan_dynunet(self.patch_size, self.spacing, min_size=self.min_size, max_stages=self.max_stages,
                            base=self.base_filters, cap=self.max_filters)


SWINUNETR_PRESETS: dict[str, dict] = {
    "tiny": dict(patch_size=(64, 64, 64), num_classes=3, depths=(1, 1, 1, 1), num_heads=(1, 2, 3, 6)),
    "cpu": dict(patch_size=(64, 64, 64)),  # feature size 12
    "paper": dict(patch_size=(96, 96, 96), num_classes=14, feature_size=48),  # MONAI's BTCV setup
}
UNETR_PRESETS: dict[str, dict] = {
    "tiny": dict(patch_size=(32, 32, 32), num_classes=3, feature_size=8, hidden_size=48, mlp_dim=96, num_heads=2),
    "cpu": dict(),  # ViT width 192, 32×64×64 patches
    "paper": dict(patch_size=(96, 96, 96), num_classes=14, hidden_size=768, mlp_dim=3072, num_heads=12),
}
DYNUNET_PRESETS: dict[str, dict] = {
    "tiny": dict(patch_size=(16, 32, 32), num_classes=3, base_filters=4, max_filters=32, max_stages=4),
    "cpu": dict(),  # 16 filters doubling to 320, 32×64×64 patches
    "paper": dict(base_filters=32, patch_size=(128, 128, 128)),  # nnU-Net's widths
}
