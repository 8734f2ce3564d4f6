"""tasks.compare.stats and tasks.compare.paired against SciPy, sacreBLEU and hand computations on small known inputs.

Every number here is float64 arithmetic on a few values: exact comparisons where the result is a ratio of
counts (p-values of resampling tests, McNemar on a table), 1e-12 where a formula is evaluated two ways.
"""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from tasks.cifar.paired import _correct_stats, _macro_f1
from tasks.compare.paired import PairedMetric, first_column, mean_score, paired_statistics
from tasks.compare.stats import (
    check_alpha,
    holm,
    mcnemar_exact,
    percentile_interval,
    percentile_test,
    resample_counts,
    sign_flip_test,
    t_interval,
    verdict,
    wilcoxon_test,
)
from tasks.translation.paired import _bleu_score, _bleu_stats

REFS = ["the cat sat on the mat", "a dog ran home", "he went home today", "she likes green apples",
        "we read a long book", "they play in the park"] * 10
GOOD = ["the cat sat on the mat", "a dog ran home", "he went home", "she likes green apples",
        "we read a book", "they play in park"] * 10
BAD = ["the cat on mat", "dog ran", "he home today", "she likes apples green", "we a long book", "the park"] * 10


def test_t_interval_matches_scipy_and_the_formula():
    x = [1.0, 2.0, 3.0, 4.0, 5.5]
    mean, (low, high) = t_interval(x)
    s = math.sqrt(sum((v - 3.1) ** 2 for v in x) / 4)
    half = 2.7764451051977987 * s / math.sqrt(5)  # t_{0.975, 4} from a table
    assert mean == pytest.approx(3.1, abs=1e-12)
    assert (low, high) == pytest.approx((3.1 - half, 3.1 + half), abs=1e-12)
    assert (low, high) == pytest.approx(scipy_stats.t.interval(0.95, 4, loc=3.1, scale=scipy_stats.sem(x)), abs=1e-12)
    assert t_interval([2.5]) == (2.5, None)  # one seed: no spread to estimate
    with pytest.raises(ValueError, match="non-empty"):
        t_interval([])


def test_holm_on_a_hand_example():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 -> raised to 0.06 (monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.02]) == [0.02]  # one comparison: nothing to correct
    assert holm([]) == []
    for bad in ([1.5], [-0.1], [math.nan]):
        with pytest.raises(ValueError, match="p-values must be numbers in"):
            holm(bad)


def test_holm_rejects_what_the_step_down_procedure_rejects():
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = rng.uniform(0, 0.1, size=6)
        adjusted, alpha = holm(p), 0.05
        order, rejected = np.argsort(p), set()
        for i, j in enumerate(order):  # Holm: reject while p_(i) <= alpha / (m - i)
            if p[j] > alpha / (len(p) - i):
                break
            rejected.add(int(j))
        assert {j for j, q in enumerate(adjusted) if q <= alpha} == rejected


def test_mcnemar_exact_on_a_two_by_two_table():
    # b = 1, c = 9: p = 2·P(X <= 1), X ~ Bin(10, 1/2) = 2·(1 + 10)/1024
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024, abs=1e-15)
    assert mcnemar_exact(9, 1) == mcnemar_exact(1, 9)
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(5, 5) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64, abs=1e-15)
    for bad in ((-1, 3), (1.5, 2), (True, 2)):
        with pytest.raises(ValueError, match="must be a count"):
            mcnemar_exact(*bad)


def test_sign_flip_estimates_mcnemar_on_binary_differences():
    d = np.array([1.0] * 14 + [-1.0] * 4 + [0.0] * 30)
    exact = mcnemar_exact(14, 4)  # 0.0309
    estimate = sign_flip_test(d, resamples=20_000)
    assert abs(estimate - exact) < 4 * math.sqrt(exact * (1 - exact) / 20_000) + 1e-4
    assert sign_flip_test(np.zeros(10)) == 1.0
    assert sign_flip_test(d) == sign_flip_test(d)  # seeded


