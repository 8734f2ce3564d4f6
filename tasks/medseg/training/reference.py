"""Non-zoo baselines of the segmentation task, trained with the same budget as the zoo's segmenter.

MONAI's ``BasicUNet`` is the CNN U-Net every medical paper compares with; MONAI's ``SwinUNETR`` is an existing
Swin-Transformer segmenter (Hatamizadeh et al. 2022), in 2D here. Both are sized for CPU training on the embedded
phantom; they are not patches on the Transformer, so they have no delta analysis.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn


def basic_unet(in_channels: int, num_classes: int, image_size: int) -> nn.Module:
    """MONAI ``BasicUNet`` in 2D with half its default widths (16-16-32-64-128, ~0.5 M parameters).

    Shape:
        (B, in_channels, H, W) -> (B, num_classes, H, W), H and W divisible by 16.
    """
    from monai.networks.nets import BasicUNet

    if image_size % 16:
        raise ValueError(f"basicunet needs an image_size divisible by 16 (4 poolings), got {image_size}")
    return BasicUNet(spatial_dims=2, in_channels=in_channels, out_channels=num_classes,
                     features=(16, 16, 32, 64, 128, 16))


def swin_unetr(in_channels: int, num_classes: int, image_size: int) -> nn.Module:
    """MONAI ``SwinUNETR`` in 2D with feature size 12 (~1.6 M parameters; the paper's is 48).

    Shape:
        (B, in_channels, H, W) -> (B, num_classes, H, W), H and W divisible by 32 and at least 64.
    """
    from monai.networks.nets import SwinUNETR

    if image_size % 32 or image_size < 64:
        raise ValueError(f"swinunetr needs an image_size divisible by 32 and >= 64 (5 halvings, and its instance "
                         f"norms need more than one pixel at the bottom), got {image_size}")
    return SwinUNETR(in_channels=in_channels, out_channels=num_classes, spatial_dims=2, feature_size=12)


# name -> builder(in_channels, num_classes, image_size)
REFERENCE_MODELS: dict[str, Callable[[int, int, int], nn.Module]] = {
    "basicunet": basic_unet,
    "swinunetr": swin_unetr,
}
