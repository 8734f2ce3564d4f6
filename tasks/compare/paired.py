"""Paired comparisons of groups of runs on the same test examples: each task's metrics, example by example.

Every evaluation writes per-example records (:mod:`tasks.runs.records`). Here a task's metric becomes
*per-example sufficient statistics* ``S (n, k)`` whose column sums give the metric back (BLEU: n-gram
matches, totals and lengths of each sentence; top-1: whether the image is right; Dice and HD95: each organ's
value and whether it was scored), so that one resample of the test set scores every run at once
(``counts @ S``), in the aggregation the run's own metrics.json reports.

Several seeds per variant: runs are paired on the data they were scored on (the split hash of their
records). Where every seed scores the same test set (cifar, medseg: their data do not depend on the seed),
**we average over seeds per example first**, then test once on the shared examples. Per-seed tests on one
test set are not independent, so combining their p-values (Fisher, Stouffer) would assume what is false and
overstate significance; and seed s of one variant has nothing in particular to pair with seed s of another
(they share only a data order). For corpus BLEU, which is no mean of per-sentence values, each resample of
sentences is applied to every seed and the resampled BLEU averaged over seeds. Where the data differ by
seed (translation generates its corpus from the seed), seed s of a variant is paired with the baseline's
run on the same data, and the seeds are combined as strata: Δ is the mean of the per-seed Δ, the bootstrap
resamples each seed's test set.

One quantity per row, for every metric: the estimate is the metric's Δ (corpus Δ for BLEU, Δ of the mean
for the others), the interval its paired-bootstrap percentile interval at 1 − α, the p-value the one that
interval inverts (:func:`tasks.compare.stats.percentile_test`: p < α exactly when the interval excludes 0), and
the verdict needs both. That measures the test-set noise of the seed-averaged systems. The seed-aware
columns add the seeds' spread (:func:`tasks.compare.stats.seed_t_test`, from :data:`tasks.compare.stats.MIN_SEEDS`
seeds a side): on a shared test set, Welch's t over each variant's per-seed scores with the test set's bootstrap
variance added; where the data follow the seed, a paired t over the seed pairs' Δ.

Other tests are reported beside (``other_p_values``), never deciding (``PairedMetric.extra_test``):
sacreBLEU's ``paired_bs`` p-value for BLEU (from the same resamples, scored as sacreBLEU scores them, so
``sacrebleu --paired-bs`` gives the same number for one seed each); McNemar's exact test for top-1 with
one seed (a sign-flip test with several); Wilcoxon's signed-rank test for Dice and HD95 (a test of the
per-case median shift, which can disagree with the mean's Δ).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from tasks.compare.stats import (
    BOOTSTRAP_SEED,
    MIN_SEEDS,
    holm,
    mcnemar_exact,
    paired_bs_p_value,
    percentile_interval,
    percentile_test,
    resample_counts,
    seed_t_test,
    sign_flip_test,
    t_interval,
    too_few_seeds,
    verdict,
    wilcoxon_test,
)
from tasks.engine.paired_metric import PairedMetric
from tasks.engine.registry import task_class

RESAMPLES = 1000  # bootstrap resamples of the test set (sacreBLEU's default for paired_bs); smallest p 2/1001
FLIPS = 10_000  # sign-flip randomisations
OTHER_TESTS = {"sacrebleu_paired_bs": "sacreBLEU paired_bs", "mcnemar_exact": "McNemar", "sign_flip": "sign-flip",
               "wilcoxon": "Wilcoxon"}  # other_p_values key -> its name in the report


def example_ids(records: list[dict]) -> list:
    """The identity of each example (its record's ``id``, or ``case`` for a volume): runs pair on these."""
    return [r.get("id", r.get("case")) for r in records]


# --- building blocks of the tasks' metrics (Task.paired_metrics) ------------------------------------------
def mean_score(sums: np.ndarray) -> np.ndarray:
    """The first column of the summed statistics over the second: a fraction (right / counted)."""
    sums = np.atleast_2d(sums)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums[:, 0] / sums[:, 1]


def first_column(stats: np.ndarray) -> np.ndarray:
    """Per example, the first statistic where the example counts (NaN elsewhere): the value a test pairs."""
    return np.where(stats[:, 1] > 0, stats[:, 0], np.nan)



def task_metrics(task: str, info: dict, splits: set[str]) -> list[PairedMetric]:
    """The metrics a comparison of ``task`` tests (its runner's :meth:`~tasks.engine.task.Task.paired_metrics`),
    given a run's run.json ``info`` and the ``splits`` every run of the comparison has records of (a metric of a
    missing split is left out)."""
    metrics = task_class(task).paired_metrics(info)
    if "test" not in splits:
        raise ValueError(f"the runs have no records of the test split (they have: {', '.join(sorted(splits))}); "
                         "evaluate them with `zoo evaluate RUN` first")
    return [m for m in metrics if m.split in splits]


def metric_intervals(path: Path | str, info: dict, resamples: int = RESAMPLES, confidence: float = 0.95
                     ) -> list[dict[str, Any]]:
    """Each headline and secondary metric of one run (``path``: its folder with per-example records; ``info``: its
    run.json) with its bootstrap percentile interval over the test examples: ``[{"key", "title", "split",
    "value", "low", "high", "n"}]``. What a model card reports; a run without records gives ``[]``."""
    from tasks.runs.records import INDEX_FILE, read_records

    if not (Path(path) / "predictions" / INDEX_FILE).is_file():
        return []
    out = []
    for metric in task_class(info["task"]).paired_metrics(info):
        if metric.role == "per-class":
            continue
        try:
            records, _ = read_records(path, metric.split)
        except (FileNotFoundError, ValueError):
            continue  # a split the run has no records of
        stats = metric.stats(records, info)  # (n, k)
        samples = metric.score(_resampled_sums(metric, resample_counts(len(records), resamples), stats))  # (B,)
        interval = percentile_interval(samples, confidence) or (float("nan"), float("nan"))
        out.append({"key": metric.key, "title": metric.title, "split": metric.split, "n": len(records),
                    "value": run_score(metric, stats), "low": interval[0], "high": interval[1]})
    return out


# --- the comparison ----------------------------------------------------------------------------------
BY_SEED = " by seed"  # suffix of a test whose seeds were scored on different data (strata)


def describe_test(metric: PairedMetric, test: str, resamples: int = RESAMPLES) -> str:
    """One line saying what ``test`` (as recorded in a row, ``" by seed"`` appended when the seeds' data
    differ) computed for ``metric``, and what is reported beside it."""
    what = (f"paired bootstrap of the test set ({resamples} resamples drawn as sacreBLEU's paired_bs, the same "
            f"for every variant; {metric.title} averaged over seeds in each): Δ's percentile interval at 1 − α and "
            "the p-value it inverts (p < α exactly when the interval excludes 0) decide the verdict")
    if test.endswith(BY_SEED):
        what += ("; each seed was scored on its own data (the task's data follow the seed), so each seed is "
                 "paired with the reference's run on the same data: Δ is the mean of the per-seed Δ, the bootstrap "
                 "resamples each seed's test set")
    beside = {"paired_bs": "sacreBLEU's paired_bs p from the same resamples (its rule: |Δ*| shifted by its mean "
                           "against |Δ|; `sacrebleu --paired-bs` gives this number for one seed each)",
              "mcnemar": "McNemar's exact test on per-image correctness (one seed), a sign-flip randomisation "
                         f"test ({FLIPS} flips) on correctness averaged over seeds (several)",
              "wilcoxon": f"Wilcoxon signed-rank test (SciPy) on per-case {metric.title} averaged over seeds (and "
                          "over a case's organs for the mean over organs): a test of the median shift, which can "
                          "disagree with the mean's Δ"}
    if metric.extra_test in beside:
        what += f"; reported beside, not deciding: {beside[metric.extra_test]}"
    return what


def paired_statistics(metric: PairedMetric, runs: dict[str, list[tuple[str, np.ndarray]]],
                      pairs: list[tuple[str, str, str]], alpha: float = 0.05, resamples: int = RESAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> dict[str, dict[str, Any]]:
    """Mean, 95 % interval and, for each pair ``(row, a, b)``, Δ = a − b with its interval, test and verdict,
    on the test set alone and across seeds.

    Runs are paired on the data they were scored on: runs whose records carry the same split hash form a
    *stratum* and are paired example by example (several runs of a group in one stratum are averaged per
    example first); when the data differ by seed (the translation task generates its corpus from the seed),
    each seed is its own stratum and the strata are combined: Δ is the mean over strata of the per-stratum
    Δ, the bootstrap resamples each stratum's examples.

    Args:
        runs: group label -> ``(data hash, metric.stats array (n, k))`` of each of its runs (seeds).
        pairs: ``(row label, a, b)``: the row reports ``a`` against ``b`` (compare: the variant against the
            baseline; ablate: the full variant against the row without one change).
        alpha: the level of the verdicts (on the Holm-corrected p-values over the pairs) and of the Δ
            intervals (1 − α).

    Returns:
        label -> ``{"mean", "ci95", "ci95_method", "per_seed"}``, and for the rows of ``pairs`` also
        ``"delta", "delta_ci95", "p_value", "p_value_holm", "verdict", "test"`` (test-set noise of the
        seed-averaged systems), ``"other_p_values"`` (tests reported beside: :data:`OTHER_TESTS`),
        ``"seed_units", "seed_delta_ci95", "seed_p_value", "seed_p_value_holm", "seed_verdict"``
        (seeds and test set, :func:`_seed_aware`; without :data:`~tasks.compare.stats.MIN_SEEDS` seeds a side the
        numbers are None and the verdict says "test-set noise only, N seed(s)"), ``"seed_deltas"`` (each seed
        of the row alone against the other side's mean on the same data) and ``"seeds_agree"`` ("k/n": the
        seeds whose Δ has the sign of the mean Δ). ``"delta_ci95"`` keeps its name whatever α is.
    """
    strata = list(dict.fromkeys(h for group in runs.values() for h, _ in group))
    by = {label: {h: [s for g, s in group if g == h] for h in strata} for label, group in runs.items()}
    counts = {}
    for j, h in enumerate(strata):
        sizes = {len(s) for group in by.values() for s in group[h]}
        if len(sizes) != 1:
            raise ValueError(f"runs scored on the same data hold different numbers of records ({sorted(sizes)})")
        counts[h] = resample_counts(sizes.pop(), resamples, seed + j)  # (B, n_h), shared by every group
    out: dict[str, dict[str, Any]] = {}
    boot: dict[str, dict[str, np.ndarray]] = {}  # label -> stratum -> (runs, B) resampled score of each run
    observed: dict[str, dict[str, float]] = {}
    for label, group in runs.items():
        per_seed = [run_score(metric, s) for _, s in group]
        observed[label] = {h: float(np.mean([run_score(metric, s) for s in by[label][h]]))
                           for h in strata if by[label][h]}
        boot[label] = {h: np.stack([metric.score(_resampled_sums(metric, counts[h], s)) for s in by[label][h]])
                       for h in strata if by[label][h]}
        mean, ci = t_interval(per_seed)
        method = f"Student t over {len(group)} seeds"
        if ci is None:
            ci = percentile_interval(next(iter(boot[label].values()))[0])
            method = f"bootstrap of the test set ({resamples} resamples; one seed)"
        out[label] = {"mean": mean, "ci95": list(ci) if ci else None, "ci95_method": method, "per_seed": per_seed}
    rows = []
    for row, a, b in pairs:
        shared = [h for h in strata if h in boot[a] and h in boot[b]]
        if not shared or len(shared) != len(boot[a]) or len(shared) != len(boot[b]):
            raise ValueError(f"{a!r} and {b!r} were not scored on the same data: their examples cannot be paired")
        deltas = np.mean([boot[a][h].mean(0) - boot[b][h].mean(0) for h in shared], axis=0)  # (B,)
        delta = float(np.mean([observed[a][h] - observed[b][h] for h in shared]))
        ci, p = percentile_test(deltas, alpha)
        result = {"delta": delta, "delta_ci95": list(ci) if ci else None, "p_value": p,
                  "test": "bootstrap" + (BY_SEED if len(shared) > 1 else ""),
                  "other_p_values": _other_p_values(metric, by[a], by[b], shared, deltas, delta),
                  **_seed_aware(metric, by[a], by[b], shared, delta, deltas, alpha),
                  "seed_deltas": _seed_deltas(metric, by, row, a, b, shared)}
        if metric.extra_test == "wilcoxon" and metric.role == "headline":  # few cases: kept for the per-case plot
            value_a, value_b = example_values(metric, by[a], by[b], shared)
            result["per_case"] = {"row": value_a.tolist(), "reference": value_b.tolist()}
        rows.append((row, result))
    for (_, result), p_holm in zip(rows, holm([r["p_value"] for _, r in rows])):
        result.update(p_value_holm=p_holm, verdict=verdict(result["delta"], result["delta_ci95"], p_holm, alpha,
                                                           metric.higher_is_better))
        agree = sum(1 for d in result["seed_deltas"] if d * result["delta"] > 0 or d == result["delta"] == 0)
        result["seeds_agree"] = f"{agree}/{len(result['seed_deltas'])}"
    seeded = [result for _, result in rows if result["seed_p_value"] is not None]
    for result, p_holm in zip(seeded, holm([r["seed_p_value"] for r in seeded])):
        result.update(seed_p_value_holm=p_holm, seed_verdict=verdict(result["delta"], result["seed_delta_ci95"],
                                                                     p_holm, alpha, metric.higher_is_better))
    for row, result in rows:
        out[row] = {**out[row], **result}
    return out


def run_score(metric: PairedMetric, stats: np.ndarray) -> float:
    """``metric`` of one run from its per-example statistics ``stats`` (n, k)."""
    return float(metric.score(stats.sum(0))[0])


def _resampled_sums(metric: PairedMetric, counts: np.ndarray, stats: np.ndarray) -> np.ndarray:
    sums = counts @ stats  # (B, k): exact integer sums for count statistics
    # sacreBLEU scores its resamples from float32 sums (exact below 2^24): the same inputs, its scores bit for bit
    return sums.astype(np.float32) if metric.extra_test == "paired_bs" else sums


def _seed_aware(metric: PairedMetric, a: dict[str, list[np.ndarray]], b: dict[str, list[np.ndarray]],
                strata: list[str], delta: float, deltas: np.ndarray, alpha: float) -> dict[str, Any]:
    """Δ's interval and p across seeds and the test set (:func:`tasks.compare.stats.seed_t_test`), or why there is none.

    One test set shared by every seed: Welch's two terms, each variant's per-seed variance over its seeds,
    plus the test-only bootstrap variance of ``deltas``. Seeds on their own data (strata): the per-pair Δ's
    variance over the pairs, which holds each pair's test-set noise already."""
    scores = [[[run_score(metric, s) for s in side[h]] for h in strata] for side in (a, b)]  # side, stratum, seed
    if len(strata) > 1:
        pairs = [np.mean(x) - np.mean(y) for x, y in zip(*scores)]
        units, terms, test_variance = len(pairs), [(float(np.var(pairs, ddof=1)) / len(pairs), len(pairs) - 1)], 0.0
    else:
        seeds = [side[0] for side in scores]
        units = min(len(x) for x in seeds)
        terms = [(float(np.var(x, ddof=1)) / len(x), len(x) - 1) for x in seeds] if units > 1 else []
        test_variance = float(np.nanvar(deltas, ddof=1))
    if units < MIN_SEEDS:
        return {"seed_units": units, "seed_delta_ci95": None, "seed_p_value": None, "seed_p_value_holm": None,
                "seed_verdict": too_few_seeds(units)}
    ci, p = seed_t_test(delta, terms, test_variance, alpha)
    return {"seed_units": units, "seed_delta_ci95": list(ci), "seed_p_value": p}


def _seed_deltas(metric: PairedMetric, by: dict[str, dict[str, list[np.ndarray]]], row: str, a: str, b: str,
                 strata: list[str]) -> list[float]:
    """Δ of each seed of the row's group alone, against the mean of the other side's runs on the same data:
    whether the seeds, one by one, point the way the seed-averaged Δ does."""
    deltas = []
    for h in strata:
        mean_a, mean_b = (float(np.mean([run_score(metric, s) for s in by[g][h]])) for g in (a, b))
        deltas += ([run_score(metric, s) - mean_b for s in by[a][h]] if row == a
                   else [mean_a - run_score(metric, s) for s in by[b][h]])
    return deltas


def example_values(metric: PairedMetric, a: dict[str, list[np.ndarray]], b: dict[str, list[np.ndarray]],
                   strata: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per-example values ``(n,)`` of two groups, averaged over each group's runs in a stratum and pooled over
    the strata: what the McNemar / Wilcoxon tests pair (and the per-case scatter plots). NaN: not scored."""
    with warnings.catch_warnings():  # an example no seed scored stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        pooled = [np.concatenate([np.nanmean([metric.value(s) for s in group[h]], axis=0) for h in strata])
                  for group in (a, b)]
    return pooled[0], pooled[1]


def _other_p_values(metric: PairedMetric, a: dict[str, list[np.ndarray]], b: dict[str, list[np.ndarray]],
                    strata: list[str], deltas: np.ndarray, delta: float) -> dict[str, float]:
    """The p-values reported beside the verdict's (keys of :data:`OTHER_TESTS`); none for ``bootstrap``."""
    if metric.extra_test == "bootstrap":
        return {}
    if metric.extra_test == "paired_bs":
        return {"sacrebleu_paired_bs": paired_bs_p_value(deltas, delta)}
    value_a, value_b = example_values(metric, a, b, strata)
    d = value_a - value_b
    if metric.extra_test == "wilcoxon":
        return {"wilcoxon": wilcoxon_test(d)}
    d = d[~np.isnan(d)]
    if np.all(np.isin(d, (-1.0, 0.0, 1.0))):  # per-example right/wrong: McNemar's table exists
        return {"mcnemar_exact": mcnemar_exact(int(np.sum(d > 0)), int(np.sum(d < 0)))}
    return {"sign_flip": sign_flip_test(d, FLIPS)}
