"""The language-model task's tokenizers: characters (nanoGPT's ``shakespeare_char``) or byte-level BPE (GPT-2's).

- ``"char"``: one id per character of the training split, sorted, after ``<unk>`` (id 0). A character the
  training split never holds (a digit only the test play uses) is encoded as ``<unk>`` and decoded as U+FFFD: the
  model is scored on predicting ``<unk>`` there, which it never learnt, so such characters cost loss instead of
  vanishing from the text (the count of them is :meth:`CharTokenizer.unknown`).
- ``"bpe"``: Hugging Face ``tokenizers`` byte-level BPE (Radford et al. 2019) trained on the training split with
  ``vocab_size`` ids; bytes cover every text, so nothing is unknown.

Both save to one JSON file (``tokenizer.json`` of a run) that :func:`load_tokenizer` reads back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from plumbing.atomic import write_text_atomic
from plumbing.errors import check_int, unknown_name

KINDS = ("char", "bpe")
UNK = "<unk>"
REPLACEMENT = "\ufffd"  # what <unk> decodes to


class LMTokenizer(Protocol):
    """What the task needs of a tokenizer."""

    kind: str

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def save(self, path: str | os.PathLike) -> None: ...


class CharTokenizer:
    """Characters to ids: ``<unk>`` is 0, the training split's characters follow in sorted order.

    Args:
        chars: the characters of the vocabulary (each once, ``<unk>`` excluded), in id order from 1.
    """

    kind = "char"

    def __init__(self, chars: str) -> None:
        if len(set(chars)) != len(chars) or any(len(c) != 1 for c in chars):
            raise ValueError(f"chars must list distinct single characters, got {chars!r}")
        self.chars = chars
        self._ids = {c: i for i, c in enumerate(chars, start=1)}

    @classmethod
    def train(cls, text: str) -> CharTokenizer:
        """The vocabulary of ``text`` (the training split)."""
        if not text:
            raise ValueError("no training text to build a character vocabulary from; give a non-empty corpus")
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + 1

    def encode(self, text: str) -> list[int]:
        ids = self._ids
        return [ids.get(c, 0) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        chars = self.chars
        return "".join(chars[i - 1] if 0 < i <= len(chars) else REPLACEMENT for i in ids)

    def unknown(self, text: str) -> int:
        """How many characters of ``text`` encode as ``<unk>``."""
        return sum(c not in self._ids for c in text)

    def save(self, path: str | os.PathLike) -> None:
        write_text_atomic(path, json.dumps({"kind": "char", "unk": UNK, "chars": self.chars}))

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


class BPETokenizer:
    """Byte-level BPE (GPT-2's scheme) from Hugging Face ``tokenizers``: text → UTF-8 bytes → merged pieces."""

    kind = "bpe"

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer

    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        """Learn ``vocab_size`` ids (the 256 bytes, then merges) from ``text`` (the training split)."""
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        check_int("vocab_size", vocab_size, 257, hint="byte-level BPE holds the 256 bytes before any merge")
        if not text:
            raise ValueError("no training text to learn BPE merges from; give a non-empty corpus")
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        lines = text.splitlines(keepends=True)  # pieces never cross a line: the merges are learnt per line
        tokenizer.train_from_iterator(lines, trainer=trainer)
        return cls(tokenizer)

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(ids))

    def save(self, path: str | os.PathLike) -> None:
        write_text_atomic(path, self._tokenizer.to_str())

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size})"


def train_tokenizer(kind: str, text: str, vocab_size: int) -> LMTokenizer:
    """A ``kind`` tokenizer ("char" or "bpe") trained on ``text``; ``vocab_size`` is BPE's."""
    if kind == "char":
        return CharTokenizer.train(text)
    if kind == "bpe":
        return BPETokenizer.train(text, vocab_size)
    raise unknown_name("tokenizer", kind, KINDS)


def load_tokenizer(path: str | os.PathLike) -> LMTokenizer:
    """The tokenizer a run saved at ``path`` (by :meth:`CharTokenizer.save` or :meth:`BPETokenizer.save`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file {path} not found; the run folder lacks its tokenizer.json: "
                                "retrain the run or copy the file back")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not a tokenizer file ({error}); restore the run's own tokenizer.json") from None
    if isinstance(data, dict) and data.get("kind") == "char":
        return CharTokenizer(data["chars"])
    from tokenizers import Tokenizer

    try:
        return BPETokenizer(Tokenizer.from_str(json.dumps(data)))
    except Exception as error:  # tokenizers raises a bare Exception for any parse error
        raise ValueError(f"{path} is not a tokenizer file ({error}); restore the run's own tokenizer.json") from None
