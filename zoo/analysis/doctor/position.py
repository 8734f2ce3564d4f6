"""Check 4: is there a position signal, and can it be heard over the token embeddings?

* **permutation test (encoder)**: permute the source tokens; without positional information self-attention is
  permutation-equivariant, so the encoder's outputs are the same rows permuted (relative difference ~1e-7);
* **ablation test (decoder)**: take the decoder's position signal away (the scheme's embedding hook and any
  rotation or bias inside its attention) and measure how far its outputs move; nothing moves when no position
  information reached it (a causal decoder is not permutation-equivariant, so the encoder's test cannot serve);
* **signal ratio**: mean norm of the position signal added to the embeddings over the mean norm of the
  token embeddings the batch uses (the article's √d_model point: with the core's Xavier init a token row has
  norm ≈ √(2D/(V+D)); ×√d_model brings it to the sinusoid's √(D/2));
* **table check**: a sinusoidal scheme whose table is not the sinusoid of its width (e.g. sin/cos swapped).

Thresholds: outputs that move by < 1e-4 of their largest value under permutation are equivariant (rounding is
~1e-7, a real position signal moves them by > 1e-2). A ratio above 3 means the tokens hold < 10 % of the input's
energy (1/(1 + 3²)); the core's scaled embeddings give 0.9-1.4 at the lab's and the translation task's sizes,
unscaled ones 7-10. Below 1e-3 the signal is absent (a zeroed table).

Shape legend: B batch, S source tokens, T target tokens, D width.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from core.embedding import TokenEmbedding
from core.multihead import MultiHeadAttention
from core.position import PositionalScheme, sinusoid_table
from zoo.analysis.doctor.batch import Batch
from zoo.analysis.doctor.findings import CheckResult, Finding

EQUIVARIANT = 1e-4
DROWNED = 3.0
ABSENT = 1e-3


def _relative(a: Tensor, b: Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


@torch.no_grad()
def permutation_gap(model: nn.Module, src: Tensor, seed: int = 0) -> float:
    """max |encode(src[:, π]) − encode(src)[:, π]| relative to the outputs' largest value."""
    perm = torch.randperm(src.shape[1], generator=torch.Generator().manual_seed(seed)).to(src.device)
    memory, _ = model.encode(src)  # (B, S, D)
    permuted, _ = model.encode(src[:, perm])  # padding moves with its tokens, and so does its mask
    return _relative(permuted.float(), memory[:, perm].float())


@contextmanager
def decoder_without_positions(model: nn.Module) -> Iterator[None]:
    """Within the block, the decoder gets no position signal: the model's scheme adds nothing and no attention
    layer under ``model.decoder`` rotates or biases by position (the encoder keeps its own: encode first)."""
    kept = model.position
    layers = [(m, m.position) for m in model.decoder.modules() if isinstance(m, MultiHeadAttention)]
    model.position = PositionalScheme()  # every hook is the identity
    for m, _ in layers:
        m.position = None
    try:
        yield
    finally:
        model.position = kept
        for m, scheme in layers:
            m.position = scheme


@torch.no_grad()
def decoder_position_gap(model: nn.Module, src: Tensor, tgt: Tensor, pad_id: int) -> float | None:
    """How far the decoder's outputs move when its position signal is taken away, relative to their size; 0 means
    no position information reaches the decoder. None when the model has no core positional scheme to remove.

    A permutation test cannot say this for a causal decoder: even without positions, its causal mask lets a
    position count what precedes it, so permuted prefixes change the outputs anyway (Haviv et al. 2022).
    """
    if _embedding_scheme(model) is None or not hasattr(model, "decoder"):
        return None
    memory, src_mask = model.encode(src)
    real = tgt != pad_id  # (B, T)
    with_positions = model.decode(tgt, memory, src_mask).float()[real]  # (n, V)
    with decoder_without_positions(model):
        without = model.decode(tgt, memory, src_mask).float()[real]
    return _relative(without, with_positions)


def _embedding_scheme(model: nn.Module) -> PositionalScheme | None:
    scheme = getattr(model, "position", None)
    return scheme if isinstance(scheme, PositionalScheme) else None


@torch.no_grad()
def signal_ratio(model: nn.Module, ids: Tensor, pad_id: int | None) -> dict[str, float] | None:
    """Mean norms of the position signal added to the embeddings and of the batch's token embeddings."""
    scheme = _embedding_scheme(model)
    embedding = next((m for m in model.modules() if isinstance(m, TokenEmbedding)), None)
    if scheme is None or embedding is None:
        return None
    d = embedding.weight.shape[1]
    zeros = torch.zeros(1, ids.shape[1], d, device=ids.device)
    signal = scheme.embed(zeros, 0)[0]  # (N, D): what the scheme adds to an embedding
    tokens = embedding(ids[ids != pad_id] if pad_id is not None else ids.flatten())  # (n, D)
    position_norm, token_norm = float(signal.norm(dim=-1).mean()), float(tokens.norm(dim=-1).mean())
    return {"position_norm": position_norm, "token_norm": token_norm,
            "ratio": position_norm / token_norm if token_norm else float("inf")}


