"""CPU benchmark of the language-model task (``zoo train lm``): training speed, generation, attention memory.

Run: ``.venv/bin/python benchmarks/bench_lm.py [--quick] [--threads N] [--rounds R] [--clock wall|cpu]
[--preset P] [--steps K] [--new-tokens T] [--mem-n N] [--mem-batch B]``.

What is measured (float32, CPU, one process; the model is the lm task's default, the ``small`` preset: nanoGPT's
``shakespeare_char`` CPU anchor, 4 layers, 4 heads, width 128, context 64, batch 12):

1. **Training tokens/s of the package against a plain loop.** *ours*: the trainer's own loop
   (``Trainer._train_epoch`` of :mod:`tasks.engine.trainer`) on :class:`tasks.lm.task.LMTask`, set up as
   ``zoo train lm`` sets it up (the task's data, model, AdamW, warm-up + cosine schedule, fp32, deterministic
   algorithms, the FLOP counter's hook, the per-step bookkeeping), fed K of the task's shuffled batches per
   timed block. *peer*: what nanoGPT's ``train.py`` does, written plainly here: ``get_batch`` of 12 random
   windows of the same training ids, forward, cross-entropy, backward, clip to norm 1, the learning rate set by
   hand, AdamW step (decay on matrices, β (0.9, 0.99)), on a second copy of the same model with the same initial
   weights. Target: ours at least 0.95 × the peer's tokens/s (ms per step ours/peer <= 1/0.95). MFU: the step's
   training FLOPs (3 × forward, ``zoo diff``'s counter, as the trainer counts them) per median second over this
   machine's measured float32 matmul peak (:mod:`tasks.engine.mfu`); both loops do the same FLOPs.
   Where the trainer's extra time goes (cProfile and separate timings, 1 thread; ~1.5–2.5 ms a step, whatever
   the model's size, so ~3 % of a ``small`` step and ~20 % of a ``tiny`` one): the generic engine, not the lm
   task — :func:`core.sidechannels.auxiliary_loss` scanning every module against runtime-checkable protocols
   (~0.5 ms), rescaling every gradient by 1 / items (~0.2 ms), and the loop's per-step bookkeeping (RNG state
   for Ctrl-C, FLOP counter, progress, stop signals: ~0.5 ms); ``LMTask.loss``'s windows cost ~0.1 ms.
2. **Generation with the KV cache against full recomputation**: :func:`core.generation.generate`, greedy, B 1,
   a 16-token prompt, 512 new tokens, ``use_cache=True`` vs ``False``, the ``small`` preset with sinusoidal
   positions (the classic base) and with RoPE (schemes with no table, so 528 positions are legal; eval mode,
   random weights). Target: the cache at least 3× faster (ours/peer <= 1/3); the two must give the same tokens.
3. **Peak memory of the fused attention path at context 2,048** (B 4 × 4 heads × 32 per head, the ``small``
   preset's attention), forward (``no_grad``, as when scoring or generating) and forward + backward (training):

   * *kernel*: :class:`core.attention.ScaledDotProductAttention` called as ``MultiHeadAttention`` calls it for
     causal self-attention (no mask, no bias, ``is_causal=True``) against raw
     ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` on the same q, k, v. Target <= 1.1.
   * *module*: :class:`core.multihead.MultiHeadAttention` (the sdpa kernel, ``is_causal=True``) on x
     ``(B, N, 128)`` against the same projections written plainly around raw SDPA (packed ``F.linear``, a
     view/permute to heads, SDPA, a reshape, the output ``F.linear``), same weights: the module's bookkeeping
     (``einops`` rearranges, mask checks) must not hold extra activations. Target <= 1.1.
   * *reference*: :class:`core.attention.ReferenceAttention` (the explicit softmax, which materialises the
     ``(B, H, N, N)`` scores and weights) against raw SDPA: for contrast, no target.

   How memory is measured, and why so: torch has no CPU allocator statistics (``torch.cuda.max_memory_allocated``
   has no CPU twin), ``tracemalloc`` does not see torch's allocations, and the profiler's ``profile_memory``
   reports per-operator allocations, not the high-water mark of everything alive at once. The process's peak
   resident set does measure that: each measurement runs in a fresh subprocess of this script, which builds its
   inputs, makes one tiny warm-up call (thread pools, kernel choice), resets the kernel's peak-RSS mark
   (``/proc/self/clear_refs``), runs once, and reports VmHWM − VmRSS-before (Linux only), as ``bench_core``
   does; the median over repeats. The workers run with glibc's ``MALLOC_MMAP_THRESHOLD_`` fixed at 64 KiB, so
   every tensor of 64 KiB or more is its own mapping, mapped when allocated and unmapped when freed, and the
   peak RSS is the peak of the bytes alive at once. Left to glibc's default, the threshold adapts to the sizes
   freed so far and freed tensors may stay in the heap to be reused or not, depending on the order of frees:
   the same MultiHeadAttention forward + backward then peaked at 36, 39 or 43 MB from one run to the next.

Timing: sections 1 and 2 by ``bench_core.time_pair`` (warm-up, then R rounds alternating ours/peer, the order
flipped every round); medians, their ratio, PASS/MISS against the target, the IQR as a noise flag; ``--clock
cpu`` times this process's CPU time (steadier on a shared machine, with ``--threads 1``). These are
measurements, not tests: nothing is asserted, exit code 0.
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
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from bench_core import (
    CLOCKS,
    HEADER,
    Row,
    bench_parser,
    print_row,
    proc_status_kb,
    step_flops,
    summarise,
    time_pair,
    timed_row,
)
from torch import Tensor, nn

from core.attention import ReferenceAttention, ScaledDotProductAttention
from core.multihead import MultiHeadAttention

if TYPE_CHECKING:  # imported where used: the memory workers need none of the task's modules
    from tasks.engine.trainer import Trainer

Step = Callable[[], None]
SPEED_TARGET = 1 / 0.95  # section 1: ms per step ours/peer, i.e. tokens/s ours >= 0.95 x peer's
CACHE_TARGET = 1 / 3  # section 2: cached / full, i.e. >= 3x faster
MEMORY_TARGET = 1.1  # section 3: peak ours / raw SDPA
PROMPT = 16
MEM_HEADS, MEM_WIDTH = 4, 128  # the small preset's attention
MMAP_THRESHOLD = 64 * 1024  # bytes: glibc maps every allocation this large on its own (see section 3's note)


# ------------------------------------------------------------------- 1. the trainer's loop vs a plain loop


def lm_trainer(preset: str, threads: int | None, out: Path) -> Trainer:
    """A :class:`~tasks.engine.trainer.Trainer` of ``zoo train lm`` (variant classic), set up as ``fit`` sets
    it up, without training: data, model, optimizer, schedule, precision, FLOP counter, session."""
    from tasks.lm.task import LMConfig, LMTask

    return prepared_trainer(LMTask, LMConfig(preset=preset, progress=False, device="cpu", num_threads=threads or 0,
                                             out=str(out)))


def prepared_trainer(task_class: type, config: Any) -> Trainer:
    """A :class:`~tasks.engine.trainer.Trainer` of ``task_class`` with ``config``, set up as ``fit`` sets it up,
    without training: data, model, optimizer, schedule, precision, FLOP counter, session."""
    from tasks.engine.budget import TrainingFlopCounter
    from tasks.engine.precision import resolve
    from tasks.engine.sessions import Session
    from tasks.engine.trainer import Trainer

    trainer = Trainer(task_class, config)
    task = trainer.task
    task.setup()
    trainer.model = task.build_model().to(trainer.device)
    trainer.optimizer = task.make_optimizer(trainer.model)
    trainer.planned_steps = math.ceil(len(task.train_batches(0)) / config.accumulate) * config.epochs
    trainer.scheduler = task.make_scheduler(trainer.optimizer, trainer.planned_steps)
    trainer.precision = resolve(config.precision, trainer.device)
    trainer.flop_counter = TrainingFlopCounter().start(trainer)
    trainer.session, trainer._session_start = Session.begin(0), time.perf_counter()
    return trainer


def trainer_block(trainer: Trainer, steps: int) -> Step:
    """``steps`` optimizer steps of the trainer's own epoch loop per call, on the task's next shuffled batches."""
    from tasks.engine.trainer import deterministic_algorithms

    task, model = trainer.task, trainer.model
    batches, state = task.train_batches(0), {"next": 0, "step": 0}

    def block() -> None:
        start = state["next"] if state["next"] + steps <= len(batches) else 0
        task.train_batches = lambda epoch: batches[start : start + steps]  # this block's slice of the epoch
        with deterministic_algorithms(trainer.config.deterministic):
            state["step"], _ = trainer._train_epoch(model, 0, 0, state["step"], None)
        state["next"] = start + steps

    return block


def plain_block(trainer: Trainer, steps: int, seed: int = 1) -> tuple[nn.Module, Step]:
    """nanoGPT's training loop on a copy of the trainer's model (same weights), its data and its optimizer
    settings; returns the copy and ``steps`` steps per call."""
    from tasks.lm.task import warmup_cosine_floor

    c, data = trainer.config, trainer.task.ids["train"]
    model = trainer.task.build_model()
    model.load_state_dict(trainer.model.state_dict())
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": c.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=c.lr, betas=(0.9, 0.99))
    get_lr = warmup_cosine_floor(c.warmup, trainer.planned_steps)
    gen = torch.Generator().manual_seed(seed)
    state = {"iter": 0}
    model.train()

    def get_batch() -> tuple[Tensor, Tensor]:
        ix = torch.randint(len(data) - c.context, (c.batch_size,), generator=gen)
        x = torch.stack([data[i : i + c.context] for i in ix.tolist()])  # (B, L)
        y = torch.stack([data[i + 1 : i + 1 + c.context] for i in ix.tolist()])  # (B, L)
        return x, y

    def block() -> None:
        for _ in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = c.lr * get_lr(state["iter"])
            x, y = get_batch()
            logits = model(x)  # (B, L, V)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), c.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            state["iter"] += 1

    return model, block


def bench_training(preset: str, steps: int, threads: int | None, warmup: int, rounds: int,
                   clock: Callable[[], float], peak: float | None) -> Row:
    """Section 1's row: ms per optimizer step of the trainer's loop and of the plain loop, tokens/s, MFU."""
    with tempfile.TemporaryDirectory() as out:
        trainer = lm_trainer(preset, threads, Path(out) / "run")
        plain, peer = plain_block(trainer, steps)
        ours = trainer_block(trainer, steps)
        c = trainer.config
        samples = time_pair(ours, peer, warmup, rounds, clock)
    x = torch.zeros(c.batch_size, c.context, dtype=torch.long)
    per_step = tuple([ms / steps for ms in times] for times in samples)
    row = timed_row(f"lm {preset} train step B{c.batch_size} L{c.context}: trainer vs plain", per_step,
                    SPEED_TARGET, step_flops(lambda: plain(x), plain))
    tokens = c.batch_size * c.context
    speed = {who: tokens / (ms / 1e3) for who, ms in (("ours", row.ours), ("peer", row.peer))}
    note = (f"({speed['ours']:.0f} vs {speed['peer']:.0f} tok/s = {speed['ours'] / speed['peer']:.3f}x, "
            "target >= 0.95x")
    if peak is not None:
        mfu = row.mfu(peak)
        note += f"; MFU ours {100 * mfu[0]:.1f} %, plain {100 * mfu[1]:.1f} %"
    return print_row(row, note + ")")


# -------------------------------------------------------------- 2. generation: KV cache vs recomputation


def bench_generation(preset: str, position: str, new_tokens: int, warmup: int, rounds: int,
                     clock: Callable[[], float]) -> Row:
    """Section 2's row for one position scheme: greedy generation with the cache vs recomputing every step."""
    from core.generation import generate
    from core.language_model import build_language_model

    torch.manual_seed(0)
    model = build_language_model(preset, vocab_size=65, position=position).eval()
    prompt = torch.randint(65, (1, PROMPT), generator=torch.Generator().manual_seed(1))  # (1, P)

    def run(use_cache: bool) -> Tensor:
        return generate(model, prompt, new_tokens, temperature=0.0, use_cache=use_cache)

    cached, full = run(True), run(False)
    n = int((cached != full).sum())
    same = "same tokens" if n == 0 else f"{n} of {cached.numel()} tokens differ"
    samples = time_pair(lambda: run(True), lambda: run(False), warmup, rounds, clock)
    row = timed_row(f"lm {preset} {position}: generate {new_tokens} tok, cache vs full", samples, CACHE_TARGET)
    return print_row(row, f"({row.peer / row.ours:.1f}x faster, target >= 3x; {same})")


