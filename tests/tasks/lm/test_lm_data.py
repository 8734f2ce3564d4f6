"""The lm task's text: the embedded Shakespeare subset, users' corpora (text, JSONL, folder), their bad inputs, and
the tokenizers (char with its <unk> policy, byte-level BPE) with bits per character."""

from __future__ import annotations

import ast
import fnmatch
import json
import math
import re
from pathlib import Path

import pytest

from tasks.lm.corpus import EMBEDDED, embedded_corpus, parse_fraction, read_corpus
from tasks.lm.task import LMConfig, text_scores
from tasks.lm.tokenizer import BPETokenizer, CharTokenizer, load_tokenizer, train_tokenizer

ROOT = Path(__file__).resolve().parents[3]
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 40


def test_embedded_corpus_is_whole_plays_split_by_play():
    splits = embedded_corpus()
    assert 850_000 < len(splits["train"]) < 1_000_000  # about 0.9 MB, nanoGPT's shakespeare_char is 1.1 MB
    assert splits["train"].startswith("HAMLET, PRINCE OF DENMARK")
    assert "\n\nMACBETH\n" in splits["train"] and splits["train"].rstrip().endswith("[Exit.]")
    assert splits["valid"].upper().startswith("TWELFTH NIGHT")
    assert "MERCHANT OF VENICE" in splits["test"][:200].upper()
    assert "\r" not in "".join(splits.values())
    assert splits["valid"] not in splits["train"] and splits["test"][:5000] not in splits["train"]


def test_package_data_ships_the_embedded_corpus():
    """pyproject's package-data patterns match every file of tasks/lm/data (the wheel would carry them)."""
    section = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1]  # no tomllib on 3.10
    patterns = ast.literal_eval(re.search(r'^"\*" = (\[.*\])$', section, re.M).group(1))
    files = sorted(p.name for p in EMBEDDED.iterdir())
    assert {"train.txt.gz", "valid.txt.gz", "test.txt.gz", "SOURCE.md"} <= set(files)
    for name in files:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name


