"""Translation's paired metrics for `zoo compare` (:mod:`tasks.compare.paired`): corpus BLEU from per-sentence
n-gram statistics, on the test set and the long-sentence test set."""

from __future__ import annotations

import numpy as np

from tasks.compare.paired import PairedMetric


def _bleu():
    from sacrebleu.metrics import BLEU

    return BLEU(force=True)  # as tasks.translation.metrics.translation_metrics scores the corpus


def _bleu_stats(records: list[dict], info: dict) -> np.ndarray:
    hyps, refs = [r["greedy"] for r in records], [r["reference"] for r in records]
    return np.asarray(_bleu()._extract_corpus_statistics(hyps, [refs]), dtype=np.float64)  # (n, 2 + 2·4)


def _bleu_score(sums: np.ndarray) -> np.ndarray:
    bleu = _bleu()
    return np.array([bleu._compute_score_from_stats(row).score for row in np.atleast_2d(sums)])


def paired_metrics(info: dict) -> list[PairedMetric]:
    return [PairedMetric("bleu", "BLEU", "test", True, "paired_bs", _bleu_stats, _bleu_score),
            PairedMetric("long_bleu", "long BLEU", "test_long", True, "paired_bs", _bleu_stats, _bleu_score,
                         role="secondary")]
