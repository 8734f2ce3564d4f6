"""``examine(model, batch)``: run every check on one batch and return the ranked :class:`Diagnosis`.

The model is examined in evaluation mode (no dropout) and left as it was found: its mode, its weights (the
temperature probe restores them exactly), its gradients (cleared) and the global random state (forked), so a
training run that the doctor examines before its first step trains exactly as it would have without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from zoo.analysis.doctor.attention import attention_checks, temperature_probe
from zoo.analysis.doctor.batch import Batch, as_batch, logits, loss
from zoo.analysis.doctor.capture import capture_attention
from zoo.analysis.doctor.curve import curve_checks
from zoo.analysis.doctor.depth import init_checks
from zoo.analysis.doctor.findings import CheckResult, Diagnosis
from zoo.analysis.doctor.generation import generation_checks
from zoo.analysis.doctor.leaks import mask_checks
from zoo.analysis.doctor.position import position_checks

MODEL_CHECKS = ("attention", "score_scale", "mask", "position", "init", "generation")


def examine(
    model: nn.Module,
    batch: Batch | tuple,
    kind: str | None = None,
    *,
    trained: bool = False,
    warmup_steps: int | None = None,
    train_batch: Batch | tuple | None = None,
    history: Sequence[dict[str, Any]] = (),
    steps: Sequence[dict[str, Any]] = (),
    metric: str | None = None,
    higher_is_better: bool = True,
    plateau: float | None = None,
) -> Diagnosis:
    """Examine ``model`` on ``batch`` with checks 1-5 and 7 (and 6 when a history, steps or a training batch is
    given); return the :class:`~zoo.analysis.doctor.findings.Diagnosis`.

    Args:
        model: any model built from the package's parts (attention checks need core multi-head attention; the
            mask, position and generation checks an encoder–decoder following :mod:`core.decoding`'s protocol).
        batch: a :class:`~zoo.analysis.doctor.batch.Batch`, ``(src, tgt)`` token ids (whole targets, BOS … EOS) or
            ``(images, labels)``; held-out data is best.
        kind: what a tuple ``batch`` holds (``seq2seq``, ``classification``, ``segmentation``), when the model
            does not say.
        trained: whether the model has been trained; the at-initialisation thresholds (saturation, score
            variance, weight std, gradient ratio by depth) apply only when it has not, the temperature probe only
            when it has.
        warmup_steps: the learning-rate warm-up the model will be (or was) trained with, when known.
        train_batch: a batch of training data: with it, the validation/training loss gap is measured.
        history, steps: a run's epoch rows (``metrics.jsonl``) and per-step rows (``loss``, ``lr``).
        metric, higher_is_better: the validation metric in ``history`` and its direction.
        plateau: the unigram plateau of the training targets (nats), for the curve check.

    Shape: see :mod:`zoo.analysis.doctor.batch`.
    """
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    b = as_batch(model, batch, kind).to(device)
    was_training = model.training
    model.eval()
    forks = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=forks):
            checks = _model_checks(model, b, trained, warmup_steps)
            gap = None
            if train_batch is not None:
                tb = as_batch(model, train_batch, kind).to(device)
                with torch.no_grad():
                    gap = {"train": float(loss(model, tb)), "valid": float(loss(model, b))}
            if history or steps or gap:
                checks.append(curve_checks(history, steps, is_post_ln(model), warmup_steps, metric, higher_is_better,
                                           gap, plateau))
    finally:
        model.train(was_training)
    _link_causes(checks)
    context = {"model": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters()),
               "trained": trained, "batch": b.describe(), "device": str(device)}
    return Diagnosis(checks, context)


def _model_checks(model: nn.Module, b: Batch, trained: bool, warmup_steps: int | None) -> list[CheckResult]:
    with capture_attention(model) as calls, torch.no_grad():
        logits(model, b)
    attention, scale = attention_checks(calls, b, trained)
    if trained:
        temperature_probe(model, b, scale)
    return [attention, scale, mask_checks(model, b, scale.measured.get("forbidden_weight")),
            position_checks(model, b), init_checks(model, b, trained, warmup_steps), generation_checks(model, b)]


def is_post_ln(model: nn.Module) -> bool | None:
    """Whether ``model``'s residual layers put the norm after the addition (None: it has none)."""
    from core.layers import ResidualLayer

    layers = [m for m in model.modules() if isinstance(m, ResidualLayer)]
    return (not layers[0].norm_first) if layers else None


def _link_causes(checks: list[CheckResult]) -> None:
    """Point the symptoms (saturated heads, large score variance) at the root cause another check found."""
    found = {f.check: f for c in checks for f in c.findings if f.severity in ("critical", "error")}
    root = None
    if "init" in found and "initialisation" in found["init"].problem:
        root = f"the Q/K/V initialisation (init check: {found['init'].evidence.split('; ')[-1]})"
    elif "score_scale" in found and "kernel" in found["score_scale"].problem:
        root = f"the kernel's scale (score-scale check: {found['score_scale'].evidence.split(' in ')[0]})"
    if root is None:
        return
    for c in checks:
        for f in c.findings:
            if f.severity == "warning" and f.check in ("attention", "score_scale"):
                f.cause = root
