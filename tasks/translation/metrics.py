"""Translation metrics: sacreBLEU corpus BLEU (with its signature), exact match, BLEU by source length,
per-sentence chrF and BLEU."""

from __future__ import annotations

from sacrebleu.metrics import BLEU, CHRF

LENGTH_BUCKETS = ((1, 5), (6, 10), (11, 15), (16, 20), (21, 30), (31, 10_000))


def translation_metrics(hypotheses: list[str], references: list[str]) -> dict:
    """Corpus BLEU (sacreBLEU defaults: 13a tokenisation, exp smoothing), exact-match rate, signature."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu = BLEU(force=True)  # the generated corpus is space-tokenised on purpose; do not warn about it
    score = bleu.corpus_score(hypotheses, [references])
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references)) / max(len(references), 1)
    return {"bleu": score.score, "exact_match": exact, "signature": str(bleu.get_signature())}


def bleu_by_length(sources: list[str], hypotheses: list[str], references: list[str]) -> list[dict]:
    """BLEU of the sentences whose source has 1–5, 6–10, ... words."""
    rows = []
    for low, high in LENGTH_BUCKETS:
        idx = [i for i, s in enumerate(sources) if low <= len(s.split()) <= high]
        if idx:
            m = translation_metrics([hypotheses[i] for i in idx], [references[i] for i in idx])
            label = f"{low}-{high}" if high < 10_000 else f"{low}+"
            rows.append({"source tokens": label, "sentences": len(idx), "bleu": m["bleu"],
                         "exact_match": m["exact_match"]})
    return rows


def sentence_scores(hypotheses: list[str], references: list[str]) -> list[dict[str, float]]:
    """Per-sentence ``chrf`` and ``bleu`` (sacreBLEU's ``sentence_chrf`` / ``sentence_bleu``: chrF defaults,
    BLEU with effective order) of each hypothesis against its one reference."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = BLEU(effective_order=True), CHRF()
    return [{"chrf": chrf.sentence_score(h, [r]).score, "bleu": bleu.sentence_score(h, [r]).score}
            for h, r in zip(hypotheses, references)]
