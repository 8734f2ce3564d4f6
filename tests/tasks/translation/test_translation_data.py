"""Real-data loaders and the tokenizer of the translation task, on tiny files written to tmp_path."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tasks.translation.data import load_parallel
from tasks.translation.tokenizer import SPECIALS, Tokenizer

EN = ["A dog runs .", "Two men sit on a bench .", "The girl , who smiles , reads a book ."]
DE = ["Ein Hund rennt .", "Zwei Männer sitzen auf einer Bank .", "Das Mädchen , das lächelt , liest ein Buch ."]
PAIRS = list(zip(EN, DE))


def write(path: Path, lines: list[str]) -> Path:
    """Write one line per item, gzip-compressed when the name ends in .gz."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{line}\n" for line in lines)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_plain(folder: Path, stems: tuple[str, ...] = ("train", "valid", "test"), suffix: str = "") -> Path:
    for stem in stems:
        write(folder / f"{stem}.en{suffix}", EN)
        write(folder / f"{stem}.de{suffix}", DE)
    return folder


# ---- layouts -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_plain_text_folder(tmp_path, suffix):
    splits = load_parallel(write_plain(tmp_path, suffix=suffix))
    assert list(splits) == ["train", "valid", "test"]
    assert all(pairs == PAIRS for pairs in splits.values())


def test_languages_can_be_swapped(tmp_path):
    splits = load_parallel(write_plain(tmp_path), src_lang="de", tgt_lang="en")
    assert splits["train"] == [(de, en) for en, de in PAIRS]


@pytest.mark.parametrize("alias", ["val", "dev"])
def test_valid_aliases(tmp_path, alias):
    splits = load_parallel(write_plain(tmp_path, stems=("train", alias)))
    assert list(splits) == ["train", "valid"]


def test_iwslt14_parent_folder(tmp_path):
    write_plain(tmp_path / "iwslt14.tokenized.de-en")
    write(tmp_path / "iwslt14.tokenized.de-en" / "code", ["e n</w>"])  # fairseq's BPE codes: not a split
    splits = load_parallel(tmp_path, src_lang="de", tgt_lang="en")
    assert splits["test"][0] == (DE[0], EN[0])


@pytest.mark.parametrize("root", ["repo", "raw"])
def test_multi30k_layout(tmp_path, root):
    raw = tmp_path / "data" / "task1" / "raw"
    write_plain(raw, stems=("train", "val", "test_2017_flickr", "test_2017_mscoco"), suffix=".gz")
    write(raw / "test_2016_flickr.en.gz", ["flickr 2016"])
    write(raw / "test_2016_flickr.de.gz", ["Flickr 2016"])
    write(raw / "train.fr.gz", ["Un chien court ."] * 3)  # other languages are ignored
    splits = load_parallel(tmp_path if root == "repo" else raw)
    assert list(splits) == ["train", "valid", "test"]
    assert splits["test"] == [("flickr 2016", "Flickr 2016")]


def test_other_test_name_when_no_2016_flickr(tmp_path):
    write_plain(tmp_path, stems=("train", "test_2018_flickr"))
    assert load_parallel(tmp_path)["test"] == PAIRS


def test_uncompressed_file_wins_over_gz(tmp_path):
    write_plain(tmp_path, suffix=".gz")
    write(tmp_path / "test.en", ["plain"])
    write(tmp_path / "test.de", ["einfach"])
    assert load_parallel(tmp_path)["test"] == [("plain", "einfach")]


def test_tsv_without_header_is_src_then_tgt(tmp_path):
    for stem in ("train", "dev"):
        write(tmp_path / f"{stem}.tsv", [f"{en}\t{de}" for en, de in PAIRS])
    splits = load_parallel(tmp_path)
    assert splits == {"train": PAIRS, "valid": PAIRS}


def test_tsv_header_picks_columns_by_language(tmp_path):
    for stem in ("train", "test"):
        write(tmp_path / f"{stem}.tsv.gz", ["de\tid\ten", *(f"{de}\t{i}\t{en}" for i, (en, de) in enumerate(PAIRS))])
    assert load_parallel(tmp_path)["test"] == PAIRS
    assert load_parallel(tmp_path, "de", "en")["train"] == [(de, en) for en, de in PAIRS]


@pytest.mark.parametrize("nested", [True, False])
def test_jsonl(tmp_path, nested):
    rows = [{"de": de, "en": en} for en, de in PAIRS]
    rows = [{"translation": row} for row in rows] if nested else rows
    for stem in ("train", "valid"):
        write(tmp_path / f"{stem}.jsonl", [json.dumps(row, ensure_ascii=False) for row in rows])
    assert load_parallel(tmp_path)["valid"] == PAIRS


def test_whitespace_and_blank_lines(tmp_path):
    write(tmp_path / "train.en", ["  A dog .\r", "", "only English", "", ""])
    write(tmp_path / "train.de", ["Ein Hund .  ", "", "", "nur Deutsch", "", "", ""])
    write_plain(tmp_path, stems=("valid",))
    # Stripped; both-blank pairs dropped; one-sided pairs kept; extra blank lines at the end of one file ignored.
    assert load_parallel(tmp_path)["train"] == [("A dog .", "Ein Hund ."), ("only English", ""), ("", "nur Deutsch")]


