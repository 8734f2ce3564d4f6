"""Paired comparisons of groups of runs on the same test examples: each task's metrics, example by example.

Every evaluation writes per-example records (:mod:`tasks.records`). Here a task's metric becomes
*per-example sufficient statistics* ``S (n, k)`` whose column sums give the metric back (BLEU: n-gram
matches, totals and lengths of each sentence; top-1: whether the image is right; Dice and HD95: the case's
value), so that one resample of the test set scores every run at once (``counts @ S``).

Several seeds per variant: runs are paired on the data they were scored on (the split hash of their
records). Where every seed scores the same test set (cifar, medseg: their data do not depend on the seed),
**we average over seeds per example first**, then test once on the shared examples. Per-seed tests on one
test set are not independent, so combining their p-values (Fisher, Stouffer) would assume what is false and
overstate significance; and seed s of one variant has nothing in particular to pair with seed s of another
(they share only a data order). Averaging gives one test per variant with the right dependence between
examples, on the quantity reported (the mean over seeds). For corpus BLEU, which is no mean of per-sentence
values, each resample of sentences is applied to every seed and the resampled BLEU averaged over seeds.
Where the data differ by seed (translation generates its corpus from the seed), seed s of a variant is
paired with the baseline's run on the same data, and the seeds are combined as strata: Δ is the mean of
the per-seed Δ, the bootstrap resamples each seed's test set, the per-example tests pool all seeds'
examples (distinct examples, so this is sound). The tests measure the test-set noise of the seed-averaged
systems; the seeds' own spread is the Student-t interval of each mean.

The tests (``PairedMetric.test``):

* ``bootstrap`` (BLEU, macro-F1): paired bootstrap resampling of the test set, with sacreBLEU's
  ``paired_bs`` resamples (one seed's resampled BLEU scores are sacreBLEU's) and the shifted-Δ p-value
  that its percentile interval inverts (:func:`tasks.stats.bootstrap_p_value` says why not sacreBLEU's);
* ``mcnemar`` (top-1): McNemar's exact test on per-image correctness with one seed; with several seeds,
  the correctness averaged over seeds is fractional and the sign-flip randomisation test (McNemar's idea
  for non-binary differences) is used;
* ``wilcoxon`` (Dice, HD95): Wilcoxon's signed-rank test (SciPy) on per-case values, for the mean over
  organs and per organ.

Every Δ gets a 95 % percentile interval from the same paired bootstrap (the same resamples for every
variant of a comparison).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tasks.stats import (
    BOOTSTRAP_SEED,
    bootstrap_p_value,
    holm,
    mcnemar_exact,
    percentile_interval,
    resample_counts,
    sign_flip_test,
    t_interval,
    verdict,
    wilcoxon_test,
)

RESAMPLES = 1000  # bootstrap resamples of the test set (sacreBLEU's default for paired_bs)
FLIPS = 10_000  # sign-flip randomisations


@dataclass(frozen=True)
class PairedMetric:
    """A metric a comparison tests: where it is read, which way is better, how it is tested.

    ``stats`` turns a run's records of ``split`` (and its run.json) into per-example statistics ``(n, k)``;
    ``score`` turns their sums over examples ``(B, k)`` into the metric ``(B,)``; ``value`` gives the
    per-example value ``(n,)`` the McNemar / Wilcoxon tests pair (None for a bootstrap-only metric).
    """

    key: str  # the key in results.json ("bleu", "hd95", "liver/dice")
    title: str  # the column title ("BLEU", "long BLEU", "HD95")
    split: str
    higher_is_better: bool
    test: str  # bootstrap, mcnemar or wilcoxon
    stats: Callable[[list[dict], dict], np.ndarray]
    score: Callable[[np.ndarray], np.ndarray]
    value: Callable[[np.ndarray], np.ndarray] | None = None
    role: str = "headline"  # headline (ranks the variants), secondary, or per-class
    unit: str = ""  # shown after the title in the report, e.g. "voxels"


def example_ids(records: list[dict]) -> list:
    """The identity of each example (translation/cifar ``id``, medseg ``case``): runs pair on these."""
    return [r.get("id", r.get("case")) for r in records]


# --- the metrics of each task ----------------------------------------------------------------------
def _bleu():
    from sacrebleu.metrics import BLEU

    return BLEU(force=True)  # as tasks.translation.metrics.translation_metrics scores the corpus


def _bleu_stats(records: list[dict], info: dict) -> np.ndarray:
    hyps, refs = [r["greedy"] for r in records], [r["reference"] for r in records]
    return np.asarray(_bleu()._extract_corpus_statistics(hyps, [refs]), dtype=np.float64)  # (n, 2 + 2·4)


def _bleu_score(sums: np.ndarray) -> np.ndarray:
    bleu = _bleu()
    return np.array([bleu._compute_score_from_stats(row).score for row in np.atleast_2d(sums)])


def _correct_stats(records: list[dict], info: dict) -> np.ndarray:
    return np.array([[float(r["label"] == r["prediction"]), 1.0] for r in records])  # (n, 2): right, counted


def _mean_score(sums: np.ndarray) -> np.ndarray:
    sums = np.atleast_2d(sums)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums[:, 0] / sums[:, 1]


def _first_column(stats: np.ndarray) -> np.ndarray:
    return np.where(stats[:, 1] > 0, stats[:, 0], np.nan)


def _confusion_stats(records: list[dict], info: dict) -> np.ndarray:
    k = len(info["preprocessing"]["class_names"])
    out = np.zeros((len(records), k * k))  # one-hot cell (label, prediction) of each image
    out[np.arange(len(records)), [r["label"] * k + r["prediction"] for r in records]] = 1.0
    return out


def _macro_f1(sums: np.ndarray) -> np.ndarray:
    """Macro-F1 over all K classes from summed confusion cells, as scikit-learn's report with ``labels`` = all
    classes and ``zero_division=0`` (a class neither labelled nor predicted counts as F1 0)."""
    sums = np.atleast_2d(sums)
    k = int(round(sums.shape[1] ** 0.5))
    cm = sums.reshape(-1, k, k)  # (B, true, predicted)
    tp = np.diagonal(cm, axis1=1, axis2=2)  # (B, K)
    denominator = cm.sum(2) + cm.sum(1)  # 2·tp + fp + fn per class
    f1 = np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=denominator > 0)
    return f1.mean(1)


def _case_stats(field: str, organ: str | None) -> Callable[[list[dict], dict], np.ndarray]:
    """A case's value of ``field`` (dice/hd95) in the run's headline convention: one organ's, or the mean
    over the organs it has a score for (the per-case number behind the papers' mean)."""

    def stats(records: list[dict], info: dict) -> np.ndarray:
        convention = info["config"].get("hd95", "papers")
        values = []
        for r in records:
            organs = r[convention] if organ is None else {organ: r[convention].get(organ, {})}
            scores = [s.get(field) for s in organs.values()]
            scores = [s for s in scores if s is not None]
            values.append(float(np.mean(scores)) if scores else np.nan)
        v = np.array(values)
        return np.stack([np.nan_to_num(v), (~np.isnan(v)).astype(float)], axis=1)  # (n, 2): value, counted

    return stats


def task_metrics(task: str, info: dict, splits: set[str]) -> list[PairedMetric]:
    """The metrics a comparison of ``task`` tests, given a run's run.json ``info`` and the ``splits`` every run
    of the comparison has records of (a metric of a missing split is left out)."""
    if task == "translation":
        metrics = [PairedMetric("bleu", "BLEU", "test", True, "bootstrap", _bleu_stats, _bleu_score),
                   PairedMetric("long_bleu", "long BLEU", "test_long", True, "bootstrap", _bleu_stats, _bleu_score,
                                role="secondary")]
    elif task == "cifar":
        metrics = [PairedMetric("top1", "top-1", "test", True, "mcnemar", _correct_stats, _mean_score,
                                _first_column),
                   PairedMetric("macro_f1", "macro-F1", "test", True, "bootstrap", _confusion_stats, _macro_f1,
                                role="secondary")]
    elif task == "medseg":
        unit = "voxels" if info["config"].get("hd95", "papers") == "papers" else "mm"
        metrics = [PairedMetric("dice", "Dice", "test", True, "wilcoxon", _case_stats("dice", None), _mean_score,
                                _first_column),
                   PairedMetric("hd95", "HD95", "test", False, "wilcoxon", _case_stats("hd95", None), _mean_score,
                                _first_column, role="secondary", unit=unit)]
        for organ in info["preprocessing"]["class_names"][1:]:
            for field, title, higher in (("dice", "Dice", True), ("hd95", "HD95", False)):
                metrics.append(PairedMetric(f"{organ}/{field}", f"{organ} {title}", "test", higher, "wilcoxon",
                                            _case_stats(field, organ), _mean_score, _first_column,
                                            role="per-class", unit=unit if field == "hd95" else ""))
    else:
        from core.errors import unknown_name

        raise unknown_name("task with paired metrics", task, ("translation", "cifar", "medseg"))
    if "test" not in splits:
        raise ValueError(f"the runs have no records of the test split (they have: {', '.join(sorted(splits))}); "
                         "evaluate them with `zoo evaluate RUN` first")
    return [m for m in metrics if m.split in splits]


# --- the comparison ----------------------------------------------------------------------------------
BY_SEED = " by seed"  # suffix of a test whose seeds were scored on different data (strata)


def describe_test(metric: PairedMetric, test: str, resamples: int = RESAMPLES) -> str:
    """One line saying what ``test`` (as recorded in a row, ``" by seed"`` appended when the seeds' data
    differ) computed for ``metric``."""
    base = test.removesuffix(BY_SEED)
    what = {"bootstrap": f"paired bootstrap of the test set ({resamples} resamples drawn as sacreBLEU's paired_bs, "
                         f"the same for every variant; {metric.title} averaged over seeds in each; p from the "
                         "shifted resampled Δ)",
            "mcnemar exact": "McNemar's exact test on per-image correctness",
            "sign-flip": f"sign-flip randomisation test ({FLIPS} flips) on per-image correctness averaged over seeds",
            "wilcoxon": f"Wilcoxon signed-rank test (SciPy) on per-case {metric.title} averaged over seeds"}[base]
    if base != test:
        what += ("; each seed was scored on its own data (the task's data follow the seed), so each seed is "
                 "paired with the reference's run on the same data: Δ is the mean of the per-seed Δ, the bootstrap "
                 "resamples each seed's test set, per-example tests pool the seeds' examples")
    return what


def paired_statistics(metric: PairedMetric, runs: dict[str, list[tuple[str, np.ndarray]]],
                      pairs: list[tuple[str, str, str]], alpha: float = 0.05, resamples: int = RESAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> dict[str, dict[str, Any]]:
    """Mean, 95 % interval and, for each pair ``(row, a, b)``, Δ = a − b with its interval and paired test.

    Runs are paired on the data they were scored on: runs whose records carry the same split hash form a
    *stratum* and are paired example by example (several runs of a group in one stratum are averaged per
    example first); when the data differ by seed (the translation task generates its corpus from the seed),
    each seed is its own stratum and the strata are combined: Δ is the mean over strata of the per-stratum
    Δ, the bootstrap resamples each stratum's examples, the per-example tests pool the strata's examples.

    Args:
        runs: group label -> ``(data hash, metric.stats array (n, k))`` of each of its runs (seeds).
        pairs: ``(row label, a, b)``: the row reports ``a`` against ``b`` (compare: the variant against the
            baseline; ablate: the full variant against the row without one change).
        alpha: the level of the verdicts, on the Holm-corrected p-values over the pairs.

    Returns:
        label -> ``{"mean", "ci95", "ci95_method", "per_seed"}``, and for the rows of ``pairs`` also
        ``"delta", "delta_ci95", "p_value", "p_value_holm", "verdict", "test"``, ``"seed_deltas"`` (each seed
        of the row alone against the other side's mean on the same data) and ``"seeds_agree"`` ("k/n": the
        seeds whose Δ has the sign of the mean Δ).
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
    boot: dict[str, dict[str, np.ndarray]] = {}  # label -> stratum -> (B,) resampled score, mean over its runs
    observed: dict[str, dict[str, float]] = {}
    for label, group in runs.items():
        per_seed = [float(metric.score(s.sum(0))[0]) for _, s in group]
        observed[label] = {h: float(np.mean([metric.score(s.sum(0))[0] for s in by[label][h]]))
                           for h in strata if by[label][h]}
        boot[label] = {h: np.mean([metric.score(counts[h] @ s) for s in by[label][h]], axis=0)
                       for h in strata if by[label][h]}
        mean, ci = t_interval(per_seed)
        method = f"Student t over {len(group)} seeds"
        if ci is None:
            ci = percentile_interval(next(iter(boot[label].values())))
            method = f"bootstrap of the test set ({resamples} resamples; one seed)"
        out[label] = {"mean": mean, "ci95": list(ci) if ci else None, "ci95_method": method, "per_seed": per_seed}
    rows = []
    for row, a, b in pairs:
        shared = [h for h in strata if h in boot[a] and h in boot[b]]
        if not shared or len(shared) != len(boot[a]) or len(shared) != len(boot[b]):
            raise ValueError(f"{a!r} and {b!r} were not scored on the same data: their examples cannot be paired")
        deltas = np.mean([boot[a][h] - boot[b][h] for h in shared], axis=0)  # (B,)
        delta = float(np.mean([observed[a][h] - observed[b][h] for h in shared]))
        p, test = _paired_test(metric, by[a], by[b], shared, deltas, delta)
        test += BY_SEED if len(shared) > 1 else ""
        ci = percentile_interval(deltas)
        result = {"delta": delta, "delta_ci95": list(ci) if ci else None, "p_value": p, "test": test,
                  "seed_deltas": _seed_deltas(metric, by, row, a, b, shared)}
        if metric.test == "wilcoxon" and metric.role == "headline":  # few cases: kept for the per-case plot
            value_a, value_b = example_values(metric, by[a], by[b], shared)
            result["per_case"] = {"row": value_a.tolist(), "reference": value_b.tolist()}
        rows.append((row, result))
    for (row, result), p_holm in zip(rows, holm([r["p_value"] for _, r in rows])):
        result.update(p_value_holm=p_holm, verdict=verdict(result["delta"], p_holm, alpha, metric.higher_is_better))
        agree = sum(1 for d in result["seed_deltas"] if d * result["delta"] > 0 or d == result["delta"] == 0)
        result["seeds_agree"] = f"{agree}/{len(result['seed_deltas'])}"
        out[row] = {**out[row], **result}
    return out


def _seed_deltas(metric: PairedMetric, by: dict[str, dict[str, list[np.ndarray]]], row: str, a: str, b: str,
                 strata: list[str]) -> list[float]:
    """Δ of each seed of the row's group alone, against the mean of the other side's runs on the same data:
    whether the seeds, one by one, point the way the seed-averaged Δ does (the paired tests measure
    test-set noise, not seed noise)."""
    def score(s: np.ndarray) -> float:
        return float(metric.score(s.sum(0))[0])

    deltas = []
    for h in strata:
        mean_a, mean_b = (float(np.mean([score(s) for s in by[g][h]])) for g in (a, b))
        deltas += ([score(s) - mean_b for s in by[a][h]] if row == a else [mean_a - score(s) for s in by[b][h]])
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


def _paired_test(metric: PairedMetric, a: dict[str, list[np.ndarray]], b: dict[str, list[np.ndarray]],
                 strata: list[str], deltas: np.ndarray, delta: float) -> tuple[float, str]:
    if metric.test == "bootstrap":
        return bootstrap_p_value(deltas, delta), "bootstrap"
    value_a, value_b = example_values(metric, a, b, strata)
    d = value_a - value_b
    if metric.test == "wilcoxon":
        return wilcoxon_test(d), "wilcoxon"
    d = d[~np.isnan(d)]
    if np.all(np.isin(d, (-1.0, 0.0, 1.0))):  # per-example right/wrong: McNemar's table exists
        return mcnemar_exact(int(np.sum(d > 0)), int(np.sum(d < 0))), "mcnemar exact"
    return sign_flip_test(d, FLIPS), "sign-flip"
