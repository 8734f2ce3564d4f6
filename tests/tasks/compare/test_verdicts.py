"""A verdict agrees with its interval and its test, survives seeds, and reads the runs' own aggregation.

Every resampling here is seeded, and the property checked on random data is an identity of
:func:`tasks.compare.stats.percentile_test` and :func:`tasks.compare.stats.seed_t_test` (p < α exactly when the interval
excludes 0), not a statistical statement: the tests cannot fail by chance. Cross-checks against sacreBLEU
and the medseg summary compare for equality, since both sides compute the same float operations on the
same inputs; the seed-aware test is checked against SciPy's Welch and one-sample t-tests.
"""

import numpy as np
import pytest

from tasks.compare.paired import PairedMetric, first_column, mean_score, paired_statistics, task_metrics
from tasks.compare.stats import resample_counts, seed_t_test
from tasks.translation.paired import _bleu_score, _bleu_stats

MEDSEG_INFO = {"config": {"hd95": "papers"}, "preprocessing": {"class_names": ["background", "liver"]}}


def _mean_metric(higher_is_better: bool = True, extra_test: str = "wilcoxon") -> PairedMetric:
    return PairedMetric("m", "metric", "test", higher_is_better, extra_test, _value_stats, mean_score, first_column)


def _value_stats(values) -> np.ndarray:
    return np.stack([np.asarray(values, dtype=float), np.ones(len(values))], axis=1)  # (n, 2): value, counted


def _excludes_zero(interval) -> bool:
    return interval is not None and (interval[0] > 0 or interval[1] < 0)


def _check_row(row: dict, alpha: float, higher_is_better: bool) -> None:
    """The row's test-set and seed-aware numbers agree with each other and with their verdicts."""
    for ci, p, p_holm, said in (("delta_ci95", "p_value", "p_value_holm", "verdict"),
                                ("seed_delta_ci95", "seed_p_value", "seed_p_value_holm", "seed_verdict")):
        if row[p] is None:  # too few seeds for the seed-aware numbers
            assert row[said].startswith("test-set noise only") and row[ci] is None
            continue
        assert (row[p] < alpha) == _excludes_zero(row[ci]), (row[p], row[ci])
        assert row[p] <= row[p_holm]
        if row[said] in ("better", "worse"):
            low, high = row[ci]
            up = (row[said] == "better") == higher_is_better
            assert (low > 0 and row["delta"] > 0) if up else (high < 0 and row["delta"] < 0), (row[said], row[ci])
            assert row[p_holm] < alpha
        else:
            assert row[said] == "no significant difference"


def _random_values(rng: np.random.Generator, n: int) -> np.ndarray:
    kind = rng.integers(4)
    if kind == 0:
        return rng.normal(0.7, 0.1, n)
    if kind == 1:
        return rng.integers(0, 2, n).astype(float)  # right / wrong: ties at 0 in the differences
    if kind == 2:
        return 1 - rng.exponential(0.1, n)  # skewed: a few collapses
    return np.round(rng.uniform(0, 1, n), 1)  # coarse: many exact ties


def test_no_verdict_contradicts_its_interval_on_random_paired_data():
    rng = np.random.default_rng(0)
    said = set()
    for trial in range(60):
        n, alpha, higher = int(rng.integers(5, 60)), float(rng.choice([0.01, 0.05, 0.1, 0.3])), bool(trial % 2)
        base = _random_values(rng, n)
        groups = {}
        for g in range(4):  # the reference and three variants, shifted by nothing, a little or much
            shift = rng.choice([0.0, 0.02, -0.05, 0.2]) * (g > 0)
            seeds = int(rng.integers(1, 6))
            groups[f"g{g}"] = [("h", _value_stats(base + shift + rng.normal(0, rng.choice([0.0, 0.05, 0.3]), n)))
                               for _ in range(seeds)]
        pairs = [(f"g{g}", f"g{g}", "g0") for g in range(1, 4)]
        out = paired_statistics(_mean_metric(higher), groups, pairs, alpha=alpha, resamples=400)
        for row, _, _ in pairs:
            _check_row(out[row], alpha, higher)
            said |= {("test set", out[row]["verdict"]), ("seeds", out[row]["seed_verdict"].split(",")[0])}
    verdicts = ("better", "worse", "no significant difference")
    every = {(level, v) for level in ("test set", "seeds") for v in verdicts} | {("seeds", "test-set noise only")}
    assert said == every  # every branch of both verdicts was checked