def test_text_beyond_the_other_file_is_a_mismatch(tmp_path):
    write(tmp_path / "train.en", ["A dog .", "", "", "a late line"])
    write(tmp_path / "train.de", ["Ein Hund ."])
    write_plain(tmp_path, stems=("valid",))
    with pytest.raises(ValueError, match=r"train\.en has 4 lines but .*train\.de has 1"):
        load_parallel(tmp_path)


# ---- errors ------------------------------------------------------------------------------------------------


def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_parallel(tmp_path / "nowhere")


def test_missing_train_split(tmp_path):
    write_plain(tmp_path, stems=("valid", "test"))
    with pytest.raises(FileNotFoundError, match=r"train\.en \+ train\.de"):
        load_parallel(tmp_path)


def test_missing_evaluation_split(tmp_path):
    write_plain(tmp_path, stems=("train",))
    with pytest.raises(ValueError, match=r"no evaluation split.*valid\.en"):
        load_parallel(tmp_path)


def test_missing_one_side(tmp_path):
    write_plain(tmp_path)
    (tmp_path / "valid.de").unlink()
    with pytest.raises(FileNotFoundError, match=r"valid\.de"):
        load_parallel(tmp_path)


def test_language_without_files(tmp_path):
    write_plain(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"train\.fr"):
        load_parallel(tmp_path, tgt_lang="fr")


def test_same_source_and_target_language(tmp_path):
    with pytest.raises(ValueError, match="different"):
        load_parallel(write_plain(tmp_path), "en", "en")


def test_mismatched_line_counts(tmp_path):
    write_plain(tmp_path)
    write(tmp_path / "test.de", DE[:2])
    with pytest.raises(ValueError, match=r"test\.en has 3 lines but .*test\.de has 2"):
        load_parallel(tmp_path)


@pytest.mark.parametrize("name", ["train.en", "train.tsv", "train.jsonl", "train.en.gz"])
def test_empty_file(tmp_path, name):
    write_plain(tmp_path, stems=("valid",))
    write(tmp_path / name, ["", "  "])
    if name.startswith("train.en"):
        write(tmp_path / name.replace(".en", ".de"), DE)
    with pytest.raises(ValueError, match=rf"{name} is empty"):
        load_parallel(tmp_path)


def test_tsv_with_only_a_header(tmp_path):
    write_plain(tmp_path, stems=("valid",))
    write(tmp_path / "train.tsv", ["en\tde"])
    with pytest.raises(ValueError, match=r"train\.tsv holds no sentence pairs"):
        load_parallel(tmp_path)


def test_corrupt_gzip(tmp_path):
    write_plain(tmp_path, suffix=".gz")
    (tmp_path / "valid.de.gz").write_bytes(b"this is not gzip data")
    with pytest.raises(ValueError, match=r"valid\.de\.gz is not a valid gzip file"):
        load_parallel(tmp_path)


