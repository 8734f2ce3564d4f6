"""The statistics of a comparison that holds up: intervals, paired tests, Holm's correction, a verdict.

Pure functions of numbers, no task knowledge (:mod:`tasks.paired` turns a task's per-example records into
them). The conventions:

* a mean over seeds gets a Student-t 95 % interval (:func:`t_interval`; seeds are few, so not a normal one);
* a difference between two systems scored on the *same* test examples is tested paired, example by
  example: a paired bootstrap of the test set (:func:`bootstrap_p_value`, resamples drawn as sacreBLEU's
  ``paired_bs`` draws them), McNemar's exact test on per-example correctness (:func:`mcnemar_exact`), a sign-flip
  randomisation test on per-example differences (:func:`sign_flip_test`, the same test for fractional
  differences), or Wilcoxon's signed-rank test (:func:`wilcoxon_test`, SciPy);
* the p-values of the variants of one comparison are corrected together with Holm's step-down method
  (:func:`holm`), which keeps the family-wise error rate at α without Bonferroni's loss of power;
* :func:`verdict` reads the corrected p-value and the sign of the effect in the metric's direction.

Resampling is seeded: the same inputs give the same intervals and p-values on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

VERDICTS = ("better", "worse", "no significant difference")
BOOTSTRAP_SEED = 12345  # sacreBLEU's default (SACREBLEU_SEED): the same resamples as its paired_bs


def check_alpha(alpha: float) -> None:
    """Raise unless ``alpha`` is a significance level strictly between 0 and 1."""
    from core.errors import check_number

    check_number("alpha", alpha, 0, 1, low_open=True, high_open=True, hint="e.g. 0.05")


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, tuple[float, float] | None]:
    """The mean of ``values`` and its Student-t interval: mean ± t_{(1+c)/2, n-1} · s / √n.

    Returns ``(mean, None)`` for a single value (one seed has no spread to estimate).

    Shape:
        values (n,) -> (mean, (low, high)).
    """
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or not len(x):
        raise ValueError(f"t_interval needs a non-empty list of numbers, got shape {x.shape}")
    mean = float(x.mean())
    if len(x) < 2:
        return mean, None
    half = float(stats.t.ppf(0.5 + confidence / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return mean, (mean - half, mean + half)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input order.

    Sorted ascending, the i-th smallest p (i from 0) becomes ``max_{j <= i} min(1, (m - j) · p_(j))``: an
    adjusted p below α rejects exactly the hypotheses Holm's step-down procedure rejects at level α.

    Shape:
        p_values (m,) -> (m,).
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1 or np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
        raise ValueError(f"p-values must be numbers in [0, 1], got {list(p_values)}")
    m, order = len(p), np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out.tolist()


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar test of a paired 2×2 table with discordant counts ``b`` and ``c``.

    Under "no difference" each of the ``b + c`` discordant examples (right for one system only) is equally
    likely to favour either system, so ``b ~ Binomial(b + c, 1/2)``; p = P(as far from (b + c)/2 as observed).
    No discordant example gives p = 1.
    """
    for name, value in (("b", b), ("c", c)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be a count (an int >= 0), got {value!r}")
    if b + c == 0:
        return 1.0
    from scipy import stats

    return float(stats.binomtest(int(b), int(b + c), 0.5).pvalue)


def sign_flip_test(differences: Sequence[float], resamples: int = 10_000, seed: int = BOOTSTRAP_SEED) -> float:
    """Two-sided paired randomisation test of ``mean(d) = 0``: each example's difference flips sign at random.

    p = (1 + #{|Σ ε_i d_i| >= |Σ d_i|}) / (1 + resamples), ε_i = ±1 uniform. For differences in {-1, 0, 1}
    (one seed's per-example correctness) it estimates McNemar's exact p-value; for fractions (correctness
    averaged over seeds) it is the same idea where McNemar's table no longer exists.

    Shape:
        differences (n,) -> p.
    """
    d = np.asarray(differences, dtype=np.float64)
    d = d[d != 0]  # a zero difference contributes nothing whatever its sign
    observed = abs(d.sum())
    if observed == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, resamples, 1000):  # in blocks: (1000, n) signs at a time
        signs = rng.integers(0, 2, size=(min(1000, resamples - start), len(d))) * 2 - 1
        hits += int(np.sum(np.abs(signs @ d) >= observed - 1e-9 * observed))
    return (1 + hits) / (1 + resamples)


