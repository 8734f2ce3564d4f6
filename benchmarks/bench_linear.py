"""Crossover study: softmax attention against linear attention, forward + backward, CPU, one process.

Run: ``.venv/bin/python benchmarks/bench_linear.py [--quick] [--threads N] [--rounds R] [--json PATH]``.

What is measured (float32, CPU, 8 heads, d_head 64, one forward + backward of the kernel alone on fresh
``(B, 8, N, 64)`` q, k, v, loss = sum of the output):

* ``reference``: ``core.attention.ReferenceAttention`` (softmax written out, builds the N×N weights);
* ``sdpa`` / ``sdpa-causal``: ``core.attention.ScaledDotProductAttention`` (fused, never builds them),
  without and with ``is_causal``;
* ``linear`` / ``linear-causal``: ``zoo.linear.LinearAttention`` with φ = elu + 1, non-causal and causal
  (chunked prefix sums, chunk 64).

For N = 64 … 8,192 (``--quick``: 64, 256, 1,024, 4,096) the table shows the median milliseconds per call
and, at N = 256, 1,024, 4,096, 8,192, the peak memory growth of one forward + backward at B 1, each in a
fresh subprocess per kernel and N (like ``bench_core.py``: reset ``VmHWM`` via ``/proc/self/clear_refs``,
then VmHWM − VmRSS-before; Linux only; ``--quick`` skips ``sdpa-causal``'s, which match ``sdpa``'s).
Batch: B 8, reduced where time or memory would not be sane, as the table says: B 2 at N = 8,192 (quick:
at N = 4,096), and ``reference`` keeps its N×N float32 weights under 512 MiB per matrix
(B = 512 MiB / (8·N²·4 bytes), at most 8; skipped at 0, its memory probe likewise).

Reported: the crossover length N* where ``linear`` becomes faster than ``sdpa`` (and ``linear-causal``
than ``sdpa-causal``), interpolated in log N between the measured points; the headline check at N 4,096
(``sdpa`` / ``linear`` ≥ 3, at B 8 in the full run); and how linear attention's memory grows (the log-log
slope over the three largest N: 1 = linear). ``--json PATH`` also writes these results as JSON.

Timing: every kernel of a point is called once as warm-up, then R rounds in a rotating order, each call
timed with ``time.perf_counter``; R = ``--rounds`` (default 7; quick 5), lowered to no fewer than 3 where
the rounds of one N would take over 60 s (quick: 30 s). Use ``--threads 1`` on a shared machine: a busy
CPU makes multi-threaded timings far noisier. These are measurements, not tests: nothing is asserted,
exit code 0.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from bench_core import attention_fwd_bwd, check_load, relative_iqr
from torch import Tensor

from core.attention import ReferenceAttention, ScaledDotProductAttention
from zoo.linear import LinearAttention

HEADS, D_HEAD = 8, 64
FULL_N = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
QUICK_N = (64, 256, 1024, 4096)
# Memory is probed at fewer N (below 256 the growth is within the allocator's granularity), and --quick skips
# sdpa-causal's probes (they match sdpa's): each probe is a fresh interpreter, which costs seconds to start.
MEMORY_N, QUICK_MEMORY_SKIP = (256, 1024, 4096, 8192), ("sdpa-causal",)
REFERENCE_MATRIX_BYTES = 512 * 2**20  # largest (B, 8, N, N) float32 weight matrix the reference may build
POINT_SECONDS, QUICK_POINT_SECONDS = 60.0, 30.0  # timed rounds of one N aim to fit in this (at least 3 rounds)
HEADLINE_N, HEADLINE_RATIO = 4096, 3.0
NOISY = 0.10  # relative IQR above which a timing is flagged as noisy

Kernel = Callable[[Tensor, Tensor, Tensor], Tensor]
KERNELS: dict[str, Callable[[], Kernel]] = {
    "reference": lambda: lambda q, k, v: ReferenceAttention()(q, k, v)[0],
    "sdpa": lambda: lambda q, k, v: ScaledDotProductAttention()(q, k, v)[0],
    "sdpa-causal": lambda: lambda q, k, v: ScaledDotProductAttention()(q, k, v, is_causal=True)[0],
    "linear": lambda: lambda q, k, v: LinearAttention()(q, k, v)[0],
    "linear-causal": lambda: lambda q, k, v: LinearAttention()(q, k, v, is_causal=True)[0],
}
PAIRS = {"non-causal": ("sdpa", "linear"), "causal": ("sdpa-causal", "linear-causal")}  # (softmax, linear)


@dataclass
class Point:
    """One kernel at one sequence length."""

    kernel: str
    n: int
    batch: int  # 0: skipped (too much memory)
    ms: float | None = None  # median per call
    iqr: float | None = None  # relative interquartile range of the timings
    peak_mb: float | None = None  # peak memory growth of one fwd+bwd at B 1


def reference_batch(n: int) -> int:
    """The largest batch whose (B, 8, N, N) float32 weights fit in REFERENCE_MATRIX_BYTES (0: none)."""
    return REFERENCE_MATRIX_BYTES // (HEADS * n * n * 4)


def batch_for(kernel: str, n: int, quick: bool) -> int:
    """The batch size of ``kernel`` at ``n`` (see the module docstring); 0 = skipped."""
    batch = 2 if n >= (4096 if quick else 8192) else 8
    return min(batch, reference_batch(n)) if kernel == "reference" else batch


# ----------------------------------------------------------------------------------------- timing


def fwd_bwd_step(kernel: Kernel, batch: int, n: int) -> Callable[[], None]:
    """A forward + backward of ``kernel`` on fixed random (B, 8, N, 64) inputs, gradients cleared first."""
    q, k, v = (torch.randn(batch, HEADS, n, D_HEAD, requires_grad=True) for _ in range(3))

    def step() -> None:
        for t in (q, k, v):
            t.grad = None
        kernel(q, k, v).sum().backward()

    return step


def time_group(steps: dict[str, Callable[[], None]], rounds: int, seconds: float) -> dict[str, list[float]]:
    """Milliseconds per call of every step: one warm-up each, then rounds in a rotating order (fewer rounds,
    but at least 3, where the warm-up round says that ``rounds`` would take longer than ``seconds``)."""
    names = list(steps)
    start = time.perf_counter()
    for name in names:
        steps[name]()
    rounds = max(3, min(rounds, int(seconds / (time.perf_counter() - start))))
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            steps[name]()
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


# ----------------------------------------------------------------------------------------- memory


def mem_worker(kind: str, n: int) -> None:
    """Subprocess entry: print the peak-RSS growth (bytes) of ``kind``'s fwd+bwd at B 1 as JSON."""
    torch.manual_seed(0)
    kernel = KERNELS[kind]()
    attention_fwd_bwd(kernel, 1, 64)  # warm-up: thread pools, kernel selection, allocator state
    print(json.dumps({"kind": kind, "peak_bytes": attention_fwd_bwd(kernel, 1, n)}))


