"""ViT (Dosovitskiy et al. 2021) as a patch on the classic Transformer.

The classic Transformer reads symbols from a vocabulary through an encoder–decoder; ViT reads an image as
a sequence of linearly projected patches through the encoder alone and classifies from a [CLS] token.
Each change below can be reverted alone through its ``revert`` overrides (leave-one-out ablation).
"""

import dataclasses

from zoo.registry import Change, Paper, Variant, register
from zoo.vision import image_inputs
from zoo.vit.config import DEFAULT_PRESET, PRESETS, ViTConfig
from zoo.vit.model import VisionTransformer, drop_path_rates, resample_positions
from zoo.vit.timm_interop import load_timm_weights, timm_kwargs, timm_state_to_ours

PAPER = Paper(
    "An Image is Worth 16x16 Words: Transformers for Image Recognition at Scale", 2021,
    "https://arxiv.org/abs/2010.11929",
)

CHANGES = (
    Change(
        "embedding",
        "each token a symbol looked up in a vocabulary (a patch quantised to one of 256 symbols)",
        "each P×P patch projected linearly to D (a strided convolution)",
        "a discrete vocabulary cannot represent continuous pixels: quantising a patch throws away its content",
        scope="task-specific",
        revert={"tokens": "vocabulary"},
    ),
    Change(
        "position",
        "fixed sinusoids added to the embeddings",
        "a learned absolute table over the patch grid (+ [CLS]); at another image size its grid is resampled "
        "bicubically (as timm does), since a learned table cannot extrapolate",
        "fixed 1-D frequencies know nothing of the 2-D patch grid; a learned table adapts to it from the data",
        revert={"position": "sinusoidal"},
    ),
    Change(
        "norm",
        "Post-LN: x = LN(x + Sublayer(x))",
        "Pre-LN: x = x + Sublayer(LN(x)), a final LN (eps 1e-6)",
        "Post-LN needs a careful warm-up and trains deep stacks poorly; Pre-LN keeps the residual path clean",
        revert={"norm_first": False},
    ),
    Change(
        "ffn",
        "ReLU between the two linear layers",
        "GELU between the two linear layers",
        "ReLU's hard zero discards half the pre-activations' gradient; GELU is smooth (as in BERT)",
        revert={"activation": "relu"},
    ),
    Change(
        "stacking",
        "encoder–decoder: a decoder produces the output sequence (here the label as one decoded token)",
        "encoder only; the class is read from a learned [CLS] token prepended to the patches (N + 1 tokens)",
        "classification needs one output, not a generated sequence: the decoder costs layers for nothing",
        revert={"readout": "decoder"},
        resizes={"position": "the learned table has one more row, for the [CLS] token"},
    ),
)

VIT = register(
    Variant(
        name="vit",
        paper=PAPER,
        tasks=("cifar",),
        config_class=ViTConfig,
        presets=PRESETS,
        build=VisionTransformer,
        changes=CHANGES,
        default_preset=DEFAULT_PRESET,
        summary="The Transformer encoder on linearly embedded image patches, classified from a [CLS] token.",
        example_input=image_inputs,
        import_weights=timm_state_to_ours,
    )
)

__all__ = [
    "CHANGES", "PAPER", "PRESETS", "VIT", "ViTConfig", "VisionTransformer", "drop_path_rates", "load_timm_weights",
    "on_vit", "resample_positions", "timm_kwargs", "timm_state_to_ours",
]


def on_vit(variant: Variant, presets: dict | None = None) -> Variant:
    """The same patch applied to ViT instead of the classic encoder–decoder, for the image task: ``variant``'s
    paper, changes and base overrides on ViT's config, presets (``presets``: ViT's plus extra ones) and builder,
    built on ViT (its classic counterpart is ViT at the same preset with the same reverts)."""
    return dataclasses.replace(variant, tasks=("cifar",), config_class=ViTConfig, builds_on="vit",
                               presets={**PRESETS, **(presets or {})}, build=VisionTransformer,
                               default_preset=DEFAULT_PRESET, example_input=image_inputs,
                               import_weights=timm_state_to_ours)