def wilcoxon_test(differences: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank test of paired differences (SciPy, zeros dropped as Wilcoxon did).

    SciPy picks the exact distribution for small samples without ties, else the normal approximation. NaN
    differences (a value one system has no score for) are left out; all-zero differences give p = 1.

    Shape:
        differences (n,) -> p.
    """
    from scipy import stats

    d = np.asarray(differences, dtype=np.float64)
    d = d[~np.isnan(d)]
    if not np.any(d != 0):
        return 1.0
    return float(stats.wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)


def resample_counts(n: int, resamples: int, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """How often each of ``n`` examples appears in each of ``resamples`` bootstrap resamples of size ``n``.

    The resamples are drawn as sacreBLEU draws them (``default_rng(seed).choice(n, (resamples, n))``), so
    one seed's resampled BLEU scores are sacreBLEU's ``paired_bs`` ones. A sum over a resample of per-example
    statistics ``S (n, k)`` is then ``counts @ S``.

    Shape:
        -> (resamples, n) float64.
    """
    if n < 1:
        raise ValueError(f"cannot resample an empty test set (n={n})")
    index = np.random.default_rng(seed).choice(n, size=(resamples, n), replace=True)  # (B, n)
    counts = np.zeros((resamples, n))
    np.add.at(counts, (np.arange(resamples)[:, None], index), 1.0)
    return counts


def bootstrap_p_value(resampled_deltas: np.ndarray, observed_delta: float) -> float:
    """Two-sided p-value of a paired bootstrap: the resampled differences, shifted to mean 0, stand for the
    null distribution; p = (1 + #{|Δ* − mean Δ*| >= |Δ|}) / (1 + B).

    This is the test the percentile interval of Δ inverts: p < 0.05 goes with a 95 % interval that excludes
    0 (up to the skew of Δ*). sacreBLEU's ``paired_bs`` instead shifts the *absolute* differences
    (``|Δ*| − mean|Δ*| > |Δ|``): when Δ* straddles 0 the folded distribution is much narrower than Δ*'s, and a
    difference whose own bootstrap interval covers 0 comes out "significant" (measured here: BLEU 0.0065 vs
    0.0031 from 1 and 4 matched unigrams, interval [−0.0035, +0.0054], sacreBLEU p = 0.001, this p = 0.44);
    and its strict ``>`` gives two identical systems p = 1/(B + 1). Two identical systems get p = 1 here.

    Shape:
        resampled_deltas (B,) -> p.
    """
    deltas = np.asarray(resampled_deltas, dtype=np.float64)
    null = np.abs(deltas - deltas.mean())
    observed = abs(observed_delta)
    hits = int(np.sum(null >= observed - 1e-9 * max(observed, 1e-12)))
    return (1 + hits) / (1 + len(null))


def percentile_interval(samples: np.ndarray, confidence: float = 0.95) -> tuple[float, float] | None:
    """The central ``confidence`` interval of bootstrap ``samples`` (percentile method); None without samples.

    Shape:
        samples (B,) -> (low, high).
    """
    x = np.asarray(samples, dtype=np.float64)
    x = x[~np.isnan(x)]
    if not len(x):
        return None
    low, high = np.percentile(x, [50 * (1 - confidence), 50 * (1 + confidence)])
    return float(low), float(high)


def verdict(delta: float | None, p_holm: float | None, alpha: float, higher_is_better: bool) -> str:
    """``better``, ``worse`` or ``no significant difference`` (Holm-corrected p at ``alpha``, in the
    metric's direction: for HD95 a negative Δ is better)."""
    if delta is None or p_holm is None or p_holm >= alpha or delta == 0:
        return VERDICTS[2]
    return VERDICTS[0] if (delta > 0) == higher_is_better else VERDICTS[1]
