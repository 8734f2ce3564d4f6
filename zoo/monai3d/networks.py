"""The 3D segmenters, built by MONAI and tagged with the parts of the classic Transformer.

Each builder calls MONAI's own network with the config's arguments (the tests check ours against a network MONAI
builds directly, weights copied) and wraps it in :class:`Volumetric`, which checks the input's shape and tags the
network's modules with :mod:`core.parts` so that ``zoo diff``, ``zoo check`` and ``zoo list`` can count them:
patch embeddings are ``embedding``, attention blocks ``attention``, MLPs ``ffn``, the Transformer's LayerNorms
``norm``, the CNN encoder and decoder blocks and the patch merging ``stacking`` (they are the topology), the output
convolution ``head``. A position table MONAI keeps inside the patch-embedding block counts as ``embedding``.

nnU-Net ResEnc's network comes from nnU-Net's own package, ``dynamic-network-architectures`` (the ``nnunet`` extra),
built with the arguments nnU-Net's ResEnc planner writes into its plans and initialised as nnU-Net initialises it.

Three departures from building the library's class and calling it, all bookkeeping: UNETR's Transformer blocks
build a cross-attention LayerNorm their forward never calls (no cross-attention in UNETR), and ResEnc's decoder
builds a segmentation head at every stage although without deep supervision it calls the last one only; we replace
those modules by identities (their parameters would never get a gradient; nnU-Net's count of ResEnc includes the
idle heads). And SwinUNETR computes with values while it builds (``.item()``), so on the meta device (where
``zoo list`` counts parameters) it is built on the CPU and moved there.

Deep supervision: a network built with it returns a list of heads in training mode (SegResNetDS, MedNeXt, ResEnc)
or a stacked tensor (DynUNet); :class:`Volumetric` returns DynUNet's form for all of them (see
:mod:`zoo.monai3d.config`).

Shape legend: B batch, C channels, D×H×W voxels, K classes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn.functional import interpolate

from core.parts import tag
from plumbing.errors import import_extra
from zoo.monai3d.config import (
    MEDNEXT_SIZES,
    DynUNetConfig,
    MedNeXtConfig,
    ResEncConfig,
    Segmenter3DConfig,
    SegResNetConfig,
    SwinUNETR3DConfig,
    UNETRConfig,
)

# MONAI module types -> the part they are (the rest inherit their parent's tag, or are stacking)
_PARTS = {"PatchEmbed": "embedding", "PatchEmbeddingBlock": "embedding", "WindowAttention": "attention",
          "SABlock": "attention", "MLPBlock": "ffn", "LayerNorm": "norm", "PatchMerging": "stacking",
          "PatchMergingV2": "stacking", "UnetrBasicBlock": "stacking", "UnetrUpBlock": "stacking",
          "UnetrPrUpBlock": "stacking", "UnetResBlock": "stacking", "UnetBasicBlock": "stacking",
          "UnetUpBlock": "stacking", "UnetOutBlock": "head", "MedNeXtOutBlock": "head"}


class Volumetric(nn.Module):
    """A MONAI 3D segmenter with its input checked and its modules tagged with parts.

    Args:
        network: the MONAI network (kept as ``self.network``: its state dict keys are MONAI's, prefixed).
        config: the config it was built from.

    Shape:
        ``(B, C, D, H, W)`` float volumes -> ``(B, K, D, H, W)`` logits (in training with deep supervision:
        ``(B, S, K, D, H, W)``, see :func:`stacked_heads`).
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
        out = self.network(volumes)
        return stacked_heads(out, self.training) if isinstance(out, (list, tuple)) else out


def stacked_heads(heads: list[Tensor] | tuple[Tensor, ...], training: bool) -> Tensor:
    """Deep supervision's heads (full resolution first) in MONAI ``DynUNet``'s form, so that a forward stays tensor
    in, tensor out (the delta analysis, the doctor and the loss read one tensor): in training, every head upsampled
    (nearest, as DynUNet does) to the first's size and stacked; in evaluation, the first alone (ResEnc's decoder
    returns its list in both modes).

    Shape:
        S heads ``(B, K, d_i, h_i, w_i)`` -> ``(B, S, K, D, H, W)`` in training, ``(B, K, D, H, W)`` otherwise.
    """
    if not training:
        return heads[0]
    size = heads[0].shape[2:]
    return torch.stack([h if h.shape[2:] == size else interpolate(h, size) for h in heads], dim=1)  # (B, S, K, D, H, W)


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
    """MONAI ``SwinUNETR(spatial_dims=3)`` with the config's sizes (v2 with ``use_v2``)."""
    from monai.networks.nets import SwinUNETR

    c = config
    network = _anywhere(lambda: SwinUNETR(in_channels=c.in_channels, out_channels=c.num_classes, depths=c.depths,
                                          num_heads=c.num_heads, window_size=c.window_size,
                                          feature_size=c.feature_size, drop_rate=c.dropout, spatial_dims=3,
                                          use_v2=c.use_v2))
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
                      dropout=c.dropout or None, deep_supervision=c.deep_supervision,
                      deep_supr_num=len(plan.strides) - 2)  # a head at every decoder stage but the bottleneck's
    return Volumetric(network, c)


