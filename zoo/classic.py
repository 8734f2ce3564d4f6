"""The classic Transformer and the core-option variants that differ from it in exactly one part.

These are not papers' architectures but the alternatives the core itself offers, registered so that the
delta analysis and the task runners treat them like any other variant.
"""

from __future__ import annotations

import torch

from core.model import PRESETS, Transformer, TransformerConfig
from zoo.registry import Change, Paper, Variant, register

VASWANI = Paper("Attention Is All You Need", 2017, "https://arxiv.org/abs/1706.03762")
TASKS = ("translation",)


def token_inputs(config: TransformerConfig, shape: dict[str, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Random source and target ids of the task's size: ``(B, S)`` and ``(B, T)``."""
    gen = torch.Generator().manual_seed(0)
    low = 3  # above the special tokens, so no padding
    src = torch.randint(low, config.src_vocab, (shape["batch"], shape["src_len"]), generator=gen)
    tgt = torch.randint(low, config.tgt_vocab, (shape["batch"], shape["tgt_len"]), generator=gen)
    return src, tgt


def _core_variant(name: str, paper: Paper, summary: str, change: Change | None, **overrides) -> Variant:
    return register(
        Variant(
            name=name,
            paper=paper,
            tasks=TASKS,
            config_class=TransformerConfig,
            presets=PRESETS,
            build=Transformer,
            changes=() if change is None else (change,),
            default_preset="small",
            summary=summary,
            base_overrides=overrides,
            builds_on=None if name == "classic" else "classic",
            example_input=token_inputs,
        )
    )


CLASSIC = _core_variant("classic", VASWANI, "The paper's encoder-decoder: Post-LN, sinusoidal positions.", None)

_core_variant(
    "pre-ln",
    Paper("On Layer Normalization in the Transformer Architecture", 2020, "https://arxiv.org/abs/2002.04745"),
    "LayerNorm moved inside the residual branch, plus a final norm.",
    Change(
        "norm",
        "Post-LN: x = LN(x + Sublayer(x))",
        "Pre-LN: x = x + Sublayer(LN(x)), final LN per stack",
        "Post-LN gradients near the output are large at initialisation, so it needs a careful warm-up",
        revert={"norm_first": False},
    ),
    norm_first=True,
)
_core_variant(
    "learned-pos",
    Paper("BERT: Pre-training of Deep Bidirectional Transformers", 2019, "https://arxiv.org/abs/1810.04805"),
    "A learned vector per absolute position instead of fixed sinusoids.",
    Change(
        "position",
        "fixed sinusoids added to the embeddings",
        "learned absolute embeddings added to the embeddings",
        "fixed frequencies cannot adapt to the data (at the price of no extrapolation past max_len)",
        revert={"position": "sinusoidal"},
    ),
    position="learned",
)
_core_variant(
    "rope",
    Paper("RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021, "https://arxiv.org/abs/2104.09864"),
    "Queries and keys rotated by their positions inside self-attention.",
    Change(
        "position",
        "absolute sinusoids added to the embeddings",
        "rotary embedding of q and k in every self-attention",
        "absolute positions make attention depend on where a pair is, not on how far apart it is",
        revert={"position": "sinusoidal"},
    ),
    position="rope",
)
_core_variant(
    "alibi",
    Paper("Train Short, Test Long: Attention with Linear Biases", 2022, "https://arxiv.org/abs/2108.12409"),
    "A per-head linear distance penalty on the attention scores; no position in the embeddings.",
    Change(
        "position",
        "absolute sinusoids added to the embeddings",
        "-m_h·|i - j| added to every self-attention score",
        "sinusoidal models extrapolate poorly to sequences longer than those seen in training",
        revert={"position": "sinusoidal"},
    ),
    position="alibi",
)