def test_wilcoxon_against_the_exact_distribution_and_scipy():
    # five positive differences of distinct sizes: W- = 0, the most extreme of 2^5 sign patterns, two-sided
    assert wilcoxon_test([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2 / 32, abs=1e-15)
    d = [0.3, -0.1, 0.25, 0.4, -0.05, 0.2, 0.15, 0.35]
    assert wilcoxon_test(d) == pytest.approx(scipy_stats.wilcoxon(d).pvalue, abs=1e-15)
    assert wilcoxon_test([0.0, 0.0, 0.0]) == 1.0  # identical systems
    assert wilcoxon_test([0.2, math.nan, 0.3, 0.1, 0.4, 0.5]) == pytest.approx(2 / 32, abs=1e-15)  # NaN left out


def test_percentile_test_and_interval():
    assert percentile_test(np.zeros(999), 0.05) == ((0.0, 0.0), 1.0)  # identical systems are not "significant"
    deltas = np.arange(1.0, 1000.0)  # B = 999 resamples 1..999, none <= 0
    # m = 24, the smallest count whose p 2·(1 + m)/1000 is not below α: the 24th smallest and the 24th largest
    assert percentile_test(deltas, 0.05) == ((24.0, 976.0), 2 / 1000)
    # 30 of 999 at or below 0: p = 2·31/1000; the interval starts at the 24th smallest, still below 0
    (low, high), p = percentile_test(deltas - 30, 0.05)
    assert p == pytest.approx(62 / 1000, abs=1e-15) and (low, high) == (-6.0, 946.0)
    assert percentile_test(-deltas, 0.05)[1] == 2 / 1000  # two-sided
    assert percentile_test(np.array([np.nan, np.nan]), 0.05) == (None, 1.0)
    with pytest.raises(ValueError, match="30 resamples cannot give p < 0.05"):
        percentile_test(np.ones(30), 0.05)
    assert percentile_interval(np.arange(1001.0)) == pytest.approx((25.0, 975.0))
    assert percentile_interval(np.array([np.nan])) is None


def test_resample_counts_are_sacrebleus_resamples():
    counts = resample_counts(7, 50, seed=12345)
    index = np.random.default_rng(12345).choice(7, size=(50, 7), replace=True)
    assert np.array_equal(counts.sum(1), np.full(50, 7.0))
    assert np.array_equal(counts, np.stack([np.bincount(row, minlength=7) for row in index]).astype(float))
    with pytest.raises(ValueError, match="empty test set"):
        resample_counts(0, 10)


def test_verdict_respects_the_direction_of_the_metric_and_the_interval():
    assert verdict(+1.2, (0.2, 2.0), 0.01, 0.05, higher_is_better=True) == "better"
    assert verdict(-1.2, (-2.0, -0.2), 0.01, 0.05, higher_is_better=True) == "worse"
    assert verdict(-3.0, (-5.0, -1.0), 0.01, 0.05, higher_is_better=False) == "better"  # HD95: lower is better
    assert verdict(+3.0, (1.0, 5.0), 0.01, 0.05, higher_is_better=False) == "worse"
    assert verdict(+3.0, (1.0, 5.0), 0.05, 0.05, higher_is_better=True) == "no significant difference"  # p < α
    assert verdict(+3.0, (-1.0, 5.0), 0.01, 0.05, higher_is_better=True) == "no significant difference"  # covers 0
    assert verdict(-0.1, (0.5, 5.0), 0.01, 0.05, higher_is_better=True) == "no significant difference"  # other side
    assert verdict(+3.0, None, 0.01, 0.05, higher_is_better=True) == "no significant difference"  # no interval
    for bad in (0, 1, 1.5, math.nan):
        with pytest.raises(ValueError, match="alpha must be"):
            check_alpha(bad)


def test_bleu_statistics_are_sacrebleus():
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import _bootstrap_resample

    records = [{"greedy": h, "reference": r} for h, r in zip(GOOD, REFS)]
    stats = _bleu_stats(records, {})
    bleu = BLEU(force=True)
    assert _bleu_score(stats.sum(0))[0] == pytest.approx(bleu.corpus_score(GOOD, [REFS]).score, abs=1e-12)
    _, theirs = _bootstrap_resample(bleu._extract_corpus_statistics(GOOD, [REFS]), bleu, 200)  # seed 12345
    ours = _bleu_score(resample_counts(len(REFS), 200) @ stats)
    # the same resamples; sacreBLEU hands float32 count sums to its formula (2.8e-8 relative apart, measured)
    assert ours == pytest.approx([s.score for s in theirs], rel=1e-6)


def _bleu_metric():
    return PairedMetric("bleu", "BLEU", "test", True, "paired_bs", _bleu_stats, _bleu_score)


def _runs(*systems):
    return [("sha256:same", _bleu_stats([{"greedy": h, "reference": r} for h, r in zip(hyps, REFS)], {}))
            for hyps in systems]


def test_paired_bleu_bootstrap_identical_and_clearly_better():
    metric = _bleu_metric()
    out = paired_statistics(metric, {"base": _runs(BAD), "same": _runs(BAD), "good": _runs(GOOD)},
                            [("same", "same", "base"), ("good", "good", "base")])
    assert out["same"]["delta"] == 0.0 and out["same"]["p_value"] == 1.0
    assert out["same"]["verdict"] == "no significant difference"
    # no resample at or below 0: the smallest two-sided p of 1000 resamples, 2/1001 (Holm over 2: 4/1001)
    assert out["good"]["delta"] > 10 and out["good"]["p_value"] == pytest.approx(2 / 1001)
    assert out["good"]["p_value_holm"] == pytest.approx(4 / 1001) and out["good"]["verdict"] == "better"
    low, high = out["good"]["delta_ci95"]
    assert 0 < low < out["good"]["delta"] < high
    assert "ci95" in out["base"] and "delta" not in out["base"]


def test_paired_bleu_agrees_with_sacrebleu_on_a_clear_difference():
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    _, scores = PairedTest([("base", BAD), ("good", GOOD)], {"BLEU": BLEU(force=True)}, [REFS], test_type="bs")()
    out = paired_statistics(_bleu_metric(), {"base": _runs(BAD), "good": _runs(GOOD)}, [("good", "good", "base")])
    assert out["good"]["mean"] == pytest.approx(scores["BLEU"][1].score, abs=1e-12)
    assert out["good"]["other_p_values"]["sacrebleu_paired_bs"] == scores["BLEU"][1].p_value  # both 1 / 1001


def test_several_seeds_average_per_example_and_strata_pair_by_data():
    metric = _bleu_metric()
    two = {"base": _runs(BAD, BAD), "good": _runs(GOOD, BAD)}
    out = paired_statistics(metric, two, [("good", "good", "base")])
    good, bad = out["good"]["per_seed"]
    assert out["good"]["mean"] == pytest.approx((good + bad) / 2, abs=1e-12)
    assert out["good"]["ci95_method"] == "Student t over 2 seeds"
    assert out["good"]["delta"] == pytest.approx((good - bad) / 2, abs=1e-12)
    assert out["good"]["seed_deltas"] == pytest.approx([good - bad, 0.0], abs=1e-12)
    assert out["good"]["seeds_agree"] == "1/2"  # the second seed alone shows no difference
    # seeds scored on different data: each seed is paired with the baseline's run on the same data
    strata = {"base": [("h0", _runs(BAD)[0][1]), ("h1", _runs(GOOD)[0][1])],
              "good": [("h1", _runs(GOOD)[0][1]), ("h0", _runs(GOOD)[0][1])]}
    out = paired_statistics(metric, strata, [("good", "good", "base")])
    assert out["good"]["delta"] == pytest.approx((good - bad) / 2, abs=1e-12)  # (good − bad on h0 + 0 on h1) / 2
    assert out["good"]["test"] == "bootstrap by seed"
    with pytest.raises(ValueError, match="not scored on the same data"):
        paired_statistics(metric, {"base": [("h0", _runs(BAD)[0][1])], "good": [("h1", _runs(GOOD)[0][1])]},
                          [("good", "good", "base")])


def test_accuracy_reports_mcnemar_with_one_seed_and_sign_flips_with_several():
    labels = [i % 10 for i in range(200)]
    right = [{"label": y, "prediction": y} for y in labels]
    wrong = [{"label": y, "prediction": (y + 1) % 10 if i % 3 else y} for i, y in enumerate(labels)]
    metric = PairedMetric("top1", "top-1", "test", True, "mcnemar", _correct_stats, mean_score, first_column)

    def runs(*records):
        return [("h", _correct_stats(r, {})) for r in records]

    out = paired_statistics(metric, {"base": runs(wrong), "same": runs(wrong), "good": runs(right)},
                            [("same", "same", "base"), ("good", "good", "base")])
    assert out["same"]["other_p_values"] == {"mcnemar_exact": 1.0} and out["same"]["p_value"] == 1.0
    b = sum(1 for i in range(200) if i % 3)  # right for "good" only
    assert out["good"]["other_p_values"]["mcnemar_exact"] == pytest.approx(mcnemar_exact(b, 0))
    assert out["good"]["test"] == "bootstrap" and out["good"]["verdict"] == "better"
    assert out["good"]["delta"] == pytest.approx(b / 200, abs=1e-12)
    two = {"base": runs(wrong, wrong), "good": runs(right, wrong)}
    out = paired_statistics(metric, two, [("good", "good", "base")])
    assert list(out["good"]["other_p_values"]) == ["sign_flip"] and out["good"]["verdict"] == "better"


def test_macro_f1_from_confusion_cells_is_scikit_learns():
    from sklearn.metrics import f1_score

    from tasks.cifar.paired import _confusion_stats

    rng = np.random.default_rng(1)
    y, p = rng.integers(0, 4, 60), rng.integers(0, 4, 60)
    p[y == 3] = 0  # a class never predicted
    records = [{"label": int(a), "prediction": int(b)} for a, b in zip(y, p)]
    stats = _confusion_stats(records, {"preprocessing": {"class_names": list("abcd")}})
    expected = f1_score(y, p, labels=range(4), average="macro", zero_division=0)
    assert _macro_f1(stats.sum(0))[0] == pytest.approx(expected, abs=1e-12)
