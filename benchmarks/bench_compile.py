"""CPU benchmark of ``--compile``: the compiled model's speed against eager, after compilation, and its cost.

Run: ``.venv/bin/python benchmarks/bench_compile.py [--quick] [--threads N] [--rounds R] [--only NAMES]
[--clock wall|cpu]``.

What is measured, for the three default models as ``zoo train`` builds them on their default data
(translation ``classic`` ``mini`` on the generated corpus, cifar ``vit`` ``cpu`` on the shipped Fashion-MNIST
subset, medseg ``missformer`` ``cpu`` on the phantom), each as :class:`tasks.engine.compiled.CompiledModel` wraps
it for ``--compile`` and as the eager module, with the same weights and each its own optimizer:

1. **training step**: ``Task.loss`` on real training batches (translation: the first ``--batches``
   length buckets in turn, so every step has other lengths), backward, the task's optimizer step;
2. **evaluation forward**: ``eval()`` and ``no_grad``, the task's evaluation batch (cifar 500 images, medseg
   32 slices); translation: the teacher-forced forward of a validation batch (its evaluation itself decodes,
   which ``--compile`` leaves eager: see :mod:`tasks.engine.compiled`).

``compile s`` is the time of the first compiled calls (one per training batch) minus eager's: what a run
pays before its first steps (training row: the training graphs, forward and backward; evaluation row: the
inference graphs).
``graphs`` counts the graphs torch.compile built for that row (graph breaks and recompilations included),
``recompiled`` those built during the timed rounds (0: no batch length triggered a recompilation).
``|Δ|`` (evaluation rows): the largest difference of the two outputs over the largest output, same weights,
float32 (training rows have none: dropout draws other masks in compiled code, so their losses differ anyway).

Timing: warm-up, then R rounds alternating eager/compiled (order flipped each round), ``perf_counter`` per
call (``--clock cpu``: the process's CPU time, steadier when other processes share the CPUs); medians and
their ratio (speed-up = eager / compiled), and the interquartile range as a noise flag.
Measurements, not tests: nothing is asserted, exit code 0.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import logging
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from bench_core import CLOCKS, bench_parser, check_load, relative_iqr, time_pair
from torch import nn
from torch._dynamo.utils import counters

from tasks.engine.compiled import CompiledModel, dynamic_shapes
from tasks.engine.distributed import DistInfo
from tasks.engine.task import Task

Step = Callable[[], None]


@dataclass
class Case:
    name: str  # the table's label
    task: Task
    train_rows: list  # batches of rows for Task.loss, used in turn
    eval_input: Callable[[], tuple]  # the evaluation forward's arguments


def translation_case(batches: int) -> Case:
    from tasks.translation.task import TranslationConfig, TranslationTask, pad_batch

    task = TranslationTask(TranslationConfig(progress=False), torch.device("cpu"), DistInfo())
    task.setup()
    tok, pairs = task.tokenizer, task.splits[task.valid_split][:64]

    def eval_input() -> tuple:
        src = pad_batch([tok.encode(s) + [tok.eos_id] for s, _ in pairs], tok.pad_id, task.device)
        tgt = pad_batch([[tok.bos_id] + tok.encode(t) for _, t in pairs], tok.pad_id, task.device)
        return src, tgt

    return Case("translation classic mini", task, task.train_batches(0)[:batches], eval_input)


def cifar_case() -> Case:
    from tasks.cifar.task import CifarConfig, CifarTask

    task = CifarTask(CifarConfig(progress=False), torch.device("cpu"), DistInfo())
    task.setup()
    images = task.images["test"][: task.config.eval_batch_size]
    return Case("cifar vit cpu", task, task.train_batches(0)[:1], lambda: (task.inputs(images),))


def medseg_case() -> Case:
    from tasks.medseg.task import MedsegConfig, MedsegTask

    task = MedsegTask(MedsegConfig(progress=False), torch.device("cpu"), DistInfo())
    task.setup()
    slices = task.evaluator.zoomed(task.volumes["test"][0])[: task.config.eval_batch_size]
    return Case("medseg missformer cpu", task, task.train_batches(0)[:1], lambda: (slices,))


def graph_count() -> int:
    return counters["stats"]["unique_graphs"]


def training_step(task: Task, called: nn.Module, plain: nn.Module, batches: list) -> Step:
    """One optimizer step per call on the next of ``batches``, through ``called`` (eager or compiled)."""
    optimizer = task.make_optimizer(plain)
    turn = itertools.cycle(batches)

    def step() -> None:
        loss, items = task.loss(called, next(turn))
        (loss / items).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def eval_forward(called: nn.Module, inputs: tuple) -> Step:
    def step() -> None:
        with torch.no_grad():
            called(*inputs)

    return step


def output_difference(eager: nn.Module, compiled: nn.Module, inputs: tuple) -> float:
    """Largest difference of the two evaluation outputs relative to the largest eager output (same weights)."""
    with torch.no_grad():
        want, got = eager(*inputs).float(), compiled(*inputs).float()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


def first_calls(step: Step, calls: int) -> tuple[float, int]:
    """Seconds of ``step``'s first ``calls`` calls and the graphs torch.compile built in them."""
    graphs, tic = graph_count(), time.perf_counter()
    for _ in range(calls):
        step()
    return time.perf_counter() - tic, graph_count() - graphs


