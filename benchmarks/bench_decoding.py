"""Side-by-side CPU benchmark of incremental decoding, in one process.

Run: ``.venv/bin/python benchmarks/bench_decoding.py [--quick] [--threads N] [--rounds R] [--clock wall|cpu]``.

What is measured (float32, CPU, eval mode, random weights; EOS is put out of reach, so every row decodes
exactly the number of tokens asked for; sources are B × 32 random ids):

1. **KV cache vs full recomputation** (``core.decoding``, ``use_cache=True`` vs ``False``): greedy decoding of
   128 tokens at B 4 and beam search (beam 4, B 1: the same 4 hypotheses per step) for the classic presets
   ``mini`` (d 128, 2+2 layers) and ``small`` (d 256, 3+3 layers; skipped with ``--quick``).
   Target: the cache at least 3× faster (ours/peer <= 0.33).
2. **The cache's buffer vs concatenation**: greedy decoding of 512 and 1,024 tokens at B 8 (``mini``) with
   :class:`core.decoding.KVCache` (a preallocated buffer that doubles when full: O(L) copying per decode)
   against the same cache appending by ``torch.cat`` at every step (what ``KVCache.update`` did before:
   O(L²) copying). Reported, no target.
3. **Linear attention's recurrent decoding vs softmax with the KV cache** ("Transformers are RNNs",
   Katharopoulos et al. 2020): greedy decoding of 4,096 tokens (``--quick``: 2,048) at B 8 with ``mini`` and
   ``kernel="linear"`` (each step folds the new key/value into a fixed-size state) against the same weights
   with ``kernel="sdpa"`` (each step attends every cached key). The two decode in lockstep, one position each
   in turn, and every step (``model.decode`` and the argmax) is timed; the time per token at L is the median
   step time over positions (L/2, L], for L = 256 … 4,096, then the median over 3 rounds (2 with ``--quick``).
   The least-squares exponent of time per token against L is fitted over those L: 0 = flat (RNN-like),
   > 0 = grows with the context. Target: linear's fitted time per token at the largest L within 1.25× of the
   one at 256 (an exponent of at most ~0.08 over the 16× range).

Timing: sections 1 and 2 by ``bench_core.time_pair`` (warm-up, then R rounds alternating ours/peer, the
order flipped every round); section 3 alternates the two kernels at every position (the order flipped too).
``--clock cpu`` times this process's CPU time, which other processes on a shared machine do not inflate (use
it with ``--threads 1``). Medians throughout; IQR = the larger interquartile range / median of a pair.
The full run takes ~50 minutes on a shared 2-core machine (``--quick``: ~6). These are measurements, not
tests: nothing is asserted, exit code 0.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from types import SimpleNamespace

import torch
from bench_core import CLOCKS, HEADER, Row, bench_parser, print_row, relative_iqr, summarise, time_pair, timed_row
from torch import Tensor, nn

import zoo  # noqa: F401  (registers the "linear" attention kernel)
from core.decoding import KVCache, beam_search, greedy_decode
from core.model import DecoderCache, build_transformer

SOURCE_LEN = 32
CACHE_TARGET = 1 / 3  # section 1: cached / full <= 1/3, i.e. >= 3x faster
FLAT_TARGET = 1.25  # section 3: linear's per-token time at the largest L / at 256
FLAT_L = (256, 512, 1024, 2048, 4096)


class FixedLength:
    """``model`` as :mod:`core.decoding` sees it, with EOS out of reach (every row decodes ``max_len`` tokens);
    ``cache`` is the class of the per-layer self-attention caches."""

    def __init__(self, model: nn.Module, cache: type[KVCache] = KVCache) -> None:
        c = model.config
        self.model, self.cache_class = model, cache
        self.config = SimpleNamespace(bos_id=c.bos_id, eos_id=-1, pad_id=c.pad_id)  # no id is -1

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return self.model.encode(src)

    def new_cache(self) -> DecoderCache:
        cache = self.model.new_cache()
        if self.cache_class is not KVCache:
            cache.layers = [(self.cache_class(), cross) for _, cross in cache.layers]
        return cache

    def decode(self, *args) -> Tensor:
        return self.model.decode(*args)


class ConcatKVCache(KVCache):
    """The cache as it was: every append concatenates the new keys/values to all the old ones (O(L) per step)."""

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self._concatenate(k, v)


def build(preset: str, **overrides) -> nn.Module:
    torch.manual_seed(0)
    return build_transformer(preset, **overrides).eval()


def source(batch: int, vocab: int) -> Tensor:
    return torch.randint(3, vocab, (batch, SOURCE_LEN), generator=torch.Generator().manual_seed(1))


def differing(a: Tensor, b: Tensor) -> str:
    """How many generated ids two decodes disagree on (float32 near-ties can flip one)."""
    n = int((a != b).sum()) if a.shape == b.shape else a.numel()
    return "same tokens" if n == 0 else f"{n} of {a.numel()} tokens differ"


# --------------------------------------------------------------------- 1. KV cache vs full recomputation


def bench_cache(preset: str, beam: int, warmup: int, rounds: int, clock: Callable[[], float]) -> Row:
    model = FixedLength(build(preset))
    batch, steps = (4, 128) if beam == 1 else (1, 128)
    src = source(batch, model.model.config.src_vocab)

    def run(use_cache: bool) -> Tensor:
        if beam == 1:
            return greedy_decode(model, src, max_len=steps, use_cache=use_cache)
        return beam_search(model, src, beam_size=beam, max_len=steps, use_cache=use_cache)

    same = differing(run(True), run(False))
    samples = time_pair(lambda: run(True), lambda: run(False), warmup, rounds, clock)
    how = f"greedy B{batch}" if beam == 1 else f"beam {beam} B{batch}"
    row = timed_row(f"{preset}: {how} {steps} tok, cache vs full recompute", samples, CACHE_TARGET)
    return print_row(row, f"({row.peer / row.ours:.1f}x faster, target >= 3x; {same})")


# ----------------------------------------------------------------- 2. buffer vs concatenation in the cache


def bench_buffer(steps: int, warmup: int, rounds: int, clock: Callable[[], float]) -> Row:
    base = build("mini")
    buffered, concatenating = FixedLength(base), FixedLength(base, cache=ConcatKVCache)
    src = source(8, base.config.src_vocab)
    same = differing(greedy_decode(buffered, src, max_len=steps), greedy_decode(concatenating, src, max_len=steps))
    samples = time_pair(lambda: greedy_decode(buffered, src, max_len=steps),
                        lambda: greedy_decode(concatenating, src, max_len=steps), warmup, rounds, clock)
    row = timed_row(f"mini: greedy B8 {steps} tok, KVCache buffer vs torch.cat", samples, None)
    return print_row(row, f"({row.peer / row.ours:.2f}x faster; {same})")


# ------------------------------------------------------- 3. linear attention's recurrence vs softmax + cache


def per_token(steps: list[float], length: int) -> float:
    """Median step time over positions (L/2, L] of one decode (step i produces position i + 1)."""
    return statistics.median(steps[length // 2 : length])


def exponent(lengths: list[int], times: list[float]) -> float:
    """Least-squares slope of log(time per token) against log(L): 0 = flat, 1 = linear in L."""
    xs, ys = [math.log(n) for n in lengths], [math.log(t) for t in times]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


@torch.no_grad()
def lockstep_greedy(models: dict[str, nn.Module], src: Tensor, steps: int, clock: Callable[[], float]
                    ) -> dict[str, list[float]]:
    """Greedy decoding with the cache (the steps of ``greedy_decode``) of every model at once, one position
    each in turn, the order flipped every position, so that a load change on a shared machine hits all of them
    at the same positions. Returns each model's milliseconds per step (its ``decode`` call and the argmax)."""
    names, times = list(models), {name: [] for name in models}
    state = {}
    for name, model in models.items():
        memory, src_mask = model.encode(src)
        bos = torch.full((src.shape[0], 1), model.config.bos_id, dtype=torch.long)
        state[name] = [memory, src_mask, model.new_cache(), bos]
    for i in range(steps):
        for name in names if i % 2 == 0 else names[::-1]:
            memory, src_mask, cache, last = state[name]
            start = clock()
            state[name][3] = models[name].decode(last, memory, src_mask, cache)[:, -1].argmax(-1, keepdim=True)
            times[name].append((clock() - start) * 1e3)
    return times


