"""Check 6: the training curve, from a run's ``metrics.jsonl`` (one row per epoch) and, when the run was trained
with ``--doctor``, its per-step log (``doctor/steps.jsonl``: step, loss, learning rate).

* **non-finite** losses;
* **stuck**: the loss ends at or above 97 % of where it started, or ends flat within 0.1 nats of (or above) the
  *unigram plateau* (the loss of predicting target-token frequencies without reading anything, where the lab's
  failed Post-LN runs sit; the task layer computes it);
* **saw-teeth**: after the warm-up, the loss (per step: a moving average over max(20, n/20) steps; per epoch: as
  logged) climbs back above its running minimum by 10 % (steps) or 5 % (epochs): plateau, drop, climb, the
  signature of too large a rate. The smoothing matters: single steps of length-bucketed batches scatter by ±15 %;
  averaged over 20 steps a healthy tiny run of the translation task climbs at most 2.7 %, the lab's tiny model at
  a constant 3e-2 climbs 12.5 % off its plateau;
* **crawl**: a monotone curve still falling at the end (the last quarter after the warm-up holds more than 7 %
  of its drop) that has not even got below the unigram plateau (without a plateau: fell by less than 25 %):
  a rate too small to reach the fast phase, where any usable rate leaves the plateau within tens of steps.
  Measured on the lab's tiny model, 200 Adam steps: at 3e-5 the loss fell 13 % to 4.78, above the plateau
  3.76, and the last quarter held 15 % of the drop; a healthy Noam run ended at 1.27; runs stuck at a too-large
  rate sit on the plateau but hold 1-2 % of their drop at the end;
* **no warm-up on a Post-LN model**: the schedule starts at (nearly) its peak, on a model with the norm after
  the residual (the lab's ``warmup`` and ``norm`` lessons: the combination that sticks on the unigram plateau);
* **validation/training gap**: the loss on held-out data above 1.5× the training loss and by more than 0.2 nats,
  measured on the model itself; and a validation metric more than 5 % below its best in each of the last two
  epochs while the training loss kept falling (a single noisy epoch is not a trend).

The shape checks (stuck, saw-teeth, crawl) need at least 50 logged steps or 3 epochs: a warm-up's first steps
are too short to say anything. The thresholds are relative, so they do not depend on the task's loss scale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from zoo.analysis.doctor.findings import CheckResult, Finding

STUCK = 0.97
PLATEAU_MARGIN = 0.1  # nats: a final loss this close to the unigram plateau (or above it) sits on it
MIN_STEPS, MIN_EPOCHS = 50, 3  # fewer logged steps (or epochs) than this are too short to judge the curve's shape
SPIKE_STEPS, SPIKE_EPOCHS = 0.10, 0.05
SPIKES = 1
CRAWL_DROP = 0.25  # without a plateau to compare with
CRAWL_LATE = 0.07
GAP_RATIO, GAP_NATS = 1.5, 0.2
METRIC_DROP = 0.05


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def spikes(values: Sequence[float], rise: float) -> int:
    """How many times ``values`` climb back above ``(1 + rise)`` × their running minimum (separate episodes)."""
    count, low, above = 0, math.inf, False
    for v in values:
        low = min(low, v)
        now = v > low * (1 + rise)
        count += now and not above
        above = now
    return count


def late_share(values: Sequence[float]) -> float:
    """Share of the total drop of ``values`` made in their last quarter (NaN when they did not fall)."""
    total = values[0] - values[-1]
    if total <= 0 or len(values) < 4:
        return math.nan
    return (values[(3 * len(values)) // 4] - values[-1]) / total


def warmup_end(lrs: Sequence[float]) -> int:
    """Index of the first step whose rate reaches 90 % of the largest (0 without a warm-up)."""
    peak = max(lrs)
    return next(i for i, lr in enumerate(lrs) if lr >= 0.9 * peak)


def curve_checks(history: Sequence[dict[str, Any]] = (), steps: Sequence[dict[str, Any]] = (),
                 post_ln: bool | None = None, warmup_steps: int | None = None, metric: str | None = None,
                 higher_is_better: bool = True, gap: dict[str, float] | None = None,
                 plateau: float | None = None) -> CheckResult:
    """Check 6 (see the module docstring).

    Args:
        history: epoch rows with ``train_loss`` (and ``metric``), as in ``metrics.jsonl``.
        steps: per-step rows with ``loss`` and ``lr``; when given, the shape checks read them.
        post_ln, warmup_steps: the model's norm placement and the configured warm-up, when known.
        gap: ``{"train": loss, "valid": loss}`` measured on the model.
        plateau: the unigram plateau of the training targets (nats), when the task knows it.
    """
    result = CheckResult("curve", thresholds={
        "stuck": f"final loss >= {STUCK:g} × the first, or within {PLATEAU_MARGIN} nats of the unigram plateau",
        "saw-teeth": f"a climb above the running minimum by {SPIKE_STEPS:.0%} (steps, smoothed over max(20, n/20)) "
                     f"/ {SPIKE_EPOCHS:.0%} (epochs), after the warm-up",
        "crawl": f"monotone, > {CRAWL_LATE:.0%} of the drop after the warm-up still in its last quarter, and above "
                 f"the unigram plateau + {PLATEAU_MARGIN} nats (without a plateau: fell < {CRAWL_DROP:.0%})",
        "no warm-up": "Post-LN model and a schedule that starts at >= 50 % of its peak (or --warmup <= 1)",
        "gap": f"held-out loss > {GAP_RATIO:g}× and > {GAP_NATS} nats above the training loss; validation "
               f"{metric or 'metric'} > {METRIC_DROP:.0%} below its best"})
    m = result.measured
    epoch_losses = [float(r["train_loss"]) for r in history if "train_loss" in r]
    step_losses = [float(r["loss"]) for r in steps if "loss" in r]
    lrs = [float(r["lr"]) for r in steps if "lr" in r]
    m.update({"epochs": len(epoch_losses), "steps": len(step_losses), "epoch_losses": epoch_losses,
              "plateau": plateau})
    if gap:
        m["gap"] = gap
    if len(epoch_losses) + len(step_losses) == 0 and not gap:
        return result.skip("no training history (metrics.jsonl) and no per-step log")
    bad = [v for v in epoch_losses + step_losses if not math.isfinite(v)]
    if bad:
        result.add(Finding("curve", "non-finite training loss", f"{len(bad)} NaN/inf losses in the log",
                           "a rate too large, an overflow, or a log of zero", "lower --lr, raise --warmup, enable "
                           "--grad-clip", "critical", math.inf, 0.0))
        return result
    start = 0
    if step_losses:
        window = max(20, len(step_losses) // 20)
        series, rise, unit = smooth(step_losses, window), SPIKE_STEPS, "steps"
        start = warmup_end(lrs) if len(lrs) == len(step_losses) else 0
        m.update({"smoothing_window": window, "warmup_end": start,
                  "step_curve": series[:: max(1, len(series) // 400)]})
    else:
        series, rise, unit = epoch_losses, SPIKE_EPOCHS, "epochs"
    m["series"] = unit
    no_warmup = None
    if lrs:
        no_warmup = lrs[0] >= 0.5 * max(lrs)
    elif warmup_steps is not None:
        no_warmup = warmup_steps <= 1
    m["no_warmup"], m["post_ln"] = no_warmup, post_ln
    cold = bool(no_warmup and post_ln)
    _shape_findings(result, series, start, rise, unit, cold, plateau)
    if cold and not any(f.problem.startswith("loss") for f in result.findings):
        result.add(Finding("curve", "no warm-up on a Post-LN model",
                           f"the learning rate starts at {lrs[0] / max(lrs):.0%} of its peak" if lrs
                           else f"--warmup {warmup_steps}",
                           "Post-LN's large gradients near the output meet the largest steps at once",
                           "--warmup (e.g. a tenth of the steps) or --variant pre-ln", "warning", 1.0, 0.5))
    _gap_findings(result, history, metric, higher_is_better, gap)
    return result


def _shape_findings(result: CheckResult, series: list[float], start: int, rise: float, unit: str, cold: bool,
                    plateau: float | None) -> None:
    m = result.measured
    if len(series) < (MIN_STEPS if unit == "steps" else MIN_EPOCHS):
        m["shape"] = f"too short to judge ({len(series)} {unit}; the shape checks need {MIN_STEPS} steps or " \
                     f"{MIN_EPOCHS} epochs)"
        return
    after = series[start:] if len(series) - start >= 4 else series
    first, final = series[0], series[-1]
    m.update({"first_loss": first, "final_loss": final, "spikes": spikes(after, rise),
              "drop": (first - final) / first if first else 0.0, "late_share": late_share(after)})
    falling = m["late_share"] == m["late_share"] and m["late_share"] > CRAWL_LATE
    on_plateau = plateau is not None and final >= plateau - PLATEAU_MARGIN and not falling
    if final >= STUCK * first or on_plateau:
        if cold:
            cause = ("Post-LN with no warm-up: the first large steps throw the output layers off and the model "
                     "settles on the unigram plateau")
            fix = "--warmup and a lower --lr; or --variant pre-ln"
        else:
            cause = "a rate far too large (the model settles on a plateau) or far too small"
            fix = "try --lr 10× lower and 3× higher; check that gradients reach every layer (the init check)"
        where = f"; the unigram plateau is {plateau:.3f}" if plateau is not None else ""
        problem = "loss stuck at or above the unigram plateau" if on_plateau else "loss does not fall"
        statistic = final / (plateau - PLATEAU_MARGIN) if on_plateau else final / first
        result.add(Finding("curve", problem, f"{first:.3f} → {final:.3f} over {len(series)} {unit}{where}", cause,
                           fix, "error", statistic, 1.0 if on_plateau else STUCK))
        return
    if m["spikes"] >= SPIKES:
        result.add(Finding("curve", "saw-teeth: the loss climbs back up",
                           f"{m['spikes']} climb(s) > {rise:.0%} above the running minimum over {len(after)} {unit} "
                           "after the warm-up", "a learning rate too large (or no warm-up): each overshoot undoes "
                           "progress", "lower --lr (÷3), raise --warmup, keep --grad-clip", "warning", m["spikes"],
                           SPIKES))
    late = m["late_share"]
    above = final > plateau + PLATEAU_MARGIN if plateau is not None else m["drop"] < CRAWL_DROP
    if m["spikes"] == 0 and falling and above:
        statistic = final / (plateau + PLATEAU_MARGIN) if plateau is not None else CRAWL_DROP / max(m["drop"], 1e-6)
        where = f", still above the unigram plateau {plateau:.3f}" if plateau is not None else ""
        result.add(Finding("curve", "slow monotone crawl", f"the loss fell {m['drop']:.0%} ({first:.3f} → "
                           f"{final:.3f} over {len(series)} {unit}{where}) and still falls: {late:.0%} of the drop in "
                           "the last quarter", "a learning rate too small: training never reaches its fast phase",
                           "raise --lr (×3) or train longer", "warning", statistic, 1.0))


def _gap_findings(result: CheckResult, history: Sequence[dict], metric: str | None, higher_is_better: bool,
                  gap: dict[str, float] | None) -> None:
    if gap and gap["valid"] > GAP_RATIO * gap["train"] and gap["valid"] - gap["train"] > GAP_NATS:
        result.add(Finding("curve", "validation/training gap", f"held-out loss {gap['valid']:.3f} vs training "
                           f"{gap['train']:.3f} ({gap['valid'] / max(gap['train'], 1e-12):.1f}×)",
                           "overfitting: the model memorises its training data", "more data, more dropout, weight "
                           "decay, or stop earlier (the best checkpoint)", "warning",
                           gap["valid"] / max(gap["train"], 1e-12), GAP_RATIO))
    rows = [r for r in history if metric and metric in r]
    values = [float(r[metric]) for r in rows]
    if len(values) >= 4 and values[-1] and values[-2]:
        best = max(values) if higher_is_better else min(values)
        last = values[-1]

        def worse(v: float) -> float:
            return (best - v) / abs(best) if higher_is_better else (v - best) / abs(best)

        drop = min(worse(values[-1]), worse(values[-2]))  # both of the last two epochs below the best
        losses = [float(r.get("train_loss", math.nan)) for r in rows[-3:]]
        still_learning = losses[-1] < losses[0]
        result.measured["metric_drop_from_best"] = drop if best else 0.0
        if best and drop > METRIC_DROP and still_learning:
            result.add(Finding("curve", f"validation {metric} falls after its best epoch",
                               f"best {best:.4g} at epoch {values.index(best) + 1}, last {last:.4g} ({drop:.0%} worse)",
                               "overfitting, or a rate that is still too large late in training",
                               "keep the best checkpoint (the default), stop earlier, or decay the rate faster",
                               "warning", drop, METRIC_DROP))
