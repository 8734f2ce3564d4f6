"""The language-model task's text: the embedded Shakespeare subset, or a user's corpus, as train/valid/test strings.

Splits are contiguous blocks of text, never shuffled lines: a language model scored on lines interleaved with its
training lines is scored on text it has half read. The embedded subset splits by whole plays
(``tasks/lm/data/SOURCE.md``). A user's ``--data`` is one of:

- a text file: cut into train / valid / test at the fractions ``split_fraction`` (default 0.9 / 0.05 / 0.05), in
  that order;
- a JSONL file (``.jsonl``): one JSON object per line with a ``"text"`` field; the texts, joined by a blank line,
  are then cut as a text file is;
- a folder holding ``train.txt`` and, where they exist, ``valid.txt`` and ``test.txt``: a missing valid or test
  split is cut off the end of train at its share of ``split_fraction`` (e.g. no valid.txt: train keeps
  0.9 / 0.95 of its text, valid gets the last 0.05 / 0.95).

Every file is read as UTF-8 (a byte order mark is dropped, CRLF becomes LF); bytes that are not UTF-8 are refused
with the file and the byte offset.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

SPLITS = ("train", "valid", "test")
EMBEDDED = Path(__file__).resolve().parent / "data"  # train.txt.gz, valid.txt.gz, test.txt.gz (see SOURCE.md)
DEFAULT_FRACTION = (0.9, 0.05, 0.05)


def embedded_corpus() -> dict[str, str]:
    """The embedded Shakespeare subset: seven plays to train on, one to validate, one to test."""
    splits = {}
    for split in SPLITS:
        path = EMBEDDED / f"{split}.txt.gz"
        if not path.is_file():
            raise FileNotFoundError(f"the embedded corpus file {path} is missing; reinstall the package (its "
                                    "package data ships tasks/lm/data/*.txt.gz) or pass --data")
        splits[split] = decode_text(gzip.decompress(path.read_bytes()), path)
    return splits


def read_corpus(data: str | Path, fraction: tuple[float, float, float] = DEFAULT_FRACTION) -> dict[str, str]:
    """The train / valid / test text of ``data`` (a text file, a JSONL file or a folder; see the module's doc)."""
    path = Path(data)
    if not path.exists():
        raise FileNotFoundError(f"--data {path} not found; pass a text file, a .jsonl file with a 'text' field, or a "
                                "folder holding train.txt (and valid.txt, test.txt)")
    if path.is_dir():
        return _read_folder(path, fraction)
    text = _read_jsonl(path) if path.suffix == ".jsonl" else read_text(path)
    return split_text(text, fraction, str(path))


def _read_folder(path: Path, fraction: tuple[float, float, float]) -> dict[str, str]:
    files = {split: path / f"{split}.txt" for split in SPLITS if (path / f"{split}.txt").is_file()}
    if "train" not in files:
        found = sorted(p.name for p in path.iterdir())[:8]
        raise FileNotFoundError(f"--data {path} is a folder without train.txt (it holds: "
                                f"{', '.join(found) or 'nothing'}); put the training text in train.txt (valid.txt "
                                "and test.txt are optional), or pass one text file to split")
    texts = {split: read_text(file) for split, file in files.items()}
    missing = [split for split in SPLITS if split not in files]
    if missing:  # cut off train's end, at their shares of the fractions among train and themselves
        shares = [fraction[SPLITS.index(s)] for s in ("train", *missing)]
        cut = split_text(texts["train"], tuple(shares), str(files["train"]), names=("train", *missing))
        texts.update(cut)
    for split, text in texts.items():
        if not text.strip():
            raise ValueError(f"--data {path}: the {split} split is empty; put text in {split}.txt (or remove the "
                             "file to have it cut off train.txt)")
    return {split: texts[split] for split in SPLITS}


def _read_jsonl(path: Path) -> str:
    """The ``"text"`` fields of a JSONL file, joined by a blank line."""
    texts = []
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {number}: not JSON ({error.msg}); write one object per line, e.g. "
                             '{"text": "..."}') from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise ValueError(f"{path}, line {number}: no string field 'text'; write one object per line, e.g. "
                             '{"text": "..."}')
        texts.append(record["text"])
    return "\n\n".join(texts)


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path`` (a byte order mark dropped, CRLF as LF)."""
    return decode_text(path.read_bytes(), path)


def decode_text(data: bytes, path: Path | str) -> str:
    """``data`` decoded as UTF-8; bytes that are not UTF-8 get an error naming ``path`` and their byte offset."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}); convert "
                         "it, e.g. `iconv -f latin1 -t utf-8`") from None
    return text.replace("\r\n", "\n")


def split_text(text: str, fraction: tuple[float, ...], where: str,
               names: tuple[str, ...] = SPLITS) -> dict[str, str]:
    """``text`` cut into contiguous blocks ``names`` at the (normalised) ``fraction`` of its characters."""
    if not text.strip():
        raise ValueError(f"{where} holds no text (the corpus is empty); give a file with the text to train on")
    total = sum(fraction)
    bounds, acc = [0], 0.0
    for share in fraction:
        acc += share
        bounds.append(round(len(text) * acc / total))
    return {name: text[bounds[i] : bounds[i + 1]] for i, name in enumerate(names)}


def parse_fraction(value: str | tuple | list) -> tuple[float, float, float]:
    """``"0.9,0.05,0.05"`` (or a sequence of three numbers) as the train/valid/test fractions, checked."""
    if isinstance(value, str):
        try:
            value = tuple(float(v) for v in value.split(","))
        except ValueError:
            raise ValueError(f"split_fraction must be three numbers TRAIN,VALID,TEST such as 0.9,0.05,0.05, got "
                             f"{value!r}") from None
    if not isinstance(value, (tuple, list)) or len(value) != 3 or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
        raise ValueError(f"split_fraction must be three numbers TRAIN,VALID,TEST such as 0.9,0.05,0.05, got {value!r}")
    if value[0] <= 0 or min(value) < 0 or abs(sum(value) - 1.0) > 1e-6:
        raise ValueError(f"split_fraction {','.join(f'{v:g}' for v in value)} must have a train share > 0, no "
                         "negative share and sum to 1; e.g. 0.9,0.05,0.05")
    return tuple(float(v) for v in value)
