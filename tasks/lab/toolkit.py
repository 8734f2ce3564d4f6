"""Shared bench of the lab: a small translation dataset, a short training loop, decoding scores, attention
statistics and plotting. Lessons build their models from public ``core``/``zoo`` parts and use these helpers,
so each lesson file holds only its experiment.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.decoding import greedy_decode, strip_special
from core.model import Transformer, TransformerConfig, build_transformer
from core.multihead import record_attention
from core.schedule import noam_rate
from tasks.translation.task import pad_batch

if TYPE_CHECKING:  # annotation only: the lab's translation lessons need not import the lm task
    from tasks.lm.task import LMTask


@dataclass
class Seq2SeqData:
    """Token ids of the embedded English→German-style corpus, split as the generator splits it.

    ``pairs[split]`` holds (source ids, target ids) without bos/eos; ``text[split]`` the (English, German) strings.
    """

    tokenizer: object  # tasks.translation.tokenizer.Tokenizer
    pairs: dict[str, list[tuple[list[int], list[int]]]]
    text: dict[str, list[tuple[str, str]]]

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def longest_train(self) -> int:
        """Longest training sequence in tokens (source or target, without bos/eos)."""
        return max(max(len(s), len(t)) for s, t in self.pairs["train"])


@functools.lru_cache(maxsize=4)
def translation_data(n_train: int = 3000, seed: int = 0, difficulty: str = "easy") -> Seq2SeqData:
    """The embedded corpus (see :mod:`tasks.translation.corpus`) with a word-level tokenizer; cached per process."""
    from tasks.translation.corpus import generate_corpus
    from tasks.translation.tokenizer import Tokenizer

    splits = generate_corpus(seed=seed, difficulty=difficulty, n_train=n_train, n_valid=200, n_test=200, n_long=200)
    tok = Tokenizer.train([s for pair in splits["train"] for s in pair], kind="word")
    pairs = {name: list(zip(tok.encode_batch([s for s, _ in rows]), tok.encode_batch([t for _, t in rows])))
             for name, rows in splits.items()}
    return Seq2SeqData(tok, pairs, splits)


def small_transformer(data: Seq2SeqData, preset: str = "tiny", seed: int = 0, **overrides) -> Transformer:
    """A classic Transformer sized for the lab (default: the ``tiny`` preset, no dropout), for ``data``'s vocabulary."""
    tok = data.tokenizer
    torch.manual_seed(seed)
    # max_len covers greedy_decode's default limit (source length + 50) even for the longest test_long source
    settings = {"dropout": 0.0, "max_len": 4 * data.longest_train + 128, **overrides}
    return build_transformer(preset, src_vocab=tok.vocab_size, tgt_vocab=None, pad_id=tok.pad_id,
                             bos_id=tok.bos_id, eos_id=tok.eos_id, **settings)


def batch(data: Seq2SeqData, rows: Sequence[tuple[list[int], list[int]]]) -> tuple[Tensor, Tensor]:
    """(source ``(B, S)`` with eos, target ``(B, T+2)`` with bos … eos) of ``rows``."""
    tok, cpu = data.tokenizer, torch.device("cpu")
    src = pad_batch([s + [tok.eos_id] for s, _ in rows], tok.pad_id, cpu)
    tgt = pad_batch([[tok.bos_id] + t + [tok.eos_id] for _, t in rows], tok.pad_id, cpu)
    return src, tgt


def sequence_loss(model: nn.Module, src: Tensor, tgt: Tensor, pad_id: int, smoothing: float = 0.0) -> Tensor:
    """Mean teacher-forced cross-entropy per target token (inputs are the target shifted right)."""
    logits = model(src, tgt[:, :-1])  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), tgt[:, 1:].flatten(), ignore_index=pad_id,
                           label_smoothing=smoothing)


@dataclass
class TrainLog:
    """Per-step record of :func:`train`. ``diverged``: the loss became NaN/inf (training stopped there)."""

    loss: list[float]
    lr: list[float]
    grad_norm: list[float]
    diverged: bool = False

    def final(self, last: int = 10) -> float:
        """Mean loss of the last ``last`` steps (inf if training diverged)."""
        return math.inf if self.diverged else sum(self.loss[-last:]) / len(self.loss[-last:])


