"""Lesson "temperature": distinct-n by hand and a reduced lesson run."""

import pytest

from tasks.lab import LabSettings, run_lesson
from tasks.lab.temperature import distinct_n
from tests.tasks.lab.zh_checks import assert_chinese


def test_distinct_n_by_hand():
    texts = ["a b a", "a b"]  # unigrams a b a a b (2 unique of 5); bigrams ab ba ab (2 unique of 3)
    assert distinct_n(texts, 1) == pytest.approx(2 / 5)
    assert distinct_n(texts, 2) == pytest.approx(2 / 3)
    assert distinct_n(["a"], 2) == 0.0  # no bigram at all


def test_reduced_lesson_run(tmp_path):
    # scale 0.4: 100 training steps, enough for greedy decoding to beat sampling (at 25 steps BLEU is noise).
    result = run_lesson("temperature", LabSettings(tmp_path, quick=True, scale=0.4, progress=False))
    f = result.findings
    assert f["greedy"]["deterministic"] and f["greedy"]["outputs_per_source"] == 1.0
    for n in (1, 2):
        assert f["T=1.3"][f"distinct_{n}"] >= f["T=0.7"][f"distinct_{n}"]
    assert f["greedy"]["bleu"] >= f["T=0.7"]["bleu"] >= f["T=1.3"]["bleu"]  # by >= 10.7 and 3.4 BLEU; kernels: <= 0.8
    assert result.holds
    assert (tmp_path / "lesson.md").exists() and (tmp_path / "result.json").exists()
    assert result.figures and all((tmp_path / name).exists() for name in result.figures)
    assert_chinese("temperature", result, tmp_path)