def _inside_attention(model: nn.Module) -> bool:
    """Whether some attention layer injects positions itself (RoPE, ALiBi)."""
    return any(isinstance(m, MultiHeadAttention) and m.position is not None for m in model.modules())


@torch.no_grad()
def table_mismatch(model: nn.Module, length: int, device: torch.device) -> dict[str, float] | None:
    """For a model whose config declares sinusoidal positions: how far its added signal is from the sinusoid
    table, and from the same table with each (sin, cos) pair swapped."""
    config, scheme = getattr(model, "config", None), _embedding_scheme(model)
    if scheme is None or getattr(config, "position", None) != "sinusoidal":
        return None
    d = config.d_model
    signal = scheme.embed(torch.zeros(1, length, d, device=device), 0)[0].cpu()  # (N, D)
    table = sinusoid_table(length, d)
    swapped = table.unflatten(-1, (-1, 2)).flip(-1).flatten(-2) if d % 2 == 0 else table
    return {"max_diff": float((signal - table).abs().max()), "max_diff_swapped": float((signal - swapped).abs().max())}


def position_checks(model: nn.Module, batch: Batch) -> CheckResult:
    """Check 4 (see the module docstring); the encoder/decoder tests need a model with ``encode``/``decode``."""
    result = CheckResult("position", thresholds={
        "permutation / ablation test": f"outputs move by < {EQUIVARIANT:g} (relative): no position information",
        "signal ratio": f"|position| / |token embedding| > {DROWNED:g} (tokens drowned) or < {ABSENT:g} (no signal)",
        "table": "a declared sinusoidal table that differs from the sinusoid by > 1e-4"})
    if batch.kind != "seq2seq" or not (hasattr(model, "encode") and hasattr(model, "decode")):
        return result.skip("the position tests need an encoder-decoder over token ids (encode/decode)")
    src = batch.src
    m = result.measured
    m["encoder_permutation_gap"] = permutation_gap(model, src)
    gap = decoder_position_gap(model, src, batch.tgt_in, batch.pad_id)
    if gap is not None:
        m["decoder_position_gap"] = gap
    ratio = signal_ratio(model, src, batch.pad_id)
    if ratio is not None:
        m.update(ratio)
    table = table_mismatch(model, src.shape[1], src.device)
    if table is not None:
        m["table"] = table
    inside = _inside_attention(model)
    m["scheme_inside_attention"] = inside
    blind = [side for side, value in (("encoder", m["encoder_permutation_gap"]),
                                      ("decoder", m.get("decoder_position_gap", 1.0))) if value < EQUIVARIANT]
    absent = ratio is not None and not inside and ratio["ratio"] < ABSENT
    if blind or absent:
        where = " and ".join(blind) if blind else "embeddings"
        parts = {"encoder": f"encoder outputs permute with the input (difference {m['encoder_permutation_gap']:.1e})",
                 "decoder": "the decoder's outputs do not move when its position signal is taken away "
                            f"(difference {m.get('decoder_position_gap', 1.0):.1e})"}
        evidence = "; ".join(parts[side] for side in blind)
        if ratio is not None:
            evidence += f"{'; ' if evidence else ''}position signal norm {ratio['position_norm']:.3g} vs tokens " \
                        f"{ratio['token_norm']:.3g}"
        result.add(Finding(
            "position", f"no position information ({where})", evidence,
            "the positional scheme was removed, or its signal is zero: self-attention is then a bag of words",
            "build the model with a positional scheme (config position=sinusoidal|learned|rope|alibi; "
            "core/position.py) and do not overwrite its table", "error",
            min(m["encoder_permutation_gap"], m.get("decoder_position_gap", 1.0)), EQUIVARIANT, where))
    elif ratio is not None and not inside and ratio["ratio"] > DROWNED:
        scaled = all(e.scale != 1.0 for e in model.modules() if isinstance(e, TokenEmbedding))
        result.add(Finding(
            "position", "position signal drowns the token embeddings",
            f"|position| / |token| = {ratio['ratio']:.2f} ({ratio['position_norm']:.3g} vs {ratio['token_norm']:.3g}): "
            f"the tokens carry {1 / (1 + ratio['ratio'] ** 2):.0%} of the input's energy",
            "embeddings not multiplied by √d_model" if not scaled else "token embeddings initialised too small",
            "scale_embeddings=True (core/embedding.py, §3.4)" if not scaled else
            "initialise the embedding larger (init='normal' or a larger std; core/init.py)",
            "warning", ratio["ratio"], DROWNED, "embeddings"))
    if table is not None and table["max_diff"] > 1e-4 and not (blind or absent):
        swapped = table["max_diff_swapped"] < 1e-4
        result.add(Finding(
            "position", "positional table differs from the declared sinusoid",
            f"max |table − sinusoid| = {table['max_diff']:.3g}"
            + (" ; equal to the sinusoid with sin and cos swapped" if swapped else ""),
            "the table was replaced " + ("(cos on even, sin on odd dimensions)" if swapped else "or corrupted")
            + ": harmless if training used the same table, harmful if inference uses another",
            "use core.position.SinusoidalPosition, the same at training and at inference", "warning",
            table["max_diff"], 1e-4, "position"))
    return result