def train(
    model: nn.Module,
    data: Seq2SeqData,
    steps: int,
    lr: float | Callable[[int], float] = 1e-3,
    batch_size: int = 32,
    seed: int = 0,
    clip: float | None = 1.0,
    progress: bool = True,
    desc: str = "train",
    on_step: Callable[[int, nn.Module], None] | None = None,
) -> TrainLog:
    """Adam (β 0.9/0.98, ε 1e-9, as the paper) on shuffled training batches for ``steps`` steps.

    Args:
        lr: a constant, or a function of the step (0-based) giving the learning rate (e.g. Noam).
        clip: gradient-norm clipping (None: off). The norm *before* clipping is logged.
        on_step: called after each backward pass, before the optimizer step (to read gradients).
    """
    from tasks.engine.progress import progress_bar

    tok = data.tokenizer
    rows = data.pairs["train"]
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    rate = lr if callable(lr) else (lambda _step: lr)
    log = TrainLog([], [], [])
    order: list[int] = []
    model.train()
    bar = progress_bar(range(steps), desc=desc, disable=not progress, leave=False)
    for step in bar:
        if len(order) < batch_size:
            order += torch.randperm(len(rows), generator=gen).tolist()
        picked, order = order[:batch_size], order[batch_size:]
        src, tgt = batch(data, [rows[i] for i in picked])
        loss = sequence_loss(model, src, tgt, tok.pad_id)
        if not torch.isfinite(loss):
            log.diverged = True
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if on_step is not None:
            on_step(step, model)
        params = [p for p in model.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip is not None else math.inf)
        for group in optimizer.param_groups:
            group["lr"] = rate(step)
        optimizer.step()
        log.loss.append(float(loss.detach()))
        log.lr.append(rate(step))
        log.grad_norm.append(float(norm))
        bar.set_postfix(loss=f"{log.loss[-1]:.3f}")
    model.eval()
    return log


def train_lm(model: nn.Module, task: LMTask, steps: int, progress: bool = True, desc: str = "train",
             on_step: Callable[[int, nn.Module], None] | None = None) -> TrainLog:
    """``steps`` optimizer steps of a language model on a set-up :class:`tasks.lm.task.LMTask`'s training windows.

    The task's own batches (windows of ``context + 1`` tokens, shuffled from (seed, epoch)), loss, optimizer
    (AdamW as nanoGPT) and warm-up/cosine schedule over ``steps``, gradients clipped at its ``grad_clip``: what
    ``zoo train lm`` does without checkpoints and evaluation, so that a lesson trains several models in one
    process. ``on_step`` is called after each backward pass, before the optimizer step. Logged: the mean loss per
    token of each step, its learning rate and the gradient norm before clipping.
    """
    from tasks.engine.progress import progress_bar

    optimizer = task.make_optimizer(model)
    scheduler = task.make_scheduler(optimizer, steps)
    clip = task.config.grad_clip or math.inf
    log = TrainLog([], [], [])
    batches: list = []
    epoch = 0
    model.train()
    bar = progress_bar(range(steps), desc=desc, disable=not progress, leave=False)
    for step in bar:
        if not batches:  # the next epoch: the text cut at another offset, reshuffled
            batches, epoch = task.train_batches(epoch), epoch + 1
        total, count = task.loss(model, batches.pop(0))
        loss = total / count
        if not torch.isfinite(loss):
            log.diverged = True
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if on_step is not None:
            on_step(step, model)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        log.lr.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
        log.loss.append(float(loss.detach()))
        log.grad_norm.append(float(norm))
        bar.set_postfix(loss=f"{log.loss[-1]:.3f}")
    model.eval()
    return log


