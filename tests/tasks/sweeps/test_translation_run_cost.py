"""What a translation run costs besides its training, in a process that trains many (a serial sweep, a local
launcher's reused worker): the generated corpus and its tokenizer are made once per settings and each run gets data
of its own; a beam of one reuses the greedy translations. Neither may change what a run reports."""

from __future__ import annotations

import pytest
import torch

import core.decoding
import tasks.translation.corpus
import tasks.translation.task as translation
from tasks.engine.distributed import DistInfo
from tasks.translation.task import TranslationConfig, TranslationTask

CPU = torch.device("cpu")
SMALL = dict(preset="tiny", n_train=200, progress=False)


def _set_up(tmp_path, **settings) -> TranslationTask:
    task = TranslationTask(TranslationConfig(out=str(tmp_path / "run"), **{**SMALL, **settings}), CPU, DistInfo())
    task.setup()
    return task


def _greedy_model(tmp_path, tests: int, longs: int):
    """A set-up task decoding greedily (beam_size 1) on the first ``tests`` / ``longs`` sentences of its test
    splits, and its untrained model (seed 0), in eval mode."""
    task = _set_up(tmp_path, beam_size=1, n_train=0)
    torch.manual_seed(0)
    model = task.build_model().eval()
    task.splits = {"test": task.splits["test"][:tests], "test_long": task.splits["test_long"][:longs]}
    return task, model


@pytest.fixture
def generations(monkeypatch):
    """The generate_corpus calls (their keyword arguments), with the process's caches emptied before and after."""
    calls = []
    real = tasks.translation.corpus.generate_corpus

    def counted(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(tasks.translation.corpus, "generate_corpus", counted)
    translation._generated_corpus.cache_clear()
    translation._tokenised_corpus.cache_clear()
    yield calls
    translation._generated_corpus.cache_clear()
    translation._tokenised_corpus.cache_clear()


def test_the_generated_corpus_is_made_once_per_settings_and_each_run_gets_its_own_data(tmp_path, generations):
    first = _set_up(tmp_path)
    first.splits["train"].clear()  # a run that changes its data changes nobody else's
    with pytest.raises((TypeError, AttributeError)):  # the shared training ids cannot be changed
        first.train_src[0][0] = 99
    second = _set_up(tmp_path)
    assert len(generations) == 1  # the same settings: generated once
    assert len(second.splits["train"]) == 200
    assert second.tokenizer is first.tokenizer
    translation._generated_corpus.cache_clear()
    translation._tokenised_corpus.cache_clear()
    fresh = _set_up(tmp_path)  # what an uncached run gets: the same data and ids
    assert fresh.splits == second.splits
    assert fresh.train_src == second.train_src and fresh.train_tgt == second.train_tgt
    vocab_size = TranslationConfig().vocab_size
    assert list(map(list, fresh.train_src)) == translation._tokenise(fresh.splits["train"], "word", vocab_size)[1]
    assert fresh.tokenizer.vocab_size == second.tokenizer.vocab_size
    assert fresh.train_rows == second.train_rows


@pytest.mark.parametrize("change", [{"seed": 1}, {"n_train": 150}, {"difficulty": "hard"}])
def test_a_run_with_other_corpus_settings_gets_other_data(tmp_path, generations, change):
    base = _set_up(tmp_path)
    other = _set_up(tmp_path, **change)
    assert len(generations) == 2
    assert other.splits["train"] != base.splits["train"] and other.splits["test"] != base.splits["test"]
    _set_up(tmp_path)  # the first settings again: still cached
    assert len(generations) == 2


def test_other_tokenizer_settings_retrain_the_tokenizer_on_the_cached_corpus(tmp_path, generations):
    base = _set_up(tmp_path)
    smaller = _set_up(tmp_path, vocab_size=20)
    bpe = _set_up(tmp_path, tokenizer="bpe", vocab_size=300)
    assert len(generations) == 1
    assert smaller.tokenizer.vocab_size == 20 < base.tokenizer.vocab_size
    assert smaller.train_src != base.train_src and bpe.tokenizer_kind == "bpe" and bpe.train_src != base.train_src


def test_a_beam_of_one_reuses_the_greedy_translations(tmp_path, monkeypatch):
    task, model = _greedy_model(tmp_path, 40, 20)
    beams = []
    real = core.decoding.beam_search

    def counted(*args, **kwargs):
        beams.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(translation, "beam_search", counted)
    (tmp_path / "run").mkdir()
    final, _ = task.final_report(model, tmp_path / "run")
    assert beams == []  # no second decoding of the same sentences
    for split in ("test", "test_long"):
        sources = [s for s, _ in task.splits[split]]
        assert task.translate(model, sources, "beam") == task.translate(model, sources)  # what it relies on
        assert final[split]["beam_bleu"] == final[split]["greedy_bleu"]
    beams.clear()
    task.config.beam_size = 2
    task.final_report(model, tmp_path / "run")
    assert len(beams) > 0  # a real beam still searches


def _corpus_pairs(n: int) -> tuple[list[str], list[str], list[str]]:
    """Sources, references and imperfect hypotheses (some exact, some cut, some empty) of the generated corpus."""
    pairs = tasks.translation.corpus.generate_corpus(seed=3, n_train=50)["test_long"][:n]
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    hyps = [r if i % 3 == 0 else ("" if i % 7 == 1 else " ".join(r.split()[: 2 + i % 9])) for i, r in enumerate(refs)]
    return sources, refs, hyps


def test_bleu_from_the_statistics_equals_sacrebleus_own_scores_to_the_last_digit():
    from sacrebleu.metrics import BLEU, CHRF

    from tasks.translation.metrics import (
        LENGTH_BUCKETS,
        bleu_by_length,
        bleu_statistics,
        sentence_scores,
        translation_metrics,
    )

    sources, refs, hyps = _corpus_pairs(120)
    stats = bleu_statistics(hyps, refs)
    assert translation_metrics(hyps, refs, stats)["bleu"] == BLEU(force=True).corpus_score(hyps, [refs]).score
    buckets = [[i for i, s in enumerate(sources) if low <= len(s.split()) <= high] for low, high in LENGTH_BUCKETS]
    expected = [BLEU(force=True).corpus_score([hyps[i] for i in idx], [[refs[i] for i in idx]]).score
                for idx in buckets if idx]
    assert [row["bleu"] for row in bleu_by_length(sources, hyps, refs, stats)] == expected and len(expected) >= 2
    bleu, chrf = BLEU(effective_order=True), CHRF()
    assert sentence_scores(hyps, refs, stats) == [{"chrf": chrf.sentence_score(h, [r]).score,
                                                   "bleu": bleu.sentence_score(h, [r]).score}
                                                  for h, r in zip(hyps, refs)]
    with pytest.raises(ValueError, match="rows of BLEU statistics for 119 hypotheses"):
        sentence_scores(hyps[1:], refs[1:], stats)


def test_the_final_evaluation_tokenises_each_split_once_for_bleu(tmp_path, monkeypatch):
    from sacrebleu.metrics import BLEU

    task, model = _greedy_model(tmp_path, 30, 20)
    passes = []
    real = BLEU._extract_corpus_statistics

    def counted(self, hypotheses, references):
        passes.append(len(hypotheses))
        return real(self, hypotheses, references)

    monkeypatch.setattr(BLEU, "_extract_corpus_statistics", counted)
    (tmp_path / "run").mkdir()
    task.final_report(model, tmp_path / "run")
    assert sorted(n for n in passes if n > 1) == [20, 30]  # one pass over each split; the signature's is of 1
