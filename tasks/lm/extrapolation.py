"""Length extrapolation measured as the reference does: perplexity at evaluation lengths past the training length.

Press et al. (2022, "Train Short, Test Long", §2 and appendix B) train at one context length L_train and report
perplexity as the evaluation length L grows, in two protocols:

* **non-overlapping**: the corpus is cut into windows of L tokens, each run alone; a token is scored with the
  context of its own window's earlier tokens only (0 to L - 1 of them, L/2 on average);
* **sliding window** with stride S <= L: windows of L tokens advanced by S; the first window scores all its
  tokens, each later one only its last S, so every token is scored exactly once with at least L - S tokens of
  context (S = 1: every token gets the full L - 1). This is also Hugging Face's "perplexity of fixed-length
  models" recipe; S = L is the non-overlapping protocol.

Conventions (the same for both protocols, since the non-overlapping one is the sliding one at S = L):

* a window of L tokens is what the model runs on, so each forward pass is exactly L tokens long (the length
  being measured); window position j is predicted from positions < j, so position 0 of a window is never
  scored there, and the corpus's first token is never scored at all;
* the last window is aligned to end at the corpus's last token (instead of a shorter final window) and scores only
  the tokens no earlier window scored; so a tail shorter than S is scored, with more context, not dropped;
* at S = L the first token of each window after the first has no context inside its window and is not scored
  (as in the reference's non-overlapping evaluation).

A model that cannot run at L (a learned position table shorter than L) is reported "not defined" at L, found by
reading its position modules up front: never a silent wrap or truncation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.position import PositionalScheme
from plumbing.errors import check_int
from tasks.compare.stats import t_interval
from tasks.engine.progress import progress_bar

PROTOCOLS = ("non_overlapping", "sliding")
MULTIPLES = (1, 2, 4, 8)  # the reference's lengths, as multiples of the training length


def windows(n_tokens: int, length: int, stride: int) -> tuple[Tensor, Tensor]:
    """Where the windows of ``length`` tokens start, and the first position each scores.

    Returns ``(starts, first_scored)``, each ``(W,)`` long: window ``i`` is ``tokens[starts[i]:starts[i] + length]``
    and scores its positions ``first_scored[i] .. length - 1`` (position ``j`` predicted from positions ``< j``).
    """
    starts = list(range(0, n_tokens - length + 1, stride))
    if starts[-1] + length < n_tokens:  # a tail: one last window ending at the corpus's end
        starts.append(n_tokens - length)
    first = [1] + [max(1, previous + length - start) for previous, start in zip(starts, starts[1:], strict=False)]
    return torch.tensor(starts), torch.tensor(first)


def position_limit(model: nn.Module) -> int | None:
    """The longest sequence ``model``'s position modules can take (a learned table's ``max_len``), or None when
    every scheme extends to any length (sinusoidal, RoPE, ALiBi, T5's buckets, none)."""
    limits = [m.max_len for m in model.modules() if isinstance(m, PositionalScheme) and hasattr(m, "max_len")]
    return min(limits, default=None)


@torch.no_grad()
def token_nll(model: nn.Module, tokens: Tensor, length: int, stride: int | None = None, batch_size: int = 16,
              progress: bool = False) -> Tensor:
    """The negative log-likelihood (nats) of each token of ``tokens`` under ``model``, scored by windows of
    ``length`` tokens advanced by ``stride`` (default ``length``: non-overlapping; see the module docstring).

    The windows are stacked into ``(batch_size, length)`` batches: no Python loop over tokens. The model is put in
    eval mode for the call and given back in the mode it had.

    Shape:
        tokens ``(N,)`` -> ``(N,)`` float64, NaN at the tokens no window scores (the first one; at stride =
        length, the first token of each window after the first).
    """
    check_protocol(tokens, [length], stride, batch_size, None)
    stride = length if stride is None else stride
    starts, first = windows(len(tokens), length, stride)
    device = next(model.parameters()).device
    tokens = tokens.to(device)
    offsets = torch.arange(length, device=device)
    out = torch.full((len(tokens),), math.nan, dtype=torch.float64, device=device)
    was_training = model.training
    model.eval()
    try:
        batches = torch.arange(len(starts)).split(batch_size)
        for index in progress_bar(batches, desc=f"perplexity at length {length}", unit="batch",
                                  disable=not progress):
            positions = starts[index].to(device)[:, None] + offsets  # (B, L)
            ids = tokens[positions]  # (B, L)
            scored = offsets[None, 1:] >= first[index].to(device)[:, None]  # (B, L - 1): position j predicted at j-1
            logits = model(ids)[:, :-1][scored]  # (T, V): only the scored predictions reach the log-softmax
            if logits.dtype not in (torch.float32, torch.float64):  # half precision: the log-softmax in float32
                logits = logits.float()
            out[positions[:, 1:][scored]] = F.cross_entropy(logits, ids[:, 1:][scored], reduction="none").double()
    finally:
        model.train(was_training)
    return out.cpu()


def scores(nll: Tensor, n_tokens: int, n_chars: int | None, stride: int, n_windows: int) -> dict[str, Any]:
    """Mean NLL, perplexity, bits per token and per character of the scored (non-NaN) entries of ``nll``.

    Bits per character divide the total NLL in bits by the characters the scored tokens cover, estimated as
    ``n_chars`` times the scored fraction of the ``n_tokens`` tokens (a character model: bits per token).
    """
    scored = nll[~nll.isnan()]
    total, count = float(scored.sum()), len(scored)
    mean = total / count
    return {
        "stride": stride, "windows": n_windows, "tokens": count, "nll": mean, "perplexity": math.exp(mean),
        "bits_per_token": mean / math.log(2),
        "bits_per_char": None if n_chars is None else total / math.log(2) / (n_chars * count / n_tokens),
    }


def check_protocol(tokens: Tensor, lengths: Sequence[int], stride: int | None, batch_size: int,
                   n_chars: int | None) -> None:
    """Raise a ValueError/TypeError naming the value and the fix for an input the protocol cannot measure."""
    if not isinstance(tokens, Tensor) or tokens.dim() != 1 or tokens.is_floating_point():
        shown = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise TypeError(f"tokens must be a 1-D LongTensor (the corpus as token ids), got {shown}; "
                        "flatten the corpus with tokens.flatten() or encode it first")
    if not lengths:
        raise ValueError("lengths is empty: give the evaluation lengths, e.g. --lengths 64,128,256")
    for length in lengths:
        check_int("each evaluation length", length, 2, hint="a window of one token scores nothing")
        if length > len(tokens):
            raise ValueError(f"evaluation length {length} is longer than the corpus ({len(tokens)} tokens); "
                             f"evaluate on a longer split or drop {length} from --lengths")
    if stride is not None:
        check_int("stride", stride, 1, min(lengths),
                  hint=f"a window advances by at most its length, the shortest being {min(lengths)}; "
                       "lower --stride or drop the shorter lengths")
    check_int("batch_size", batch_size, 1)
    if n_chars is not None:
        check_int("n_chars", n_chars, 1, hint="the characters of the evaluated text, for bits per character")


def perplexity_at_lengths(model: nn.Module, tokens: Tensor, lengths: Sequence[int], stride: int | None = None,
                          batch_size: int = 16, n_chars: int | None = None,
                          progress: bool = False) -> list[dict[str, Any]]:
    """Perplexity of ``model`` on ``tokens`` at each evaluation length, non-overlapping and (given ``stride``)
    with a sliding window: the extrapolation protocol of Press et al. (see the module docstring).

    Args:
        model: a causal language model, ``ids (B, L) -> logits (B, L, V)``.
        tokens: the evaluated text as token ids, ``(N,)``; ``N`` >= every length.
        lengths: the evaluation lengths L (ints >= 2), in the order the rows come back.
        stride: the sliding window's stride S, 1 <= S <= min(lengths); None measures non-overlapping windows only.
        batch_size: windows per forward pass.
        n_chars: the characters ``tokens`` encode, for bits per character (None: not reported).
        progress: a progress bar per length.

    Returns:
        One dict per length: ``length``, ``defined`` (False when the model cannot run at L, with a ``reason`` and
        the longest length it can run at, ``limit``),
        ``non_overlapping`` and ``sliding`` (None when not measured), each the dict of :func:`scores`: ``stride``,
        ``windows``, ``tokens`` (scored), ``nll`` (mean, nats), ``perplexity``, ``bits_per_token``,
        ``bits_per_char`` (None without ``n_chars``).
    """
    check_protocol(tokens, lengths, stride, batch_size, n_chars)
    limit = position_limit(model)
    rows = []
    for length in lengths:
        if limit is not None and length > limit:
            rows.append({"length": length, "defined": False, "non_overlapping": None, "sliding": None, "limit": limit,
                         "reason": f"not defined past {limit}: the learned position table has {limit} positions "
                                   f"(build it with max_len >= {length}, or use a scheme that extrapolates)"})
            continue
        row: dict[str, Any] = {"length": length, "defined": True}
        for protocol, step in zip(PROTOCOLS, (length, stride), strict=True):
            if step is None:
                row[protocol] = None
                continue
            nll = token_nll(model, tokens, length, step, batch_size, progress)
            row[protocol] = scores(nll, len(tokens), n_chars, step, len(windows(len(tokens), length, step)[0]))
        rows.append(row)
    return rows


def headline(row: dict[str, Any]) -> dict[str, Any] | None:
    """The scores a row is judged by: the sliding window's when measured (the reference's protocol), else the
    non-overlapping ones; None when the length is not defined for the model."""
    if not row["defined"]:
        return None
    return row["sliding"] or row["non_overlapping"]


def measure_run(path: str | Path, lengths: Sequence[int], stride: int | None = None, batch_size: int = 16,
                split: str = "valid", train_length: int | None = None) -> list[dict[str, Any]]:
    """:func:`perplexity_at_lengths` of a finished ``zoo train lm`` run folder on its own ``split``; a run trained
    at another context than ``train_length`` (when given) is refused before anything is measured."""
    from tasks.runs.run import load_run

    run = load_run(path, task="lm")
    context = run.task.config.context
    if train_length is not None and context != train_length:
        raise ValueError(f"run {path} was trained at context {context}, not train_length={train_length}; "
                         f"compare runs trained at one length, or pass train_length={context}")
    run.task.setup()  # reads the run's corpus and encodes it with the run's own tokenizer
    if split not in run.task.ids:
        raise ValueError(f"split {split!r} is not one of the run's splits {sorted(run.task.ids)}; pick one of them")
    return perplexity_at_lengths(run.model, run.task.ids[split], lengths, stride, batch_size,
                                 n_chars=len(run.task.texts[split]))


Seed = Sequence[dict[str, Any]] | tuple[nn.Module, Tensor] | str | Path


def compare_schemes(runs: Mapping[str, Sequence[Seed]], train_length: int, multiples: Sequence[int] = MULTIPLES,
                    stride: int | None = None, batch_size: int = 16, confidence: float = 0.95,
                    split: str = "valid") -> list[dict[str, Any]]:
    """Perplexity at each multiple of the training length, per scheme, as a mean over seeds with a Student-t
    interval (:func:`tasks.compare.stats.t_interval`): the README's extrapolation table and the lesson's.

    Args:
        runs: for each scheme (or run) name, one entry per seed: the rows :func:`perplexity_at_lengths`
            returned for it, a ``(model, tokens)`` pair, or a ``zoo train lm`` run folder (measured on its
            ``split``; refused when it was trained at another context than ``train_length``).
        train_length: the length the models were trained at; the table's lengths are its ``multiples``.
        stride: the sliding window's stride for what is measured here (None: non-overlapping).
        confidence: the interval's level.

    Returns:
        One dict per (scheme, length): ``scheme``, ``length``, ``multiple``, ``seeds``, ``mean`` (None when the
        length is not defined for the scheme), ``interval`` (``(low, high)``, or None with one seed) and ``note``
        (``"1 seed, no interval"``, ``"not defined past N"``, or ``""``).
    """
    check_int("train_length", train_length, 2)
    lengths = [train_length * m for m in multiples]
    table = []
    for name, seeds in runs.items():
        if not seeds:
            raise ValueError(f"scheme {name!r} has no runs; give at least one seed's rows or (model, tokens)")
        measured = [measure(seed, lengths, train_length, stride, batch_size, split) for seed in seeds]
        for multiple, length in zip(multiples, lengths, strict=True):
            found = [[row for row in rows if row["length"] == length] for rows in measured]
            if not all(found):
                raise ValueError(f"scheme {name!r} was not measured at length {length} ({multiple}x the training "
                                 f"length {train_length}); evaluate it with --lengths {','.join(map(str, lengths))}")
            best = [headline(rows[0]) for rows in found]
            entry = {"scheme": name, "length": length, "multiple": multiple, "seeds": len(seeds),
                     "mean": None, "interval": None, "note": ""}
            if any(score is None for score in best):
                entry["note"] = f"not defined past {min(rows[0]['limit'] for rows in found if not rows[0]['defined'])}"
            else:
                entry["mean"], entry["interval"] = t_interval([s["perplexity"] for s in best], confidence)
                entry["note"] = "1 seed, no interval" if len(seeds) == 1 else ""
            table.append(entry)
    return table


def measure(seed: Seed, lengths: Sequence[int], train_length: int, stride: int | None, batch_size: int,
            split: str) -> Sequence[dict[str, Any]]:
    """One seed's rows for :func:`compare_schemes`: given, measured on a ``(model, tokens)`` pair, or on a run."""
    if isinstance(seed, (str, Path)):
        return measure_run(seed, lengths, stride, batch_size, split, train_length)
    if isinstance(seed, tuple):
        return perplexity_at_lengths(*seed, lengths, stride, batch_size)
    return seed
