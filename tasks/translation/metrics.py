"""Translation metrics: sacreBLEU corpus BLEU (with its signature), exact match, BLEU by source length,
per-sentence chrF and BLEU.

Corpus, bucket and sentence BLEU are all sums of each sentence's sufficient statistics (sacreBLEU's n-gram matches
and totals, on its 13a tokens), so a caller scoring one split several ways passes :func:`bleu_statistics` once
instead of having sacreBLEU tokenise every sentence again for each score: the numbers are the same to the last digit.
"""

from __future__ import annotations

import functools

from sacrebleu.metrics import BLEU, CHRF

LENGTH_BUCKETS = ((1, 5), (6, 10), (11, 15), (16, 20), (21, 30), (31, 10_000))
Statistics = list[list[int]]  # one row of sacreBLEU's BLEU statistics per sentence


def _check_lengths(hypotheses: list[str], references: list[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")


def bleu_statistics(hypotheses: list[str], references: list[str]) -> Statistics:
    """Each hypothesis's BLEU statistics against its one reference (sacreBLEU's, 13a tokens): what
    ``statistics=`` of the functions below takes for these sentences."""
    _check_lengths(hypotheses, references)
    return BLEU(force=True)._extract_corpus_statistics(hypotheses, [references])


def _statistics(hypotheses: list[str], references: list[str], statistics: Statistics | None) -> Statistics:
    """``statistics`` checked against the sentences, or computed when None."""
    if statistics is None:
        return bleu_statistics(hypotheses, references)
    _check_lengths(hypotheses, references)
    if len(statistics) != len(hypotheses):
        raise ValueError(f"{len(statistics)} rows of BLEU statistics for {len(hypotheses)} hypotheses; pass "
                         "bleu_statistics(hypotheses, references) of these sentences")
    return statistics


@functools.cache
def bleu_signature() -> str:
    """sacreBLEU's signature of the corpus BLEU below (its settings and version)."""
    bleu = BLEU(force=True)
    bleu.corpus_score(["a"], [["a"]])
    return str(bleu.get_signature())


def translation_metrics(hypotheses: list[str], references: list[str], statistics: Statistics | None = None) -> dict:
    """Corpus BLEU (sacreBLEU defaults: 13a tokenisation, exp smoothing), exact-match rate, signature.

    ``statistics``: :func:`bleu_statistics` of these sentences, if already computed."""
    statistics = _statistics(hypotheses, references, statistics)
    # the generated corpus is space-tokenised on purpose: force, so sacreBLEU does not warn about it
    score = BLEU(force=True)._aggregate_and_compute(statistics)
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references)) / max(len(references), 1)
    return {"bleu": score.score, "exact_match": exact, "signature": bleu_signature()}


def bleu_by_length(sources: list[str], hypotheses: list[str], references: list[str],
                   statistics: Statistics | None = None) -> list[dict]:
    """BLEU of the sentences whose source has 1–5, 6–10, ... words (``statistics``: as in
    :func:`translation_metrics`)."""
    statistics = _statistics(hypotheses, references, statistics)
    rows = []
    for low, high in LENGTH_BUCKETS:
        idx = [i for i, s in enumerate(sources) if low <= len(s.split()) <= high]
        if idx:
            m = translation_metrics([hypotheses[i] for i in idx], [references[i] for i in idx],
                                    [statistics[i] for i in idx])
            label = f"{low}-{high}" if high < 10_000 else f"{low}+"
            rows.append({"source tokens": label, "sentences": len(idx), "bleu": m["bleu"],
                         "exact_match": m["exact_match"]})
    return rows


def sentence_scores(hypotheses: list[str], references: list[str],
                    statistics: Statistics | None = None) -> list[dict[str, float]]:
    """Per-sentence ``chrf`` and ``bleu`` (sacreBLEU's ``sentence_chrf`` / ``sentence_bleu``: chrF defaults,
    BLEU with effective order) of each hypothesis against its one reference (``statistics``: as in
    :func:`translation_metrics`; the sentence BLEU's tokens and n-grams are the corpus BLEU's)."""
    statistics = _statistics(hypotheses, references, statistics)
    bleu, chrf = BLEU(effective_order=True), CHRF()
    return [{"chrf": chrf.sentence_score(h, [r]).score, "bleu": bleu._aggregate_and_compute([row]).score}
            for h, r, row in zip(hypotheses, references, statistics)]
