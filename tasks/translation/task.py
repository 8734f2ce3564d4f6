"""The translation task: an encoder–decoder variant trained on parallel text and scored with sacreBLEU.

Default data: the generated English → German-style corpus (:mod:`tasks.translation.corpus`), with a
held-out split of sentences longer than any seen in training. Real data: ``--data DIR`` in any layout
:func:`tasks.translation.data.load_parallel` reads.

A finished run keeps its tokenizer (``tokenizer.json``) and decoding settings in run.json; a restored runner
(:func:`tasks.runs.run.load_run`) encodes any data with that tokenizer instead of training a new one.

Training follows the paper: length-bucketed batches, label smoothing 0.1 ignoring pads, Adam
(β 0.9/0.98, ε 1e-9) with the Noam schedule (``--lr`` is its peak), teacher forcing with the target
shifted right.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.decoding import beam_search, greedy_decode, sample_decode, strip_special
from core.schedule import NoamLR
from plumbing.errors import check_int, check_number, check_positive, check_probability, unknown_name
from plumbing.tables import markdown_table
from tasks.engine.config import TrainConfig
from tasks.engine.distributed import shard
from tasks.engine.progress import progress_bar
from tasks.engine.registry import register_task
from tasks.engine.task import Task
from tasks.runs.records import split_hash, write_records
from tasks.translation import paired
from tasks.translation.corpus import DIFFICULTIES
from tasks.translation.metrics import (
    bleu_by_length,
    bleu_signature,
    bleu_statistics,
    sentence_scores,
    translation_metrics,
)
from tasks.translation.tokenizer import KINDS, SPECIALS, Tokenizer
from zoo.analysis.delta import TaskShape
from zoo.analysis.doctor import Batch, entropy, seq2seq_batch

if TYPE_CHECKING:  # annotations only: runs sit above the tasks
    from tasks.runs.run import Run


@dataclass
class TranslationConfig(TrainConfig):
    task: str = "translation"
    epochs: int = 8
    batch_size: int = 64  # sentence pairs per micro-batch
    lr: float = 2e-3  # peak of the Noam schedule
    weight_decay: float = 0.0  # must stay 0: the paper's Adam has no weight decay
    warmup: int = 300
    difficulty: str = "easy"  # of the generated corpus (ignored with --data)
    n_train: int = 0  # generated training pairs; 0: the difficulty's default
    src_lang: str = "en"  # source language code (the file suffix with --data)
    tgt_lang: str = "de"  # target language code
    tokenizer: str = "auto"  # word (generated corpus), bpe (real data), or auto
    vocab_size: int = 8000  # largest vocabulary, the 4 special tokens included
    label_smoothing: float = 0.1  # of the cross-entropy, in [0, 1)
    eval_size: int = 300  # validation sentences decoded after each epoch
    beam_size: int = 4  # hypotheses kept by the test-time beam search; 1 is greedy
    length_penalty: float = 0.6  # GNMT's alpha: beam scores divided by ((5 + length) / 6)^alpha
    temperature: float = 0.0  # > 0: also report BLEU of sampling at this temperature
    max_len: int = 256  # training pairs with a side this long (tokens) or longer are left out

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.difficulty not in DIFFICULTIES:
            raise unknown_name("difficulty", self.difficulty, DIFFICULTIES)
        if self.tokenizer not in ("auto", *KINDS):
            raise unknown_name("tokenizer", self.tokenizer, ("auto", *KINDS))
        check_number("weight_decay", self.weight_decay, 0, 0, hint="translation trains with the paper's Adam")
        check_positive("n_train", self.n_train, allow_zero=True)
        check_int("vocab_size", self.vocab_size, len(SPECIALS), low_open=True,
                  hint=f"room for the {len(SPECIALS)} special tokens and at least one word")
        check_probability("label_smoothing", self.label_smoothing)
        for name in ("eval_size", "beam_size"):
            check_positive(name, getattr(self, name))
        check_number("length_penalty", self.length_penalty)
        check_number("temperature", self.temperature, 0, hint="0: no sampling")
        check_int("max_len", self.max_len, 2, hint="pairs are kept when both sides are shorter: below 2 none is")


DEFAULT_PRESET = "mini"
TOKENIZER_FILE = "tokenizer.json"
# run.json "preprocessing": how sources were encoded and decoded (besides the tokenizer file)
SAVED_FIELDS = ("src_lang", "tgt_lang", "max_len", "beam_size", "length_penalty", "temperature")


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> Tensor:
    """Right-pad id lists into a ``(B, N)`` long tensor."""
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    for i, seq in enumerate(seqs):
        out[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return out.to(device)


@register_task
class TranslationTask(Task):
    name = "translation"
    config_class = TranslationConfig
    main_metric = "bleu"
    baseline = "classic"
    headline = ("test", "greedy_bleu")  # the number `zoo compare` ranks by
    extra_columns = (("test_long", "greedy_bleu", "long BLEU"),)  # length generalisation
    eval_splits = ("test", "test_long", "valid")
    delta_shape = TaskShape("translation", "mini", {"batch": 1, "src_len": 32, "tgt_len": 32}, ("src_len", "tgt_len"),
                            "one sentence pair of 32 source and 32 target tokens")
    dynamic_shapes = True  # length-bucketed batches change both lengths (and the last bucket the batch size)
    predict_options = ("beam_size", "temperature", "top_k", "top_p")

    @classmethod
    def paired_metrics(cls, info: dict[str, Any]) -> list:
        return paired.paired_metrics(info)

    @classmethod
    def predict_inputs(cls, run: Run, inputs: list[str], out: str | None, progress: bool = True,
                       **options: Any) -> str:
        """Translate the lines of text files (:mod:`tasks.translation.predict`)."""
        from tasks.translation.predict import predict

        return predict(run, inputs, out, progress=progress, **options)

    def doctor_batch(self, split: str = "valid", n: int = 64) -> Batch:
        """The first ``n`` pairs of ``split``, encoded as training encodes them (sources cut at ``max_len``, EOS
        appended; targets BOS … EOS), right-padded."""
        if split not in self.splits:
            raise ValueError(f"the translation data has no {split!r} split (it has: {', '.join(self.splits)})")
        tok, limit = self.tokenizer, self.config.max_len
        pairs = self.splits[split][:n]
        src_ids = [ids[:limit] + [tok.eos_id] for ids in tok.encode_batch([s for s, _ in pairs])]
        tgt_ids = [[tok.bos_id] + ids[:limit] + [tok.eos_id] for ids in tok.encode_batch([t for _, t in pairs])]
        return seq2seq_batch(pad_batch(src_ids, tok.pad_id, self.device), pad_batch(tgt_ids, tok.pad_id, self.device),
                             tok.pad_id)

    def onnx_graphs(self, model: nn.Module, n: int = 8) -> list:
        """The encoder and the decoder step (:func:`tasks.engine.export_graphs.seq2seq_graphs`) on the first
        ``n`` test pairs, encoded as training encodes them."""
        from tasks.engine.export_graphs import seq2seq_graphs

        if not hasattr(model, "encode") or not hasattr(model, "decode"):
            raise ValueError(f"{type(model).__name__} has no encode/decode steps to export; ONNX export takes the "
                             "zoo's encoder-decoder variants")
        src, tgt_in = self.doctor_batch("test" if "test" in self.splits else self.valid_split, n).inputs
        return seq2seq_graphs(model, src.cpu(), tgt_in.cpu())

    def target_entropy(self, n: int = 5000) -> float:
        """Entropy of the training targets' token frequencies (EOS included)."""
        tok = self.tokenizer
        targets = tok.encode_batch([t for _, t in self.splits["train"][:n]])
        return entropy(Counter(t for ids in targets for t in [*ids, tok.eos_id]))

    def setup(self) -> None:
        c: TranslationConfig = self.config
        if c.data is None:
            corpus = (c.seed, c.difficulty, c.n_train)
            self.splits = {name: list(pairs) for name, pairs in _generated_corpus(*corpus).items()}
            kind = "word" if c.tokenizer == "auto" else c.tokenizer
        else:
            from tasks.translation.data import load_parallel

            self.splits = load_parallel(c.data, c.src_lang, c.tgt_lang)
            kind = "bpe" if c.tokenizer == "auto" else c.tokenizer
        self.valid_split = "valid" if "valid" in self.splits else "test"
        if self.restored is not None:
            return  # the run's tokenizer encodes the data; the training rows are not needed to evaluate
        self.tokenizer_kind = kind
        if c.data is None:
            self.tokenizer, self.train_src, self.train_tgt = _tokenised_corpus(*corpus, kind, c.vocab_size)
        else:
            self.tokenizer, self.train_src, self.train_tgt = _tokenise(self.splits["train"], kind, c.vocab_size)
        lengths = zip(self.train_src, self.train_tgt)
        self.train_rows = [i for i, (s, t) in enumerate(lengths) if 0 < len(s) < c.max_len and len(t) < c.max_len]
        if not self.train_rows:
            shortest = min((max(len(s), len(t)) for s, t in zip(self.train_src, self.train_tgt)), default=0)
            raise ValueError(f"max_len={c.max_len} keeps none of the {len(self.train_src)} training pairs (the "
                             f"shortest has {shortest} tokens on its longer side); raise --max-len above {shortest}")

    def build_model(self) -> nn.Module:
        c: TranslationConfig = self.config
        variant = self.variant  # translation has no reference models: always a registration
        preset = c.preset or (DEFAULT_PRESET if DEFAULT_PRESET in variant.presets else None)
        self.preset = preset
        tok = self.tokenizer
        longest = max(len(s) for s in self.train_src) + 50
        config = variant.config(preset, **{"max_len": max(512, 4 * longest), **c.model, "src_vocab": tok.vocab_size,
                                           "tgt_vocab": None, "pad_id": tok.pad_id, "bos_id": tok.bos_id,
                                           "eos_id": tok.eos_id})
        self.model_config = config
        return variant.build(config)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=self.config.lr, betas=(0.9, 0.98), eps=1e-9)

    def make_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int):
        c, d_model = self.config, self.model_config.d_model
        warmup = max(c.warmup, 1)
        return NoamLR(optimizer, d_model, warmup, factor=c.lr * (d_model * warmup) ** 0.5)  # peak = lr

    def train_batches(self, epoch: int) -> list[list[int]]:
        """Length buckets: sort by source length (ties broken randomly), cut, shuffle the batch order."""
        gen = torch.Generator().manual_seed(self.config.seed * 100_003 + epoch)
        rows = self.train_rows
        noise = torch.rand(len(rows), generator=gen).tolist()
        ordered = sorted(range(len(rows)), key=lambda i: (len(self.train_src[rows[i]]), noise[i]))
        size = self.config.batch_size
        batches = [[rows[i] for i in ordered[j : j + size]] for j in range(0, len(ordered), size)]
        order = torch.randperm(len(batches), generator=gen).tolist()
        return [batches[i] for i in order]

    def loss(self, model: nn.Module, rows: Sequence[int]) -> tuple[Tensor, float]:
        tok = self.tokenizer
        src = pad_batch([[*self.train_src[i], tok.eos_id] for i in rows], tok.pad_id, self.device)
        tgt = pad_batch([[tok.bos_id, *self.train_tgt[i], tok.eos_id] for i in rows], tok.pad_id, self.device)
        logits = model(src, tgt[:, :-1])  # teacher forcing: inputs are the target shifted right
        labels = tgt[:, 1:]
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=tok.pad_id,
                               label_smoothing=self.config.label_smoothing, reduction="sum")
        return loss, float((labels != tok.pad_id).sum())

    # --- evaluation --------------------------------------------------------------------------------
    def _eval_pairs(self, split: str) -> list[tuple[str, str]]:
        pairs = self.splits[split]
        return pairs[: self.config.eval_size] if split == self.valid_split else pairs

    def data_hash(self, split: str) -> str:
        """The hash of the sentence pairs ``split`` scores (``valid``: the first ``eval_size`` of the split
        validation reads)."""
        pairs = self._eval_pairs(split if split in self.splits else self.valid_split)
        return split_hash(text for pair in pairs for text in pair)

    @torch.no_grad()
    def translate(self, model: nn.Module, sources: list[str], method: str = "greedy", batch_size: int = 64,
                  generator: torch.Generator | None = None, *, beam_size: int | None = None,
                  temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
                  progress: bool = False) -> list[str]:
        """Translate sentences with ``method`` greedy, beam or sample decoding (batched by length).

        ``beam_size`` and ``temperature`` default to the config's (the report's settings); ``top_k``/``top_p``
        restrict sampling. A source longer than :meth:`source_limit` tokens is cut there, as training cut
        its sentences; a translation stops after 2·n + 10 tokens (n: its batch's longest source, eos
        included), or at the end of a learned position table.
        """
        c, tok = self.config, self.tokenizer
        beam_size = c.beam_size if beam_size is None else beam_size
        temperature = c.temperature if temperature is None else temperature
        limit, table = self.source_limit(model), _position_table(model)
        encoded = [tok.encode(s)[:limit] + [tok.eos_id] for s in sources]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        out: list[str] = [""] * len(sources)
        bar = progress_bar(total=len(sources), desc="translating", unit="sentence", disable=not progress,
                           leave=False, dynamic_ncols=True)
        for j in range(0, len(order), batch_size):
            idx = order[j : j + batch_size]
            src = pad_batch([encoded[i] for i in idx], tok.pad_id, self.device)
            max_len = 2 * src.shape[1] + 10
            if table is not None:
                max_len = min(max_len, table)  # the decoder feeds positions 0 .. max_len - 1
            if method == "beam":
                ids = beam_search(model, src, beam_size, c.length_penalty, max_len)
            elif method == "sample":
                ids = sample_decode(model, src, temperature, top_k, top_p, max_len=max_len, generator=generator)
            else:
                ids = greedy_decode(model, src, max_len)
            for i, hyp in zip(idx, strip_special(ids, tok.eos_id, tok.pad_id)):
                out[i] = tok.decode(hyp)
            bar.update(len(idx))
        bar.close()
        return out

    def source_limit(self, model: nn.Module) -> int:
        """The longest source, in tokens without eos, that :meth:`translate` gives ``model`` whole: the run's
        ``max_len`` (training kept only shorter sentences) and, with a learned position table, its size - 1."""
        table = _position_table(model)
        return self.config.max_len if table is None else min(self.config.max_len, table - 1)

    def evaluate(self, model: nn.Module, split: str) -> list[Any]:
        pairs = self._eval_pairs(split if split in self.splits else self.valid_split)
        index = shard(list(range(len(pairs))), self.dist)
        hyps = self.translate(model, [pairs[i][0] for i in index])
        return list(zip(index, hyps))

    def score(self, records: list[Any], split: str) -> dict[str, float]:
        pairs = self._eval_pairs(split if split in self.splits else self.valid_split)
        hyps = [h for _, h in sorted(records)]
        metrics = translation_metrics(hyps, [t for _, t in pairs])
        return {"bleu": metrics["bleu"], "exact_match": metrics["exact_match"]}

    def final_report(self, model: nn.Module, out_dir: Path, splits: Sequence[str] | None = None
                     ) -> tuple[dict[str, Any], str]:
        c = self.config
        results: dict[str, Any] = {}
        sections = ["## Test results", ""]
        rows, samples, buckets = [], [], []
        for split in self._report_splits(splits):
            pairs = self.splits[split]
            sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
            greedy = self.translate(model, sources)
            # a beam of one is greedy decoding exactly (core.decoding.beam_search; tests/core/test_decoding.py)
            beam = greedy if c.beam_size == 1 else self.translate(model, sources, "beam")
            stats = bleu_statistics(greedy, refs)  # sacreBLEU tokenises the greedy translations once for 3 scores
            scored = {"greedy": translation_metrics(greedy, refs, stats)}
            scored["beam"] = scored["greedy"] if beam is greedy else translation_metrics(beam, refs)
            metrics = {f"{how}_{k}": v for how, m in scored.items() for k, v in m.items() if k != "signature"}
            outputs = {"greedy": greedy, "beam": beam}
            if c.temperature > 0:
                gen = torch.Generator(device=self.device).manual_seed(c.seed)
                outputs["sample"] = self.translate(model, sources, "sample", generator=gen)
                metrics[f"sample_t{c.temperature:g}_bleu"] = translation_metrics(outputs["sample"], refs)["bleu"]
            results[split] = metrics
            rows.append({"split": split, "sentences": len(pairs), **metrics})
            buckets += [{"split": split, **b} for b in bleu_by_length(sources, greedy, refs, stats)]
            samples += [(split, s, r, h) for s, r, h in list(zip(sources, refs, greedy))[:3]]
            if self.dist.is_main:
                records = [{"id": i, "source": src, "reference": ref, **{k: v[i] for k, v in outputs.items()}, **scores}
                           for i, (src, ref, scores) in enumerate(zip(sources, refs, sentence_scores(greedy, refs,
                                                                                                      stats)))]
                write_records(out_dir, split, records, self.data_hash(split))
        signature = bleu_signature()
        results["bleu_signature"] = signature
        sections += [markdown_table(rows), "", f"sacreBLEU signature: `{signature}`", "",
                     "### BLEU by source length (greedy)", "", markdown_table(buckets), "",
                     "### Samples (greedy)", ""]
        for split, src, ref, hyp in samples:
            sections += [f"- *{split}*  \n  source: `{src}`  \n  reference: `{ref}`  \n  hypothesis: `{hyp}`"]
        return results, "\n".join(sections)

    def _report_splits(self, splits: Sequence[str] | None) -> list[str]:
        """The requested splits (all of them, whole), or by default the test splits the data has."""
        if splits is None:
            return [s for s in ("test", "test_long") if s in self.splits]
        for split in splits:
            if split not in self.splits:
                has = ", ".join(s for s in self.eval_splits if s in self.splits) or "none"
                where = self.config.data or "the generated corpus"
                raise ValueError(f"{where} has no {split!r} split (it has: {has}); pick one of those with --split")
        return list(splits)

    def delta_overrides(self) -> dict[str, Any]:
        return {**self.config.model, "src_vocab": self.tokenizer.vocab_size, "tgt_vocab": None}

    def save_artifacts(self, out_dir: Path) -> None:
        self.tokenizer.save(Path(out_dir) / TOKENIZER_FILE)

    # --- using a finished run ----------------------------------------------------------------------
    def preprocessing(self) -> dict[str, Any]:
        c = self.config
        return {"tokenizer": TOKENIZER_FILE, "tokenizer_kind": self.tokenizer_kind,
                "vocab_size": self.tokenizer.vocab_size, **{k: getattr(c, k) for k in SAVED_FIELDS}}

    def artifact_files(self) -> list[str]:
        return [TOKENIZER_FILE]

    def restore(self, preprocessing: dict[str, Any], run_dir) -> None:
        super().restore(preprocessing, run_dir)
        missing = [k for k in ("tokenizer", "tokenizer_kind", "vocab_size", *SAVED_FIELDS) if k not in preprocessing]
        if missing:
            raise ValueError(f"run.json of {run_dir} lacks the translation preprocessing {missing}; retrain the run "
                             "with this package version")
        self.tokenizer = Tokenizer.load(Path(run_dir) / preprocessing["tokenizer"])
        if self.tokenizer.vocab_size != preprocessing["vocab_size"]:
            raise ValueError(f"{Path(run_dir) / preprocessing['tokenizer']} has {self.tokenizer.vocab_size} tokens but "
                             f"the run was trained with {preprocessing['vocab_size']}: the file was replaced; restore "
                             "the run's own tokenizer.json")
        self.tokenizer_kind = preprocessing["tokenizer_kind"]
        self.config = dataclasses.replace(self.config, **{k: preprocessing[k] for k in SAVED_FIELDS})


