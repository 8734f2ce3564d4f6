"""Checks 1 and 2: attention saturation per layer and head, and the scale of the scores.

Per layer and head, over query rows that are real tokens with at least two keys to choose from:

* **saturation**: the share of rows whose largest weight exceeds 0.99 (a near one-hot softmax);
* **entropy** of a row against the uniform entropy log(n) over the keys it may attend (1 = uniform);
* **softmax gain** ‖∂softmax/∂scores‖_F = √(Σp² − 2Σp³ + (Σp²)²): what a row passes back to its scores (0 for a
  one-hot row, about 1/√n for a uniform one);
* **score variance**: the within-row variance of q·k/√d_k (+ bias) computed from the layer's own projections;
* **effective scale**: the slope of log-weights against those scores, within rows (the softmax is shift
  invariant). A correct kernel gives exactly 1 with a fit R² of 1; one that leaves out 1/√d_k gives √d_k; a
  kernel that adds terms of its own (a learned bias) gives R² < 1 and the slope is not interpreted;
* **weight on forbidden keys**: the attention mass a row puts where its mask says it may not attend
  (exactly 0 for the core kernels; check 3 measures what that does to the outputs).

For a trained model saturation alone is not a fault (heads learn to point), so the trained-model test of
the scale is the **temperature probe**: multiply every query by τ (every score by τ) and see whether the
model's own loss on the batch would be clearly lower at some τ ≥ 4 or ≤ 1/4. After training it should not be:
τ is one direction of the Q weights the optimizer has already searched. Q/K weights scaled after training (or a
scale changed between training and inference) show up as a best τ far from 1.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from zoo.analysis.doctor.batch import Batch, loss, query_mask
from zoo.analysis.doctor.capture import AttentionCall, attention_modules
from zoo.analysis.doctor.findings import CheckResult, Finding

SATURATED_WEIGHT = 0.99  # a row is saturated when its largest weight exceeds this (as the lab's lessons count)
# At initialisation a healthy head has ~0 saturated rows: with Xavier Q/K the scores have a std of about 0.5, and a
# row saturates only when its top score beats the others by ln(99·(n−1)) ≈ 7 nats. Half the rows is far out.
SATURATED_HEAD = 0.5
# Within-row score variance at initialisation: 1 is the design point of the 1/√d_k scale; beyond 10 (std > 3) rows
# already approach one-hot; Xavier gives ~0.1-0.3, std-1.0 Q/K/V several hundred.
SCORE_VARIANCE = 10.0
# A correct kernel's effective scale is 1 to float32 rounding (~1e-6); a missing 1/√d_k gives √d_k >= 2 for any
# d_k >= 4. Flag outside [1/1.25, 1.25] when the fit is exact (R² > 0.999: the kernel's scores are linear in ours).
SCALE_TOLERANCE = 1.25
EXACT_FIT = 0.999
TEMPERATURES = (0.25, 0.5, 1.0, 2.0, 4.0)  # extended by halving / doubling while the best is at an end
TEMPERATURE_LIMIT = 64.0
# The temperature probe flags a best τ at least 4× away from 1 that lowers the loss by 5 % (and 0.01 nats): a trained
# model's loss is flat to first order in τ (one direction of W^Q the optimizer searched). Measured: healthy tiny models
# after 10-150 steps have their best τ at 1 (or gain < 0.3 %); the README's main run has its best at τ = 0.5 (4.5 %,
# 0.003 nats: hence the 4× gate); Q/K ×4 after training (scores ×16) puts the best at τ = 1/16-1/32, gaining 12-63 %.
TEMPERATURE_GATE = 2  # |log2 τ| of the best scale
TEMPERATURE_GAIN = 0.05
TEMPERATURE_NATS = 0.01


def _row_stats(call: AttentionCall, rows: Tensor) -> dict[str, Tensor]:
    """Per-head means ``(H,)`` over the valid ``rows`` ``(B, H, Nq)``."""
    w = call.weights.double()  # (B, H, Nq, Nk)
    allowed = call.allowed
    n_allowed = allowed.sum(-1).clamp_min(1)  # (B, H, Nq)
    top = w.masked_fill(~allowed, 0).amax(-1)
    entropy = -(w * w.clamp_min(1e-300).log()).sum(-1)
    uniform = n_allowed.double().log().clamp_min(1e-12)
    p2, p3 = w.pow(2).sum(-1), w.pow(3).sum(-1)
    gain = (p2 - 2 * p3 + p2 * p2).clamp_min(0).sqrt()
    forbidden = w.masked_fill(allowed, 0).sum(-1)
    s = call.scores()
    count = allowed.sum(-1).clamp_min(1)
    mean = s.masked_fill(~allowed, 0).sum(-1, keepdim=True) / count[..., None]
    variance = ((s - mean).masked_fill(~allowed, 0).pow(2).sum(-1)) / count  # (B, H, Nq) within-row variance

    def per_head(x: Tensor) -> Tensor:
        r = rows.double()
        return (x.double() * r).sum((0, 2)) / r.sum((0, 2)).clamp_min(1)

    return {"saturation": per_head(top > SATURATED_WEIGHT), "entropy": per_head(entropy / uniform),
            "gain": per_head(gain), "forbidden": per_head(forbidden), "score_variance": per_head(variance),
            "forbidden_max": (forbidden * rows).amax((0, 2))}


def effective_scale(call: AttentionCall, rows: Tensor) -> tuple[float, float]:
    """(slope, R²) of log-weights against :meth:`AttentionCall.scores`, within rows, over the allowed keys whose
    weight did not underflow. Slope 1 and R² 1: the kernel computed softmax(q·k/√d_k + bias)."""
    w = call.weights.double()
    include = call.allowed & (w > 1e-30) & rows[..., None]  # (B, H, Nq, Nk)
    n = include.sum(-1, keepdim=True).clamp_min(1)
    s, lw = call.scores(), w.clamp_min(1e-300).log()
    ds = (s - (s * include).sum(-1, keepdim=True) / n) * include
    dl = (lw - (lw * include).sum(-1, keepdim=True) / n) * include
    sxx, sxy, syy = (ds * ds).sum(), (ds * dl).sum(), (dl * dl).sum()
    if sxx <= 0 or syy <= 0:
        return math.nan, math.nan
    slope = float(sxy / sxx)
    residual = float(((dl - slope * ds) ** 2).sum())
    return slope, 1.0 - residual / float(syy)


def valid_rows(call: AttentionCall, batch: Batch, name: str) -> Tensor:
    """Rows ``(B, H, Nq)`` that are real tokens and may attend at least two keys."""
    rows = call.allowed.sum(-1) >= 2
    queries = query_mask(batch, name, call.q.shape[-2])
    return rows & queries[:, None, :] if queries is not None else rows


def attention_checks(calls: dict[str, AttentionCall], batch: Batch, trained: bool) -> tuple[CheckResult, CheckResult]:
    """Checks 1 (``attention``) and 2 (``score_scale``) from one forward's records (see the module docstring)."""
    sat = CheckResult("attention", thresholds={
        "saturated row": f"largest weight > {SATURATED_WEIGHT}",
        "saturated head": f"> {SATURATED_HEAD:.0%} of its rows saturated (at initialisation; after training heads "
                          "may point on purpose, and the temperature probe of check 2 tests the scale)"})
    scale = CheckResult("score_scale", thresholds={
        "score variance": f"within-row Var(q·k/√d_k) > {SCORE_VARIANCE:g} at initialisation",
        "effective scale": f"slope of log-weights vs q·k/√d_k outside [{1 / SCALE_TOLERANCE:.2f}, {SCALE_TOLERANCE}] "
                           f"when R² > {EXACT_FIT}",
        "temperature probe": f"after training: loss lower by > {TEMPERATURE_GAIN:.0%} (and {TEMPERATURE_NATS} nats) "
                             f"at a global score scale τ = 2^k, |k| >= {TEMPERATURE_GATE} (up to "
                             f"{TEMPERATURE_LIMIT:g})"})
    layers: dict[str, dict] = {}
    for name, call in calls.items():
        if call.weights is None:
            layers[name] = {"weights": "the kernel returns no attention weights"}
            continue
        rows = valid_rows(call, batch, name)
        stats = _row_stats(call, rows)
        slope, r2 = effective_scale(call, rows)
        layers[name] = {**{k: v.tolist() for k, v in stats.items()}, "effective_scale": slope, "fit_r2": r2,
                        "d_k": call.d_k, "cross": call.cross}
    sat.measured["layers"] = {n: {k: v for k, v in s.items() if k in ("saturation", "entropy", "gain", "weights")}
                              for n, s in layers.items()}
    scale.measured["layers"] = {n: {k: v for k, v in s.items()
                                    if k in ("score_variance", "effective_scale", "fit_r2", "d_k", "weights")}
                                for n, s in layers.items()}
    scale.measured["forbidden_weight"] = {n: max(s["forbidden_max"]) for n, s in layers.items() if "forbidden" in s}
    measured = {n: s for n, s in layers.items() if "saturation" in s}
    if not measured:
        reason = "no attention layer returned weights" if calls else "the model has no core multi-head attention"
        return sat.skip(reason), scale.skip(reason)
    _scale_findings(scale, measured, trained)
    if not trained:
        _saturation_findings(sat, measured)
    return sat, scale


