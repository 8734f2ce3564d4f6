"""Lesson "sampling": looping and prompts by hand, the continuation's likelihood against a per-token loop in
float64, and a reduced lesson run: lower T loops more and is likelier, higher T is more diverse and less likely."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from core.language_model import build_language_model
from tasks.lab import LabSettings, run_lesson
from tasks.lab.sampling import continuation_nll, prompts, repeated_ngrams
from tests.numerics import FP64, float64
from tests.tasks.lab.zh_checks import assert_chinese


def test_repeated_ngrams_by_hand():
    # word 2-grams of "a b a b c": ab ba ab bc -> the second "a b" was seen before: 1 of 4
    assert repeated_ngrams(["a", "b", "a", "b", "c"], 2) == pytest.approx(1 / 4)
    assert repeated_ngrams("eeeeeeeeee", 8) == pytest.approx(2 / 3)  # 3 character 8-grams, all "eeeeeeee"
    assert repeated_ngrams(["to", "be"], 4) == 0.0  # no 4-gram at all


def test_prompts_spread_over_the_text_with_the_real_continuation():
    tokens = torch.arange(100)
    ids, real = prompts(tokens, 3, length=10, room=5)
    assert ids[:, 0].tolist() == [0, 42, 85] and ids.shape == (3, 10)
    assert torch.equal(real[2], torch.arange(95, 100))  # the last prompt's continuation ends the text
    with pytest.raises(ValueError, match="fewer than a prompt of 10 plus 95"):
        prompts(tokens, 3, length=10, room=95)


@float64()
def test_continuation_nll_scores_only_the_generated_tokens():
    torch.manual_seed(0)
    model = build_language_model("tiny", vocab_size=11, dropout=0.0).eval()
    ids = torch.randint(11, (2, 9))
    got = continuation_nll(model, ids, prompt_length=4)  # tokens 4..8 of each row
    expected = torch.stack([torch.stack([F.cross_entropy(model(ids[b : b + 1, :t])[0, -1], ids[b, t])
                                         for t in range(4, 9)]).mean() for b in range(2)])
    assert_close(got, expected, **FP64)


def test_reduced_lesson_run(tmp_path):
    # scale 0.5: a 250-step model. Measured here: NLL/token greedy 1.41, T=0.7 2.20, T=1.0 2.68, T=1.3 3.18;
    # greedy repeats 92 % of its character 8-grams, T = 0.7 none; word distinct-1 0.64 at T = 0.7, 0.89 at 1.3.
    result = run_lesson("sampling", LabSettings(tmp_path, quick=True, scale=0.5, progress=False))
    f = result.findings
    greedy, low, mid, high = f["greedy"], f["T=0.7"], f["T=1.0"], f["T=1.3"]
    assert greedy["nll"] + 0.3 < low["nll"] and low["nll"] + 0.2 < mid["nll"] and mid["nll"] + 0.2 < high["nll"]
    assert greedy["repeated_char_8grams"] > low["repeated_char_8grams"] + 0.2  # greedy loops
    assert high["distinct_1"] > low["distinct_1"] and high["distinct_2"] >= low["distinct_2"]
    assert result.holds
    assert set(f["samples"]) == {"prompt", "real text", "greedy", "T=0.7", "T=1.0", "T=1.3"}
    assert (tmp_path / "lesson.md").exists() and (tmp_path / "result.json").exists()
    assert result.figures and all((tmp_path / name).exists() for name in result.figures)
    assert_chinese("sampling", result, tmp_path)
