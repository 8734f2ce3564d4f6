"""Swin Transformer (Liu et al. 2021) as a patch on the classic Transformer.

One idea per file: :mod:`~zoo.swin.windows` (partition, reverse, cyclic shift, shift mask),
:mod:`~zoo.swin.relative_position` (learned relative position bias), :mod:`~zoo.swin.attention`
(the window-attention kernel), :mod:`~zoo.swin.merging` (patch merging), :mod:`~zoo.swin.config`
(config, stage geometry, presets), :mod:`~zoo.swin.model` (the model), :mod:`~zoo.swin.timm_weights`
(copying timm's weights, for the equivalence tests).
"""

from zoo.registry import Change, Paper, Variant, register
from zoo.swin.attention import WindowAttention
from zoo.swin.config import DEFAULT_PRESET, PRESETS, SwinConfig
from zoo.swin.merging import PatchMerging
from zoo.swin.model import SwinTransformer
from zoo.swin.relative_position import RelativePositionBias
from zoo.swin.timm_weights import load_timm_weights, timm_kwargs, timm_state_to_ours
from zoo.vision import image_inputs

PAPER = Paper("Swin Transformer: Hierarchical Vision Transformer using Shifted Windows", 2021,
              "https://arxiv.org/abs/2103.14030")

CHANGES = (
    Change(
        "attention",
        "global softmax attention over all tokens",
        "softmax attention inside W×W windows, shifted by ⌊W/2⌋ every other block (W-MSA / SW-MSA): linear "
        "instead of quadratic in the number of tokens",
        "quadratic cost in the number of tokens, prohibitive at the token counts of dense vision tasks",
        revert={"window_size": None},
        resizes={"position": "the relative table spans the (2W−1)² offsets inside a window, not those of the "
                             "whole map"},
    ),
    Change(
        "position",
        "absolute sinusoids added to the embeddings once",
        "a learned bias per relative offset inside the window, added to the scores in every block",
        "absolute positions carry no translation invariance; what matters in an image is relative layout",
        revert={"position": "sinusoidal"},
    ),
    Change(
        "stacking",
        "isotropic stack at one resolution and width, label read out by an encoder–decoder",
        "a hierarchy of stages at 1/P, 1/2P, 1/4P, … of the image (Swin-T: 4 stages, 1/4 … 1/32) with patch "
        "merging between them, and a global average pool",
        "single scale: no multi-scale feature maps for dense prediction, and every layer pays full resolution",
        scope="task-specific",
        revert={"hierarchy": False, "readout": "decoder"},
        resizes={
            "attention": "stage i's projections are 2^(i−1)·D wide",
            "ffn": "stage i's FFN is 2^(i−1)·D wide, its hidden layer 4× that",
            "norm": "stage i's norms are 2^(i−1)·D wide",
            "position": "stage i's relative tables hold one bias per head of that stage",
            "head": "the classifier reads the last stage, 2^(S−1)·D wide",
        },
    ),
    Change(
        "embedding",
        "each token a symbol looked up in a vocabulary",
        "linear projection of each P×P patch, then LayerNorm",
        "a discrete vocabulary of patch symbols throws away the pixels' detail",
        scope="task-specific",
        revert={"tokens": "vocabulary"},
    ),
    Change(
        "norm",
        "Post-LN: x = LN(x + Sublayer(x))",
        "Pre-LN: x = x + Sublayer(LN(x)), final LN",
        "Post-LN gradients near the output are large at initialisation, so deep stacks need a careful warm-up",
        revert={"norm_first": False},
    ),
    Change(
        "ffn",
        "ReLU",
        "GELU",
        "ReLU's hard zero discards negative inputs and their gradient",
        revert={"activation": "relu"},
    ),
)

VARIANT = register(
    Variant(
        name="swin",
        paper=PAPER,
        tasks=("cifar",),
        config_class=SwinConfig,
        presets=PRESETS,
        build=SwinTransformer,
        changes=CHANGES,
        default_preset=DEFAULT_PRESET,
        summary="Shifted-window attention with relative position bias, in stages joined by patch merging.",
        example_input=image_inputs,
        import_weights=timm_state_to_ours,
    )
)

__all__ = [
    "PAPER", "PRESETS", "VARIANT", "PatchMerging", "RelativePositionBias", "SwinConfig", "SwinTransformer",
    "WindowAttention", "load_timm_weights", "timm_kwargs", "timm_state_to_ours",
]