def segresnet(config: SegResNetConfig) -> Volumetric:
    """MONAI ``SegResNetDS`` with the config's widths, blocks and norm (``dsdepth`` from ``deep_supervision``)."""
    from monai.networks.nets import SegResNetDS

    c = config
    network = SegResNetDS(3, c.init_filters, c.in_channels, c.num_classes, norm=c.norm, blocks_down=c.blocks_down,
                          dsdepth=c.dsdepth)
    for level in network.up_layers:
        if "head" in level:
            tag(level["head"], "head")
    return Volumetric(network, c)


def mednext(config: MedNeXtConfig) -> Volumetric:
    """MONAI ``MedNeXt`` of the config's size (``MEDNEXT_SIZES``), with MONAI's ``create_mednext`` settings:
    residual down- and up-sampling blocks, group norm, no global response norm."""
    from monai.networks.nets import MedNeXt

    c = config
    network = MedNeXt(3, c.init_filters, c.in_channels, c.num_classes, kernel_size=c.kernel_size,
                      deep_supervision=c.deep_supervision, use_residual_connection=True, norm_type="group",
                      global_resp_norm=False, **MEDNEXT_SIZES[c.size])
    return Volumetric(network, c)


def resenc_arguments(config: ResEncConfig) -> dict:
    """The keyword arguments of ``ResidualEncoderUNet`` that nnU-Net's ResEnc planner writes into its plans
    (``arch_kwargs``), for the config's plan (:meth:`~zoo.monai3d.config.PlannedUNetConfig.plan`)."""
    c, plan = config, config.plan()
    stages = len(plan.strides)
    return dict(input_channels=c.in_channels, n_stages=stages, features_per_stage=plan.filters,
                conv_op=nn.Conv3d, kernel_sizes=plan.kernel_sizes, strides=plan.strides,
                n_blocks_per_stage=c.blocks_per_stage(stages), num_classes=c.num_classes,
                n_conv_per_stage_decoder=(1,) * (stages - 1), conv_bias=True, norm_op=nn.InstanceNorm3d,
                norm_op_kwargs={"eps": 1e-5, "affine": True}, dropout_op=nn.Dropout3d if c.dropout else None,
                dropout_op_kwargs={"p": c.dropout} if c.dropout else None,  # nnU-Net's plans: none
                nonlin=nn.LeakyReLU, nonlin_kwargs={"inplace": True}, deep_supervision=c.deep_supervision)


def resenc(config: ResEncConfig) -> Volumetric:
    """nnU-Net ResEnc's ``ResidualEncoderUNet`` (``dynamic-network-architectures``) as nnU-Net plans and
    initialises it; without deep supervision the decoder's idle heads are identities."""
    unet = import_extra("dynamic_network_architectures.architectures.unet", "--variant resenc", "nnunet",
                        "dynamic-network-architectures")
    network = unet.ResidualEncoderUNet(**resenc_arguments(config))
    network.apply(network.initialize)  # He init, each residual branch's last norm at zero (nnU-Net's)
    heads = network.decoder.seg_layers
    if not config.deep_supervision:
        for i in range(len(heads) - 1):
            heads[i] = nn.Identity()  # never called: the decoder uses seg_layers[-1] alone
    tag(heads, "head")
    return Volumetric(network, config)
