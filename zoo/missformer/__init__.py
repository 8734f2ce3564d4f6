"""MISSFormer (Huang et al. 2021) as a patch on the classic Transformer, for medical image segmentation.

One idea per file: :mod:`~zoo.missformer.config` (config, stages, presets), :mod:`~zoo.missformer.attention`
(efficient self-attention), :mod:`~zoo.missformer.ffn` (ReMix-FFN), :mod:`~zoo.missformer.encoder`
(overlapping patch embeddings, stages), :mod:`~zoo.missformer.bridge` (context bridge),
:mod:`~zoo.missformer.decoder` (patch expanding, decoder stages, ×4 head), :mod:`~zoo.missformer.model`
(the model), :mod:`~zoo.missformer.official_weights` (loading the official code's state dict).
Each change below can be reverted alone through its ``revert`` overrides (leave-one-out ablation).
"""

from zoo.missformer.attention import EfficientSelfAttention, SpatialReduction
from zoo.missformer.bridge import BridgeLayout, ContextBridge
from zoo.missformer.config import DEFAULT_PRESET, PRESETS, PRESETS_3D, MISSFormer3DConfig, MISSFormerConfig
from zoo.missformer.decoder import PatchExpand, SegmentationHead, UShapedDecoder
from zoo.missformer.encoder import HierarchicalEncoder, OverlapPatchEmbedding
from zoo.missformer.ffn import ReMixFFN
from zoo.missformer.model import MISSFormer
from zoo.missformer.official_weights import load_official_weights
from zoo.registry import Change, Paper, Variant, register
from zoo.vision import image_inputs, volume_inputs

PAPER = Paper("MISSFormer: An Effective Medical Image Segmentation Transformer", 2021,
              "https://arxiv.org/abs/2109.07162")

CHANGES = (
    Change(
        "attention",
        "global softmax attention: keys and values from every token, O(N²)",
        "efficient self-attention: keys and values from the map reduced R× per side by a strided convolution and a "
        "LayerNorm (R = 8, 4, 2, 1 by stage), O(N²/R²)",
        "quadratic cost in the number of tokens: at 1/4 of a 224×224 image that is 3136² scores per head",
        revert={"spatial_reduction": False},
        also_in={"stacking": "the context bridge's and the decoder's attention (modules the stacking part owns) "
                             "reduce their keys and values too"},
    ),
    Change(
        "ffn",
        "position-wise ReLU FFN: every token alone",
        "ReMix-FFN: a GELU FFN whose hidden tokens pass a depth-wise 3×3 convolution with a skip and a LayerNorm",
        "a position-wise FFN sees no neighbours: no local context and, without position codes, no position",
        revert={"ffn": "dense", "activation": "relu"},
        also_in={"stacking": "the FFNs of the context bridge and of the decoder's blocks (modules the stacking "
                             "part owns) are ReMix-FFNs too"},
    ),
    Change(
        "stacking",
        "isotropic stack at one resolution and width (here: one stage at 1/4, no decoder)",
        "four stages at 1/4 … 1/32 joined by overlapping stride-2 patch embeddings, and a U-shaped decoder: patch "
        "expanding, skip concatenation, Transformer blocks per scale",
        "single scale: dense prediction needs fine detail and coarse context together, and full resolution in every "
        "layer is costly",
        scope="task-specific",
        revert={"hierarchy": False},
        name="hierarchy",
        resizes={
            "attention": "stage i's projections are widths[i] wide, with its own key/value reduction",
            "ffn": "stage i's FFN is widths[i] wide",
            "norm": "stage i's norms are widths[i] wide",
        },
    ),
    Change(
        "stacking",
        "each scale reaches the decoder alone, through its own skip (or there is no decoder)",
        "context bridge: the tokens of all stages fused into one sequence and attended jointly (keys reduced per "
        "stage), then a ReMix-FFN per stage",
        "separate skips carry no cross-scale, global context into the decoder",
        scope="task-specific",
        revert={"bridge_depth": 0},
        name="bridge",
    ),
    Change(
        "embedding",
        "each token a symbol looked up in a vocabulary (a 4×4 patch quantised to one of 256 symbols)",
        "overlapping patch embedding: a 7×7 convolution of stride 4 (neighbouring patches share pixels), then "
        "LayerNorm",
        "a vocabulary throws away the pixels' detail, and non-overlapping patches cut structures at their borders",
        scope="task-specific",
        revert={"tokens": "vocabulary"},
    ),
    Change(
        "position",
        "fixed sinusoids added to the embeddings",
        "none: the zero-padded depth-wise convolutions of the ReMix-FFN give position away",
        "position codes made for one token count must be interpolated when the test resolution differs",
        revert={"position": "sinusoidal"},
    ),
    Change(
        "norm",
        "Post-LN: x = LN(x + Sublayer(x))",
        "Pre-LN: x = x + Sublayer(LN(x)), and a LayerNorm at the end of every encoder stage",
        "Post-LN gradients near the output are large at initialisation, so deep stacks need a careful warm-up",
        revert={"norm_first": False},
    ),
)

VARIANT = register(
    Variant(
        name="missformer",
        paper=PAPER,
        tasks=("medseg",),
        config_class=MISSFormerConfig,
        presets=PRESETS,
        build=MISSFormer,
        changes=CHANGES,
        default_preset=DEFAULT_PRESET,
        summary="Spatially reduced attention and ReMix-FFN in a four-stage encoder, a context bridge across the "
                "scales, and a U-shaped decoder to per-pixel logits.",
        example_input=image_inputs,
    )
)

# The same parts in 3D (the official code is 2D only): 3D convolutions, d×h×w token maps, the context bridge over
# 3D tokens. Every change is the 2D one; the embedding's cannot be reverted, the vocabulary tokenizer being 2D.
CHANGES_3D = tuple(
    Change(c.part, c.classic, c.variant.replace("7×7 convolution", "7×7×7 convolution"), c.flaw, c.scope,
           name=c.name, no_revert="the patch and vocabulary tokenizers exist in 2D only")
    if c.part == "embedding" else c for c in CHANGES
)

VARIANT_3D = register(
    Variant(
        name="missformer3d",
        paper=PAPER,
        tasks=("medseg",),
        config_class=MISSFormer3DConfig,
        presets=PRESETS_3D,
        build=MISSFormer,
        changes=CHANGES_3D,
        default_preset="cpu",
        summary="MISSFormer's parts on volumes: 3D overlapping patch embedding, efficient attention with keys from a "
                "map reduced R× per side (R³ fewer keys), 3×3×3 ReMix-FFN, the context bridge over the 3D tokens of "
                "all stages, and a U-shaped decoder with 2×2×2 patch expanding.",
        example_input=volume_inputs,
        spatial_dims=3,
    )
)

__all__ = [
    "CHANGES", "CHANGES_3D", "PAPER", "PRESETS", "PRESETS_3D", "VARIANT", "VARIANT_3D", "BridgeLayout",
    "ContextBridge", "EfficientSelfAttention", "HierarchicalEncoder", "MISSFormer", "MISSFormer3DConfig",
    "MISSFormerConfig", "OverlapPatchEmbedding", "PatchExpand", "ReMixFFN", "SegmentationHead", "SpatialReduction",
    "UShapedDecoder", "load_official_weights",
]
