"""Lesson "extrapolation": the 8L/L ratio read from the protocol's rows, and a reduced lesson run in which ALiBi
holds past the training length where sinusoidal positions do not and a learned table is "not defined"."""

import json

import pytest

from tasks.lab import LabSettings, run_lesson
from tasks.lab.extrapolation import CONTEXT, ratio
from tasks.lm.extrapolation import MULTIPLES
from tests.tasks.lab.zh_checks import assert_chinese


def _row(length: int, perplexity: float | None) -> dict:
    if perplexity is None:
        return {"length": length, "defined": False, "non_overlapping": None, "sliding": None, "reason": "no row"}
    return {"length": length, "defined": True, "non_overlapping": {"perplexity": perplexity + 1.0},
            "sliding": {"perplexity": perplexity}}


def test_ratio_reads_the_sliding_perplexity_and_none_past_a_table():
    rows = [_row(CONTEXT * m, p) for m, p in zip(MULTIPLES, (10.0, 11.0, 14.0, 25.0), strict=True)]
    assert ratio(rows) == pytest.approx(2.5)  # the sliding window's 25 / 10, not the non-overlapping 26 / 11
    assert ratio(rows, 2) == pytest.approx(1.1)
    learned = [_row(CONTEXT, 10.0)] + [_row(CONTEXT * m, None) for m in MULTIPLES[1:]]
    assert ratio(learned) is None


def test_reduced_lesson_run(tmp_path):
    # scale 0.5: 150 steps per scheme, one seed. Measured here: alibi 1.01x, t5 1.03x, none 1.04x, sinusoidal
    # 1.22x, rope 1.25x (8L over L); the assertions keep a wide margin below those gaps.
    result = run_lesson("extrapolation", LabSettings(tmp_path, quick=True, scale=0.5, progress=False))
    ratios = result.findings["ratio_8x"]
    assert ratios["learned"] is None  # not defined past its table: no silent wrap or truncation
    assert ratios["alibi"] < 1.1 and ratios["alibi"] + 0.08 < ratios["sinusoidal"]
    assert ratios["alibi"] < ratios["rope"]
    learned = [e for e in result.findings["table"] if e["scheme"] == "learned"]
    assert [e["mean"] is None for e in learned] == [False, True, True, True]
    assert result.holds
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["findings"]["ratio_8x"]["learned"] is None
    assert (tmp_path / "lesson.md").exists() and (tmp_path / "curves.png").exists()
    assert "not defined past L" in (tmp_path / "lesson.md").read_text()
    assert_chinese("extrapolation", result, tmp_path)