def bench_case(case: Case, warmup: int, rounds: int, clock: Callable[[], float]) -> list[dict]:
    task = case.task
    torch.manual_seed(0)
    eager = task.build_model().train()
    plain = copy.deepcopy(eager)
    compiled = CompiledModel(plain, dynamic_shapes(task.name), case.name)
    rows = []
    for what in ("training step", "evaluation forward"):
        if what == "training step":
            steps = [training_step(task, m, p, case.train_rows) for m, p in ((eager, eager), (compiled, plain))]
        else:
            eager.eval(), plain.eval()
            plain.load_state_dict(eager.state_dict())  # training moved the two copies apart by rounding
            inputs = case.eval_input()
            steps = [eval_forward(m, inputs) for m in (eager, compiled)]
        # every training batch once, both ways: the lengths a run meets (the timed rounds then show any
        # recompilation), and both cycles of batches stay in step
        calls = len(case.train_rows) if what == "training step" else 1
        eager_s, _ = first_calls(steps[0], calls)
        compile_s, graphs = first_calls(steps[1], calls)
        compile_s -= eager_s
        before = graph_count()
        eager_ms, compiled_ms = time_pair(steps[0], steps[1], warmup, rounds, clock)
        diff = output_difference(eager, compiled, inputs) if what == "evaluation forward" else None
        rows.append({"model": case.name, "what": what, "eager": statistics.median(eager_ms),
                     "compiled": statistics.median(compiled_ms), "compile_s": compile_s, "graphs": graphs,
                     "recompiled": graph_count() - before, "diff": diff,
                     "iqr": max(relative_iqr(eager_ms), relative_iqr(compiled_ms)),
                     "fallback": compiled.fallback_reason})
        print_row(rows[-1])
    return rows


HEADER = (f"{'model':<26} {'what':<19} {'eager ms':>9} {'compiled':>9} {'speed-up':>8} {'compile s':>9} "
          f"{'graphs':>6} {'recompiled':>10} {'|Δ|':>8} {'IQR':>5}")


def print_row(row: dict) -> None:
    diff = f"{row['diff']:.1e}" if row["diff"] is not None else "-"
    print(f"{row['model']:<26} {row['what']:<19} {row['eager']:>9.1f} {row['compiled']:>9.1f} "
          f"{row['eager'] / row['compiled']:>7.2f}x {row['compile_s']:>9.1f} {row['graphs']:>6} "
          f"{row['recompiled']:>10} {diff:>8} {row['iqr']:>5.0%}", flush=True)
    if row["fallback"]:
        print(f"  (compilation failed, eager fallback: {row['fallback']})")


CASES = {"translation": translation_case, "cifar": cifar_case, "medseg": medseg_case}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, "fewer rounds and translation batches",
                          "timed rounds per row (default 16, quick 8)")
    parser.add_argument("--batches", type=int, default=None, help="translation training batches (default 8, quick 4)")
    parser.add_argument("--only", default=",".join(CASES), help=f"comma-separated cases of {', '.join(CASES)}")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"--only {','.join(unknown)}: unknown case; choose from {', '.join(CASES)}")
    warnings.filterwarnings("ignore", category=UserWarning)
    logging.getLogger("torch").setLevel(logging.ERROR)  # graph-break notices: the graphs column counts them
    rounds, warmup = args.rounds or (8 if args.quick else 16), 1
    batches = args.batches or (4 if args.quick else 8)
    start = time.perf_counter()
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads (os.cpu_count "
          f"{os.cpu_count()}), {warmup} warm-up + {rounds} rounds, medians, {args.clock} clock; "
          "speed-up = eager / compiled\n")
    print(HEADER + "\n" + "-" * len(HEADER))
    for name in names:
        case = CASES[name](batches) if name == "translation" else CASES[name]()
        bench_case(case, warmup, rounds, CLOCKS[args.clock])
    check_load(torch.get_num_threads() + 1)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
