"""Non-Transformer reference models for the image task: the CNN rows of a comparison.

They are not zoo variants (they are not patches on the Transformer, so they have no delta analysis);
``zoo train cifar --variant resnet18`` selects one by name. ``resnet18-w16`` is ResNet-18 at a quarter of
its width (stages of 16, 32, 64, 128 channels): its training FLOPs per 32×32 image are within 20 % of the
ViT ``cpu`` preset's (ResNet-18 itself costs about 14× as much), so a ViT-vs-CNN comparison at the same
number of steps is also one at about the same compute. :func:`matched_width` finds such a width for any
budget with the package's FLOP counter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from plumbing.errors import check_positive

RESNET18_WIDTH = 64  # channels of the first stage; the stages have w, 2w, 4w, 8w


def resnet18_small(in_channels: int, num_classes: int, width: int = RESNET18_WIDTH) -> nn.Module:
    """torchvision's ResNet-18 (He et al., 2016) with the small-image stem common in CIFAR work.

    The ImageNet stem (7×7 stride-2 convolution, then max-pooling) would shrink 32×32 to 8×8 before the
    first block; here it is a 3×3 stride-1 convolution and no pooling, so the four stages see 32, 16, 8, 4.
    ``width`` scales every stage (w, 2w, 4w, 8w channels; ResNet-18's is 64): torchvision's blocks, rebuilt
    at that width and initialised as torchvision initialises them.

    Shape:
        (B, in_channels, H, W) float -> (B, num_classes) logits.
    """
    from torchvision.models import resnet18
    from torchvision.models.resnet import BasicBlock

    check_positive("width", width)
    model = resnet18(weights=None, num_classes=num_classes)
    if width != RESNET18_WIDTH:
        model.inplanes = width  # what torchvision's _make_layer reads as the incoming channels
        model.bn1 = nn.BatchNorm2d(width)
        for i, stride in enumerate((1, 2, 2, 2)):
            setattr(model, f"layer{i + 1}", model._make_layer(BasicBlock, width * 2**i, 2, stride=stride))
        model.fc = nn.Linear(8 * width, num_classes)
        for m in model.modules():  # torchvision's initialisation, for the rebuilt modules
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
    model.conv1 = nn.Conv2d(in_channels, width, kernel_size=3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")  # as torchvision's
    model.maxpool = nn.Identity()
    return model


def training_flops(model: nn.Module, images: torch.Tensor) -> int:
    """FLOPs of one training step's forward and backward on ``images`` (torch.utils.flop_counter, FLOPs =
    2·MACs of matmuls and convolutions, attention through the math backend, as in :mod:`zoo.analysis.delta`).

    Shape:
        images (B, C, H, W) float: the count is for the whole batch.
    """
    was_training = model.training
    model.train()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(images).float().sum().backward()
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return counter.get_total_flops()


def resnet18_flops(width: int, in_channels: int = 1, num_classes: int = 10, image_size: int = 32) -> int:
    """Training FLOPs per image of :func:`resnet18_small` at ``width``."""
    with torch.random.fork_rng():  # building draws initial weights; leave the caller's generator alone
        model = resnet18_small(in_channels, num_classes, width)
    return training_flops(model, torch.zeros(1, in_channels, image_size, image_size))


def matched_width(target_flops: float, in_channels: int = 1, num_classes: int = 10, image_size: int = 32,
                  widths: range = range(2, 65)) -> tuple[int, int]:
    """The ResNet-18 width whose training FLOPs per image are nearest ``target_flops``, and those FLOPs.

    FLOPs grow about as width², so only the widths around √(target / FLOPs at width 8) · 8 are measured.
    """
    check_positive("target_flops", target_flops)
    probe = 8
    guess = probe * (target_flops / resnet18_flops(probe, in_channels, num_classes, image_size)) ** 0.5
    near = [w for w in widths if abs(w - guess) <= max(2.0, 0.2 * guess)] or [min(widths, key=lambda w: abs(w - guess))]
    measured = {w: resnet18_flops(w, in_channels, num_classes, image_size) for w in near}
    best = min(measured, key=lambda w: abs(measured[w] - target_flops))
    return best, measured[best]


# name -> builder(in_channels, num_classes)
REFERENCE_MODELS: dict[str, Callable[[int, int], nn.Module]] = {
    "resnet18": resnet18_small,
    "resnet18-w16": functools.partial(resnet18_small, width=16),
}
