"""Configs of the 3D segmenters taken from MONAI (``swinunetr3d`` and ``swinunetr-v2``, ``unetr``, ``dynunet``,
``segresnet``, ``mednext``) and from nnU-Net's network package (``resenc``), and their presets.

Every config holds the patch the network is built for (``patch_size``, D × H × W voxels), its channels and classes,
and the network's sizes; ``image_size``, when given, replaces the patch's in-plane sides (the delta analysis and
``zoo check`` measure every medseg model at the task's side and grow it). The medseg task sets ``patch_size`` from
``--patch-size`` or the data, and ``spacing`` (dynunet, resenc) from the training cases.

Deep supervision (the contract the medseg recipes read): every config has a ``deep_supervision`` field, False by
default, and a class-level ``supports_deep_supervision``. A config whose network has no deep supervision
(SwinUNETR, UNETR) refuses ``deep_supervision=True``; one whose network has it builds the network with it on,
and the network then returns, in training mode only, every head stacked as MONAI's ``DynUNet`` stacks them:
``(B, S, K, D, H, W)``, full resolution first, the coarser heads upsampled to it (nearest), so that a forward stays
tensor in, tensor out (nnU-Net scores a coarse head against targets downsampled to it instead; MONAI's DynUNet
training, like the recipes here, scores the upsampled heads at full size); in evaluation mode the full-resolution
logits ``(B, K, D, H, W)`` alone (:class:`zoo.monai3d.networks.Volumetric`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from plumbing.errors import check_bool, check_int_tuple, check_positive, check_probability, unknown_name
from zoo.vision import volume_patch

if TYPE_CHECKING:
    from zoo.monai3d.plan import DynUNetPlan


@dataclass
class Segmenter3DConfig:
    """What every 3D segmenter's config holds; validated on construction."""

    patch_size: tuple[int, ...] = (32, 64, 64)  # (D, H, W) voxels the network is built and measured at
    image_size: int | None = None  # in-plane side when given: patch (D, image_size, image_size)
    in_channels: int = 1
    num_classes: int = 9
    dropout: float = 0.0
    deep_supervision: bool = False  # training-mode heads at the coarser decoder stages too (nnU-Net's recipe)
    multiple: ClassVar[int] = 16  # every patch side must be a multiple of this (the network's downsampling)
    min_side: ClassVar[int] = 16  # and at least this
    supports_deep_supervision: ClassVar[bool] = False  # whether the network has heads at coarser stages

    def __post_init__(self) -> None:
        self.patch_size = volume_patch(self.patch_size, self.image_size)
        check_positive("in_channels", self.in_channels)
        check_positive("num_classes", self.num_classes)
        check_probability("dropout", self.dropout)
        check_bool("deep_supervision", self.deep_supervision)
        if self.deep_supervision and not self.supports_deep_supervision:
            raise ValueError(f"{type(self).__name__}: the network has no deep supervision (no heads at coarser "
                             f"stages); use deep_supervision=False, or a network that has it (dynunet, segresnet, "
                             f"mednext, resenc)")
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
    use_v2: bool = False  # SwinUNETR v2: a residual convolution block before each Swin stage (swinunetr-v2)
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
        check_bool("use_v2", self.use_v2)
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
class PlannedUNetConfig(Segmenter3DConfig):
    """A U-Net planned by nnU-Net's rule (:mod:`zoo.monai3d.plan`) from ``spacing`` and the patch: what ``dynunet``
    and ``resenc`` share (neither builds on the other, so neither config class derives from the other's)."""

    spacing: tuple[float, ...] = (1.0, 1.0, 1.0)  # (D, H, W) mm of the voxels: the plan's kernels and strides
    base_filters: int = 16  # stage 1's width (nnU-Net: 32), doubling per stage
    max_filters: int = 320
    min_size: int = 4  # the smallest feature-map side the plan halves to
    max_stages: int | None = None  # None: as many as nnU-Net's rule gives (its prostate plan has 7)
    multiple: ClassVar[int] = 1  # the plan says what the patch must divide by
    min_side: ClassVar[int] = 1
    supports_deep_supervision: ClassVar[bool] = True  # DynUNet's deep_supervision, a head per decoder stage
    recipe: ClassVar[str] = "nnunet"  # the training recipe it declares as its own (--recipe own): nnU-Net's

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
        if self.deep_supervision and len(plan.strides) < 3:
            raise ValueError(f"deep supervision needs at least 3 stages (a head below the full resolution that is "
                             f"not the bottleneck); the plan of patch {self.patch_size} has {len(plan.strides)}: use "
                             f"a larger patch, max_stages=None, or deep_supervision=False")

    def plan(self) -> DynUNetPlan:
        from zoo.monai3d.plan import plan_dynunet

        return plan_dynunet(self.patch_size, self.spacing, min_size=self.min_size, max_stages=self.max_stages,
                            base=self.base_filters, cap=self.max_filters)


