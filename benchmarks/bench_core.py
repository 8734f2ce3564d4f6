"""Side-by-side CPU benchmark of the core parts against their PyTorch peers, in one process.

Run: ``.venv/bin/python benchmarks/bench_core.py [--quick] [--threads N] [--rounds R]``.

What is measured (float32, CPU, train mode, identical weights copied from the peer into ours):

1. Multi-head self-attention, forward + backward, B 8 × N 256, d 512, 8 heads:
   ``core.multihead.MultiHeadAttention`` vs ``nn.MultiheadAttention(batch_first=True)`` called as
   ``mha(x, x, x, need_weights=False)``. Target ours/peer <= 1.05.
2. Encoder–decoder training step (forward + backward), batch 16 × 64 source and 64 target tokens:
   (a) d 256, 4 heads, 3+3 layers, d_ff 1024; (b) d 512, 8 heads, 6+6 layers, d_ff 2048 (skipped with
   ``--quick``). Target ours/peer <= 1.05.

   * *stack*: ``model.encoder`` + ``model.decoder`` vs ``nn.Transformer`` on the same embedded float
     inputs, dropout 0.1 everywhere (ours gets ``attention_dropout=0.1`` too, as ``nn.Transformer``
     drops attention weights), a causal decoder (ours ``is_causal=True``; torch the float
     ``generate_square_subsequent_mask`` with ``tgt_is_causal=True``) and no padding masks. Our
     Post-LN stacks have no final LayerNorm, so the peer's ``encoder.norm``/``decoder.norm`` are
     replaced by ``nn.Identity()``: both do exactly the same work.
   * *model*: ``Transformer(src_ids, tgt_ids)`` with its shared √d-scaled embedding, sinusoids,
     embedding dropout, padding masks and tied generator (vocab 8000), then cross-entropy; vs the
     same embedding/sinusoids/dropout/tied head wrapped around ``nn.Transformer``, given the same
     padding masks (``*_key_padding_mask``) and the causal mask.
3. Peak memory of attention forward + backward at N 2048 (B 1, 8 heads, d_head 64): our
   ``ScaledDotProductAttention`` kernel vs ``F.scaled_dot_product_attention`` called directly
   (target ours/SDPA <= 1.2), and our ``ReferenceAttention`` (builds the N×N matrix) for contrast.
   Each measurement runs in a fresh subprocess of this script: after a tiny warm-up call it resets
   the peak-RSS mark (``/proc/self/clear_refs``), runs once, and reports VmHWM − VmRSS-before
   (Linux only). ``core.model`` is imported lazily so that these subprocesses start fast.

Timing: warm-up iterations, then R rounds alternating ours/peer (the order flips every round), each
call timed with ``time.perf_counter``; the table shows median ms and the ratio of the medians, with
PASS/MISS against the target. These are measurements, not tests: nothing is asserted, exit code 0.

MFU (rows 1 and 2): the step's training FLOPs over its median time, as a share of this machine's float32
matmul peak at the same thread count (:mod:`tasks.engine.mfu`: a cached GEMM probe). The FLOPs follow the
trainer's convention (:mod:`tasks.engine.budget`: 3 × the forward FLOPs counted by ``zoo diff``'s counter), counted
on our module; the peer is credited with the same FLOPs, since it does the same arithmetic on the same
weights (the eval max|diff| column shows it) and torch's fused attention fast path is invisible to the
counter.
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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.attention import ReferenceAttention, ScaledDotProductAttention
from core.multihead import MultiHeadAttention
from core.position import sinusoid_table

if TYPE_CHECKING:  # core.model is imported where used: it pulls in torchvision (~4 s), which the
    from core.model import Transformer  # memory subprocesses do not need

Step = Callable[[], None]
VOCAB, PAD = 8000, 0
NOISY = 0.10  # relative IQR above which a timing is flagged as noisy
STACKS = {
    "a": dict(d_model=256, heads=4, layers=3, d_ff=1024),
    "b": dict(d_model=512, heads=8, layers=6, d_ff=2048),
}


@dataclass
class Row:
    """One line of the results table."""

    name: str
    ours: float
    peer: float
    unit: str
    target: float | None
    spread: float | None = None  # the larger relative interquartile range of the two sample sets
    flops: float | None = None  # training FLOPs of one timed call, where counted (gives the row an MFU)

    def mfu(self, peak: float) -> tuple[float, float]:
        """(ours, peer): the FLOP/s of one call (``flops`` over the median ms) as a share of ``peak`` FLOP/s."""
        return tuple(self.flops / (ms / 1e3) / peak for ms in (self.ours, self.peer))

    @property
    def ratio(self) -> float:
        return self.ours / self.peer

    def line(self) -> str:
        target = "-" if self.target is None else f"<={self.target:.2f}"
        mark = "info" if self.target is None else ("PASS" if self.ratio <= self.target else "MISS")
        ours, peer = f"{self.ours:9.1f} {self.unit}", f"{self.peer:9.1f} {self.unit}"
        spread = "-" if self.spread is None else f"{100 * self.spread:.0f}%"
        return f"{self.name:<52} {ours:>12} {peer:>12} {self.ratio:>9.3f} {target:>7} {mark:>5} {spread:>5}"


HEADER = f"{'benchmark':<52} {'ours':>12} {'peer':>12} {'ours/peer':>9} {'target':>7} {'mark':>5} {'IQR':>5}"


# ----------------------------------------------------------------------------------------- timing


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}  # cpu: this process's CPU time, robust when shared


def bench_parser(doc: str, quick: str, rounds: str, clock: bool = True) -> argparse.ArgumentParser:
    """The flags every benchmark script shares (``--quick``, ``--threads``, ``--rounds`` and, with ``clock``,
    ``--clock``), described by ``doc``'s first line; ``quick`` and ``rounds`` are the script's own help texts."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--rounds", type=int, default=None, help=rounds)
    if clock:
        parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                            help="wall: perf_counter (default); cpu: process CPU time, robust on a shared machine")
    return parser


