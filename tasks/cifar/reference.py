"""Non-Transformer reference models for the image task: the CNN row of a comparison.

They are not zoo variants (they are not patches on the Transformer, so they have no delta analysis);
``zoo train cifar --variant resnet18`` selects one by name.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn


def resnet18_small(in_channels: int, num_classes: int) -> nn.Module:
    """torchvision's ResNet-18 (He et al., 2016) with the small-image stem common in CIFAR work.

    The ImageNet stem (7×7 stride-2 convolution, then max-pooling) would shrink 32×32 to 8×8 before the
    first block; here it is a 3×3 stride-1 convolution and no pooling, so the four stages see 32, 16, 8, 4.

    Shape:
        (B, in_channels, H, W) float -> (B, num_classes) logits.
    """
    from torchvision.models import resnet18

    model = resnet18(weights=None, num_classes=num_classes)
    model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")  # as torchvision's
    model.maxpool = nn.Identity()
    return model


# name -> builder(in_channels, num_classes)
REFERENCE_MODELS: dict[str, Callable[[int, int], nn.Module]] = {
    "resnet18": resnet18_small,
}
