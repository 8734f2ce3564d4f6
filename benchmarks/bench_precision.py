"""Training step in float32 vs bfloat16 on the CPU, in one process: where the casts go and what they cost.

Run: ``.venv/bin/python benchmarks/bench_precision.py [--presets mini,small,base] [--rounds R] [--threads N]
[--profile]``.

What is measured: one training step (forward, fp32 cross-entropy, backward, Adam step) of the classic
translation model at each preset, built exactly as ``zoo train translation --preset P`` builds it, on a batch
of the default (generated) corpus: the epoch-0 batch whose source length is the median of the epoch's
batches. Three arms on the same model and optimizer:

* ``fp32``: no autocast (``--precision fp32``);
* ``autocast``: plain ``torch.autocast("cpu", torch.bfloat16)``, what bf16 on the CPU would be without
  this package's policy (weights cast at each use, layer norm, residual sums and embeddings in float32);
* ``bf16``: ``--precision bf16`` (:mod:`tasks.engine.precision`): a bfloat16 copy of the weights per forward,
  the activations bfloat16 from the embedding to the logits, the loss float32, master weights float32.

Timing: two warm-up steps per arm, then R rounds in which the arms take turns (the order rotates each
round); the table shows the median ms, the interquartile range relative to the median, and fp32 / arm.
Targets for ``bf16``: >= 1.5x at ``base``, >= 1.3x at ``small`` (``mini`` is reported, no target).
``--profile`` also runs one step of each bf16 arm under ``torch.profiler`` and reports the casts: calls of
``aten::_to_copy`` (every dtype conversion, forward and backward) and their share of the step's CPU time.
These are measurements, not tests: nothing is asserted, exit code 0. On a shared machine use ``--threads 1``:
two threads descheduled in turn spin in OpenMP barriers and the step times lose all meaning.

Measured (2026-12-01, AMX CPU of the 2-core shared machine, 1 thread, heavily loaded: IQR 4-75 %; batch 64
pairs of 7/7 tokens, word vocabulary 204), fp32 / arm for autocast and bf16 in three sessions:
mini 1.07 / 1.02 (7 rounds); small 1.41 / 1.31 (7), 1.37 / 1.43 (7); base 1.42 / 1.68 (7), 1.58 / 1.46 (7),
1.68 / 1.78 (15 rounds, IQR 12-15 %). Casts per step (``--profile``): mini 139 -> 127, of which autocast's
46 activation casts -> 0, 3.9 % -> 0.2 % of the step's CPU time; small 205 -> 187, 6.4 % -> 5.1 %; base
403 -> 367, 8.8 % -> 8.0 %. What remains is one cast per weight in the forward and one per gradient in the
backward (float32 master weights): at base they are most of the cast time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from bench_core import relative_iqr
from torch import nn

from tasks.engine.distributed import DistInfo
from tasks.engine.precision import Precision, native_bf16
from tasks.translation.task import TranslationConfig, TranslationTask

CPU = torch.device("cpu")
TARGETS = {"base": 1.5, "small": 1.3}
ARMS = ("fp32", "autocast", "bf16")


def contexts(model: nn.Module) -> dict[str, Callable[[], AbstractContextManager]]:
    """The forward context of each arm."""
    ours = Precision("bf16", "bf16", "benchmark")
    return {"fp32": nullcontext, "autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
            "bf16": lambda: ours.context(model, CPU)}


def setup(preset: str) -> tuple[TranslationTask, nn.Module, torch.optim.Optimizer, list[int]]:
    task = TranslationTask(TranslationConfig(preset=preset, progress=False), CPU, DistInfo())
    task.setup()
    model = task.build_model().train()
    batches = task.train_batches(0)
    by_length = sorted(batches, key=lambda rows: max(len(task.train_src[i]) for i in rows))
    return task, model, task.make_optimizer(model), by_length[len(by_length) // 2]


def make_step(task: TranslationTask, model: nn.Module, optimizer: torch.optim.Optimizer, rows: list[int],
              context: Callable[[], AbstractContextManager]) -> Callable[[], None]:
    def step() -> None:
        with context():
            loss, _ = task.loss(model, rows)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def time_arms(steps: dict[str, Callable[[], None]], rounds: int) -> dict[str, list[float]]:
    for step in steps.values():
        step()
        step()
    names = list(steps)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            tic = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - tic)
    return times


def cast_profile(step: Callable[[], None]) -> tuple[int, float, float]:
    """(tensor casts, their CPU ms, the step's CPU ms) in one profiled step.

    A cast is a call of ``aten::_to_copy`` on a tensor with at least one dimension: the optimizer's scalar
    step counters go through ``_to_copy`` too, in every arm, and are left out.
    """
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    events = prof.events()
    casts = [e for e in events if e.name == "aten::_to_copy" and e.input_shapes and e.input_shapes[0]]
    total = sum(e.self_cpu_time_total for e in events) / 1e3
    return len(casts), sum(e.cpu_time_total for e in casts) / 1e3, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="mini,small,base")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--profile", action="store_true", help="count the casts under torch.profiler")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    native, why = native_bf16(CPU)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, native bf16: {native} ({why})")
    rows = []
    for preset in args.presets.split(","):
        task, model, optimizer, batch = setup(preset)
        shape = (len(batch), max(len(task.train_src[i]) for i in batch) + 1,
                 max(len(task.train_tgt[i]) for i in batch) + 1)
        steps = {name: make_step(task, model, optimizer, batch, ctx) for name, ctx in contexts(model).items()}
        times = time_arms(steps, args.rounds)
        med = {name: (statistics.median(values), relative_iqr(values)) for name, values in times.items()}
        fp32 = med["fp32"][0]
        for name in ARMS:
            ms, iqr = med[name]
            ratio = fp32 / ms
            target = TARGETS.get(preset) if name == "bf16" else None
            verdict = "" if target is None else ("PASS" if ratio >= target else f"FAIL (target {target}x)")
            rows.append(f"| {preset} | {shape[0]}x{shape[1]}/{shape[2]} | {name} | {ms * 1e3:.1f} | {iqr:.0%} | "
                        f"{ratio:.2f}x | {verdict} |")
        if args.profile:
            for name in ("autocast", "bf16"):
                calls, ms, total = cast_profile(steps[name])
                rows.append(f"| {preset} | | {name}: casts (aten::_to_copy) | {calls} calls, {ms:.1f} ms | "
                            f"{ms / total:.1%} of the step's CPU time | | |")
        print(f"{preset}: done", flush=True)
    print("\n| preset | batch BxS/T | arm | median ms | IQR | fp32 / arm | target |\n|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
