"""The extrapolation protocol (tasks/lm/extrapolation.py): sliding-window perplexity equals scoring each token
separately with its own window, on a tiny decoder-only model of every position scheme, in float64."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from scipy import stats

from core.language_model import build_language_model
from core.position import POSITIONAL_SCHEMES
from tasks.lm.curves import markdown_section, plot_curves, schemes_markdown
from tasks.lm.extrapolation import compare_schemes, perplexity_at_lengths, token_nll, windows
from tests.numerics import assert_close_fp64, float64

VOCAB, N_TOKENS = 13, 41  # 41 = no whole number of windows at the lengths below: the tail rule is exercised


def tiny(position: str = "sinusoidal", max_len: int = 64, seed: int = 0):
    with float64():
        torch.manual_seed(seed)
        return build_language_model("tiny", vocab_size=VOCAB, d_model=16, heads=2, d_ff=32, position=position,
                                    max_len=max_len).eval()


def corpus(n: int = N_TOKENS) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(1))


def nll_of_last(model, context: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The reference: the model run on exactly ``context`` (one sequence), scoring the token after it."""
    with torch.no_grad():
        logits = model(context[None])[0, -1]  # (V,)
    return -torch.log_softmax(logits, -1)[target]


def reference_nll(model, tokens: torch.Tensor, length: int, stride: int) -> torch.Tensor:
    """Hugging Face's "perplexity of fixed-length models" loop, written plainly, one token at a time: windows of
    ``length`` advanced by ``stride`` (the last one ending at the corpus's end), each scoring the tokens after the
    previous window's end, each such token run separately on its window's tokens before it."""
    out = torch.full((len(tokens),), math.nan, dtype=torch.float64)
    previous_end, begin = 0, 0
    while previous_end < len(tokens):
        begin = min(begin, len(tokens) - length)
        end = begin + length
        for t in range(max(begin + 1, previous_end), end):
            out[t] = nll_of_last(model, tokens[begin:t], tokens[t])
        previous_end, begin = end, begin + stride
    return out


@pytest.mark.parametrize("position", POSITIONAL_SCHEMES)
@pytest.mark.parametrize("length,stride", [(8, 3), (8, 8), (5, 1)])
def test_each_token_scored_once_equals_its_own_window_run_alone(position, length, stride):
    model, tokens = tiny(position), corpus()
    with float64():
        got = token_nll(model, tokens, length, stride, batch_size=2)
        expected = reference_nll(model, tokens, length, stride)
    assert got.dtype == torch.float64
    assert torch.equal(got.isnan(), expected.isnan())  # the same tokens scored
    assert_close_fp64(got[~got.isnan()], expected[~expected.isnan()])
    if stride < length:  # every token but the first is scored exactly once
        assert got.isnan().tolist() == [True] + [False] * (len(tokens) - 1)


def test_stride_one_gives_every_token_its_full_context():
    model, tokens, length = tiny("alibi"), corpus(), 6
    with float64():
        got = token_nll(model, tokens, length, stride=1)
        expected = [nll_of_last(model, tokens[max(0, t - length + 1):t], tokens[t]) for t in range(1, len(tokens))]
    assert_close_fp64(got[1:], torch.stack(expected))


def test_stride_equal_to_length_is_the_non_overlapping_protocol():
    model, tokens = tiny("rope"), corpus()
    with float64():
        rows = perplexity_at_lengths(model, tokens, [8, 16], stride=8, batch_size=3)
    first = rows[0]
    assert first["sliding"] == first["non_overlapping"]
    # windows at 0, 8, 16, 24, 32 and one ending at the corpus's end (33): the first token of every window after
    # the first has no context inside it; the tail's window scores only tokens 40, past the one at 32's end
    assert windows(N_TOKENS, 8, 8)[0].tolist() == [0, 8, 16, 24, 32, 33]
    assert first["non_overlapping"]["tokens"] == 7 + 4 * 7 + 1
    assert rows[1]["sliding"]["tokens"] > rows[1]["non_overlapping"]["tokens"]