def measure_peak(kind: str, n: int, threads: int | None) -> float:
    """Peak MB of ``kind`` at B 1 in a fresh subprocess."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--mem-worker", kind, "--mem-n", str(n)]
    cmd += [] if threads is None else ["--threads", str(threads)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_bytes"] / 2**20


# ------------------------------------------------------------------------------------------ analysis


def crossover(points: list[Point], softmax: str, linear: str) -> float | None:
    """N* where ``linear`` becomes faster than ``softmax``: log-linear interpolation of log(t_lin / t_soft)
    between the last N where linear is slower and the next one. ``None`` if linear never wins; the
    smallest N if it always does."""
    ms = {(p.kernel, p.n): p.ms for p in points if p.ms is not None}
    ns = sorted(n for kind, n in ms if kind == linear and (softmax, n) in ms)
    logs = [(n, math.log(ms[linear, n] / ms[softmax, n])) for n in ns]
    if not logs or logs[-1][1] >= 0:
        return None
    for (n0, r0), (n1, r1) in zip(logs, logs[1:]):
        if r0 >= 0 > r1:
            return math.exp(math.log(n0) + (math.log(n1) - math.log(n0)) * r0 / (r0 - r1))
    return float(logs[0][0])  # linear is faster everywhere measured


def memory_slope(points: list[Point], kind: str) -> float | None:
    """Least-squares slope of log(peak) against log(N) over the three largest N measured (1 = linear)."""
    xy = sorted((p.n, p.peak_mb) for p in points if p.kernel == kind and p.peak_mb and p.peak_mb > 0)[-3:]
    if len(xy) < 2:
        return None
    xs, ys = [math.log(n) for n, _ in xy], [math.log(m) for _, m in xy]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


# ------------------------------------------------------------------------------------------- driver


def run_point(n: int, args: argparse.Namespace, rounds: int) -> list[Point]:
    """Time every kernel at ``n`` (interleaved), then probe each one's memory in a subprocess."""
    points = [Point(kind, n, batch_for(kind, n, args.quick)) for kind in KERNELS]
    torch.manual_seed(0)
    steps = {p.kernel: fwd_bwd_step(KERNELS[p.kernel](), p.batch, n) for p in points if p.batch}
    timings = time_group(steps, rounds, QUICK_POINT_SECONDS if args.quick else POINT_SECONDS)
    del steps  # free the inputs before the memory probes
    for p in points:
        if p.kernel in timings:
            p.ms, p.iqr = statistics.median(timings[p.kernel]), relative_iqr(timings[p.kernel])
        skipped = (p.kernel == "reference" and not reference_batch(n)) or (args.quick and p.kernel in QUICK_MEMORY_SKIP)
        if n in MEMORY_N and not skipped:
            p.peak_mb = measure_peak(p.kernel, n, args.threads)
    return points