def _tokenise(train: Sequence[tuple[str, str]], kind: str, vocab_size: int
              ) -> tuple[Tokenizer, list[list[int]], list[list[int]]]:
    """A tokenizer trained on both sides of ``train``, and the sources' and targets' ids."""
    tokenizer = Tokenizer.train([s for pair in train for s in pair], kind=kind, vocab_size=vocab_size)
    return tokenizer, tokenizer.encode_batch([s for s, _ in train]), tokenizer.encode_batch([t for _, t in train])


# A process that trains many runs (a serial sweep, a local launcher's reused worker) generates and tokenises each
# generated corpus once: generation is deterministic in its settings (tests/tasks/translation). Keyed by every
# setting that changes the content; a few corpora at a time (a study's seeds, up to 8, at two difficulties: the least
# recently used goes first, a few MB each); the entries are tuples (the training ids too, which runs share), and each
# run gets split lists of its own (setup), so no run can change another's data.
CACHED_CORPORA = 16


@functools.lru_cache(maxsize=CACHED_CORPORA)
def _generated_corpus(seed: int, difficulty: str, n_train: int) -> dict[str, tuple[tuple[str, str], ...]]:
    """The generated corpus of these settings (``n_train`` 0: the difficulty's default), its splits as tuples."""
    from tasks.translation.corpus import generate_corpus

    overrides = {"n_train": n_train} if n_train else {}
    return {name: tuple(pairs) for name, pairs in generate_corpus(seed=seed, difficulty=difficulty,
                                                                  **overrides).items()}


@functools.lru_cache(maxsize=CACHED_CORPORA)
def _tokenised_corpus(seed: int, difficulty: str, n_train: int, kind: str, vocab_size: int
                      ) -> tuple[Tokenizer, tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """:func:`_tokenise` of the generated corpus's training split, the ids as tuples. The tokenizer is shared by the
    runs that ask for it: nothing changes a trained one (restore loads another)."""
    tokenizer, src, tgt = _tokenise(_generated_corpus(seed, difficulty, n_train)["train"], kind, vocab_size)
    return tokenizer, tuple(map(tuple, src)), tuple(map(tuple, tgt))


def _position_table(model: nn.Module) -> int | None:
    """The size of ``model``'s learned position table; None when its positions extrapolate (sinusoid, RoPE...)."""
    config = getattr(model, "config", None)
    return config.max_len if getattr(config, "position", None) == "learned" else None
