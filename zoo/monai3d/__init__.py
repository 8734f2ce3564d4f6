"""3D segmenters from MONAI, registered for the medseg task beside the 2D models: ``swinunetr3d`` and
``swinunetr-v2``, ``unetr``, and the CNN baselines "nnU-Net Revisited" (Isensee et al. 2024) holds up as the ones a
Transformer must beat: ``dynunet`` (nnU-Net's U-Net, planned by nnU-Net's rule), ``resenc`` (nnU-Net ResEnc's
residual-encoder U-Net, from nnU-Net's own network package, planned the same way), ``segresnet`` (MONAI's
SegResNetDS, as Auto3DSeg trains it) and ``mednext`` (MedNeXt, sizes S, B, M, L).

They are not patches on the classic Transformer: MONAI builds each whole, so most of what they change from it has no
switch to turn back. Each declares every change all the same — the story ``zoo diff`` tells — and marks it with
``no_revert`` (no ablation row, no attribution step; ``zoo check`` marks its revert row not applicable); SwinUNETR
v2's stage-wise convolutions do have a switch (``use_v2``), so ``swinunetr-v2`` builds on ``swinunetr3d`` and
``zoo ablate`` reverts them. The closest thing to a switch, a SwinUNETR window covering each stage's whole map
(global attention), is out of reach: MONAI's relative position index for such a window has N² entries (43 GB for a
64×96×96 patch).

All are registered with ``spatial_dims=3``: the medseg task trains them on 3D patches and predicts whole cases
through a sliding window. One idea per file: :mod:`~zoo.monai3d.config` (configs, presets),
:mod:`~zoo.monai3d.plan` (nnU-Net's rule), :mod:`~zoo.monai3d.networks` (the libraries' networks, tagged).
Which networks have deep supervision, and what they return with it, is said in :mod:`~zoo.monai3d.config`.
"""

import dataclasses

from zoo.monai3d.config import (
    DYNUNET_PRESETS,
    MEDNEXT_PRESETS,
    RESENC_PRESETS,
    SEGRESNET_PRESETS,
    SWINUNETR_PRESETS,
    SWINUNETR_V2_PRESETS,
    UNETR_PRESETS,
    DynUNetConfig,
    MedNeXtConfig,
    ResEncConfig,
    SegResNetConfig,
    SwinUNETR3DConfig,
    UNETRConfig,
)
from zoo.monai3d.networks import (
    Volumetric,
    dyn_unet,
    mednext,
    monai_state_to_ours,
    resenc,
    segresnet,
    swin_unetr_3d,
    unetr,
)
from zoo.monai3d.plan import DynUNetPlan, plan_dynunet
from zoo.registry import Change, Paper, Variant, register
from zoo.vision import volume_inputs

MONAI = "MONAI's network has no switch for it"
NNUNET = "nnU-Net's network (dynamic-network-architectures) has no switch for it"


def register_3d(**fields) -> Variant:
    """Register one of the 3D segmenters: what they share (medseg, 3D patches, the ``cpu`` preset by
    default, MONAI's checkpoint names) filled in, the rest given."""
    return register(Variant(tasks=("medseg",), default_preset="cpu", example_input=volume_inputs, spatial_dims=3,
                            import_weights=monai_state_to_ours, **fields))


CNN_DECODER = Change(
    "stacking",
    "an isotropic stack of layers at one resolution, no decoder",
    "an encoder of several resolutions and a CNN U-Net decoder with skips from each of them to per-voxel logits",
    "dense prediction needs fine detail and coarse context together",
    scope="task-specific", no_revert=MONAI,
)

SWIN_ATTENTION = Change(
    "attention", "global softmax attention over every token, O(N²)",
    "shifted-window attention: 7×7×7-voxel windows, shifted by half a window every other block, with a learned "
    "relative position bias per window offset",
    "global attention over a volume's tokens costs O(N²): 32×32×32 = 32,768 tokens at stage 1 of a 64³ patch",
    no_revert="a window covering each stage's map would be global attention, but MONAI builds an N²-entry relative "
    "position index for it (43 GB at 64×96×96)")
SWIN_EMBEDDING = Change("embedding", "each token a symbol looked up in a vocabulary",
                        "2×2×2-voxel patches projected by a strided 3D convolution", "volumes are not made of symbols",
                        scope="task-specific", no_revert=MONAI)