def noam(d_model: int, warmup: int, peak: float) -> Callable[[int], float]:
    """The paper's schedule (:func:`core.schedule.noam_rate`, step = index + 1), scaled so its maximum is ``peak``."""
    factor = peak * (d_model * warmup) ** 0.5  # noam_rate peaks at d_model^-0.5 · warmup^-0.5
    return lambda step: noam_rate(step + 1, d_model, warmup, factor)


@torch.no_grad()
def greedy_translations(model: Transformer, data: Seq2SeqData, split: str, limit: int = 200,
                        max_len: int | None = None) -> list[str]:
    """Greedy decodings (text) of the first ``limit`` sources of ``split``."""
    tok = data.tokenizer
    rows = data.pairs[split][:limit]
    out: list[str] = []
    for j in range(0, len(rows), 64):
        src, _ = batch(data, rows[j : j + 64])
        ids = greedy_decode(model, src, max_len=max_len)
        out += [tok.decode(seq) for seq in strip_special(ids, tok.eos_id, tok.pad_id)]
    return out


def bleu(model: Transformer, data: Seq2SeqData, split: str = "test", limit: int = 200,
         max_len: int | None = None) -> dict[str, float]:
    """sacreBLEU corpus BLEU and exact match of greedy decoding on ``split`` (``max_len``: decoding limit)."""
    from tasks.translation.metrics import translation_metrics

    hyps = greedy_translations(model, data, split, limit, max_len)
    refs = [t for _, t in data.text[split][: len(hyps)]]
    scores = translation_metrics(hyps, refs)
    return {"bleu": scores["bleu"], "exact_match": scores["exact_match"]}


# --- attention statistics ----------------------------------------------------------------------------------
@torch.no_grad()
def attention_maps(model: nn.Module, src: Tensor, tgt: Tensor) -> dict[str, Tensor]:
    """Attention weights ``(B, H, Nq, Nk)`` of every multi-head attention of ``model`` on one batch."""
    was_training = model.training
    model.eval()
    with record_attention(model) as maps:
        model(src, tgt)
        recorded = dict(maps)
    model.train(was_training)
    return recorded


def entropy(weights: Tensor, valid: Tensor | None = None) -> float:
    """Mean entropy (nats) of attention rows; ``valid`` (broadcastable to the rows) selects rows to average."""
    h = -(weights * weights.clamp_min(1e-12).log()).sum(-1)  # (B, H, Nq)
    return float(h[valid.expand_as(h)].mean() if valid is not None else h.mean())


def saturation(weights: Tensor, threshold: float = 0.99, valid: Tensor | None = None) -> float:
    """Share of attention rows whose largest weight exceeds ``threshold`` (a near one-hot softmax)."""
    top = weights.amax(-1) > threshold  # (B, H, Nq)
    return float(top[valid.expand_as(top)].float().mean() if valid is not None else top.float().mean())


# --- tables in two languages ---------------------------------------------------------------------------------
def translated(rows: Sequence[dict], words: dict[str, str]) -> list[dict]:
    """``rows`` of a table with each heading, and each text cell, that ``words`` names replaced by its translation.

    A lesson builds its table once, in English, and gives the Chinese page the same rows through this: the numbers
    are the same objects, so the two tables cannot differ but in their words.
    """
    return [{words.get(key, key): words.get(value, value) if isinstance(value, str) else value
             for key, value in row.items()} for row in rows]


# --- plots -------------------------------------------------------------------------------------------------
def figure(nrows: int = 1, ncols: int = 1, width: float = 5.0, height: float = 3.6):
    """A matplotlib (Agg) figure and axes grid of ``nrows × ncols`` panels, each ``width × height`` inches."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, axes


def save(fig, path: Path) -> str:
    """Save and close ``fig``; return its file name (for ``LessonResult.figures``)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path).name


def smooth(values: Sequence[float], window: int = 10) -> list[float]:
    """Trailing moving average (for loss curves)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


__all__ = ["Seq2SeqData", "TrainLog", "TransformerConfig", "attention_maps", "batch", "bleu", "entropy", "figure",
           "greedy_translations", "noam", "save", "saturation", "sequence_loss", "small_transformer", "smooth",
           "train", "train_lm", "translated", "translation_data"]