def time_pair(ours: Step, peer: Step, warmup: int, rounds: int, clock: Callable[[], float] = time.perf_counter
              ) -> tuple[list[float], list[float]]:
    """Milliseconds per call of ``ours`` and ``peer`` on ``clock``, run alternately (order flipped every round)."""
    for _ in range(warmup):
        ours()
        peer()
    times: tuple[list[float], list[float]] = ([], [])
    steps = (ours, peer)
    for r in range(rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            start = clock()
            steps[i]()
            times[i].append((clock() - start) * 1e3)
    return times


def relative_iqr(samples: list[float]) -> float:
    """Interquartile range over median: how noisy one set of timings is (0 for a single timing)."""
    if len(samples) < 2:
        return 0.0
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return (q3 - q1) / median


def timed_row(name: str, samples: tuple[list[float], list[float]], target: float, flops: float | None = None) -> Row:
    """A table row from the timings of ours and the peer: medians, their ratio, the noise."""
    ours, peer = samples
    spread = max(relative_iqr(ours), relative_iqr(peer))
    return Row(name, statistics.median(ours), statistics.median(peer), "ms", target, spread, flops)


class _Forward(nn.Module):
    """A forward closure as a module over the modules it runs, for the FLOP counter (which takes a module)."""

    def __init__(self, forward: Callable[[], Tensor], modules: tuple[nn.Module, ...]) -> None:
        super().__init__()
        self.run, self.parts = forward, nn.ModuleList(modules)

    def forward(self) -> Tensor:
        return self.run()


def step_flops(forward: Callable[[], Tensor], *modules: nn.Module) -> float:
    """Training FLOPs of a forward + backward of ``forward``, which runs ``modules`` (left in train mode)."""
    from tasks.engine.budget import BACKWARD_FACTOR
    from zoo.analysis.delta import module_flops

    wrapper = _Forward(forward, modules)
    try:
        return float(BACKWARD_FACTOR * module_flops(wrapper, ())[1])
    finally:
        wrapper.train()


def summarise(rows: list[Row], start: float) -> None:
    """The closing lines of every benchmark script: load warning, noisy rows, targets missed, total time."""
    check_load(torch.get_num_threads() + 1)  # + 1: this process itself, which just left the CPUs
    noisy = [row.name for row in rows if row.spread is not None and row.spread > NOISY]
    if noisy:
        print(f"NOTE: IQR > {NOISY:.0%} (noisy timings, rerun on a quiet machine): {'; '.join(noisy)}")
    misses = [row.name for row in rows if row.target is not None and row.ratio > row.target]
    listed = ": " + "; ".join(misses) if misses else ""
    targets = sum(row.target is not None for row in rows)
    print(f"\n{len(misses)} of {targets} targets missed{listed}; total {time.perf_counter() - start:.0f} s")


def train_step(loss_fn: Callable[[], Tensor], module: nn.Module, inputs: tuple[Tensor, ...] = ()) -> Step:
    """A step that clears the gradients of ``module`` and ``inputs``, then runs forward + backward."""
    params = [p for p in module.parameters() if p.requires_grad] + [t for t in inputs if t.requires_grad]

    def step() -> None:
        for p in params:
            p.grad = None
        loss_fn().backward()

    return step


# ---------------------------------------------------------------------------------- weight copying


def copy_affine(dst: nn.Module, src: nn.Module) -> None:
    """Copy ``weight`` and ``bias`` of a Linear or LayerNorm."""
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


@torch.no_grad()
def copy_attention(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    """Our packed ``qkv``/``out`` are ``in_proj_*``/``out_proj`` of ``nn.MultiheadAttention``."""
    ours.qkv.weight.copy_(ref.in_proj_weight)
    ours.qkv.bias.copy_(ref.in_proj_bias)
    copy_affine(ours.out, ref.out_proj)


def ffn_and_norms(o: nn.Module, r: nn.Module) -> list[tuple[nn.Module, nn.Module]]:
    """(ours, peer) pairs of the FFN linears and the LayerNorms of one layer."""
    pairs = [(o.ffn.fc1, r.linear1), (o.ffn.fc2, r.linear2)]
    return pairs + [(getattr(o, n), getattr(r, n)) for n in ("norm1", "norm2", "norm3") if hasattr(r, n)]


@torch.no_grad()
def copy_stack(ours: Transformer, ref: nn.Transformer) -> None:
    """Copy every weight of ``ref``'s encoder and decoder layers into ours."""
    for o, r in zip(ours.encoder.layers, ref.encoder.layers):
        copy_attention(o.self_attn, r.self_attn)
        for dst, src in ffn_and_norms(o, r):
            copy_affine(dst, src)
    for o, r in zip(ours.decoder.layers, ref.decoder.layers):
        copy_attention(o.self_attn, r.self_attn)
        copy_attention(o.cross_attn, r.multihead_attn)
        for dst, src in ffn_and_norms(o, r):
            copy_affine(dst, src)


# ------------------------------------------------------------------------------ 1. multi-head attention


def bench_mha(warmup: int, rounds: int) -> tuple[Row, float]:
    """Self-attention fwd+bwd; returns the row and the eval-mode max |ours - peer|."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(512, 8, batch_first=True)
    ours = MultiHeadAttention(512, 8)
    copy_attention(ours, ref)
    x = torch.randn(8, 256, 512, requires_grad=True)
    diff = (ours(x) - ref(x, x, x, need_weights=False)[0]).abs().max().item()
    step_ours = train_step(lambda: ours(x).sum(), ours, (x,))
    step_peer = train_step(lambda: ref(x, x, x, need_weights=False)[0].sum(), ref, (x,))
    samples = time_pair(step_ours, step_peer, warmup, rounds)
    return timed_row("mha fwd+bwd B8 N256 d512 h8", samples, 1.05, step_flops(lambda: ours(x), ours)), diff


# ------------------------------------------------------------------------- 2. encoder–decoder stacks


def build_pair(d_model: int, heads: int, layers: int, d_ff: int) -> tuple[Transformer, nn.Transformer]:
    """Our Post-LN Transformer and an ``nn.Transformer`` of the same size, same stack weights."""
    from core.model import Transformer, TransformerConfig

    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab=VOCAB,
        d_model=d_model,
        heads=heads,
        encoder_layers=layers,
        decoder_layers=layers,
        d_ff=d_ff,
        dropout=0.1,
        attention_dropout=0.1,
        pad_id=PAD,
    )
    ours = Transformer(config)
    ref = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout=0.1, batch_first=True)
    ref.encoder.norm, ref.decoder.norm = nn.Identity(), nn.Identity()  # ours (Post-LN) has none
    copy_stack(ours, ref)
    return ours, ref


def stack_losses(
    ours: Transformer, ref: nn.Transformer, src: Tensor, tgt: Tensor
) -> tuple[Callable[[], Tensor], Callable[[], Tensor]]:
    """Loss closures of the two stacks on the same embedded inputs, causal decoder, no padding."""
    causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])

    def ours_out() -> Tensor:
        return ours.decoder(tgt, ours.encoder(src, None), None, None, True)

    def ref_out() -> Tensor:
        return ref(src, tgt, tgt_mask=causal, tgt_is_causal=True)

    return ours_out, ref_out


def bench_stack(key: str, warmup: int, rounds: int) -> tuple[Row, float]:
    """Encoder + decoder stack fwd+bwd; returns the row and the eval-mode max |ours - peer|."""
    size = STACKS[key]
    ours, ref = build_pair(**size)
    src, tgt = torch.randn(16, 64, size["d_model"]), torch.randn(16, 64, size["d_model"])
    ours_out, ref_out = stack_losses(ours, ref, src, tgt)
    diff = eval_diff(ours, ref, ours_out, ref_out)
    steps = train_step(lambda: ours_out().mean(), ours), train_step(lambda: ref_out().mean(), ref)
    name = f"stack ({key}) fwd+bwd d{size['d_model']} {size['layers']}+{size['layers']}L 16x64"
    return timed_row(name, time_pair(*steps, warmup, rounds), 1.05, step_flops(ours_out, ours)), diff


def eval_diff(ours: nn.Module, ref: nn.Module, ours_out: Callable[[], Tensor], ref_out: Callable[[], Tensor]) -> float:
    """Max |ours - peer| with dropout off (checks that both really do the same math)."""
    ours.eval()
    ref.eval()
    with torch.no_grad():
        diff = (ours_out() - ref_out()).abs().max().item()
    ours.train()
    ref.train()
    return diff


class PeerSeq2Seq(nn.Module):
    """``nn.Transformer`` wrapped like ours: shared √d-scaled embedding + sinusoids + dropout, tied head."""

    def __init__(self, ours: Transformer, ref: nn.Transformer) -> None:
        super().__init__()
        c = ours.config
        self.embed = nn.Embedding(c.src_vocab, c.d_model, padding_idx=c.pad_id)
        with torch.no_grad():
            self.embed.weight.copy_(ours.src_embed.weight)
        self.register_buffer("pe", sinusoid_table(c.max_len, c.d_model))
        self.scale, self.pad_id = math.sqrt(c.d_model), c.pad_id
        self.dropout = nn.Dropout(c.dropout)
        self.core = ref
        self.head = nn.Linear(c.d_model, c.tgt_vocab, bias=False)
        self.head.weight = self.embed.weight

    def embed_ids(self, ids: Tensor) -> Tensor:
        return self.dropout(self.embed(ids) * self.scale + self.pe[: ids.shape[1]])

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        src_pad, tgt_pad = src == self.pad_id, tgt == self.pad_id  # torch: True = blocked
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        out = self.core(
            self.embed_ids(src),
            self.embed_ids(tgt),
            tgt_mask=causal,
            tgt_is_causal=True,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        return self.head(out)


def bench_model(key: str, warmup: int, rounds: int) -> tuple[Row, float]:
    """Full model (embeddings, masks, tied head, cross-entropy) fwd+bwd; row and eval-mode max diff."""
    size = STACKS[key]
    ours, ref = build_pair(**size)
    peer = PeerSeq2Seq(ours, ref)
    src, tgt, labels = (torch.randint(3, VOCAB, (16, 64)) for _ in range(3))
    diff = eval_diff(ours, peer, lambda: ours(src, tgt), lambda: peer(src, tgt))

    def loss(model: nn.Module) -> Callable[[], Tensor]:
        return lambda: F.cross_entropy(model(src, tgt).flatten(0, 1), labels.flatten())

    samples = time_pair(train_step(loss(ours), ours), train_step(loss(peer), peer), warmup, rounds)
    name = f"model ({key}) fwd+bwd+CE V{VOCAB} d{size['d_model']} 16x64"
    return timed_row(name, samples, 1.05, step_flops(lambda: ours(src, tgt), ours)), diff


# ------------------------------------------------------------------------------------- 3. peak memory

MEM_KERNELS: dict[str, Callable[[], Callable[[Tensor, Tensor, Tensor], Tensor]]] = {
    "sdpa": lambda: F.scaled_dot_product_attention,
    "ours": lambda: lambda q, k, v: ScaledDotProductAttention()(q, k, v)[0],
    "reference": lambda: lambda q, k, v: ReferenceAttention()(q, k, v)[0],
}


def proc_status_kb(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def attention_fwd_bwd(kernel: Callable[[Tensor, Tensor, Tensor], Tensor], batch: int, n: int) -> int:
    """Peak RSS growth (bytes) of one forward + backward of ``kernel`` on fresh (B, 8, N, 64) q, k, v."""
    q, k, v = (torch.randn(batch, 8, n, 64, requires_grad=True) for _ in range(3))
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS mark (VmHWM) to the current RSS
    before = proc_status_kb("VmRSS")
    kernel(q, k, v).sum().backward()
    return (proc_status_kb("VmHWM") - before) * 1024


def mem_worker(kind: str, batch: int, n: int) -> None:
    """Subprocess entry: print the peak-RSS growth (bytes) of ``kind``'s forward + backward as JSON."""
    torch.manual_seed(0)
    kernel = MEM_KERNELS[kind]()
    attention_fwd_bwd(kernel, 1, 64)  # warm-up: thread pools, kernel selection, allocator state
    print(json.dumps({"kind": kind, "peak_bytes": attention_fwd_bwd(kernel, batch, n)}))


def measure_peak(kind: str, batch: int, n: int, threads: int | None, repeats: int) -> float:
    """Median peak MB of ``kind`` over ``repeats`` fresh subprocesses."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--mem-worker", kind, "--mem-batch", str(batch)]
    cmd += ["--mem-n", str(n)] + ([] if threads is None else ["--threads", str(threads)])
    peaks = []
    for _ in range(repeats):
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        peaks.append(json.loads(done.stdout.strip().splitlines()[-1])["peak_bytes"] / 2**20)
    return statistics.median(peaks)


def bench_memory(batch: int, n: int, threads: int | None, repeats: int) -> list[Row]:
    """Peak-memory rows: our SDPA kernel and ReferenceAttention, each against direct SDPA."""
    peak = {kind: measure_peak(kind, batch, n, threads, repeats) for kind in ("sdpa", "ours", "reference")}
    shape = f"B{batch} h8 N{n} dh64"
    return [
        Row(f"peak mem fwd+bwd ours SDPA kernel {shape}", peak["ours"], peak["sdpa"], "MB", 1.2),
        Row(f"peak mem fwd+bwd ReferenceAttention {shape}", peak["reference"], peak["sdpa"], "MB", None),
    ]


# ------------------------------------------------------------------------------------------- driver


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, "fewer rounds, skip the 6+6-layer d512 case",
                          "timed rounds per pair (15; 7 with --quick)", clock=False)
    parser.add_argument("--mem-worker", choices=sorted(MEM_KERNELS), help=argparse.SUPPRESS)
    parser.add_argument("--mem-batch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--mem-n", type=int, default=2048, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def print_row(row: Row, note: str = "") -> Row:
    print(row.line() + (f"   {note}" if note else ""), flush=True)
    return row


def print_preamble(warmup: int, rounds: int, peak: float) -> None:
    print(
        f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads "
        f"(os.cpu_count {os.cpu_count()}), float32 CPU, {warmup} warm-up + {rounds} rounds, medians"
    )
    print(f"MFU: training FLOPs (3 x forward, zoo diff's counter, ours; the peer credited the same) per median "
          f"second / the fp32 matmul peak measured here, {peak / 1e9:.1f} GFLOP/s (tasks.engine.mfu, cached)")
    print(
        "stacks: peer = nn.Transformer with encoder.norm/decoder.norm = Identity (ours Post-LN has none);"
        " dropout 0.1 incl. attention weights"
    )
    print("IQR: the larger interquartile range / median of the two timings (noise); memory: peak RSS growth\n")
    print(HEADER + "\n" + "-" * len(HEADER))


def run_all(args: argparse.Namespace) -> list[Row]:
    """Run every benchmark, printing each row as soon as it is measured."""
    from tasks.engine.mfu import matmul_peak

    rounds = args.rounds or (7 if args.quick else 15)
    warmup = 2 if args.quick else 3
    peak = matmul_peak("cpu", "fp32")  # probed once per machine and thread count, then read from the cache
    print_preamble(warmup, rounds, peak)
    rows = [print_row(*_with_diff(bench_mha(warmup, rounds), peak))]
    for key in ("a",) if args.quick else ("a", "b"):
        rows.append(print_row(*_with_diff(bench_stack(key, warmup, rounds), peak)))
        rows.append(print_row(*_with_diff(bench_model(key, warmup, rounds), peak)))
    rows += [print_row(row) for row in bench_memory(1, 2048, args.threads, 1 if args.quick else 3)]
    return rows


def check_load(threads: int) -> None:
    """Warn when other processes compete for the CPUs: then every timing is noisy, whoever is measured."""
    load = os.getloadavg()[0]
    if load > threads + 0.5:
        print(f"WARNING: 1-min load average {load:.1f} > {threads} threads: other processes share the CPUs")


def _with_diff(result: tuple[Row, float], peak: float) -> tuple[Row, str]:
    row, diff = result
    ours, peer = row.mfu(peak)
    return row, f"(eval max|diff| {diff:.1e}; MFU ours {100 * ours:.1f} %, peer {100 * peer:.1f} %)"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    if args.mem_worker:
        mem_worker(args.mem_worker, args.mem_batch, args.mem_n)
        return 0
    start = time.perf_counter()
    rows = run_all(args)
    summarise(rows, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
