"""The statistics of a comparison that holds up: intervals, paired tests, Holm's correction, a verdict.

Pure functions of numbers, no task knowledge (:mod:`tasks.compare.paired` turns a task's per-example records into
them). The conventions:

* a mean over seeds gets a Student-t 95 % interval (:func:`t_interval`; seeds are few, so not a normal one);
* a difference Δ between two systems scored on the *same* test examples is resampled paired, example by
  example (:func:`resample_counts`, resamples drawn as sacreBLEU's ``paired_bs`` draws them); its
  percentile interval and the p-value that interval inverts come together (:func:`percentile_test`), so a
  row's p is below α exactly when its interval excludes 0;
* the seeds' own spread enters through a t interval over seeds that adds the test set's bootstrap variance
  (:func:`seed_t_test`), with at least :data:`MIN_SEEDS` seeds a side;
* other tests are reported beside, never deciding: sacreBLEU's own ``paired_bs`` p-value
  (:func:`paired_bs_p_value`), McNemar's exact test (:func:`mcnemar_exact`), a sign-flip randomisation
  test (:func:`sign_flip_test`) and Wilcoxon's signed-rank test (:func:`wilcoxon_test`, SciPy);
* the p-values of the variants of one comparison are corrected together with Holm's step-down method
  (:func:`holm`), which keeps the family-wise error rate at α without Bonferroni's loss of power;
* :func:`verdict` says better or worse only when the corrected p is below α *and* the interval excludes 0
  on the side of Δ (the interval is not corrected, so the conjunction is the stricter of the two).

Resampling is seeded: the same inputs give the same intervals and p-values on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

VERDICTS = ("better", "worse", "no significant difference")
BOOTSTRAP_SEED = 12345  # sacreBLEU's default (SACREBLEU_SEED): the same resamples as its paired_bs
# Fewer than 3 seeds a side leave the seeds' variance at most 1 degree of freedom: t_{0.975, 1} = 12.7 gives an
# interval that says nothing, and Welch–Satterthwaite's approximation is at its worst there.
MIN_SEEDS = 3


def check_alpha(alpha: float) -> None:
    """Raise unless ``alpha`` is a significance level strictly between 0 and 1."""
    from plumbing.errors import check_number

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

    A rank test: it asks whether the differences are symmetric about 0 (a shift of their median), not
    whether their mean is 0, so it may disagree with the mean Δ's interval (eleven small gains and one
    collapse: p = 0.03 for a negative mean Δ). SciPy picks the exact distribution for small samples without
    ties, else the normal approximation. NaN differences (a value one system has no score for) are left
    out; all-zero differences give p = 1.

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


def percentile_test(samples: np.ndarray, alpha: float) -> tuple[tuple[float, float] | None, float]:
    """The (1 − α) percentile interval of bootstrap differences Δ* and the two-sided p-value it inverts.

    p = min(1, 2 · (1 + min(#{Δ* <= 0}, #{Δ* >= 0})) / (B + 1)): the percentile bootstrap's achieved
    significance level (Efron & Tibshirani 1993, ch. 16) with a Monte-Carlo p-value's +1, so that no
    resample on the other side gives 2 / (B + 1), not 0. The interval is ``[Δ*_(m), Δ*_(B+1-m)]`` (order
    statistics, 1-based), m the smallest count whose p is at least α: exactly the values θ that the same
    rule, Δ* counted against θ, does not reject. So p < α if and only if the interval excludes 0, an
    identity rather than an approximation; as B grows the bounds tend to the α/2 and 1 − α/2 quantiles.
    NaN samples (a resample with nothing to score) are left out; none left gives ``(None, 1.0)``.

    Shape:
        samples (B,) -> ((low, high), p).
    """
    x = np.sort(np.asarray(samples, dtype=np.float64))
    x = x[~np.isnan(x)]
    b = len(x)
    if not b:
        return None, 1.0

    def level(count: int) -> float:  # the p-value of ``count`` resamples on the far side; monotone in count
        return min(1.0, 2 * (1 + count) / (b + 1))

    if level(0) >= alpha:
        raise ValueError(f"{b} resamples cannot give p < {alpha:g} (the smallest p is 2/(B+1) = {level(0):.3g}); "
                         f"use at least {math.ceil(2 / alpha)} resamples")
    m = max(1, math.ceil(alpha * (b + 1) / 2 - 1))
    while m > 1 and level(m - 1) >= alpha:  # the float formula decides, as it decides p below
        m -= 1
    while level(m) < alpha:
        m += 1
    p = level(min(int(np.sum(x <= 0)), int(np.sum(x >= 0))))
    return (float(x[m - 1]), float(x[b - m])), p


def paired_bs_p_value(resampled_deltas: np.ndarray, observed_delta: float) -> float:
    """sacreBLEU's ``paired_bs`` p-value from paired resampled differences: its rule, not ours.

    It shifts the *absolute* differences (``|Δ*| − mean|Δ*| > |Δ|``, p = (1 + count) / (B + 1), as in
    ``sacrebleu.significance._paired_bs_test``); when Δ* straddles 0 the folded distribution is much
    narrower than Δ*'s, so its p can be small while the interval of Δ covers 0, and two identical systems
    get 1/(B + 1). Reported beside :func:`percentile_test`'s p so that a cross-check with
    ``sacrebleu --paired-bs`` finds its own number; the verdict does not read it.

    Shape:
        resampled_deltas (B,) -> p.
    """
    folded = np.abs(np.asarray(resampled_deltas, dtype=np.float64))
    return (1 + int(np.sum(folded - folded.mean() > abs(observed_delta)))) / (len(folded) + 1)


def seed_t_test(delta: float, seed_terms: Sequence[tuple[float, int]], test_variance: float,
                alpha: float) -> tuple[tuple[float, float], float]:
    """Δ's (1 − α) interval and two-sided p-value across seeds and the test set, from variance components.

    ``seed_terms``: ``(v, df)`` of each seed component of Var(Δ): ``s²/n`` with ``n − 1`` degrees of freedom for
    each variant's mean over n seeds on a shared test set (Welch's two terms), or one term for the mean of
    per-seed-pair Δ where each pair has its own data (its spread holds that pair's test-set noise too).
    ``test_variance``: the test set's own share, a bootstrap variance taken as known (0 where the seed terms
    already hold it). With SE = √(Σ v + test_variance) and Welch–Satterthwaite's ν = SE⁴ / Σ (v² / df), the
    interval is Δ ± t_{1−α/2, ν} · SE and p = P(|T_ν| >= |Δ| / SE): p < α exactly when the interval excludes
    0. A t rather than a bootstrap over seeds because seeds are few: on 400 simulated null comparisons whose
    seeds' spread dominates (200 cases, seed sd 0.02, per-case noise 0.05), a two-level bootstrap (seeds,
    then test examples; Bouthillier et al. 2021) said better/worse at α = 0.05 in 16 % of them with 3 seeds
    and 9 % with 5, this test in 3 % and 4 %. With no spread at all (SE = 0) a non-zero Δ is certain: p = 0.

    Shape:
        seed_terms (k, 2) -> ((low, high), p).
    """
    from scipy import stats

    se = math.sqrt(sum(v for v, _ in seed_terms) + test_variance)
    if se == 0:
        return (delta, delta), 1.0 if delta == 0 else 0.0
    denominator = sum(v * v / df for v, df in seed_terms)
    nu = se**4 / denominator if denominator > 0 else math.inf  # no seed spread: the test set's normal interval
    half = float(stats.t.ppf(1 - alpha / 2, nu)) * se
    return (delta - half, delta + half), float(2 * stats.t.sf(abs(delta) / se, nu))


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


def verdict(delta: float | None, interval: Sequence[float] | None, p_holm: float | None, alpha: float,
            higher_is_better: bool) -> str:
    """``better`` or ``worse`` when the Holm-corrected p is below ``alpha`` and the interval of Δ excludes 0
    on the side of Δ, in the metric's direction (for HD95 a negative Δ is better); else ``no significant
    difference``."""
    if delta is None or interval is None or p_holm is None or p_holm >= alpha:
        return VERDICTS[2]
    low, high = interval
    if not (delta > 0 and low > 0 or delta < 0 and high < 0):
        return VERDICTS[2]
    return VERDICTS[0] if (delta > 0) == higher_is_better else VERDICTS[1]


def too_few_seeds(seeds: int) -> str:
    """The seed-aware verdict of a row with fewer than :data:`MIN_SEEDS` seeds: what its numbers cover."""
    return f"test-set noise only, {seeds} seed{'s' * (seeds != 1)}"