# ---------------------------------------------------------------------------- 3. peak memory (subprocess)


def plain_attention(module: MultiHeadAttention, x: Tensor) -> Tensor:
    """``module``'s causal self-attention written plainly around raw SDPA: (B, N, D) -> (B, N, D)."""
    b, n, d = x.shape
    qkv = F.linear(x, module.qkv.weight, module.qkv.bias).view(b, n, 3, module.heads, d // module.heads)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, N, Dh)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, N, Dh)
    return F.linear(out.transpose(1, 2).reshape(b, n, d), module.out.weight, module.out.bias)


def kernel_call(kernel: nn.Module) -> Callable[..., Tensor]:
    """A kernel called as MultiHeadAttention calls it for causal self-attention (no mask, no bias)."""
    return lambda q, k, v: kernel(q, k, v, None, None, True)[0]


SECTIONS = ("training", "generation", "memory")
MEM_KINDS = ("sdpa", "kernel", "reference", "module", "plain")
MEM_MODES = ("forward", "train")


def memory_case(kind: str, batch: int, n: int) -> tuple[Callable[[], Tensor], list[Tensor]]:
    """The call of ``kind`` and its inputs (which require grad) at ``batch`` × ``n`` tokens."""
    if kind in ("module", "plain"):
        torch.manual_seed(0)
        module = MultiHeadAttention(MEM_WIDTH, MEM_HEADS)
        x = torch.randn(batch, n, MEM_WIDTH, requires_grad=True)
        call = (lambda: module(x, is_causal=True)) if kind == "module" else (lambda: plain_attention(module, x))
        return call, [x, *module.parameters()]
    q, k, v = (torch.randn(batch, MEM_HEADS, n, MEM_WIDTH // MEM_HEADS, requires_grad=True) for _ in range(3))
    fn = {"sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
          "kernel": kernel_call(ScaledDotProductAttention()),
          "reference": kernel_call(ReferenceAttention())}[kind]
    return (lambda: fn(q, k, v)), [q, k, v]


def peak_growth(kind: str, mode: str, batch: int, n: int) -> int:
    """Peak RSS growth (bytes) of one call of ``kind`` (``mode``: forward under no_grad, or forward + backward)."""
    call, _ = memory_case(kind, batch, n)
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS mark (VmHWM) to the current RSS
    before = proc_status_kb("VmRSS")
    if mode == "forward":
        with torch.no_grad():
            out = call()
    else:
        out = call()
        out.sum().backward()
    peak = proc_status_kb("VmHWM") - before
    del out
    return peak * 1024


def mem_worker(kind: str, mode: str, batch: int, n: int) -> None:
    """Subprocess entry: print the peak-RSS growth (bytes) of ``kind`` in ``mode`` as JSON."""
    peak_growth(kind, mode, 1, 64)  # warm-up: thread pools, kernel selection, allocator state
    print(json.dumps({"kind": kind, "mode": mode, "peak_bytes": peak_growth(kind, mode, batch, n)}))


def measure_peak(kind: str, mode: str, batch: int, n: int, threads: int | None, repeats: int) -> float:
    """Median peak MB of ``kind`` in ``mode`` over ``repeats`` fresh subprocesses."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--mem-worker", kind, "--mem-mode", mode,
           "--mem-batch", str(batch), "--mem-n", str(n)] + ([] if threads is None else ["--threads", str(threads)])
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)}
    peaks = []
    for _ in range(repeats):
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
        peaks.append(json.loads(done.stdout.strip().splitlines()[-1])["peak_bytes"] / 2**20)
    # at least one page: a call too small to grow the resident set measures 0, which no ratio can divide by
    return max(statistics.median(peaks), 4096 / 2**20)


def bench_memory(batch: int, n: int, threads: int | None, repeats: int) -> list[Row]:
    """Section 3's rows, forward and forward + backward: the sdpa kernel, the module, the explicit softmax."""
    rows = []
    shape = f"B{batch} H{MEM_HEADS} N{n} Dh{MEM_WIDTH // MEM_HEADS}"
    for mode in MEM_MODES:
        peak = {kind: measure_peak(kind, mode, batch, n, threads, repeats) for kind in MEM_KINDS}
        what = "fwd" if mode == "forward" else "fwd+bwd"
        rows += [print_row(Row(f"peak mem {what}: sdpa kernel vs raw SDPA", peak["kernel"], peak["sdpa"], "MB",
                               MEMORY_TARGET), f"(q, k, v {shape})"),
                 print_row(Row(f"peak mem {what}: MultiHeadAttention vs plain+SDPA", peak["module"], peak["plain"],
                               "MB", MEMORY_TARGET), f"(x B{batch} N{n} D{MEM_WIDTH}, {MEM_HEADS} heads)"),
                 print_row(Row(f"peak mem {what}: ReferenceAttention vs raw SDPA", peak["reference"], peak["sdpa"],
                               "MB", None), f"(materialises {batch}x{MEM_HEADS}x{n}x{n})")]
    return rows


# ------------------------------------------------------------------------------------------- driver


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, "fewer rounds, RoPE generation skipped, one memory repeat",
                          "timed rounds per pair (15 training, 5 generation; quick 7 and 3)")
    parser.add_argument("--preset", default="small", help="the lm model preset (default small: nanoGPT's anchor)")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per timed training call (10)")
    parser.add_argument("--new-tokens", type=int, default=512, help="tokens generated per call (512)")
    parser.add_argument("--mem-n", type=int, default=2048, help="context of the memory rows (2048)")
    parser.add_argument("--mem-batch", type=int, default=4, help="batch of the memory rows (4)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {', '.join(SECTIONS)}")
    parser.add_argument("--mem-worker", choices=MEM_KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--mem-mode", choices=MEM_MODES, default="train", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = [name for name in args.only.split(",") if name not in SECTIONS]
    if unknown:
        parser.error(f"--only {args.only}: unknown section(s) {', '.join(unknown)}; choose among {', '.join(SECTIONS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    if args.mem_worker:
        mem_worker(args.mem_worker, args.mem_mode, args.mem_batch, args.mem_n)
        return 0
    from tasks.engine.mfu import matmul_peak

    clock, start = CLOCKS[args.clock], time.perf_counter()
    rounds = args.rounds or (7 if args.quick else 15)
    peak = matmul_peak("cpu", "fp32")  # probed once per machine and thread count, then read from the cache
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads (os.cpu_count "
          f"{os.cpu_count()}), float32 CPU, medians, {args.clock} clock; 1-min load average {os.getloadavg()[0]:.1f}")
    print(f"MFU: 3 x forward FLOPs per median second / the fp32 matmul peak measured here, {peak / 1e9:.1f} GFLOP/s "
          "(tasks.engine.mfu, cached); memory: peak RSS growth in a fresh subprocess\n")
    print(HEADER + "\n" + "-" * len(HEADER))
    rows, only = [], args.only.split(",")
    if "training" in only:
        rows.append(bench_training(args.preset, args.steps, args.threads, 1, rounds, clock, peak))
    gen_rounds = args.rounds or (3 if args.quick else 5)
    for position in ("sinusoidal",) if args.quick else ("sinusoidal", "rope"):
        if "generation" in only:
            rows.append(bench_generation(args.preset, position, args.new_tokens, 1, gen_rounds, clock))
    if "memory" in only:
        rows += bench_memory(args.mem_batch, args.mem_n, args.threads, 1 if args.quick else 3)
    summarise(rows, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