@dataclass
class DynUNetConfig(PlannedUNetConfig):
    """MONAI ``DynUNet`` planned by nnU-Net's rule from ``spacing`` and the patch."""


@dataclass
class SegResNetConfig(Segmenter3DConfig):
    """MONAI ``SegResNetDS`` (Myronenko 2018, as MONAI's Auto3DSeg trains it): a residual CNN encoder, halving once
    per stage after the first, and a light decoder with a head per stage when deep supervision is on (``dsdepth``)."""

    init_filters: int = 16  # stage 1's width, doubling per stage (Auto3DSeg: 32)
    blocks_down: tuple[int, ...] = (1, 2, 2, 4)  # residual blocks per encoder stage (Auto3DSeg: 1, 2, 2, 4, 4)
    norm: str = "instance"  # Auto3DSeg's; MONAI's class defaults to batch norm, unstable at a batch of two patches
    min_side: ClassVar[int] = 16
    supports_deep_supervision: ClassVar[bool] = True  # dsdepth: a head at every decoder stage

    @property
    def multiple(self) -> int:  # type: ignore[override]
        """Every patch side must divide by this: the network halves once per stage after the first."""
        return 2 ** (len(self.blocks_down) - 1)

    def __post_init__(self) -> None:
        self.blocks_down = check_int_tuple("blocks_down", self.blocks_down)
        if len(self.blocks_down) < 2:
            raise ValueError(f"SegResNetDS needs at least 2 stages (blocks_down), got {self.blocks_down}")
        check_positive("init_filters", self.init_filters)
        if self.norm not in ("instance", "batch", "group"):
            raise unknown_name("norm of SegResNetDS", self.norm, ("instance", "batch", "group"))
        super().__post_init__()

    @property
    def dsdepth(self) -> int:
        """MONAI's ``dsdepth``: heads at every decoder stage with deep supervision, the last one's alone without."""
        return len(self.blocks_down) - 1 if self.deep_supervision else 1


# MedNeXt's sizes (Roy et al. 2023, Table 1; MONAI's ``create_mednext``): expansion ratios and blocks per stage, for
# the 4 encoder stages, the bottleneck and the 4 decoder stages. A test builds each against ``create_mednext``.
MEDNEXT_SIZES: dict[str, dict] = {
    "S": dict(encoder_expansion_ratio=2, decoder_expansion_ratio=2, bottleneck_expansion_ratio=2,
              blocks_down=(2, 2, 2, 2), blocks_bottleneck=2, blocks_up=(2, 2, 2, 2)),
    "B": dict(encoder_expansion_ratio=(2, 3, 4, 4), decoder_expansion_ratio=(4, 4, 3, 2), bottleneck_expansion_ratio=4,
              blocks_down=(2, 2, 2, 2), blocks_bottleneck=2, blocks_up=(2, 2, 2, 2)),
    "M": dict(encoder_expansion_ratio=(2, 3, 4, 4), decoder_expansion_ratio=(4, 4, 3, 2), bottleneck_expansion_ratio=4,
              blocks_down=(3, 4, 4, 4), blocks_bottleneck=4, blocks_up=(4, 4, 4, 3)),
    "L": dict(encoder_expansion_ratio=(3, 4, 8, 8), decoder_expansion_ratio=(8, 8, 4, 3), bottleneck_expansion_ratio=8,
              blocks_down=(3, 4, 8, 8), blocks_bottleneck=8, blocks_up=(8, 8, 4, 3)),
}