def test_text_file_is_split_in_contiguous_blocks_at_the_fraction(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(TEXT.replace("\n", "\r\n").encode())
    splits = read_corpus(path)
    assert splits["train"] + splits["valid"] + splits["test"] == TEXT  # CRLF read as LF, nothing reordered
    assert len(splits["train"]) == round(0.9 * len(TEXT))
    assert len(splits["valid"]) == round(0.95 * len(TEXT)) - round(0.9 * len(TEXT))
    other = read_corpus(path, parse_fraction("0.8,0.1,0.1"))
    assert len(other["train"]) == round(0.8 * len(TEXT))


def test_jsonl_texts_are_joined_then_split(tmp_path):
    path = tmp_path / "docs.jsonl"
    docs = [f"document {i}: " + "word " * 50 for i in range(20)]
    path.write_text("\n".join(json.dumps({"text": d, "id": i}) for i, d in enumerate(docs)) + "\n\n")
    splits = read_corpus(path)
    assert "".join(splits.values()) == "\n\n".join(docs)


def test_folder_missing_splits_are_cut_off_train(tmp_path):
    (tmp_path / "train.txt").write_text(TEXT)
    (tmp_path / "test.txt").write_text("the test play\n" * 10)
    splits = read_corpus(tmp_path)
    assert splits["test"] == "the test play\n" * 10
    assert splits["train"] + splits["valid"] == TEXT
    assert len(splits["train"]) == round(len(TEXT) * 0.9 / 0.95)


@pytest.mark.parametrize("setup, error, words", [
    (lambda d: (d / "c.txt").write_text("  \n"), ValueError, ["c.txt", "empty"]),
    (lambda d: (d / "c.txt").write_bytes(b"abc\ndef\xe9gh"), ValueError, ["c.txt", "offset 7", "0xe9", "iconv"]),
    (lambda d: (d / "c.jsonl").write_text('{"text": "a"}\n{"body": "b"}\n'), ValueError, ["line 2", "'text'"]),
    (lambda d: (d / "c").mkdir() or (d / "c" / "valid.txt").write_text("x"), FileNotFoundError,
     ["without train.txt", "valid.txt"]),
])
def test_bad_corpora_get_one_line_errors(tmp_path, setup, error, words):
    setup(tmp_path)
    target = next(p for p in tmp_path.iterdir())
    with pytest.raises(error) as caught:
        read_corpus(target)
    message = str(caught.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_missing_corpus_and_bad_config_values_name_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.txt not found; pass a text file"):
        read_corpus(tmp_path / "nowhere.txt")
    with pytest.raises(ValueError, match="unknown tokenizer 'word'"):
        LMConfig(tokenizer="word")
    with pytest.raises(ValueError, match="sum to 1"):
        LMConfig(split_fraction="0.9,0.2,0.1")
    with pytest.raises(ValueError, match="eval_lengths must be comma-separated"):
        LMConfig(eval_lengths="64,long")
    assert LMConfig(eval_lengths="64,128", split_fraction=[0.8, 0.1, 0.1]).eval_lengths == (64, 128)


def test_char_tokenizer_round_trip_and_unknown_policy(tmp_path):
    tok = CharTokenizer.train("banana split\n")
    assert tok.vocab_size == len(set("banana split\n")) + 1  # + <unk>, id 0
    assert tok.decode(tok.encode("a nab\n")) == "a nab\n"
    assert tok.encode("bz") == [tok.encode("b")[0], 0] and tok.decode([0]) == "\ufffd" and tok.unknown("bzz") == 2
    tok.save(tmp_path / "t.json")
    again = load_tokenizer(tmp_path / "t.json")
    assert isinstance(again, CharTokenizer) and again.encode("split") == tok.encode("split")


def test_bpe_tokenizer_round_trip_any_text(tmp_path):
    tok = train_tokenizer("bpe", TEXT, 300)
    assert isinstance(tok, BPETokenizer) and tok.vocab_size == 300
    for text in (TEXT[:200], "Ünïcödé — never seen ☃\n"):  # byte level: nothing is unknown
        assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode(TEXT[:200])) < 200  # merges learnt
    tok.save(tmp_path / "t.json")
    assert load_tokenizer(tmp_path / "t.json").encode(TEXT[:100]) == tok.encode(TEXT[:100])
    with pytest.raises(ValueError, match="vocab_size must be >= 257"):
        train_tokenizer("bpe", TEXT, 100)
    with pytest.raises(ValueError, match="unknown tokenizer 'words'"):
        train_tokenizer("words", TEXT, 300)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a tokenizer file"):
        load_tokenizer(tmp_path / "bad.json")


def test_bits_per_character_is_total_nats_over_characters_ln2():
    records = [{"nll": 30.0, "tokens": 10, "chars": 25}, {"nll": 12.0, "tokens": 5, "chars": 11}]
    scores = text_scores(records)
    assert scores["loss"] == pytest.approx(42.0 / 15)
    assert scores["perplexity"] == pytest.approx(math.exp(42.0 / 15))
    assert scores["bits_per_char"] == pytest.approx(42.0 / (36 * math.log(2)))
    char = text_scores([{"nll": 30.0, "tokens": 25, "chars": 25}])  # one token per character: bpc = loss / ln 2
    assert char["bits_per_char"] == pytest.approx(char["loss"] / math.log(2))


def test_paired_metrics_sum_back_to_the_reported_scores():
    """zoo compare's per-window statistics, summed, give the loss and bits per character text_scores reports."""
    import numpy as np

    from tasks.lm.paired import paired_metrics

    records = [{"id": i, "nll": 1.5 * i + 2, "tokens": 64 - i, "chars": 70 - i} for i in range(5)]
    loss, bpc = paired_metrics({})
    assert (loss.key, loss.higher_is_better, bpc.key) == ("loss", False, "bits_per_char")
    sums = loss.stats(records, {}).sum(0)
    scores = text_scores(records)
    np.testing.assert_allclose(loss.score(sums), [scores["loss"]])
    np.testing.assert_allclose(bpc.score(sums), [scores["bits_per_char"]])