def test_scores_are_the_means_of_the_token_nll():
    model, tokens = tiny(), corpus()
    with float64():
        (row,) = perplexity_at_lengths(model, tokens, [8], stride=2, n_chars=2 * N_TOKENS)
        nll = token_nll(model, tokens, 8, 2)
    sliding = row["sliding"]
    mean = float(nll[1:].mean())
    assert sliding["tokens"] == N_TOKENS - 1 and sliding["stride"] == 2
    assert sliding["nll"] == pytest.approx(mean, rel=1e-12)
    assert sliding["perplexity"] == pytest.approx(math.exp(mean), rel=1e-12)
    assert sliding["bits_per_token"] == pytest.approx(mean / math.log(2), rel=1e-12)
    assert sliding["bits_per_char"] == pytest.approx(sliding["bits_per_token"] / 2, rel=1e-12)  # 2 chars a token


def test_a_learned_table_is_not_defined_past_its_length_and_never_wrapped():
    model, tokens = tiny("learned", max_len=16), corpus()
    with float64():
        rows = perplexity_at_lengths(model, tokens, [8, 16, 32], stride=4)
    assert [row["defined"] for row in rows] == [True, True, False]
    assert rows[2]["non_overlapping"] is None and rows[2]["sliding"] is None and rows[2]["limit"] == 16
    assert "not defined past 16" in rows[2]["reason"] and "max_len >= 32" in rows[2]["reason"]
    with pytest.raises(ValueError, match="max_len=16"):  # the model itself refuses: nothing to wrap silently
        model(tokens[None, :32])


@pytest.mark.parametrize("lengths,stride,match", [
    ([1], None, "each evaluation length must be >= 2"),
    ([0, 8], None, "each evaluation length must be >= 2"),
    ([], None, "lengths is empty"),
    ([8], 9, r"stride must be in \[1, 8\]"),
    ([8, 16], 12, r"stride must be in \[1, 8\].*lower --stride"),
    ([8], 0, r"stride must be in \[1, 8\]"),
    ([64], None, "evaluation length 64 is longer than the corpus \\(41 tokens\\).*drop 64"),
])
def test_bad_protocol_inputs_are_refused_by_name(lengths, stride, match):
    with pytest.raises(ValueError, match=match):
        perplexity_at_lengths(tiny(), corpus(), lengths, stride)


def test_tokens_that_are_not_a_corpus_of_ids_are_refused():
    with pytest.raises(TypeError, match="1-D LongTensor"):
        perplexity_at_lengths(tiny(), corpus()[None], [8])
    with pytest.raises(TypeError, match="stride must be an int"):
        perplexity_at_lengths(tiny(), corpus(), [8], stride=2.0)
    with pytest.raises(ValueError, match="evaluation length 64 is longer than the corpus"):  # called directly too
        token_nll(tiny(), corpus(), 64)


def test_the_model_comes_back_in_the_mode_it_had():
    model = tiny().train()
    perplexity_at_lengths(model, corpus(), [8])
    assert model.training


def test_compare_schemes_mean_and_t_interval_over_seeds():
    tokens, train_length = corpus(), 4
    runs = {"rope": [(tiny("rope", seed=s), tokens) for s in (0, 1)],
            "learned": [(tiny("learned", max_len=8, seed=0), tokens)]}
    with float64():
        table = compare_schemes(runs, train_length, stride=2)
        seed_rows = [perplexity_at_lengths(model, tokens, [4, 8, 16, 32], 2) for model, _ in runs["rope"]]
    assert [(e["scheme"], e["multiple"], e["length"]) for e in table] == [
        (scheme, m, 4 * m) for scheme in ("rope", "learned") for m in (1, 2, 4, 8)]
    for entry, *per_seed in zip(table[:4], *seed_rows, strict=True):
        values = [rows["sliding"]["perplexity"] for rows in per_seed]
        low, high = stats.t.interval(0.95, len(values) - 1, loc=sum(values) / 2, scale=stats.sem(values))
        assert entry["seeds"] == 2 and entry["note"] == ""
        assert entry["mean"] == pytest.approx(sum(values) / 2, rel=1e-12)
        assert entry["interval"] == pytest.approx((low, high), rel=1e-9)
    learned = table[4:]
    assert learned[0]["note"] == learned[1]["note"] == "1 seed, no interval" and learned[0]["interval"] is None
    assert learned[2]["mean"] is None and learned[2]["note"] == "not defined past 8"
    text = schemes_markdown(table)
    assert "| scheme | seeds | 1× (4) | 2× (8) | 4× (16) | 8× (32) |" in text
    assert f"| rope | 2 | {table[0]['mean']:.4g} [{table[0]['interval'][0]:.4g}, " in text
    assert "| learned | 1 (no interval) |" in text and "| not defined past 8 | not defined past 8 |" in text


