"""Check 4: is there a position signal, and can it be heard over the token embeddings?

* **permutation test (encoder)**: permute the source tokens; without positional information self-attention is
  permutation-equivariant, so the encoder's outputs are the same rows permuted (relative difference ~1e-7);
* **repeated-token test (decoder)**: feed one token repeated; without positions every position attends to
  identical vectors (any causal prefix averages to the same thing), so their outputs are equal;
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

import torch
from torch import Tensor, nn

from core.embedding import TokenEmbedding
from core.multihead import MultiHeadAttention
from core.position import PositionalScheme, sinusoid_table
from zoo.doctor.batch import Batch
from zoo.doctor.findings import CheckResult, Finding

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


@torch.no_grad()
def repeated_token_spread(model: nn.Module, src: Tensor, length: int = 8) -> float:
    """Spread of the decoder's outputs over the positions of one real token repeated ``length`` times, relative to
    their size. Every causal prefix of identical vectors averages to that vector, so without positions each
    position computes the same thing (a BOS first would break the symmetry: it is left out on purpose)."""
    c = model.config
    token = max(c.pad_id, c.bos_id, c.eos_id) + 1
    tgt = torch.full((src.shape[0], length), token, dtype=torch.long, device=src.device)  # (B, T)
    memory, src_mask = model.encode(src)
    out = model.decode(tgt, memory, src_mask).float()  # (B, T, V)
    return _relative(out, out[:, :1].expand_as(out))


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
        "permutation / repeated-token test": f"outputs move by < {EQUIVARIANT:g} (relative): no position information",
        "signal ratio": f"|position| / |token embedding| > {DROWNED:g} (tokens drowned) or < {ABSENT:g} (no signal)",
        "table": "a declared sinusoidal table that differs from the sinusoid by > 1e-4"})
    if batch.kind != "seq2seq" or not (hasattr(model, "encode") and hasattr(model, "decode")):
        return result.skip("the position tests need an encoder-decoder over token ids (encode/decode)")
    src = batch.src
    m = result.measured
    m["encoder_permutation_gap"] = permutation_gap(model, src)
    m["decoder_repeated_token_spread"] = repeated_token_spread(model, src[:8])
    ratio = signal_ratio(model, src, batch.pad_id)
    if ratio is not None:
        m.update(ratio)
    table = table_mismatch(model, src.shape[1], src.device)
    if table is not None:
        m["table"] = table
    inside = _inside_attention(model)
    m["scheme_inside_attention"] = inside
    blind = [side for side, value in (("encoder", m["encoder_permutation_gap"]),
                                      ("decoder", m["decoder_repeated_token_spread"])) if value < EQUIVARIANT]
    absent = ratio is not None and not inside and ratio["ratio"] < ABSENT
    if blind or absent:
        where = " and ".join(blind) if blind else "embeddings"
        parts = {"encoder": f"encoder outputs permute with the input (difference {m['encoder_permutation_gap']:.1e})",
                 "decoder": "decoder outputs of a repeated token are equal at every position (spread "
                            f"{m['decoder_repeated_token_spread']:.1e})"}
        evidence = "; ".join(parts[side] for side in blind)
        if ratio is not None:
            evidence += f"{'; ' if evidence else ''}position signal norm {ratio['position_norm']:.3g} vs tokens " \
                        f"{ratio['token_norm']:.3g}"
        result.add(Finding(
            "position", f"no position information ({where})", evidence,
            "the positional scheme was removed, or its signal is zero: self-attention is then a bag of words",
            "build the model with a positional scheme (config position=sinusoidal|learned|rope|alibi; "
            "core/position.py) and do not overwrite its table", "error",
            min(m["encoder_permutation_gap"], m["decoder_repeated_token_spread"]), EQUIVARIANT, where))
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