def test_strata_and_bleu_rows_agree_with_their_intervals_too():
    rng = np.random.default_rng(1)
    words = ["the", "a", "cat", "dog", "sat", "ran", "on", "home", "mat", "park"]
    refs = [" ".join(rng.choice(words, 6)) for _ in range(40)]

    def system(drop: float) -> np.ndarray:
        hyps = [" ".join(w for w in r.split() if rng.uniform() > drop) for r in refs]
        return _bleu_stats([{"greedy": h, "reference": r} for h, r in zip(hyps, refs)], {})

    metric = PairedMetric("bleu", "BLEU", "test", True, "paired_bs", _bleu_stats, _bleu_score)
    for alpha in (0.05, 0.2):
        # the data follow the seed: three strata, each variant's seed s on stratum s
        groups = {label: [(f"h{s}", system(drop)) for s in range(3)]
                  for label, drop in (("base", 0.2), ("same", 0.2), ("worse", 0.35))}
        out = paired_statistics(metric, groups, [("same", "same", "base"), ("worse", "worse", "base")], alpha=alpha,
                                resamples=200)
        for row in ("same", "worse"):
            assert out[row]["test"] == "bootstrap by seed" and out[row]["seed_units"] == 3
            _check_row(out[row], alpha, True)


def test_twelve_cases_eleven_small_gains_one_collapse():
    """The issue's example: the mean Δ is negative, its interval covers 0, Wilcoxon's rank test says p 0.033."""
    base, variant = np.full(12, 0.8), np.array([0.81] * 11 + [0.3])
    records = [[{"case": f"c{i}", "papers": {"liver": {"dice": float(v), "hd95": 1.0}}} for i, v in enumerate(values)]
               for values in (base, variant)]
    dice = task_metrics("medseg", MEDSEG_INFO, {"test"})[0]
    runs = {label: [("h", dice.stats(r, MEDSEG_INFO))] for label, r in zip(("base", "variant"), records)}
    row = paired_statistics(dice, runs, [("variant", "variant", "base")])["variant"]
    assert row["delta"] == pytest.approx((11 * 0.01 - 0.5) / 12, abs=1e-12)  # −0.0325
    assert row["delta_ci95"] == pytest.approx([-0.1175, 0.01], abs=1e-12)  # the resamples without the collapse
    # the resamples that leave the collapsed case out (Δ* = +0.01) are the far side of 0: 363 of 1000
    left_out = int(np.sum(resample_counts(12, 1000)[:, 11] == 0))
    assert left_out == 363 and row["p_value"] == pytest.approx(2 * (1 + left_out) / 1001, abs=1e-15)
    assert row["verdict"] == "no significant difference"  # was "worse", from Wilcoxon's p
    assert row["other_p_values"] == {"wilcoxon": pytest.approx(34 / 1024, abs=1e-15)}  # reported, not deciding
    assert row["seed_verdict"] == "test-set noise only, 1 seed"


def test_bleu_reports_sacrebleus_paired_bs_p_exactly():
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    from tests.tasks.compare.test_stats import GOOD, REFS

    damaged = list(GOOD)
    for i in (0, 30):  # two sentences lose their last two words
        damaged[i] = " ".join(damaged[i].split()[:-2])
    _, scores = PairedTest([("base", GOOD), ("damaged", damaged)], {"BLEU": BLEU(force=True)}, [REFS],
                           test_type="bs")()  # 1000 resamples, seed 12345: the resamples our bootstrap draws

    def runs(hyps):
        return [("h", _bleu_stats([{"greedy": h, "reference": r} for h, r in zip(hyps, REFS)], {}))]

    metric = task_metrics("translation", {}, {"test"})[0]
    row = paired_statistics(metric, {"base": runs(GOOD), "damaged": runs(damaged)},
                            [("damaged", "damaged", "base")])["damaged"]
    assert row["mean"] == scores["BLEU"][1].score
    assert row["other_p_values"]["sacrebleu_paired_bs"] == scores["BLEU"][1].p_value == 91 / 1001  # measured
    assert row["p_value"] == 222 / 1001  # ours, what the verdict reads: the interval covers 0
    assert row["delta_ci95"][0] < 0 <= row["delta_ci95"][1] and row["verdict"] == "no significant difference"


def _seeded_runs(seeds: int, offsets: list[float], n: int = 300) -> dict[str, list]:
    """A reference and a variant, each with ``seeds`` runs on one shared test set; the variant's seed s is the
    reference plus ``offsets[s]`` per case, every seed with its own small per-case noise."""
    rng = np.random.default_rng(7)
    cases = rng.uniform(0.4, 0.9, n)
    return {"base": [("h", _value_stats(cases + rng.normal(0, 0.02, n))) for _ in range(seeds)],
            "variant": [("h", _value_stats(cases + offsets[s] + rng.normal(0, 0.02, n))) for s in range(seeds)]}


