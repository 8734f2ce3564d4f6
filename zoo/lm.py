"""The variants of the decoder-only language model, for the ``lm`` task (``zoo train lm --variant NAME``).

The classic base is the paper's decoder without cross-attention (:class:`core.language_model.LanguageModel`:
Post-LN, sinusoidal positions, ReLU, tied embeddings). A core-level change made for the encoder–decoder applies
to it unchanged, since its config names the same fields: :func:`on_lm` re-registers such a variant (its paper,
changes and base overrides) on the language model, as :func:`zoo.vit.on_vit` does on ViT. The position schemes
the extrapolation protocol compares and the translation task has no registration of (T5's bias, NoPE) and the
GELU FFN are registered here for ``lm`` only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from core.language_model import PRESETS, LanguageModel, LanguageModelConfig
from zoo.classic import CLASSIC
from zoo.registry import Change, Paper, Variant, get_variant, register

TASK = "lm"


def lm_inputs(config: LanguageModelConfig, shape: dict[str, int]) -> tuple[torch.Tensor]:
    """Random token ids of the task's size, ``(B, N)`` with B = ``shape["batch"]``, N = ``shape["max_len"]`` (one
    window as long as the model's context)."""
    gen = torch.Generator().manual_seed(0)
    return (torch.randint(0, config.vocab_size, (shape["batch"], shape["max_len"]), generator=gen),)


# What every lm registration shares: the task, the model, its presets and inputs; the default preset is
# nanoGPT's shakespeare_char anchor.
_ON_LM: dict[str, Any] = dict(tasks=(TASK,), config_class=LanguageModelConfig, build=LanguageModel,
                              default_preset="small", example_input=lm_inputs, import_weights=None)


def on_lm(variant: Variant, presets: dict | None = None, summary: str | None = None) -> Variant:
    """The same patch applied to the decoder-only language model, for the ``lm`` task: ``variant``'s paper,
    changes and base overrides on :class:`LanguageModelConfig`, its presets (plus ``presets``), built on the lm
    ``classic``; ``summary`` replaces the variant's where its text names the encoder–decoder."""
    root = variant.name == CLASSIC.name
    return dataclasses.replace(variant, **_ON_LM, presets={**PRESETS, **(presets or {})},
                               builds_on=None if root else CLASSIC.name, summary=summary or variant.summary)


def _lm_variant(name: str, paper: Paper, summary: str, change: Change, **overrides: Any) -> Variant:
    """Register a one-change variant of the language model that only the ``lm`` task has."""
    return register(Variant(name=name, paper=paper, presets=PRESETS, changes=(change,), summary=summary,
                            base_overrides=overrides, builds_on=CLASSIC.name, **_ON_LM))


CLASSIC_LM = register(on_lm(CLASSIC, summary="The paper's decoder without cross-attention: causal self-attention, "
                                             "Post-LN, sinusoidal positions, ReLU, tied embeddings."))
CORE_OPTIONS_LM = tuple(register(on_lm(get_variant(name, "translation")))
                        for name in ("pre-ln", "learned-pos", "rope", "alibi"))

T5_BIAS = _lm_variant(
    "t5-bias",
    Paper("Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer", 2020,
          "https://arxiv.org/abs/1910.10683"),
    "A learned scalar per head and log-spaced distance bucket added to every attention score (T5).",
    Change(
        "position",
        "absolute sinusoids added to the embeddings",
        "a learned bias per head and bucket of j - i (32 buckets, exact up to 15 back, log-spaced to 128, one "
        "bucket beyond) added to every self-attention score, shared by all layers",
        "absolute positions make attention depend on where a pair is, not on how far apart it is, and a fixed "
        "curve cannot learn which distances matter",
        revert={"position": "sinusoidal"},
    ),
    position="t5",
)
NOPE = _lm_variant(
    "nope",
    Paper("The Impact of Positional Encoding on Length Generalization in Transformers", 2023,
          "https://arxiv.org/abs/2305.19466"),
    "No positional scheme at all: causal attention alone tells a token where it is.",
    Change(
        "position",
        "absolute sinusoids added to the embeddings",
        "nothing: a token sees only its prefix, which is enough to infer order",
        "an explicit scheme ties the model to the positions it was trained on, and extrapolates poorly past them",
        revert={"position": "sinusoidal"},
    ),
    position="none",
)
GELU = _lm_variant(
    "gelu",
    Paper("Gaussian Error Linear Units (GELUs)", 2016, "https://arxiv.org/abs/1606.08415"),
    "GELU instead of ReLU between the FFN's two linear layers (GPT, BERT).",
    Change(
        "ffn",
        "ReLU between the two linear layers",
        "GELU between the two linear layers",
        "ReLU's hard zero discards half the pre-activations' gradient; GELU is smooth",
        revert={"activation": "relu"},
    ),
    activation="gelu",
)
