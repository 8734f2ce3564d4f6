"""3D segmenters from MONAI, registered for the medseg task beside the 2D models: ``swinunetr3d``, ``unetr`` and
``dynunet`` (the 3D CNN baseline, planned by nnU-Net's rule).

They are not patches on the classic Transformer: MONAI builds each whole, so most of what they change from it has no
switch to turn back. Each declares every change all the same — the story ``zoo diff`` tells — and marks it with
``no_revert`` (no ablation row, no attribution step; ``zoo check`` marks its revert row not applicable). The closest
thing to a switch, a SwinUNETR window covering each stage's whole map (global attention), is out of reach: MONAI's
relative position index for such a window has N² entries (43 GB for a 64×96×96 patch).

All three are registered with ``spatial_dims=3``: the medseg task trains them on 3D patches and predicts whole cases
through a sliding window. One idea per file: :mod:`~zoo.monai3d.config` (configs, presets),
:mod:`~zoo.monai3d.plan` (nnU-Net's rule), :mod:`~zoo.monai3d.networks` (MONAI's networks, tagged).
"""

from zoo.monai3d.config import (
    DYNUNET_PRESETS,
    SWINUNETR_PRESETS,
    UNETR_PRESETS,
    DynUNetConfig,
    SwinUNETR3DConfig,
    UNETRConfig,
)
from zoo.monai3d.networks import Volumetric, dyn_unet, monai_state_to_ours, swin_unetr_3d, unetr
from zoo.monai3d.plan import DynUNetPlan, plan_dynunet
from zoo.registry import Change, Paper, Variant, register
from zoo.vision import volume_inputs

MONAI = "MONAI's network has no switch for it"



def register_3d(**fields) -> Variant:
    """Register one of MONAI's 3D segmenters: what the three share (medseg, 3D patches, the ``cpu`` preset by
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

SWINUNETR = register_3d(
    name="swinunetr3d",
    paper=Paper("Swin UNETR: Swin Transformers for Semantic Segmentation of Brain Tumors in MRI Images", 2022,
                "https://arxiv.org/abs/2201.01266"),
    config_class=SwinUNETR3DConfig,
    presets=SWINUNETR_PRESETS,
    build=swin_unetr_3d,
    changes=(
        Change("attention", "global softmax attention over every token, O(N²)",
               "shifted-window attention: 7×7×7-voxel windows, shifted by half a window every other block, with a "
               "learned relative position bias per window offset",
               "global attention over a volume's tokens costs O(N²): 32×32×32 = 32,768 tokens at stage 1 of a "
               "64³ patch", no_revert="a window covering each stage's map would be global attention, but MONAI "
               "builds an N²-entry relative position index for it (43 GB at 64×96×96)"),
        Change("embedding", "each token a symbol looked up in a vocabulary",
               "2×2×2-voxel patches projected by a strided 3D convolution", "volumes are not made of symbols",
               scope="task-specific", no_revert=MONAI),
        CNN_DECODER,
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

DYNUNET = register_3d(
    name="dynunet",
    paper=Paper("nnU-Net: a self-configuring method for deep learning-based biomedical image segmentation", 2021,
                "https://doi.org/10.1038/s41592-020-01008-z"),
    config_class=DynUNetConfig,
    presets=DYNUNET_PRESETS,
    build=dyn_unet,
    changes=(
        Change("attention", "softmax attention between tokens", "none: 3D convolutions, each voxel sees its neighbours",
               "the 3D CNN baseline: what a Transformer segmenter must beat", scope="task-specific", no_revert=MONAI),
        CNN_DECODER,
    ),
    summary="The 3D CNN baseline: MONAI's DynUNet with nnU-Net's 3d_fullres geometry planned from the data's spacing "
            "and the patch (kernel 1 along a coarse axis until the others catch up, stride 2 while a side stays ≥ 4).",
)

__all__ = [
    "DYNUNET", "SWINUNETR", "UNETR", "DynUNetConfig", "DynUNetPlan", "SwinUNETR3DConfig", "UNETRConfig", "Volumetric",
    "dyn_unet", "plan_dynunet", "swin_unetr_3d", "unetr",
]
