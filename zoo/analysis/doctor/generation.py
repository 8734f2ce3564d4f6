"""Check 7: the gap between training (teacher forcing) and inference (free-running greedy decoding).

For a causal model that decodes as it trains, greedy decoding reproduces the reference exactly up to the first
position where the teacher-forced prediction is wrong: before that, both read the same prefix. So on every
sentence the first greedy divergence from the reference should fall exactly at the first teacher-forced error.
A sentence whose greedy output diverges *earlier* reveals a model that predicts differently when it reads its
own outputs: a leak of the future in training (check 3), a KV cache that differs from full recomputation,
dropout or another train-only behaviour left on, or positions counted differently while decoding. After that
first error the two regimes part by nature (exposure bias: the model never trained on its own mistakes);
that gap is reported as token accuracies, not flagged, since it depends on the data.

Thresholds: more than 5 % of sentences diverging earlier than teacher forcing predicts (ties between two nearly
equal logits can flip a rare token between the cached and the full computation), and a KV-cache drift above 1e-4
of the largest logit (float32 rounding is ~1e-7).

Shape legend: B batch, T target positions.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from core.decoding import greedy_decode
from zoo.analysis import probes
from zoo.analysis.doctor.batch import Batch, logits
from zoo.analysis.doctor.findings import CheckResult, Finding

EARLY_SHARE = 0.05
CACHE_DRIFT = 1e-4


def _first_error(hits: Tensor, real: Tensor) -> Tensor:
    """Index ``(B,)`` of the first real position that is not a hit (the length when every one is)."""
    wrong = real & ~hits
    length = real.sum(1)
    first = torch.where(wrong.any(1), wrong.float().argmax(1), length.float())
    return first.long()


@torch.no_grad()
def generation_checks(model: nn.Module, batch: Batch) -> CheckResult:
    """Check 7 on a seq2seq model that decodes (see the module docstring)."""
    result = CheckResult("generation", thresholds={
        "early divergence": f"> {EARLY_SHARE:.0%} of sentences whose greedy output leaves the reference before "
                            "the first teacher-forced error",
        "KV cache": f"cached vs full logits differ by > {CACHE_DRIFT:g} of the largest"})
    if batch.kind != "seq2seq" or not probes.is_autoregressive(model):
        return result.skip("no autoregressive decoder")
    labels, pad = batch.labels, batch.pad_id
    real = labels != pad  # (B, T)
    forced = logits(model, batch).argmax(-1)  # (B, T)
    forced_hits = forced == labels
    greedy = greedy_decode(model, batch.src, max_len=labels.shape[1])
    free = torch.full_like(labels, pad)
    n = min(greedy.shape[1], labels.shape[1])
    free[:, :n] = greedy[:, :n]
    free_hits = free == labels
    tf_first, fr_first = _first_error(forced_hits, real), _first_error(free_hits, real)
    early = fr_first < tf_first
    drift = probes.cache_drift(model, batch.src, batch.tgt_in)
    m = result.measured
    m.update({"teacher_forced_accuracy": float(forced_hits[real].float().mean()),
              "greedy_accuracy": float(free_hits[real].float().mean()),
              "teacher_forced_exact": float((tf_first == real.sum(1)).float().mean()),
              "greedy_exact": float((fr_first == real.sum(1)).float().mean()),
              "early_divergence_share": float(early.float().mean()),
              "mean_first_error": {"teacher_forced": float(tf_first.float().mean()),
                                   "greedy": float(fr_first.float().mean())},
              "cache_drift": drift.relative})
    if m["early_divergence_share"] > EARLY_SHARE:
        result.add(Finding(
            "generation", "train/inference gap: decoding diverges before teacher forcing errs",
            f"{m['early_divergence_share']:.0%} of sentences leave the reference earlier when decoding (mean first "
            f"error at {m['mean_first_error']['greedy']:.1f} vs {m['mean_first_error']['teacher_forced']:.1f} "
            f"teacher-forced); token accuracy {m['greedy_accuracy']:.0%} greedy vs "
            f"{m['teacher_forced_accuracy']:.0%} teacher-forced",
            "training sees something decoding does not: a leak of future tokens (see the mask check), or a decode "
            "path (cache, positions, dropout) that differs from the training forward",
            "make the decoder causal (-inf masks) and decode with the same kernel and positions as in training",
            "error", m["early_divergence_share"], EARLY_SHARE, "decoder"))
    if drift.relative > CACHE_DRIFT:
        result.add(Finding(
            "generation", "KV-cache decoding differs from full recomputation",
            f"cached logits differ by {drift.relative:.2g} of the largest (zoo.analysis.probes.cache_drift)",
            "the incremental path (KVCache, positions counted from the cache length, a recurrent kernel's step) and "
            "the full forward compute different things: one of them is wrong (a leak in the full forward shows in "
            "the mask check)", "make the full forward causal and count cached positions from the cache length "
            "(core/multihead.py); a recurrent kernel's step must equal its forward", "error", drift.relative,
            CACHE_DRIFT, "decoder"))
    return result
