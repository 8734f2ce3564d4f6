"""A joint source/target subword tokenizer trained offline with HuggingFace ``tokenizers``.

One vocabulary serves both languages because the model shares its embeddings between encoder and decoder.
Two kinds:

- ``"word"``: WordLevel over whitespace-separated tokens; decoding joins tokens with single spaces, so a
  training sentence whose tokens are separated by single spaces decodes back exactly.
- ``"bpe"``: BPE (Sennrich et al., 2016) over words and punctuation runs. A Metaspace pre-tokenizer marks each
  space as "▁" at the start of the following piece, so the Metaspace decoder restores the original spacing,
  attached ("Hallo, Welt!") or separated ("hello , world .") punctuation alike.

The special tokens take ids 0..3 (``SPECIALS``), matching the model's pad 0, bos 1, eos 2.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from plumbing.errors import check_positive, unknown_name

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
"""Special tokens; their ids are their positions: pad 0, bos 1, eos 2, unk 3."""

KINDS = ("word", "bpe")

# A run of punctuation/symbols, with the "▁" of a preceding space: BPE never merges across it, so words
# and punctuation get separate subwords. Letters, digits and combining marks stay in words.
_PUNCTUATION = Regex(r"▁?[^\p{L}\p{N}\p{M}\s▁]+")


class Tokenizer:
    """Thin wrapper around a trained ``tokenizers.Tokenizer`` with the zoo's special-token ids.

    Args:
        tokenizer: a trained HuggingFace tokenizer whose vocabulary starts with ``SPECIALS``.
    """

    def __init__(self, tokenizer: HFTokenizer):
        ids = [tokenizer.token_to_id(token) for token in SPECIALS]
        if ids != list(range(len(SPECIALS))):
            found = dict(zip(SPECIALS, ids))
            raise ValueError(f"special tokens must have ids {dict(zip(SPECIALS, range(len(SPECIALS))))}, got {found}")
        self._tokenizer = tokenizer

    @classmethod
    def train(
        cls, texts: Iterable[str], kind: str = "word", vocab_size: int = 8000, min_frequency: int = 1
    ) -> Tokenizer:
        """Train a tokenizer on ``texts`` (both languages' training sentences, for a joint vocabulary).

        Args:
            texts: training sentences; may be a generator.
            kind: ``"word"`` (WordLevel) or ``"bpe"``.
            vocab_size: largest vocabulary, special tokens included.
            min_frequency: a word (or merge) seen fewer times is left out of the vocabulary.
        """
        if kind not in KINDS:
            raise unknown_name("tokenizer kind", kind, KINDS)
        check_positive("vocab_size", vocab_size)
        check_positive("min_frequency", min_frequency)
        if vocab_size <= len(SPECIALS):
            raise ValueError(f"vocab_size must exceed the {len(SPECIALS)} special tokens, got {vocab_size}")
        build = _word_level if kind == "word" else _bpe
        tokenizer, trainer = build(vocab_size, min_frequency)
        seen = _Counter(texts)
        tokenizer.train_from_iterator(seen, trainer=trainer)
        if seen.count == 0:
            raise ValueError("no training text: pass the training sentences of both languages")
        return cls(tokenizer)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Tokenizer:
        """Load a tokenizer saved by :meth:`save` (a ``tokenizers`` JSON file)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer file {path} not found; train one and save it there first")
        try:
            tokenizer = HFTokenizer.from_file(str(path))
        except Exception as err:  # tokenizers raises a bare Exception for any parse error
            raise ValueError(f"{path} is not a valid tokenizer file ({err}); delete it and retrain") from err
        try:
            return cls(tokenizer)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the tokenizer (vocabulary, merges, pre-tokenizer, decoder) as one JSON file."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._tokenizer.save(str(path))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without bos/eos."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without bos/eos."""
        return [encoding.ids for encoding in self._tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` up to the first eos, with pad/bos/eos/unk left out."""
        ids = list(ids)
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """:meth:`decode` of each sequence (e.g. the rows of a model's output)."""
        return [self.decode(ids) for ids in batch]

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def pad_id(self) -> int:
        return SPECIALS.index("<pad>")

    @property
    def bos_id(self) -> int:
        return SPECIALS.index("<bos>")

    @property
    def eos_id(self) -> int:
        return SPECIALS.index("<eos>")

    @property
    def unk_id(self) -> int:
        return SPECIALS.index("<unk>")

    def __repr__(self) -> str:
        kind = type(self._tokenizer.model).__name__
        return f"Tokenizer({kind}, vocab_size={self.vocab_size})"


def _word_level(vocab_size: int, min_frequency: int) -> tuple[HFTokenizer, trainers.Trainer]:
    tokenizer = HFTokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # No decoder: tokenizers joins word-level tokens with single spaces.
    trainer = trainers.WordLevelTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIALS), show_progress=False
    )
    return tokenizer, trainer


def _bpe(vocab_size: int, min_frequency: int) -> tuple[HFTokenizer, trainers.Trainer]:
    tokenizer = HFTokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Metaspace(), pre_tokenizers.Split(_PUNCTUATION, behavior="isolated")]
    )
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIALS), show_progress=False
    )
    return tokenizer, trainer


class _Counter:
    """Pass texts through, counting the non-blank ones (a generator can be read only once)."""

    def __init__(self, texts: Iterable[str]):
        self.texts = texts
        self.count = 0

    def __iter__(self) -> Iterator[str]:
        for text in self.texts:
            self.count += bool(text.strip())
            yield text