@dataclass
class MedNeXtConfig(Segmenter3DConfig):
    """MONAI ``MedNeXt`` (Roy et al. 2023): a U-Net of ConvNeXt blocks (depthwise k³ convolution, group norm,
    expansion, GELU, compression) with residual down- and up-sampling blocks, in the paper's sizes S, B, M, L."""

    size: str = "S"  # S, B, M or L: expansion ratios and blocks per stage (MEDNEXT_SIZES)
    init_filters: int = 32  # stage 1's width, doubling per stage (the paper's 32 in every size)
    kernel_size: int = 3  # the depthwise kernel (the paper's k3; k5 is trained from k3 by UpKern)
    supports_deep_supervision: ClassVar[bool] = True  # deep_supervision: a head per decoder stage and bottleneck

    def __post_init__(self) -> None:
        if self.size not in MEDNEXT_SIZES:
            raise unknown_name("MedNeXt size", self.size, MEDNEXT_SIZES)
        check_positive("init_filters", self.init_filters)
        check_positive("kernel_size", self.kernel_size)
        if self.kernel_size % 2 == 0:
            raise ValueError(f"MedNeXt's kernel_size must be odd (a centred depthwise kernel), got {self.kernel_size}; "
                             f"use 3 or 5")
        super().__post_init__()


@dataclass
class ResEncConfig(PlannedUNetConfig):
    """nnU-Net ResEnc's residual-encoder U-Net (Isensee et al. 2024, ``ResidualEncoderUNet`` of
    ``dynamic-network-architectures``), planned as nnU-Net plans it: the stages, kernels and strides of
    :func:`~zoo.monai3d.plan.plan_dynunet`, the widths doubling to 320, ResEnc M's residual blocks per encoder stage
    (``ENCODER_BLOCKS``) and one convolution per decoder stage."""

    ENCODER_BLOCKS: ClassVar[tuple[int, ...]] = (1, 3, 4, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6)  # nnU-Net's ResEnc planner

    def blocks_per_stage(self, stages: int) -> tuple[int, ...]:
        """ResEnc's residual blocks of each of ``stages`` encoder stages (6 past the planner's table)."""
        return tuple(self.ENCODER_BLOCKS[i] if i < len(self.ENCODER_BLOCKS) else 6 for i in range(stages))


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
RESENC_PRESETS = DYNUNET_PRESETS  # the same plans, so that the two nnU-Net networks compare at one geometry
SEGRESNET_PRESETS: dict[str, dict] = {
    "tiny": dict(patch_size=(16, 32, 32), num_classes=3, init_filters=4, blocks_down=(1, 1, 1)),
    "cpu": dict(),  # 16 filters, blocks (1, 2, 2, 4)
    "paper": dict(patch_size=(96, 96, 96), num_classes=14, init_filters=32, blocks_down=(1, 2, 2, 4, 4)),  # Auto3DSeg
}
MEDNEXT_PRESETS: dict[str, dict] = {
    "tiny": dict(patch_size=(16, 32, 32), num_classes=3, init_filters=4),
    "cpu": dict(init_filters=8),  # size S, 8 filters
    **{size: dict(size=size, patch_size=(128, 128, 128), num_classes=14) for size in MEDNEXT_SIZES},  # the paper's
}
SWINUNETR_V2_PRESETS: dict[str, dict] = {name: {**preset, "use_v2": True} for name, preset in SWINUNETR_PRESETS.items()}
