"""Real parallel corpora for the translation task, read from local files (nothing is downloaded).

``load_parallel(path, src_lang, tgt_lang)`` returns ``{"train": pairs, "valid": pairs, "test": pairs}``
(valid or test may be absent, not both), each a list of ``(source, target)`` sentence pairs.

Supported layouts, one file (or pair of files) per split, each file optionally gzip-compressed (``.gz``):

- aligned plain text: ``train.en`` + ``train.de``, line *i* of one translating line *i* of the other.
  Covers fairseq IWSLT14 (``iwslt14.tokenized.de-en/{train,valid,test}.{de,en}``) and Multi30k
  (``data/task1/raw/{train,val,test_2016_flickr}.{en,de}.gz``).
- TSV: ``train.tsv``, two tab-separated columns. With a header row of language codes (``en<TAB>de``)
  the columns are picked by language; without one they are taken as ``src_lang<TAB>tgt_lang``.
- JSONL: ``train.jsonl``, one object per line, ``{"translation": {"de": ..., "en": ...}}`` or flat
  ``{"en": ..., "de": ...}``.

Split names: ``train``; ``valid``, ``val`` or ``dev`` for valid; ``test``, else ``test_2016_flickr``,
else the first other ``test_*`` for test. ``path`` may be the folder that holds the files, or a parent
of it: the IWSLT14 folder ``iwslt14.tokenized.de-en`` or the Multi30k repository root (``data/task1/raw``).
When one split exists in several formats, plain text wins over TSV, and TSV over JSONL.

Cleaning: text is UTF-8; each sentence is stripped of surrounding whitespace; pairs blank on both sides
(and blank TSV/JSONL lines) are dropped; pairs blank on one side only are kept, so an evaluation set is never
silently shortened; blank lines that one aligned file has beyond the end of the other are ignored.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

Pairs = list[tuple[str, str]]

SPLIT_STEMS = {"train": ("train",), "valid": ("valid", "val", "dev"), "test": ("test", "test_2016_flickr")}
"""File-name stems accepted for each split, in order of preference."""

# Where the split files live when ``path`` is a parent folder (IWSLT14 prepared by fairseq, Multi30k).
_SUBFOLDERS = ("iwslt14.tokenized.de-en", "raw", "task1/raw", "data/task1/raw")
_TABLE_FORMATS = ("tsv", "jsonl")
# A header cell looks like a language code: "en", "de", "pt-br", "zh_CN".
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*")


@dataclass(frozen=True)
class _SplitFiles:
    """The files of one split: ``folder/stem.ext`` for each available extension (a language or a format)."""

    folder: Path
    stem: str
    files: dict[str, Path]

    def path(self, ext: str) -> Path:
        """The file ``stem.ext`` (or ``stem.ext.gz``); FileNotFoundError when it is missing."""
        if ext not in self.files:
            found = ", ".join(p.name for p in self.files.values())
            raise FileNotFoundError(
                f"{self.folder / f'{self.stem}.{ext}'} (or .gz) not found; the {self.stem!r} split has only: "
                f"{found}. Add the missing file or pick src_lang/tgt_lang among the files present."
            )
        return self.files[ext]


def load_parallel(path: str | os.PathLike, src_lang: str = "en", tgt_lang: str = "de") -> dict[str, Pairs]:
    """Read the splits of a parallel corpus from ``path`` (see the module docstring for the layouts).

    Args:
        path: the folder holding the split files, or a parent of it (IWSLT14 or Multi30k layout).
        src_lang: language code of the source side, e.g. ``"en"``.
        tgt_lang: language code of the target side, e.g. ``"de"``.

    Returns:
        ``{"train": pairs, "valid": pairs, "test": pairs}`` with the splits that exist (train and at least one
        of valid/test), each a list of ``(source, target)`` strings.

    Raises:
        FileNotFoundError: the folder, its training split or one side of a split is missing.
        ValueError: a file is empty, corrupt, malformed, misaligned or lacks a requested language.
    """
    if src_lang == tgt_lang:
        raise ValueError(f"src_lang and tgt_lang are both {src_lang!r}; pick two different languages")
    folder = _resolve_folder(Path(path))
    found = _discover_splits(folder)
    if "train" not in found:
        expected = _expected_names("train", src_lang, tgt_lang)
        raise FileNotFoundError(f"no training split in {folder}: expected {expected}")
    if len(found) == 1:
        valid, test = _expected_names("valid", src_lang, tgt_lang), _expected_names("test", src_lang, tgt_lang)
        raise ValueError(f"{folder} has a training split but no evaluation split: expected {valid}, or {test}")
    splits = {}
    for split, files in found.items():
        splits[split] = _read_split(files, src_lang, tgt_lang)
        log.info("%s: %d pairs from %s/%s.*", split, len(splits[split]), folder, files.stem)
    return splits


def _expected_names(stem: str, src_lang: str, tgt_lang: str) -> str:
    aliases = " (or val.*, dev.*)" if stem == "valid" else ""
    return f"{stem}.{src_lang} + {stem}.{tgt_lang}, {stem}.tsv or {stem}.jsonl (each optionally .gz){aliases}"


def _resolve_folder(path: Path) -> Path:
    """``path`` itself, or the known subfolder of it that holds a training split."""
    if not path.exists():
        raise FileNotFoundError(f"data folder {path} does not exist; pass the folder holding train.*, valid.*, test.*")
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is a file; pass the folder that holds it and the other split files")
    if "train" in _index_folder(path):
        return path
    for sub in _SUBFOLDERS:
        candidate = path / sub
        if candidate.is_dir() and "train" in _index_folder(candidate):
            return candidate
    return path


def _index_folder(folder: Path) -> dict[str, dict[str, Path]]:
    """Map each file-name stem to its extensions: ``train.en.gz`` -> ``{"train": {"en": path}}``.

    An uncompressed file wins over its ``.gz`` twin.
    """
    index: dict[str, dict[str, Path]] = {}
    for file in sorted(folder.iterdir(), key=lambda p: p.name.endswith(".gz"), reverse=True):
        name = file.name.removesuffix(".gz")
        stem, dot, ext = name.rpartition(".")
        if file.is_file() and dot and stem and not name.startswith("."):
            index.setdefault(stem, {})[ext] = file
    return index


def _discover_splits(folder: Path) -> dict[str, _SplitFiles]:
    """The files of each split found in ``folder``, keyed by "train", "valid", "test" (those present)."""
    index = _index_folder(folder)
    other_tests = sorted(stem for stem in index if stem.startswith("test_"))
    found = {}
    for split, stems in SPLIT_STEMS.items():
        candidates = [*stems, *other_tests] if split == "test" else list(stems)
        stem = next((s for s in candidates if s in index), None)
        if stem is not None:
            found[split] = _SplitFiles(folder, stem, index[stem])
    return found


def _read_split(split: _SplitFiles, src_lang: str, tgt_lang: str) -> Pairs:
    """Read one split with the reader for its format (plain text, TSV or JSONL)."""
    table = next((fmt for fmt in _TABLE_FORMATS if fmt in split.files), None)
    if table is None or src_lang in split.files or tgt_lang in split.files:
        return _read_plain(split.path(src_lang), split.path(tgt_lang))
    reader = _read_tsv if table == "tsv" else _read_jsonl
    return reader(split.files[table], src_lang, tgt_lang)


def _read_plain(src_path: Path, tgt_path: Path) -> Pairs:
    """Aligned plain-text files: line i of ``src_path`` translates line i of ``tgt_path``."""
    src_lines, tgt_lines = _read_lines(src_path), _read_lines(tgt_path)
    length = min(len(src_lines), len(tgt_lines))
    if any(line.strip() for line in src_lines[length:] + tgt_lines[length:]):  # more than trailing blank lines
        raise ValueError(
            f"{src_path} has {len(src_lines)} lines but {tgt_path} has {len(tgt_lines)}; aligned files need the "
            "same number of lines (line i of one translates line i of the other). Re-extract or re-align them."
        )
    return _clean(zip(src_lines[:length], tgt_lines[:length]), src_path)


def _read_tsv(path: Path, src_lang: str, tgt_lang: str) -> Pairs:
    """Tab-separated rows; columns picked by a header of language codes, else ``src<TAB>tgt``."""
    lines = _read_lines(path)
    header = _tsv_header(lines[0], src_lang, tgt_lang)
    columns = (_column(header, src_lang, path), _column(header, tgt_lang, path)) if header else (0, 1)
    width = len(header) if header else 2
    rows = []
    for number, line in enumerate(lines[1:] if header else lines, start=2 if header else 1):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != width:
            raise ValueError(
                f"{path}:{number}: expected {width} tab-separated columns, found {len(cells)}; "
                "fix the line (a tab inside a sentence must be replaced by a space)"
            )
        rows.append((cells[columns[0]], cells[columns[1]]))
    return _clean(rows, path)


def _tsv_header(line: str, src_lang: str, tgt_lang: str) -> list[str] | None:
    """The header cells when the first line names the columns by language code, else None."""
    cells = [cell.strip() for cell in line.split("\t")]
    names = {cell.lower() for cell in cells}
    looks_like_codes = all(_LANGUAGE_CODE.fullmatch(cell) for cell in cells)
    if len(cells) >= 2 and (looks_like_codes or {src_lang.lower(), tgt_lang.lower()} <= names):
        return cells
    return None


def _column(header: list[str], lang: str, path: Path) -> int:
    names = [cell.lower() for cell in header]
    if lang.lower() not in names:
        raise _missing_language(f"{path}:1 (header)", lang, header)
    return names.index(lang.lower())


def _read_jsonl(path: Path, src_lang: str, tgt_lang: str) -> Pairs:
    """One JSON object per line, either ``{"translation": {lang: text}}`` or flat ``{lang: text}``."""
    rows = []
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            message = f"{where}: not valid JSON ({err.msg} at column {err.colno}); fix or remove the line"
            raise ValueError(message) from None
        fields = row.get("translation", row) if isinstance(row, dict) else None
        if not isinstance(fields, dict):
            raise ValueError(f'{where}: expected an object like {{"translation": {{"en": ..., "de": ...}}}}')
        rows.append((_field(fields, src_lang, where), _field(fields, tgt_lang, where)))
    return _clean(rows, path)


def _field(fields: dict, lang: str, where: str) -> str:
    if lang not in fields:
        raise _missing_language(where, lang, fields)
    if not isinstance(fields[lang], str):
        raise ValueError(f"{where}: field {lang!r} must be a string, got {type(fields[lang]).__name__}")
    return fields[lang]


def _missing_language(where: str, lang: str, found: Iterable[str]) -> ValueError:
    keys = ", ".join(repr(key) for key in found)
    return ValueError(f"{where}: no {lang!r} entry; found {keys}. Pick src_lang/tgt_lang among those.")


def _read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 (optionally gzipped) file; ValueError if none holds text."""
    lines = _read_text(path).split("\n")
    if lines[-1] == "":  # the text after the final newline
        lines.pop()
    if not any(line.strip() for line in lines):
        raise ValueError(f"{path} is empty; it should hold one sentence (or row) per line")
    return lines


def _read_text(path: Path) -> str:
    # newline="" so a stray "\r" inside a sentence does not split it (and misalign the two sides).
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8-sig", newline="") as file:
                return file.read()
        with open(path, encoding="utf-8-sig", newline="") as file:
            return file.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise ValueError(f"{path} is not a valid gzip file ({err}); download it again or decompress it") from err
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start}); convert it to UTF-8") from err


def _clean(rows: Iterable[tuple[str, str]], path: Path) -> Pairs:
    """Strip each side and drop pairs blank on both sides; ValueError if no pair is left."""
    pairs = [(src.strip(), tgt.strip()) for src, tgt in rows]
    pairs = [(src, tgt) for src, tgt in pairs if src or tgt]
    if not pairs:
        raise ValueError(f"{path} holds no sentence pairs; it should hold one sentence (or row) per line")
    return pairs