@pytest.mark.parametrize("seeds", [1, 2, 3, 5])
def test_seed_aware_verdict_by_the_number_of_seeds(seeds):
    agreeing = [0.03, 0.035, 0.025, 0.03, 0.032][:seeds]  # every seed a little better
    scattered = [0.2, -0.1, 0.05, -0.08, 0.18][:seeds]  # better on average, not seed by seed
    for offsets in (agreeing, scattered):
        runs = _seeded_runs(seeds, offsets)
        row = paired_statistics(_mean_metric(), runs, [("variant", "variant", "base")])["variant"]
        _check_row(row, 0.05, True)
        assert row["seed_units"] == seeds
        if seeds < 3:
            assert row["seed_verdict"] == f"test-set noise only, {seeds} seed{'s' * (seeds > 1)}"
            assert row["seed_delta_ci95"] is None and row["seed_p_value"] is None
            continue
        low, high = row["seed_delta_ci95"]
        assert high - low > row["delta_ci95"][1] - row["delta_ci95"][0]  # seeds add their spread
        if offsets is agreeing:
            assert row["verdict"] == row["seed_verdict"] == "better"
        else:
            assert row["verdict"] == "better" and row["seed_verdict"] == "no significant difference"


def test_seed_t_test_is_welchs_and_the_paired_t_test():
    from scipy import stats

    a, b = [0.71, 0.74, 0.70, 0.76], [0.69, 0.70, 0.66]
    terms = [(float(np.var(x, ddof=1)) / len(x), len(x) - 1) for x in (a, b)]
    (low, high), p = seed_t_test(np.mean(a) - np.mean(b), terms, 0.0, 0.05)  # no test-set share: Welch's test
    welch = stats.ttest_ind(a, b, equal_var=False)
    assert p == pytest.approx(welch.pvalue, abs=1e-12)
    assert (low, high) == pytest.approx(tuple(welch.confidence_interval(0.95)), abs=1e-12)
    pairs = [0.02, 0.05, -0.01, 0.03]  # seed pairs on their own data: the one-sample t of their Δ
    _, p = seed_t_test(np.mean(pairs), [(float(np.var(pairs, ddof=1)) / 4, 3)], 0.0, 0.05)
    assert p == pytest.approx(stats.ttest_1samp(pairs, 0.0).pvalue, abs=1e-12)
    (low, high), p = seed_t_test(0.3, [(0.0, 2), (0.0, 2)], 0.01, 0.05)  # no seed spread: normal, SE 0.1
    assert p == pytest.approx(2 * stats.norm.sf(3.0), abs=1e-12) and low == pytest.approx(0.3 - 0.196, abs=1e-3)
    assert seed_t_test(0.0, [(0.0, 2)], 0.0, 0.05) == ((0.0, 0.0), 1.0)


def _mm_record(case: str, scores: dict[str, tuple[float | None, float | None]]) -> dict:
    return {"case": case, "papers": {o: {"dice": d or 0.0, "hd95": h or 0.0} for o, (d, h) in scores.items()},
            "mm": {o: {"dice": d, "hd95": h} for o, (d, h) in scores.items()},
            "voxels": {o: {"pred": int(d is not None), "ref": int(d is not None)} for o, (d, _) in scores.items()},
            "spacing": [1.0, 1.0, 1.0]}


def test_hd95_mm_headline_is_the_runs_metrics_json_one():
    from tasks.medseg.evaluation.evaluator import summaries

    names = ["background", "liver", "kidney", "spleen"]
    records = [_mm_record("c1", {"liver": (0.9, 4.0), "kidney": (None, None), "spleen": (0.7, 30.0)}),
               _mm_record("c2", {"liver": (0.8, 6.0), "kidney": (0.5, 12.0), "spleen": (None, None)}),
               _mm_record("c3", {"liver": (0.85, 5.0), "kidney": (0.6, 10.0), "spleen": (0.75, 20.0)})]
    summary = summaries(records, names)["mm"]  # what metrics.json reports
    info = {"config": {"hd95": "mm"}, "preprocessing": {"class_names": names}}
    for metric in task_metrics("medseg", info, {"test"})[:2]:  # dice, hd95
        out = paired_statistics(metric, {"run": [("h", metric.stats(records, info))]}, [])
        assert out["run"]["mean"] == pytest.approx(summary[f"mean_{metric.key}"], abs=1e-12), metric.key
    assert summary["mean_hd95"] == pytest.approx((5.0 + 11.0 + 25.0) / 3, abs=1e-12)  # organs' means over cases
    # the per-case means (what the comparison averaged before) give another number: (17 + 9 + 35/3) / 3
    per_case = task_metrics("medseg", info, {"test"})[1]
    values = per_case.value(per_case.stats(records, info))
    assert values.mean() == pytest.approx((17.0 + 9.0 + 35 / 3) / 3, abs=1e-12) != summary["mean_hd95"]