def _heads(measured: dict[str, dict], key: str) -> list[tuple[float, str, int]]:
    return sorted(((v, name, h) for name, s in measured.items() for h, v in enumerate(s[key])), reverse=True)


def _saturation_findings(result: CheckResult, measured: dict[str, dict]) -> None:
    heads = _heads(measured, "saturation")
    bad = [(v, n, h) for v, n, h in heads if v > SATURATED_HEAD]
    result.measured["saturated_heads"] = len(bad)
    result.measured["heads"] = len(heads)
    if bad:
        v, name, head = bad[0]
        gain = measured[name]["gain"][head]
        result.add(Finding(
            "attention", "saturated attention heads",
            f"{len(bad)} of {len(heads)} heads have > {SATURATED_HEAD:.0%} of rows with a weight > {SATURATED_WEIGHT}; "
            f"worst {name} head {head}: {v:.0%} saturated, softmax gain {gain:.3f}",
            "scores far too large: a missing 1/√d_k scale, score variance far from 1, or a large Q/K initialisation",
            "keep the 1/√d_k scale (core.attention) and the core's Xavier init of qkv (core/init.py)",
            "warning", v, SATURATED_HEAD, f"{name} head {head}"))


def _scale_findings(result: CheckResult, measured: dict[str, dict], trained: bool) -> None:
    exact = {n: s for n, s in measured.items() if s["fit_r2"] == s["fit_r2"] and s["fit_r2"] > EXACT_FIT}
    off = sorted(((abs(math.log(s["effective_scale"])), n) for n, s in exact.items()
                  if s["effective_scale"] > 0 and not 1 / SCALE_TOLERANCE <= s["effective_scale"] <= SCALE_TOLERANCE),
                 reverse=True)
    if off:
        first = next(n for n in measured if n in {name for _, name in off})  # in model order
        name = off[0][1]  # the furthest from 1
        s = measured[name]
        root = s["d_k"] ** 0.5
        missing = abs(s["effective_scale"] / root - 1) < 0.05
        result.add(Finding(
            "score_scale", "attention kernel scales the scores wrongly",
            f"effective scale {s['effective_scale']:.3f} (√d_k = {root:.3f}) in {len(off)} of {len(exact)} layers, "
            f"fit R² {s['fit_r2']:.4f}; first {first}",
            "the kernel leaves out the 1/√d_k scale" if missing else "the kernel multiplies q·k by a wrong factor",
            "compute softmax(Q Kᵀ / √d_k) V: use core.attention.reference_attention / the sdpa kernel, or pass "
            "scale=1/√d_k to the kernel", "error", s["effective_scale"], SCALE_TOLERANCE, name))
    variances = _heads(measured, "score_variance")
    result.measured["max_score_variance"] = variances[0][0]
    result.measured["effective_scales"] = {n: s["effective_scale"] for n, s in measured.items()}
    if not trained and variances[0][0] > SCORE_VARIANCE:
        v, name, head = variances[0]
        count = sum(1 for x, _, _ in variances if x > SCORE_VARIANCE)
        result.add(Finding(
            "score_scale", "attention scores far from unit variance",
            f"within-row Var(q·k/√d_k) {v:.3g} in {name} head {head} ({count} of {len(variances)} heads > "
            f"{SCORE_VARIANCE:g})", "large Q/K weights at initialisation (or inputs far from unit scale)",
            "initialise qkv with the core's scheme (init='xavier' or 'normal'; core/init.py)", "warning", v,
            SCORE_VARIANCE, f"{name} head {head}"))