SWINUNETR = register_3d(
    name="swinunetr3d",
    paper=Paper("Swin UNETR: Swin Transformers for Semantic Segmentation of Brain Tumors in MRI Images", 2022,
                "https://arxiv.org/abs/2201.01266"),
    config_class=SwinUNETR3DConfig,
    presets=SWINUNETR_PRESETS,
    build=swin_unetr_3d,
    changes=(
        SWIN_ATTENTION, SWIN_EMBEDDING, CNN_DECODER,
    ),
    summary="MONAI's 3D SwinUNETR (feature size 12 on a CPU, 48 in the paper): four Swin stages with patch merging on "
            "3D patches, a residual CNN decoder to per-voxel logits.",
)

UNETR = register_3d(
    name="unetr",
    paper=Paper("UNETR: Transformers for 3D Medical Image Segmentation", 2022, "https://arxiv.org/abs/2103.10504"),
    config_class=UNETRConfig,
    presets=UNETR_PRESETS,
    build=unetr,
    changes=(
        Change("embedding", "each token a symbol looked up in a vocabulary",
               "16×16×16-voxel patches projected by a strided 3D convolution, plus a learned position table",
               "volumes are not made of symbols", scope="task-specific", no_revert=MONAI),
        Change("position", "fixed sinusoids added to the embeddings",
               "a learned table of one vector per patch position (held by MONAI's patch-embedding block, so counted "
               "under embedding)", "a table fitted to the data may learn the anatomy's layout",
               no_revert="MONAI's UNETR builds its ViT with learned positions only"),
        Change("norm", "Post-LN: x = LN(x + Sublayer(x))", "Pre-LN: x = x + Sublayer(LN(x)), a LayerNorm at the end",
               "Post-LN gradients near the output are large at initialisation", no_revert=MONAI),
        Change("stacking", "an isotropic stack of layers at one resolution, no decoder",
               "the isotropic 12-layer ViT kept, and a CNN decoder fed from its layers 3, 6, 9 and 12 upsampled to "
               "1/8, 1/4 and 1/2 of the volume", "a ViT alone sees 16-voxel patches: too coarse for dense labels",
               scope="task-specific", no_revert=MONAI),
    ),
    summary="MONAI's UNETR: a 12-layer ViT on 16³-voxel patches (width 192 on a CPU, 768 in the paper) whose "
            "layers 3, 6, 9 and 12 feed a CNN decoder.",
)

CONVOLUTIONS = Change(
    "attention", "softmax attention between tokens", "none: 3D convolutions, each voxel sees its neighbours",
    "the 3D CNN baseline: what a Transformer segmenter must beat", scope="task-specific", no_revert=MONAI)

DYNUNET = register_3d(
    name="dynunet",
    paper=Paper("nnU-Net: a self-configuring method for deep learning-based biomedical image segmentation", 2021,
                "https://doi.org/10.1038/s41592-020-01008-z"),
    config_class=DynUNetConfig,
    presets=DYNUNET_PRESETS,
    build=dyn_unet,
    changes=(CONVOLUTIONS, CNN_DECODER),
    summary="The 3D CNN baseline: MONAI's DynUNet with nnU-Net's 3d_fullres geometry planned from the data's spacing "
            "and the patch (kernel 1 along a coarse axis until the others catch up, stride 2 while a side stays ≥ 4).",
)

SWINUNETR_V2 = register_3d(
    name="swinunetr-v2",
    paper=Paper("Swin UNETR V2: Stronger Swin Transformers with Stagewise Convolutions for 3D Medical Image "
                "Segmentation", 2023, "https://doi.org/10.1007/978-3-031-43901-8_40"),
    config_class=SwinUNETR3DConfig,
    presets=SWINUNETR_V2_PRESETS,
    build=swin_unetr_3d,
    builds_on="swinunetr3d",
    changes=(
        SWIN_ATTENTION, SWIN_EMBEDDING, CNN_DECODER,
        Change("stacking", "each Swin stage's blocks applied to the merged patches directly",
               "a residual convolution block (3×3×3 convolutions, instance norm) before each Swin stage",
               "windowed attention mixes voxels only within (shifted) windows; a convolution per stage adds the "
               "local inductive bias that the paper found to help on small medical data sets", scope="task-specific",
               name="stagewise convolutions", revert={"use_v2": False}),
    ),
    summary="MONAI's SwinUNETR with use_v2: swinunetr3d plus a residual convolution block at the start of each Swin "
            "stage (zoo ablate swinunetr-v2 --task medseg reverts it).",
)

