"""The "linear" variant: the classic Transformer with linear attention in every attention layer.

Its one change, the attention kernel (``kernel="linear"``), is declared once, in ``CHANGE``; ``zoo diff linear``
renders it with the measured deltas. Projections, heads, FFN, norms, positions and the encoder–decoder
topology are the classic model's, so the delta analysis sees exactly one replaced part.
"""

from __future__ import annotations

from core.model import PRESETS, Transformer, TransformerConfig
from zoo.classic import token_inputs
from zoo.lm import on_lm
from zoo.registry import Change, Paper, Variant, register
from zoo.vit import on_vit

KATHAROPOULOS = Paper(
    "Transformers are RNNs: Fast Autoregressive Transformers with Linear Attention",
    2020,
    "https://arxiv.org/abs/2006.16236",
)

# Crossover length N* above which LinearAttention (elu) is faster than the fused softmax kernel
# (ScaledDotProductAttention), forward + backward, B 8, 8 heads, d_head 64, float32 CPU, 1 thread. Measured with
# `.venv/bin/python benchmarks/bench_linear.py --quick --threads 1` on a shared 2-core AMD EPYC VM (torch 2.14.1,
# load average ~2.5): N* = 232 non-causal, 396 causal (quiet run, IQR <= 10% at the bracketing points). The full
# run (`--threads 1`, load ~4, noisy) gave 336 / 224, and a 15-round rerun of N = 128-512 put the non-causal
# crossover between 192 and 256 and the causal one between 384 and 512. Rounded:
CROSSOVER_N = 250  # non-causal: linear vs sdpa
CAUSAL_CROSSOVER_N = 400  # causal: linear (chunked) vs sdpa with is_causal

SUMMARY = (
    "Softmax attention replaced by linear attention with φ = elu + 1. Cost model per head (FLOPs = 2·MACs): "
    "softmax ≈ 2N²d for QKᵀ plus 2N²d for the weights times V, and N² memory; linear ≈ 2Nd² for φ(K)ᵀV plus "
    "2Nd² for φ(Q)·S, and memory linear in N; equal FLOPs at N = d, linear cheaper beyond. Measured wall-clock "
    f"crossover against fused softmax (CPU, forward + backward, d_head 64): N* ≈ {CROSSOVER_N} tokens "
    f"(causal: ≈ {CAUSAL_CROSSOVER_N}); benchmarks/bench_linear.py."
)

CHANGE = Change(
    "attention",
    "softmax(QKᵀ/√d)V, O(N²·d) time and O(N²) memory per head",
    "φ(Q)(φ(K)ᵀV) with φ = elu+1, O(N·d²)",
    "quadratic cost in sequence length",
    scope="general",
    revert={"kernel": "sdpa", "kernel_options": {}},
)

LINEAR = register(
    Variant(
        name="linear",
        paper=KATHAROPOULOS,
        tasks=("translation",),
        config_class=TransformerConfig,
        presets={
            **PRESETS,
            # A small, fast model: narrow, two heads of width 64, 2 + 2 layers.
            "lite": dict(src_vocab=8000, d_model=128, heads=2, encoder_layers=2, decoder_layers=2, d_ff=256),
        },
        build=Transformer,
        changes=(CHANGE,),
        default_preset="mini",  # the translation task's default size
        summary=SUMMARY,
        base_overrides={"kernel": "linear"},
        builds_on="classic",
        example_input=token_inputs,
    )
)

# The same kernel in ViT, for the image task: a "lite" ViT (narrow, few heads) with linear attention.
LINEAR_VIT = register(on_vit(LINEAR, {"lite": dict(d_model=96, depth=4, heads=2, patch_size=4, mlp_ratio=2.0)}))

# The same kernel in the decoder-only language model: causal, and decoding from its recurrent state.
LINEAR_LM = register(on_lm(LINEAR))