@torch.no_grad()
def temperature_probe(model: nn.Module, batch: Batch, result: CheckResult) -> None:
    """Add the temperature probe's numbers (and a finding) to ``result``; restores the weights exactly."""
    modules = attention_modules(model)
    if not modules:
        return
    saved = {n: (m.qkv.weight.detach().clone(), None if m.qkv.bias is None else m.qkv.bias.detach().clone())
             for n, m in modules.items()}

    def scaled(tau: float, only: str | None = None) -> float:
        for name, m in modules.items():
            if only is None or name == only:
                m.qkv.weight[: m.d_model].mul_(tau)  # the W^Q rows: every score of the layer times tau
                if m.qkv.bias is not None:
                    m.qkv.bias[: m.d_model].mul_(tau)
        try:
            return float(loss(model, batch))
        finally:
            for name, m in modules.items():
                m.qkv.weight.copy_(saved[name][0])
                if saved[name][1] is not None:
                    m.qkv.bias.copy_(saved[name][1])

    losses = {tau: scaled(tau) for tau in TEMPERATURES}
    best = min(losses, key=losses.get)
    while best in (min(losses), max(losses)) and best != 1.0 and 1 / TEMPERATURE_LIMIT < best < TEMPERATURE_LIMIT:
        tau = best / 2 if best == min(losses) else best * 2  # the best is at an end of the grid: look further
        losses[tau] = scaled(tau)
        best = min(losses, key=losses.get)
    losses = dict(sorted(losses.items()))
    here = losses[1.0]
    result.measured["temperature_losses"] = {str(t): v for t, v in losses.items()}
    gain = here - losses[best]
    if abs(math.log2(best)) < TEMPERATURE_GATE or gain < max(TEMPERATURE_NATS, TEMPERATURE_GAIN * here):
        return
    per_layer = sorted(((here - scaled(best, name), name) for name in modules), reverse=True)
    result.measured["temperature_per_layer"] = {name: g for g, name in per_layer}
    worst = [f"{name} ({g:+.2f} nats)" for g, name in per_layer[:3]]
    factor = f"1/{1 / best:g}" if best < 1 else f"{best:g}"
    result.add(Finding(
        "score_scale", f"attention scores too {'large' if best < 1 else 'small'} for the model's own loss",
        f"loss {here:.3f} as the weights are, {losses[best]:.3f} with every score ×{factor}; most gain from "
        f"rescaling {', '.join(worst)}",
        "Q/K weights (or the kernel's scale) changed after training: the model's own loss prefers scores "
        f"{max(best, 1 / best):g}× {'smaller' if best < 1 else 'larger'}",
        "restore the trained Q/K weights and the kernel the model was trained with (check the checkpoint and the "
        "kernel options)", "error", gain / here, TEMPERATURE_GAIN, per_layer[0][1]))