RESENC = register_3d(
    name="resenc",
    paper=Paper("nnU-Net Revisited: A Call for Rigorous Validation in 3D Medical Image Segmentation", 2024,
                "https://arxiv.org/abs/2404.09556"),
    config_class=ResEncConfig,
    presets=RESENC_PRESETS,
    build=resenc,
    changes=(
        dataclasses.replace(CONVOLUTIONS, variant="none: 3D convolutions in residual blocks",
                            no_revert=NNUNET),
        Change("stacking", "an isotropic stack of layers at one resolution, no decoder",
               "nnU-Net's plan (stages, kernels, strides, widths doubling to 320) with a residual encoder of ResEnc "
               "M's (1, 3, 4, 6, 6, 6, ...) basic blocks per stage and a U-Net decoder of one convolution per stage",
               "dense prediction needs fine detail and coarse context together; a deeper residual encoder is what "
               "nnU-Net Revisited found to beat the published Transformers", scope="task-specific", no_revert=NNUNET),
    ),
    summary="nnU-Net ResEnc's residual-encoder U-Net (dynamic-network-architectures, the nnunet extra), planned from "
            "the data's spacing and the patch as dynunet is, with ResEnc M's blocks per stage.",
)

SEGRESNET = register_3d(
    name="segresnet",
    paper=Paper("3D MRI brain tumor segmentation using autoencoder regularization", 2018,
                "https://arxiv.org/abs/1810.11654"),
    config_class=SegResNetConfig,
    presets=SEGRESNET_PRESETS,
    build=segresnet,
    changes=(
        dataclasses.replace(CONVOLUTIONS, variant="none: 3D convolutions in pre-activation residual blocks"),
        Change("stacking", "an isotropic stack of layers at one resolution, no decoder",
               "a residual CNN encoder halving per stage and a light decoder of one block per stage (MONAI's "
               "SegResNetDS, without the paper's variational autoencoder branch), with a head at every decoder "
               "stage under deep supervision", "dense prediction needs fine detail and coarse context together",
               scope="task-specific", no_revert=MONAI),
    ),
    summary="MONAI's SegResNetDS as Auto3DSeg trains it (instance norm; 16 filters on a CPU, 32 in Auto3DSeg).",
)

MEDNEXT = register_3d(
    name="mednext",
    paper=Paper("MedNeXt: Transformer-driven Scaling of ConvNets for Medical Image Segmentation", 2023,
                "https://arxiv.org/abs/2303.09975"),
    config_class=MedNeXtConfig,
    presets=MEDNEXT_PRESETS,
    build=mednext,
    changes=(
        dataclasses.replace(CONVOLUTIONS, variant="none: depthwise k×k×k convolutions (ConvNeXt blocks)"),
        Change("ffn", "position-wise FFN: Linear to 4·d, ReLU, Linear back, per token",
               "each ConvNeXt block's 1×1×1 convolutions: expansion by 2 to 8 (by size and stage), GELU, compression "
               "(inside MedNeXt's blocks, so counted under stacking)",
               "a Transformer's channel mixing, kept in a CNN that scales its width and depth instead of attention",
               scope="task-specific", no_revert=MONAI),
        Change("stacking", "an isotropic stack of layers at one resolution, no decoder",
               "a U-Net of ConvNeXt blocks with residual ConvNeXt down- and up-sampling blocks, four halvings",
               "dense prediction needs fine detail and coarse context together", scope="task-specific",
               no_revert=MONAI),
    ),
    summary="MONAI's MedNeXt: a U-Net of ConvNeXt blocks in the paper's sizes S, B, M, L (presets of those names; "
            "size S with 8 filters on a CPU).",
)

__all__ = [
    "DYNUNET", "MEDNEXT", "RESENC", "SEGRESNET", "SWINUNETR", "SWINUNETR_V2", "UNETR", "DynUNetConfig", "DynUNetPlan",
    "MedNeXtConfig", "ResEncConfig", "SegResNetConfig", "SwinUNETR3DConfig", "UNETRConfig", "Volumetric", "dyn_unet",
    "mednext", "plan_dynunet", "resenc", "segresnet", "swin_unetr_3d", "unetr",
]
