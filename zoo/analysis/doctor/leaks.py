"""Check 3: mask leaks, measured by perturbation (whatever produced the leak: a 0-filled mask, a kernel that
ignores its mask, a layer that mixes positions).

* **causal leak**: change every target token after position t and measure how far the decoder's outputs at
  positions <= t move (:func:`zoo.analysis.probes.causal_leak`; for a decoder-only model, a ``causal_lm`` batch,
  every id after t: :func:`prefix_leak`); a causal decoder gives exactly 0;
* **padding leak**: append padding to every source and target and measure how far the outputs at the real
  positions move (:func:`zoo.analysis.probes.padding_leak`); a correct mask gives float32 rounding (the padded length
  changes the matmul shapes), about 1e-7 of the largest logit.

Both are relative to the largest logit; the threshold 1e-4 sits 100× above float32 rounding across CPU kernels
and far below what a leak does (a 0-filled mask moves outputs by ~1e-1 at initialisation). The layer where a
leak enters is found the same way: the first layer whose own outputs move.

Shape legend: B batch, S source tokens, T target tokens, D width.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from core.layers import ResidualLayer
from zoo.analysis import probes
from zoo.analysis.doctor.batch import Batch
from zoo.analysis.doctor.findings import CheckResult, Finding

LEAK = 1e-4  # relative drift (max |Δ| / max |logit|)


def _layer_outputs(model: nn.Module, *inputs: Tensor) -> dict[str, Tensor]:
    """The output ``(B, N, D)`` of every encoder/decoder layer on one teacher-forced forward ``model(*inputs)``."""
    outputs: dict[str, Tensor] = {}
    handles = [m.register_forward_hook(lambda m, a, out, name=name: outputs.__setitem__(name, out.detach().float()))
               for name, m in model.named_modules() if isinstance(m, ResidualLayer)]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return outputs


def _first_moving_layer(before: dict[str, Tensor], after: dict[str, Tensor], rows: Tensor,
                        side: str) -> tuple[str | None, dict[str, float]]:
    """Relative drift of each ``side`` (``encoder``/``decoder``) layer over ``rows`` ``(B, N)``; the first above
    :data:`LEAK`."""
    drifts = {}
    for name, ref in before.items():
        if not name.startswith(side):
            continue
        other = after[name][:, : ref.shape[1]]
        where = rows[:, : ref.shape[1]]
        scale = ref[where].abs().max().clamp_min(1e-12)
        drifts[name] = float((other[where] - ref[where]).abs().max() / scale) if where.any() else 0.0
    first = next((n for n, d in drifts.items() if d > LEAK), None)
    return first, drifts


def _later_changed(ids: Tensor, t: int, low: int, high: int) -> Tensor:
    """``ids`` with every id after position ``t`` moved to another id of ``[low, high)``."""
    changed = ids.clone()
    changed[:, t + 1 :] = low + (changed[:, t + 1 :] - low + 1) % (high - low)
    return changed


@torch.no_grad()
def prefix_leak(model: nn.Module, ids: Tensor, t: int) -> probes.Drift:
    """Drift of a decoder-only model's outputs ``model(ids)`` ``(B, N, V)`` at positions ``<= t`` when every id
    after ``t`` changes; a causal model gives exactly 0."""
    later = _later_changed(ids, t, 0, model.config.vocab_size)
    before, after = model(ids)[:, : t + 1].float(), model(later)[:, : t + 1].float()
    return probes.Drift((after - before).abs().max().item(), before.abs().max().item())


def mask_checks(model: nn.Module, batch: Batch, forbidden: dict[str, float] | None = None) -> CheckResult:
    """Check 3 on a seq2seq model following the decoding protocol, or on a decoder-only model's ``causal_lm``
    batch (every position real: no padding leak to measure); skipped for other models."""
    result = CheckResult("mask", thresholds={"causal leak": f"relative drift of outputs <= t > {LEAK:g}",
                                             "padding leak": f"relative drift of real outputs > {LEAK:g}"})
    decoder_only = batch.kind == "causal_lm"
    if not decoder_only and (batch.kind != "seq2seq" or not probes.is_autoregressive(model)):
        return result.skip("no causal decoder (the probes need encode/decode and a config with pad/bos/eos ids, "
                           "or a causal_lm batch)")
    tokens = batch.inputs[0] if decoder_only else batch.tgt_in
    positions = sorted({0, tokens.shape[1] // 2})  # the first output, and one with half the sequence after it
    padding = None  # a causal_lm batch has no padding: every position is a real token
    if decoder_only:
        causal = {t: prefix_leak(model, tokens, t) for t in positions}
    else:
        causal = {t: probes.causal_leak(model, batch.src, tokens, t) for t in positions}
        padding = probes.padding_leak(model, batch.src, tokens, extra=3)
    worst_t = max(causal, key=lambda t: causal[t].relative)
    result.measured["causal_leak"] = {str(t): d.relative for t, d in causal.items()}
    if padding is not None:
        result.measured["padding_leak"] = padding.relative
    if forbidden:
        result.measured["weight_on_forbidden_keys"] = forbidden
    leaky = [f"{n} ({w:.0%})" for n, w in sorted((forbidden or {}).items(), key=lambda x: -x[1]) if w > LEAK]
    by_weight = f"; attention weight on forbidden keys: {', '.join(leaky[:3])}" if leaky else ""
    if causal[worst_t].relative > LEAK:
        t = worst_t
        c = model.config
        rows = torch.zeros_like(tokens, dtype=torch.bool)
        if decoder_only:
            inputs, changed = (tokens,), (_later_changed(tokens, t, 0, c.vocab_size),)
            rows[:, : t + 1] = True
        else:
            low = max(c.pad_id, c.bos_id, c.eos_id) + 1
            inputs, changed = (batch.src, tokens), (batch.src, _later_changed(tokens, t, low, c.tgt_vocab))
            rows[:, : t + 1] = tokens[:, : t + 1] != c.pad_id
        first, drifts = _first_moving_layer(_layer_outputs(model, *inputs), _layer_outputs(model, *changed),
                                            rows, "decoder")
        result.measured["causal_leak_by_layer"] = drifts
        result.add(Finding(
            "mask", "causal leak: earlier outputs see later target tokens",
            f"changing the tokens after position {t} moves outputs at <= {t} by {causal[t].relative:.2g} of the "
            f"largest logit; enters at {first or 'the output'}{by_weight}",
            "the causal mask is not applied as -inf (a 0-filled or multiplied mask, a kernel that ignores mask or "
            "is_causal); teacher forcing then reads the answer and decoding collapses",
            "fill masked scores with -inf before the softmax (core.attention.reference_attention) and pass "
            "is_causal to the decoder self-attention's kernel", "critical", causal[t].relative, LEAK, first or ""))
    if padding is not None and padding.relative > LEAK:
        pad, src = batch.pad_id, batch.src
        longer = [nn.functional.pad(x, (0, 3), value=pad) for x in (src, tokens)]
        before, after = _layer_outputs(model, src, tokens), _layer_outputs(model, *longer)
        first_enc, enc = _first_moving_layer(before, after, src != pad, "encoder")
        first_dec, dec = _first_moving_layer(before, after, tokens != pad, "decoder")
        result.measured["padding_leak_by_layer"] = {**enc, **dec}
        first = first_enc or first_dec or ""
        result.add(Finding(
            "mask", "padding leak: real positions attend to padding",
            f"3 extra pad tokens move real outputs by {padding.relative:.2g} of the largest logit; enters at "
            f"{first or 'the output'}{by_weight}",
            "the padding mask is not applied (or filled with 0 instead of -inf): outputs depend on how a batch is "
            "padded",
            "pass the (B, 1, 1, S) padding mask to every attention layer and fill masked scores with -inf",
            "error", padding.relative, LEAK, first))
    return result
