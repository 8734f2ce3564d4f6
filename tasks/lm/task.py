"""The language-model task: a decoder-only variant trained to predict the next token of a text.

Default data: the embedded Shakespeare subset (seven plays to train on, one each to validate and test; see
:mod:`tasks.lm.corpus`). Real data: ``--data`` a text file, a JSONL file with ``text`` fields, or a folder of
``train.txt`` / ``valid.txt`` / ``test.txt``.

Training follows nanoGPT's ``shakespeare_char`` CPU run (4 layers, 4 heads, width 128, context 64, batch 12,
AdamW lr 1e-3 with β2 0.99 and weight decay 0.1, 100 warm-up steps then a cosine to lr/10, gradient clip 1):
each epoch cuts the training tokens into windows of ``context + 1`` tokens from an offset drawn from
(seed, epoch), and shuffles them from (seed, epoch), so a resumed run sees the same batches. The loss is the
cross-entropy of each next token.

Evaluation scores every token of a split once, in non-overlapping windows of ``context`` tokens (the last one
shorter): the mean loss in nats per token (the main metric, on valid, lower is better), its perplexity, and bits
per character — the total loss over ``characters × ln 2`` — so a character and a BPE model compare. With
``eval_lengths`` the report adds the extrapolation protocol (:mod:`tasks.lm.extrapolation`).

A finished run keeps its tokenizer (``tokenizer.json``); a restored runner encodes any data with it.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plumbing.errors import check_int, check_positive, unknown_name
from plumbing.tables import markdown_table
from tasks.engine.config import TrainConfig, check_folder
from tasks.engine.distributed import shard
from tasks.engine.registry import register_task
from tasks.engine.task import Task
from tasks.lm import paired
from tasks.lm.corpus import DEFAULT_FRACTION, SPLITS, embedded_corpus, parse_fraction, read_corpus
from tasks.lm.tokenizer import KINDS, LMTokenizer, load_tokenizer, train_tokenizer
from tasks.runs.records import split_hash, write_records
from zoo.analysis.delta import TaskShape
from zoo.analysis.doctor import Batch, entropy

if TYPE_CHECKING:  # annotations only: runs sit above the tasks
    from tasks.runs.run import Run

# What `--eval-lengths` may be given as: str first, so that the command line hands the flag's text to the parser.
Lengths = str | tuple[int, ...]
Fraction = str | tuple[float, float, float]


@dataclass
class LMConfig(TrainConfig):
    task: str = "lm"
    epochs: int = 2  # passes over the training windows (2: about 2,400 steps on the embedded corpus)
    batch_size: int = 12  # windows of context + 1 tokens per micro-batch
    lr: float = 1e-3  # peak learning rate (AdamW); the cosine ends at lr / 10
    weight_decay: float = 0.1  # AdamW's, on matrices only (nanoGPT's)
    warmup: int = 100
    context: int = 64  # training length L: tokens a window feeds the model
    tokenizer: str = "char"  # char (one id per character) or bpe (byte-level BPE of --vocab-size ids)
    vocab_size: int = 2048  # bpe: ids learnt on the training split (the 256 bytes included)
    split_fraction: Fraction = DEFAULT_FRACTION  # --data of one file: train,valid,test shares of its text
    eval_lengths: Lengths = ()  # also report perplexity at these evaluation lengths, e.g. 64,128,256 (extrapolation)
    eval_stride: int = 0  # with eval_lengths: the sliding window's stride S (0: non-overlapping windows only)
    sample_tokens: int = 200  # tokens of the report's generated sample (0: none)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tokenizer not in KINDS:
            raise unknown_name("tokenizer", self.tokenizer, KINDS)
        check_int("context", self.context, 2, hint="a window must hold a token and its successor")
        check_int("vocab_size", self.vocab_size, 257, hint="byte-level BPE holds the 256 bytes before any merge")
        self.split_fraction = parse_fraction(self.split_fraction)
        self.eval_lengths = parse_lengths(self.eval_lengths)
        check_positive("eval_stride", self.eval_stride, allow_zero=True)
        if self.eval_stride and self.eval_lengths and self.eval_stride > min(self.eval_lengths):
            raise ValueError(f"eval_stride {self.eval_stride} exceeds the shortest evaluation length "
                             f"{min(self.eval_lengths)}; give a stride <= every length (or 0 for none)")
        check_positive("sample_tokens", self.sample_tokens, allow_zero=True)

    def check_paths(self) -> None:
        """As :meth:`TrainConfig.check_paths`, but ``--data`` may be a file (a text or JSONL corpus)."""
        check_folder("--out", self.out_dir, "a new folder, or a run's folder with --resume")
        if self.data is not None and not Path(self.data).exists():
            raise FileNotFoundError(f"--data {self.data} not found; pass a text file, a .jsonl file with a 'text' "
                                    "field, or a folder holding train.txt (and valid.txt, test.txt)")


def parse_lengths(value: Lengths) -> tuple[int, ...]:
    """``"64,128,256"`` (or a sequence of ints) as a tuple of evaluation lengths, each >= 2."""
    if isinstance(value, str):
        try:
            value = tuple(int(v) for v in value.split(",") if v.strip())
        except ValueError:
            raise ValueError(f"eval_lengths must be comma-separated token counts such as 64,128,256, got {value!r}"
                             ) from None
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"eval_lengths must be a tuple of ints such as (64, 128), got {value!r}")
    for length in value:
        check_int("each of eval_lengths", length, 2, hint="a window must hold a token and its successor")
    return tuple(value)


DEFAULT_PRESET = "small"  # nanoGPT's shakespeare_char CPU anchor
TOKENIZER_FILE = "tokenizer.json"
SAVED_FIELDS = ("tokenizer", "context", "sample_tokens")  # run.json "preprocessing", besides the tokenizer file
SAMPLE = {"temperature": 0.8, "top_k": 40}  # the report's sample: seeded, from the split's first context/2 tokens


def warmup_cosine_floor(warmup: int, total: int, floor: float = 0.1):
    """LR factor of optimizer step ``s``: linear to 1 over ``warmup`` steps, then a cosine down to ``floor``
    at ``total`` (nanoGPT's schedule: min_lr = lr / 10)."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


@register_task
class LMTask(Task):
    name = "lm"
    config_class = LMConfig
    main_metric = "loss"
    higher_is_better = False
    baseline = "classic"
    headline = ("test", "loss")
    extra_columns = (("test", "bits_per_char", "bits/char"),)
    eval_splits = ("test", "valid")
    # One window of max_len tokens: the model's context, a config field, so a run is measured at its own --context
    # (delta_overrides) and the cost growth builds the model for the longer window (a learned table grows with it).
    delta_shape = TaskShape("lm", DEFAULT_PRESET, {"batch": 1, "max_len": 64}, ("max_len",),
                            "one window of 64 tokens (max_len, the model's context)", config_keys=("max_len",))
    predict_options = ("temperature", "top_k", "top_p", "prompt", "max_new_tokens", "seed")

    @classmethod
    def add_arguments(cls, command: str, parser: Any) -> None:
        """The options only this task adds to ``zoo predict`` (generation) and ``zoo evaluate`` (extrapolation);
        ``parser`` skips a flag another task already defined (e.g. translation's --temperature)."""
        if command == "predict":
            parser.add_argument("--prompt", default=None, help="lm: the text to continue (default: the inputs' "
                                "text, one prompt per file; standard input when none)")
            parser.add_argument("--max-new-tokens", type=int, default=None, help="lm: tokens to generate "
                                "(default 200)")
            parser.add_argument("--temperature", type=float, default=None, help="sampling temperature (0: greedy)")
            parser.add_argument("--top-k", type=int, default=None, help="sample from the k most probable tokens")
            parser.add_argument("--top-p", type=float, default=None, help="sample from the nucleus of mass p")
            parser.add_argument("--seed", type=int, default=None, help="lm: seed of the sampling (default: the "
                                "run's seed); the same seed repeats the text")
        elif command == "evaluate":
            parser.add_argument("--lengths", dest="eval_lengths", default=None, metavar="L1,L2,...",
                                help="lm: also report perplexity at these evaluation lengths (extrapolation)")
            parser.add_argument("--stride", dest="eval_stride", type=int, default=None, metavar="S",
                                help="lm: with --lengths, a sliding window of stride S (each token scored once)")

    @classmethod
    def paired_metrics(cls, info: dict[str, Any]) -> list:
        return paired.paired_metrics(info)

    @classmethod
    def predict_inputs(cls, run: Run, inputs: list[str], out: str | None, progress: bool = True,
                       **options: Any) -> str:
        """Continue a prompt (``--prompt``, or the text of each input file) (:mod:`tasks.lm.predict`)."""
        from tasks.lm.predict import predict

        return predict(run, inputs, out, **options)

    # --- setup ---------------------------------------------------------------------------------
    def setup(self) -> None:
        c: LMConfig = self.config
        self.texts = embedded_corpus() if c.data is None else read_corpus(c.data, c.split_fraction)
        where = c.data or "the embedded corpus"
        if self.restored is None:
            self.tokenizer = train_tokenizer(c.tokenizer, self.texts["train"], c.vocab_size)
        self.ids = {split: torch.tensor(self.tokenizer.encode(text), dtype=torch.long)
                    for split, text in self.texts.items()}
        for split in SPLITS if self.restored is None else [s for s in SPLITS if s != "train"]:
            if len(self.ids[split]) < c.context + 1:
                raise ValueError(f"{where}: the {split} split has {len(self.ids[split])} tokens, fewer than one "
                                 f"window of context + 1 = {c.context + 1}; give more text or a smaller --context")

    def build_model(self) -> nn.Module:
        c: LMConfig = self.config
        model = self.build_variant(self.delta_overrides())
        check_length = getattr(model, "check_length", None)
        if check_length is not None:
            check_length(c.context, f"--context {c.context}")
        return model

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        """AdamW as nanoGPT configures it: weight decay on matrices only, β = (0.9, 0.99)."""
        c = self.config
        params = [p for p in model.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": c.weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=c.lr, betas=(0.9, 0.99))

    def make_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine_floor(self.config.warmup, total_steps))

    # --- training ------------------------------------------------------------------------------
    def window_offset(self, epoch: int) -> int:
        """Where epoch ``epoch``'s windows start, in [0, context): drawn from (seed, epoch), so that every epoch
        sees the text cut at other places and a resumed run cuts it where the uninterrupted one did."""
        gen = torch.Generator().manual_seed(self.config.seed * 100_003 + epoch + 7_919_000)
        return int(torch.randint(self.config.context, (1,), generator=gen))

    def train_batches(self, epoch: int) -> list[list[tuple[int, int]]]:
        """Shuffled batches of rows ``(window index, epoch)``; window i starts at offset(epoch) + i · context."""
        n = (len(self.ids["train"]) - 1 - self.window_offset(epoch)) // self.config.context
        return self.shuffled_batches(n, epoch, min_last=1)

    def windows(self, rows: Sequence[tuple[int, int]]) -> Tensor:
        """The training windows of ``rows`` (``context + 1`` tokens each), ``(B, context + 1)``."""
        c, ids = self.config.context, self.ids["train"]
        starts = [self.window_offset(epoch) + i * c for i, epoch in rows]
        return torch.stack([ids[s : s + c + 1] for s in starts]).to(self.device)

    def loss(self, model: nn.Module, rows: Sequence[tuple[int, int]]) -> tuple[Tensor, float]:
        batch = self.windows(rows)  # (B, L + 1)
        logits = model(batch[:, :-1])  # (B, L, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten(), reduction="sum")
        return loss, float(batch[:, 1:].numel())

    # --- evaluation ----------------------------------------------------------------------------
    def eval_windows(self, split: str) -> list[tuple[int, int]]:
        """``(start, length)`` of the windows that score ``split``: non-overlapping, ``context`` tokens each, the
        last one shorter; window k predicts tokens start + 1 .. start + length, so every token but the first is
        scored once."""
        n, c = len(self.ids[split]), self.config.context
        return [(s, min(c, n - 1 - s)) for s in range(0, n - 1, c)]

    @torch.no_grad()
    def score_windows(self, model: nn.Module, split: str, index: Sequence[int], batch_size: int = 64
                      ) -> list[dict[str, Any]]:
        """One record per window of ``index``: summed loss (nats), tokens scored, characters they decode to."""
        ids, windows, tok = self.ids[split], self.eval_windows(split), self.tokenizer
        records = []
        for length in sorted({windows[i][1] for i in index}, reverse=True):  # full windows, then the short last one
            group = [i for i in index if windows[i][1] == length]
            for j in range(0, len(group), batch_size):
                part = group[j : j + batch_size]
                batch = torch.stack([ids[windows[i][0] : windows[i][0] + length + 1] for i in part]).to(self.device)
                logits = model(batch[:, :-1]).float()  # (B, L, V)
                nll = F.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none").sum(1)  # (B,)
                for i, value, targets in zip(part, nll.tolist(), batch[:, 1:].tolist()):
                    records.append({"id": i, "nll": value, "tokens": length, "chars": len(tok.decode(targets))})
        return sorted(records, key=lambda r: r["id"])

    def evaluate(self, model: nn.Module, split: str) -> list[Any]:
        split = split if split in self.ids else "valid"
        return self.score_windows(model, split, shard(list(range(len(self.eval_windows(split)))), self.dist))

    def score(self, records: list[Any], split: str) -> dict[str, float]:
        scores = text_scores(records)
        return {key: scores[key] for key in ("loss", "perplexity", "bits_per_char")}

    def final_report(self, model: nn.Module, out_dir: Path, splits: Sequence[str] | None = None
                     ) -> tuple[dict[str, Any], str]:
        """Loss, perplexity and bits per character of ``splits`` (default: test), the extrapolation protocol at
        ``eval_lengths`` and a seeded sample; every figure is computed before any file is written, so a refused
        length leaves nothing behind."""
        from tasks.lm.curves import markdown_section, plot_curves

        c = self.config
        splits = self._report_splits(splits)
        for split in splits if c.eval_lengths else ():
            too_long = [n for n in c.eval_lengths if n > len(self.ids[split])]
            if too_long:
                raise ValueError(f"the {split} split has {len(self.ids[split])} tokens, fewer than the evaluation "
                                 f"lengths {too_long}; give shorter --lengths")
        results: dict[str, Any] = {}
        records, curves, table = {}, {}, []
        for split in splits:
            records[split] = self.score_windows(model, split, range(len(self.eval_windows(split))))
            results[split] = text_scores(records[split])
            table.append({"split": split, **results[split]})
            if c.eval_lengths:
                curves[split] = results[split]["extrapolation"] = self.extrapolation(model, split)
        sample = self.sample(model, splits[0])
        if self.dist.is_main:
            for split, rows in records.items():
                write_records(out_dir, split, rows, self.data_hash(split))
            for split, rows in curves.items() if c.figures else ():
                plot_curves({f"{c.variant} ({split})": rows}, c.context, Path(out_dir) / f"curves_{split}.png")
        section = ["## Test results", "", markdown_table(table), "",
                   "Loss: mean cross-entropy per token (nats), every token scored once in non-overlapping windows of "
                   f"{c.context} tokens; bits per character: total loss / (characters × ln 2)."]
        section += ["", "### Generated sample", "", sample] if sample else []
        for split, rows in curves.items():
            section += ["", markdown_section(rows, c.context, f"Extrapolation ({split}, trained at {c.context})")]
        return results, "\n".join(section)

    def extrapolation(self, model: nn.Module, split: str) -> list[dict[str, Any]]:
        """Perplexity of ``split`` at each ``eval_lengths``, non-overlapping and with the sliding window of
        ``eval_stride`` (:func:`tasks.lm.extrapolation.perplexity_at_lengths`)."""
        from tasks.lm.extrapolation import perplexity_at_lengths

        c = self.config
        return perplexity_at_lengths(model, self.ids[split].to(self.device), c.eval_lengths, c.eval_stride or None,
                                     n_chars=len(self.texts[split]))

    def sample(self, model: nn.Module, split: str) -> str:
        """A seeded continuation of the first tokens of ``split`` (the report's sample); "" when none is asked.

        Generated in windows of the training length: each call of :func:`core.generation.generate` continues the
        last ``context // 2`` tokens up to ``context`` positions, so the model never reads a position it was not
        trained at (a sinusoidal model continued past its training length degenerates: the extrapolation
        pitfall, which the sample should not mix in)."""
        from core.generation import generate

        c = self.config
        keep = max(c.context // 2, 1)
        prompt = self.ids[split][:keep][None].to(self.device)  # (1, P)
        if c.sample_tokens == 0:
            return ""
        gen = torch.Generator(device=self.device).manual_seed(c.seed)
        tokens = prompt
        while tokens.shape[1] - prompt.shape[1] < c.sample_tokens:
            window = tokens[:, -keep:]  # (1, ≤ context/2)
            step = min(c.context - window.shape[1], c.sample_tokens - (tokens.shape[1] - prompt.shape[1]))
            out = generate(model, window, step, SAMPLE["temperature"], SAMPLE["top_k"], generator=gen)
            tokens = torch.cat((tokens, out[:, window.shape[1] :]), dim=1)  # (1, t + step)
        decode = self.tokenizer.decode
        prompt_text, text = decode(prompt[0].tolist()), decode(tokens[0, prompt.shape[1] :].tolist())
        settings = (f"temperature {SAMPLE['temperature']}, top-k {SAMPLE['top_k']}, seed {c.seed}, "
                    f"{c.sample_tokens} tokens, each seeing the last {keep} to {c.context - 1} tokens")
        return (f"Prompt: the first {prompt.shape[1]} tokens of {split}, continued in ⟨⟩ ({settings}):\n\n"
                f"```text\n{prompt_text}⟨{text}⟩\n```")

    def _report_splits(self, splits: Sequence[str] | None) -> list[str]:
        if splits is None:
            return ["test"]
        for split in splits:
            if split not in self.ids:
                raise unknown_name(f"split of the {self.name} task", split, self.eval_splits)
        return list(splits)

    def data_hash(self, split: str) -> str:
        """The hash of ``split``'s text."""
        return split_hash([self.texts[split]])

    def doctor_batch(self, split: str = "valid", n: int = 64) -> Batch:
        """The first ``n`` full evaluation windows of ``split``: ids ``(B, L)`` and their next tokens ``(B, L)``."""
        ids, c = self.ids[split], self.config.context
        starts = [s for s, length in self.eval_windows(split) if length == c][:n]
        batch = torch.stack([ids[s : s + c + 1] for s in starts]).to(self.device)  # (B, L + 1)
        return Batch((batch[:, :-1],), batch[:, 1:], "causal_lm")

    def onnx_graphs(self, model: nn.Module, n: int = 8) -> list:
        """One graph, ids ``(B, N)`` -> next-token logits ``(B, N, V)``, dynamic in B and N, on the first ``n`` test
        windows; generation recomputes the prefix through it (:class:`tasks.runs.onnx_runtime.OnnxDecoder`)."""
        from tasks.engine.export_graphs import batch_graph

        graph = batch_graph(model, "ids", self.doctor_batch("test", n).inputs[0].cpu(), more={1: "tokens"})
        return [dataclasses.replace(graph, name="decoder")]

    def target_entropy(self, n: int = 100_000) -> float:
        """Entropy of the training tokens' unigram frequencies (the first ``n``)."""
        return entropy(Counter(self.ids["train"][:n].tolist()))

    def delta_overrides(self) -> dict[str, Any]:
        """The model's config fields the run decides: the vocabulary (the tokenizer's) and a learned position table
        of ``context`` places unless ``--model-set max_len`` says otherwise."""
        decided = self.decided_overrides({"vocab_size": self.tokenizer.vocab_size}, "the tokenizer")
        return {"max_len": self.config.context, **decided}

    def save_artifacts(self, out_dir: Path) -> None:
        self.tokenizer.save(Path(out_dir) / TOKENIZER_FILE)

    # --- using a finished run ----------------------------------------------------------------------
    def preprocessing(self) -> dict[str, Any]:
        return {"tokenizer_file": TOKENIZER_FILE, "vocab_size": self.tokenizer.vocab_size,
                **{k: getattr(self.config, k) for k in SAVED_FIELDS}}

    def artifact_files(self) -> list[str]:
        return [TOKENIZER_FILE]

    def restore(self, preprocessing: dict[str, Any], run_dir) -> None:
        super().restore(preprocessing, run_dir)
        missing = [k for k in ("tokenizer_file", "vocab_size", *SAVED_FIELDS) if k not in preprocessing]
        if missing:
            raise ValueError(f"run.json of {run_dir} lacks the lm preprocessing {missing}; retrain the run with this "
                             "package version")
        path = Path(run_dir) / preprocessing["tokenizer_file"]
        self.tokenizer: LMTokenizer = load_tokenizer(path)
        if self.tokenizer.vocab_size != preprocessing["vocab_size"]:
            raise ValueError(f"{path} has {self.tokenizer.vocab_size} tokens but the run was trained with "
                             f"{preprocessing['vocab_size']}: the file was replaced; restore the run's own "
                             f"{TOKENIZER_FILE}")
        self.config = dataclasses.replace(self.config, **{k: preprocessing[k] for k in SAVED_FIELDS})


def text_scores(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Loss (mean nats per token), perplexity and bits per character of scored windows' records."""
    nll = sum(r["nll"] for r in records)
    tokens = sum(r["tokens"] for r in records)
    chars = sum(r["chars"] for r in records)
    if tokens == 0:
        raise ValueError("no scored tokens: the split is shorter than two tokens")
    loss = nll / tokens
    return {"loss": loss, "perplexity": math.exp(min(loss, 700.0)),
            "bits_per_char": nll / (max(chars, 1) * math.log(2)), "tokens": float(tokens), "characters": float(chars)}