def print_point_rows(n: int, points: list[Point]) -> None:
    for p in points:
        ms = "skipped" if p.ms is None else f"{p.ms:10.1f}"
        iqr = "-" if p.iqr is None else f"{100 * p.iqr:.0f}%"
        mb = "-" if p.peak_mb is None else f"{p.peak_mb:9.1f}"
        print(f"{n:>6} {p.kernel:<14} {p.batch or '-':>3} {ms:>10} {iqr:>5} {mb:>10}", flush=True)


def report(points: list[Point]) -> dict:
    """Print N*, the headline check and memory growth; return them for the JSON."""
    ms = {(p.kernel, p.n): p for p in points}
    result: dict = {"crossover_n": {}, "headline": None, "memory_slope": {}}
    print()
    for label, (softmax, linear) in PAIRS.items():
        n_star = crossover(points, softmax, linear)
        result["crossover_n"][label] = n_star
        text = "not reached" if n_star is None else f"{n_star:,.0f}"
        print(f"crossover N* ({label}, {linear} faster than {softmax}): {text}")
    if ("sdpa", HEADLINE_N) in ms and ms["sdpa", HEADLINE_N].ms:
        soft, lin = ms["sdpa", HEADLINE_N], ms["linear", HEADLINE_N]
        ratio = soft.ms / lin.ms
        mark = "PASS" if ratio >= HEADLINE_RATIO else "MISS"
        print(f"headline N={HEADLINE_N} B{lin.batch}: sdpa {soft.ms:.0f} ms / linear {lin.ms:.0f} ms = {ratio:.1f}x "
              f"(target >= {HEADLINE_RATIO:.0f}x) {mark}; causal: sdpa-causal / linear-causal = "
              f"{ms['sdpa-causal', HEADLINE_N].ms / ms['linear-causal', HEADLINE_N].ms:.1f}x")
        result["headline"] = {"n": HEADLINE_N, "batch": lin.batch, "sdpa_ms": soft.ms, "linear_ms": lin.ms,
                              "ratio": ratio, "target": HEADLINE_RATIO, "pass": ratio >= HEADLINE_RATIO}
    for kind in KERNELS:
        slope = memory_slope(points, kind)
        result["memory_slope"][kind] = slope
        if slope is not None:
            print(f"peak memory of {kind:<14} grows as N^{slope:.2f} over the three largest N measured")
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N in 64, 256, 1024, 4096 (B 2 at 4096); ~2 minutes")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per point (7; 5 with --quick)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    parser.add_argument("--mem-worker", choices=sorted(KERNELS), help=argparse.SUPPRESS)
    parser.add_argument("--mem-n", type=int, default=1024, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    if args.mem_worker:
        mem_worker(args.mem_worker, args.mem_n)
        return 0
    start = time.perf_counter()
    rounds = args.rounds or (5 if args.quick else 7)
    print(f"torch {torch.__version__}, {platform.machine()} {platform.processor() or ''}, "
          f"{torch.get_num_threads()} threads (os.cpu_count {os.cpu_count()}), float32 CPU, fwd+bwd, "
          f"{HEADS} heads × d_head {D_HEAD}, 1 warm-up + up to {rounds} rounds, medians")
    print("memory: peak RSS growth of one fwd+bwd at B 1 in a fresh subprocess; reference skipped where its "
          f"N×N matrix would exceed {REFERENCE_MATRIX_BYTES // 2**20} MiB\n")
    header = f"{'N':>6} {'kernel':<14} {'B':>3} {'ms/call':>10} {'IQR':>5} {'peak MB':>10}"
    print(header + "\n" + "-" * len(header))
    points: list[Point] = []
    for n in QUICK_N if args.quick else FULL_N:
        new = run_point(n, args, rounds)
        print_point_rows(n, new)
        points += new
    result = report(points)
    check_load(torch.get_num_threads() + 1)  # + 1: this process itself
    noisy = [f"{p.kernel}@{p.n}" for p in points if p.iqr is not None and p.iqr > NOISY]
    if noisy:
        print(f"NOTE: IQR > {NOISY:.0%} (noisy timings, rerun on a quiet machine): {', '.join(noisy)}")
    elapsed = time.perf_counter() - start
    print(f"total {elapsed:.0f} s")
    if args.json is not None:
        machine = {"torch": torch.__version__, "machine": platform.machine(), "threads": torch.get_num_threads(),
                   "cpu_count": os.cpu_count(), "load_1min": os.getloadavg()[0]}
        payload = {"quick": args.quick, "machine": machine, **result, "points": [asdict(p) for p in points]}
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