def bench_linear(lengths: tuple[int, ...], rounds: int, clock: Callable[[], float]) -> list[Row]:
    softmax = build("mini")
    linear = build("mini", kernel="linear")
    linear.load_state_dict(softmax.state_dict())  # the kernel has no weights: same model, other attention
    models = {"linear": linear, "softmax": softmax}
    src, longest = source(8, softmax.config.src_vocab), max(lengths)
    lockstep_greedy(models, src, lengths[0], clock)  # warm-up: allocator, thread pool
    samples: dict[str, dict[int, list[float]]] = {name: {n: [] for n in lengths} for name in models}
    for _ in range(rounds):
        for name, steps in lockstep_greedy(models, src, longest, clock).items():
            for n in lengths:
                samples[name][n].append(per_token(steps, n))
    table = {name: {n: statistics.median(v) for n, v in by_n.items()} for name, by_n in samples.items()}
    print(f"\nper-token decode step, mini B8, ms (median over positions (L/2, L], then over {rounds} rounds):")
    print(f"{'L':>6} {'linear':>9} {'softmax':>9} {'IQR':>5}")
    for n in lengths:
        spread = max(relative_iqr(samples[name][n]) for name in models) if rounds >= 2 else math.nan
        print(f"{n:>6} {table['linear'][n]:9.3f} {table['softmax'][n]:9.3f} {100 * spread:4.0f}%")
    slopes = {name: exponent(list(lengths), [table[name][n] for n in lengths]) for name in models}
    growth = {name: (longest / lengths[0]) ** slope for name, slope in slopes.items()}
    print(f"fitted exponent of time per token vs L: linear {slopes['linear']:.3f}, softmax {slopes['softmax']:.3f} "
          f"(x{growth['linear']:.2f} and x{growth['softmax']:.2f} from L {lengths[0]} to {longest})\n")
    print(HEADER + "\n" + "-" * len(HEADER))

    def fitted(name: str, target: float | None) -> Row:
        # the fit through all L, so that one noisy window does not decide the mark
        first = table[name][lengths[0]]
        label = "linear (recurrent)" if name == "linear" else "softmax + KV cache"
        return Row(f"{label}: per-token, fit at L {longest} vs {lengths[0]}", first * growth[name], first, "ms",
                   target)

    return [print_row(fitted("linear", FLAT_TARGET), f"(exponent {slopes['linear']:.3f})"),
            print_row(fitted("softmax", None), f"(exponent {slopes['softmax']:.3f})"),
            print_row(Row(f"per-token at L {longest}: linear vs softmax + KV cache", table["linear"][longest],
                          table["softmax"][longest], "ms", None))]


# ------------------------------------------------------------------------------------------- driver


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, "mini only, fewer rounds, linear up to L 2048",
                          "timed rounds per pair (5; 3 with --quick)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    rounds, warmup, clock = args.rounds or (3 if args.quick else 5), 1, CLOCKS[args.clock]
    start = time.perf_counter()
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads (os.cpu_count "
          f"{os.cpu_count()}), float32 CPU, eval, {warmup} warm-up + {rounds} rounds, medians, {args.clock} clock")
    print("EOS out of reach: every row decodes the full length; sources B x 32 random ids; ours/peer = ratio of "
          "the medians\n")
    print(HEADER + "\n" + "-" * len(HEADER))
    rows = []
    for preset in ("mini",) if args.quick else ("mini", "small"):
        rows += [bench_cache(preset, beam, warmup, rounds, clock) for beam in (1, 4)]
    rows += [bench_buffer(steps, warmup, rounds, clock) for steps in (512, 1024)]
    rows += bench_linear(FLAT_L[:-1] if args.quick else FLAT_L, 2 if args.quick else 3, clock)
    summarise(rows, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
