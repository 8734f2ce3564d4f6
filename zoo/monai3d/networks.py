"""The 3D segmenters, built by MONAI and tagged with the parts of the classic Transformer.

Each builder calls MONAI's own network with the config's arguments (the tests check ours against a network MONAI
builds directly, weights copied) and wraps it in :class:`Volumetric`, which checks the input's shape and tags the
network's modules with :mod:`core.parts` so that ``zoo diff``, ``zoo check`` and ``zoo list`` can count them:
patch embeddings are ``embedding``, attention blocks ``attention``, MLPs ``ffn``, the Transformer's LayerNorms
``norm``, the CNN encoder and decoder blocks and the patch merging ``stacking`` (they are the topology), the output
convolution ``head``. A position table MONAI keeps inside the patch-embedding block counts as ``embedding``.

Two departures from building MONAI's class and calling it, both bookkeeping: UNETR's Transformer blocks build a
cross-attention LayerNorm their forward never calls (no cross-attention in UNETR), which we replace by an identity
(its parameters would never get a gradient); and SwinUNETR computes with values while it builds (``.item()``), so
on the meta device (where ``zoo list`` counts parameters) it is built on the CPU and moved there.

Shape legend: B batch, C channels, D×H×W voxels, K classes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from core.parts import tag
from zoo.monai3d.config import DynUNetConfig, Segmenter3DConfig, SwinUNETR3DConfig, UNETRConfig

# MONAI module types -> the part they are (the rest inherit their parent's tag, or are stacking)
_PARTS = {"PatchEmbed": "embedding", "PatchEmbeddingBlock": "embedding", "WindowAttention": "attention",
          "SABlock": "attention", "MLPBlock": "ffn", "LayerNorm": "norm", "PatchMerging": "stacking",
          "PatchMergingV2": "stacking", "UnetrBasicBlock": "stacking", "UnetrUpBlock": "stacking",
          "UnetrPrUpBlock": "stacking", "UnetResBlock": "stacking", "UnetBasicBlock": "stacking",
          "UnetUpBlock": "stacking", "UnetOutBlock": "head"}


class Volumetric(nn.Module):
    """A MONAI 3D segmenter with its input checked and its modules tagged with parts.

    Args:
        network: the MONAI network (kept as ``self.network``: its state dict keys are MONAI's, prefixed).
        config: the config it was built from.

    Shape:
        ``(B, C, D, H, W)`` float volumes -> ``(B, K, D, H, W)`` logits.
    """

    def __init__(self, network: nn.Module, config: Segmenter3DConfig) -> None:
        super().__init__()
        self.config, self.network = config, network
        for module in network.modules():
            part = _PARTS.get(type(module).__name__)
            if part is not None:
                tag(module, part)

    def forward(self, volumes: Tensor) -> Tensor:
        c = self.config
        if volumes.dim() != 5:
            raise ValueError(f"{type(self.network).__name__} takes volumes (B, {c.in_channels}, D, H, W), got shape "
                             f"{tuple(volumes.shape)}; a 2D slice model takes (B, C, H, W)")
        if volumes.shape[1] != c.in_channels:
            raise ValueError(f"volumes have {volumes.shape[1]} channels but the model was built for in_channels="
                             f"{c.in_channels}; build it with in_channels={volumes.shape[1]}")
        c.check_patch(tuple(volumes.shape[2:]))
        return self.network(volumes)


def monai_state_to_ours(state: dict[str, Tensor], ours: nn.Module) -> dict[str, Tensor]:
    """A MONAI network's state dict under our names (the 3D variants' ``import_weights``): ``network.`` before
    each name; for SwinUNETR's self-supervised encoder weights (names from ``patch_embed.``, ``layers1.``...),
    ``network.swinViT.``. A name with no place keeps its own (the transfer reports it unused: the pretraining's
    rotation and contrastive heads)."""
    own = ours.state_dict()
    mapped = {}
    for name, tensor in state.items():
        target = next((p + name for p in ("network.", "network.swinViT.") if p + name in own), name)
        mapped[target] = tensor
    return mapped


def swin_unetr_3d(config: SwinUNETR3DConfig) -> Volumetric:
    """MONAI ``SwinUNETR(spatial_dims=3)`` with the config's sizes."""
    from monai.networks.nets import SwinUNETR

    c = config
    network = _anywhere(lambda: SwinUNETR(in_channels=c.in_channels, out_channels=c.num_classes, depths=c.depths,
                                          num_heads=c.num_heads, window_size=c.window_size,
                                          feature_size=c.feature_size, drop_rate=c.dropout, spatial_dims=3))
    return Volumetric(network, c)


def _anywhere(factory: Callable[[], nn.Module]) -> nn.Module:
    """``factory()``, or on the meta device, where it needs real values to build, built on the CPU and moved there."""
    if torch.empty(0).device.type != "meta":
        return factory()
    with torch.device("cpu"):
        return factory().to("meta")


def unetr(config: UNETRConfig) -> Volumetric:
    """MONAI ``UNETR`` with the config's sizes, for volumes of ``patch_size`` (its position table is that size)."""
    from monai.networks.nets import UNETR

    c = config
    network = UNETR(in_channels=c.in_channels, out_channels=c.num_classes, img_size=c.patch_size,
                    feature_size=c.feature_size, hidden_size=c.hidden_size, mlp_dim=c.mlp_dim, num_heads=c.num_heads,
                    dropout_rate=c.dropout, spatial_dims=3)
    for block in network.vit.blocks:
        if not block.with_cross_attention:
            block.norm_cross_attn = nn.Identity()  # built by MONAI, never called without cross-attention
    return Volumetric(network, c)


def dyn_unet(config: DynUNetConfig) -> Volumetric:
    """MONAI ``DynUNet`` with nnU-Net's plan for the config's patch and spacing (:meth:`DynUNetConfig.plan`)."""
    from monai.networks.nets import DynUNet

    c, plan = config, config.plan()
    network = DynUNet(3, c.in_channels, c.num_classes, kernel_size=plan.kernel_sizes, strides=plan.strides,
                      upsample_kernel_size=plan.upsample_kernel_sizes, filters=plan.filters,
                      dropout=c.dropout or None)
    return Volumetric(network, c)