def test_truncated_gzip(tmp_path):
    write_plain(tmp_path, suffix=".gz")
    data = (tmp_path / "train.en.gz").read_bytes()
    (tmp_path / "train.en.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"train\.en\.gz is not a valid gzip file"):
        load_parallel(tmp_path)


def test_not_utf8(tmp_path):
    write_plain(tmp_path)
    (tmp_path / "train.de").write_bytes("Männer\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"train\.de is not UTF-8"):
        load_parallel(tmp_path)


def test_tsv_wrong_column_count(tmp_path):
    write_plain(tmp_path, stems=("valid",))
    write(tmp_path / "train.tsv", ["A dog .\tEin Hund .", "no tab here"])
    with pytest.raises(ValueError, match=r"train\.tsv:2: expected 2 tab-separated columns, found 1"):
        load_parallel(tmp_path)


def test_tsv_header_without_requested_language(tmp_path):
    write_plain(tmp_path, stems=("valid",))
    write(tmp_path / "train.tsv", ["en\tde", "A dog .\tEin Hund ."])
    with pytest.raises(ValueError, match=r"train\.tsv:1 \(header\): no 'fr' entry; found 'en', 'de'"):
        load_parallel(tmp_path, tgt_lang="fr")


def test_jsonl_malformed_line(tmp_path):
    write_plain(tmp_path, stems=("valid",))
    write(tmp_path / "train.jsonl", ['{"en": "A dog .", "de": "Ein Hund ."}', '{"en": "broken'])
    with pytest.raises(ValueError, match=r"train\.jsonl:2: not valid JSON"):
        load_parallel(tmp_path)


@pytest.mark.parametrize("row", [["a list"], {"translation": "a string"}])
def test_jsonl_row_not_an_object(tmp_path, row):
    write_plain(tmp_path, stems=("valid",))
    write(tmp_path / "train.jsonl", [json.dumps(row)])
    with pytest.raises(ValueError, match=r"train\.jsonl:1: expected an object"):
        load_parallel(tmp_path)


def test_jsonl_unknown_language(tmp_path):
    write_plain(tmp_path, stems=("valid",))
    write(tmp_path / "train.jsonl", [json.dumps({"translation": {"en": "A dog .", "de": "Ein Hund ."}})])
    with pytest.raises(ValueError, match=r"train\.jsonl:1: no 'fr' entry; found 'en', 'de'"):
        load_parallel(tmp_path, tgt_lang="fr")


def test_jsonl_non_string_field(tmp_path):
    write_plain(tmp_path, stems=("valid",))
    write(tmp_path / "train.jsonl", [json.dumps({"en": "A dog .", "de": None})])
    with pytest.raises(ValueError, match=r"train\.jsonl:1: field 'de' must be a string"):
        load_parallel(tmp_path)


# ---- tokenizer ---------------------------------------------------------------------------------------------

SENTENCES = EN + DE + ["Hallo, Welt!", "Der Hund (groß) läuft's...", "Er sagt: „Ja“ - 3,5 €?"]


@pytest.fixture(scope="module", params=["word", "bpe"])
def tokenizer(request):
    return Tokenizer.train(SENTENCES, kind=request.param, vocab_size=300)


def test_specials_have_fixed_ids(tokenizer):
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id) == (0, 1, 2, 3)
    assert SPECIALS == ("<pad>", "<bos>", "<eos>", "<unk>")
    assert all(i >= len(SPECIALS) for ids in tokenizer.encode_batch(SENTENCES) for i in ids)


def test_round_trip(tokenizer):
    assert tokenizer.decode_batch(tokenizer.encode_batch(SENTENCES)) == SENTENCES


def test_word_level_keeps_whole_words():
    tokenizer = Tokenizer.train(SENTENCES, kind="word")
    assert len(tokenizer.encode("Hallo, Welt!")) == 2  # "Hallo," and "Welt!": split on whitespace only
    assert tokenizer.encode("unseen") == [tokenizer.unk_id]


def test_bpe_splits_unseen_words_into_subwords():
    tokenizer = Tokenizer.train(SENTENCES, kind="bpe", vocab_size=300)
    assert tokenizer.decode(tokenizer.encode("Ein Buch, ein Hund.")) == "Ein Buch, ein Hund."
    assert tokenizer.unk_id not in tokenizer.encode("Hunde lesen")


def test_decode_stops_at_eos_and_skips_specials(tokenizer):
    ids = tokenizer.encode(EN[0])
    padded = [tokenizer.bos_id, *ids, tokenizer.eos_id, *tokenizer.encode(DE[0]), tokenizer.pad_id]
    assert tokenizer.decode(padded) == EN[0]
    assert tokenizer.decode([tokenizer.bos_id, tokenizer.unk_id, *ids]) == EN[0]


def test_vocab_size_is_capped():
    assert Tokenizer.train(SENTENCES, kind="bpe", vocab_size=60).vocab_size <= 60
    assert Tokenizer.train(SENTENCES, kind="word", vocab_size=10).vocab_size == 10


def test_min_frequency_drops_rare_words():
    tokenizer = Tokenizer.train(["a a b"], kind="word", min_frequency=2)
    assert tokenizer.encode("a b") == [4, tokenizer.unk_id]


def test_save_load_round_trip(tokenizer, tmp_path):
    path = tmp_path / "sub" / "tokenizer.json"
    tokenizer.save(path)
    loaded = Tokenizer.load(path)
    assert loaded.vocab_size == tokenizer.vocab_size
    assert loaded.encode_batch(SENTENCES) == tokenizer.encode_batch(SENTENCES)
    assert loaded.decode_batch(loaded.encode_batch(SENTENCES)) == SENTENCES


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothing\.json"):
        Tokenizer.load(tmp_path / "nothing.json")


@pytest.mark.parametrize("content", ["{not json", '{"model": 1}'])
def test_load_corrupt_file(tmp_path, content):
    path = tmp_path / "tokenizer.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=r"tokenizer\.json is not a valid tokenizer file"):
        Tokenizer.load(path)


def test_load_file_with_other_special_ids(tmp_path):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models

    path = tmp_path / "tokenizer.json"
    HFTokenizer(models.WordLevel({"<unk>": 0, "<pad>": 1, "<bos>": 2, "<eos>": 3}, unk_token="<unk>")).save(str(path))
    with pytest.raises(ValueError, match=r"tokenizer\.json: special tokens must have ids"):
        Tokenizer.load(path)


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown tokenizer kind 'bep'. Did you mean 'bpe'"):
        Tokenizer.train(SENTENCES, kind="bep")


@pytest.mark.parametrize(("texts", "match"), [([], "no training text"), (["  "], "no training text")])
def test_no_training_text(texts, match):
    with pytest.raises(ValueError, match=match):
        Tokenizer.train(texts)


@pytest.mark.parametrize("vocab_size", [0, 4])
def test_vocab_size_too_small(vocab_size):
    with pytest.raises(ValueError, match="vocab_size"):
        Tokenizer.train(SENTENCES, vocab_size=vocab_size)