def test_compare_schemes_refuses_a_length_not_measured():
    rows = perplexity_at_lengths(tiny(), corpus(), [4, 8])
    with pytest.raises(ValueError, match="not measured at length 16.*--lengths 4,8,16,32"):
        compare_schemes({"sinusoidal": [rows]}, 4)


def test_curves_and_report_section(tmp_path):
    tokens = corpus()
    with float64():
        rows = {"sinusoidal": perplexity_at_lengths(tiny(), tokens, [8, 16, 32], stride=4, n_chars=N_TOKENS),
                "learned": perplexity_at_lengths(tiny("learned", max_len=16), tokens, [8, 16, 32], stride=4)}
    path = plot_curves(rows, 8, tmp_path / "curves.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]  # written atomically: no temporary file left
    text = markdown_section(rows["sinusoidal"], 8)
    assert "| length | × training | non-overlapping ppl | sliding ppl (stride 4) | bits/char |" in text
    ratio = rows["sinusoidal"][2]["sliding"]["perplexity"] / rows["sinusoidal"][0]["sliding"]["perplexity"]
    assert f"At 4× the training length (32 tokens) perplexity is {ratio:.3g}× that at the training length" in text
    assert "not defined past 16" in markdown_section(rows["learned"], 8)
    assert "Not defined past the training length (16 tokens)" in markdown_section(rows["learned"], 16)


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> Path:
    """A ``zoo train lm`` run of one short epoch at context 8 on a small text file."""
    from tasks.cli.main import main

    root = tmp_path_factory.mktemp("lm")
    words = ["the", "king", "queen", "sword", "crown", "night", "day", "love", "death", "heart"]
    rng = torch.Generator().manual_seed(0)
    text = " ".join(words[i] for i in torch.randint(0, len(words), (800,), generator=rng).tolist())
    (root / "corpus.txt").write_text(text)
    assert main(["train", "lm", "--data", str(root / "corpus.txt"), "--preset", "tiny", "--context", "8",
                 "--epochs", "1", "--num-threads", "1", "--progress", "false", "--out", str(root / "run")]) == 0
    return root / "run"


def test_compare_schemes_measures_run_folders_at_their_training_length(lm_run):
    from tasks.runs.run import load_run

    (first, second) = compare_schemes({"classic": [lm_run, str(lm_run)]}, 8, multiples=(1, 2), stride=4)
    run = load_run(lm_run)
    run.task.setup()
    (row,) = perplexity_at_lengths(run.model, run.task.ids["valid"], [16], 4)
    assert second["length"] == 16 and second["seeds"] == 2
    assert second["mean"] == pytest.approx(row["sliding"]["perplexity"], rel=1e-9)
    assert second["interval"] == pytest.approx((second["mean"],) * 2, abs=1e-9)  # the same run twice: no spread
    with pytest.raises(ValueError, match="trained at context 8, not train_length=16.*train_length=8"):
        compare_schemes({"classic": [lm_run]}, 16)
    with pytest.raises(ValueError, match="split 'dev' is not one of the run's splits"):
        compare_schemes({"classic": [lm_run]}, 8, split="dev")
