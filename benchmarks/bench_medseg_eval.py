"""Side-by-side CPU benchmark of the medseg evaluation: both conventions in one pass vs one pass per convention.

Run: ``.venv/bin/python benchmarks/bench_medseg_eval.py [--quick] [--threads N] [--rounds R] [--clock wall|cpu]``.

What is measured, on the default run's test set (the 12 phantom test cases of ``zoo train medseg`` with no
``--data``, written to ``$ZOO_CACHE`` on first use; the phantom's HDF5 files give each case its spacing):

* ours: ``tasks.medseg.evaluation.metrics.case_scores_per_convention`` (what ``MedsegTask.case_record`` calls): each
  organ's masks, Dice and surfaces once, distances in voxels once and in mm once more only where the spacing
  is known, distance transforms evaluated at the surface voxels only;
* peer: ``case_scores`` once per convention (what ``case_record`` ran before): the whole computation twice.

Rows (the numbers of the two paths are equal bit for bit: ``tests/tasks/medseg/test_medseg_eval_once.py``):

1. the whole evaluation, ``MedsegTask.evaluate(model, "test")`` (slice-wise prediction, zoom back, scores,
   voxel counts), with an untrained model of the default variant (MISSFormer ``cpu`` preset, seed 0); the peer
   is the same call with ``case_record`` scoring per convention;
2. scoring alone, on the same untrained model's predictions (noisy labels everywhere: every organ's box is
   the whole volume, the worst case for the distance transforms), spacing known (the default run) and
   spacing unknown (as in the Synapse npz files, whose HD95 in mm then repeats the papers' in voxels);
3. scoring alone, on predictions shaped like a trained model's: each reference shifted by one row and one
   column (every organ present, boundary errors of a voxel or two), spacing known and unknown.

``--quick`` leaves out row 2 (row 1 contains it). Timing by ``bench_core.time_pair``: one warm-up, then R
rounds (3; 2 with ``--quick``) alternating ours/peer, the order flipped every round; ``--clock cpu`` times this
process's CPU time (use it with ``--threads 1`` on a shared machine). No target: the issue asks for the
evaluation time before and after. These are measurements, not tests: nothing is asserted, exit code 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import torch
from bench_core import CLOCKS, HEADER, Row, bench_parser, print_row, summarise, time_pair, timed_row

import tasks.medseg.evaluation.evaluator as medseg_task
from tasks.engine.distributed import DistInfo
from tasks.medseg.evaluation.metrics import (
    CONVENTIONS,
    case_scores,
    case_scores_per_convention,
    normalised_surface_dice,
)
from tasks.medseg.reading.volume import Volume
from tasks.medseg.task import MedsegConfig, MedsegTask


def per_convention(pred: np.ndarray, gt: np.ndarray, num_classes: int, spacing, nsd_tolerance=None) -> dict:
    """The evaluation as it was: :func:`case_scores` once per convention; the NSD, when asked, organ by organ."""
    scores = {convention: case_scores(pred, gt, num_classes, convention, spacing) for convention in CONVENTIONS}
    if nsd_tolerance is not None:  # the same NSD as ours, so that the pair still differs in the HD95 work only
        scores["mm"] = {k: (*v, normalised_surface_dice(pred == k, gt == k, nsd_tolerance, spacing))
                        for k, v in scores["mm"].items()}
    return scores


@contextmanager
def scoring_per_convention():
    """``MedsegTask.case_record`` scoring per convention, as before ``case_scores_per_convention``."""
    fast = medseg_task.case_scores_per_convention
    medseg_task.case_scores_per_convention = per_convention
    try:
        yield
    finally:
        medseg_task.case_scores_per_convention = fast


def scoring(volumes: list[Volume], preds: list[np.ndarray], num_classes: int,
            score: Callable[..., dict]) -> Callable[[], None]:
    return lambda: [score(p, v.label, num_classes, v.spacing) for v, p in zip(volumes, preds)]


def bench_evaluate(task: MedsegTask, model: torch.nn.Module, warmup: int, rounds: int,
                   clock: Callable[[], float]) -> Row:
    def before() -> None:
        with scoring_per_convention():
            task.evaluate(model, "test")

    samples = time_pair(lambda: task.evaluate(model, "test"), before, warmup, rounds, clock)
    n = len(task.volumes["test"])
    row = timed_row(f"evaluate {n} test cases (predict + score), untrained", samples, None)
    return print_row(row, f"({row.peer / row.ours:.2f}x faster; {row.ours / n:.0f} vs {row.peer / n:.0f} ms/case)")


def bench_scoring(name: str, volumes: list[Volume], preds: list[np.ndarray], num_classes: int, warmup: int,
                  rounds: int, clock: Callable[[], float]) -> Row:
    samples = time_pair(scoring(volumes, preds, num_classes, case_scores_per_convention),
                        scoring(volumes, preds, num_classes, per_convention), warmup, rounds, clock)
    row = timed_row(f"score {len(volumes)} cases: {name}", samples, None)
    return print_row(row, f"({row.peer / row.ours:.2f}x faster)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, "fewer rounds, without the scoring rows of row 2",
                          "timed rounds per pair (3; 2 with --quick)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    logging.getLogger("tasks").setLevel(logging.WARNING)
    rounds, warmup, clock = args.rounds or (2 if args.quick else 3), 1, CLOCKS[args.clock]
    start = time.perf_counter()
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads (os.cpu_count "
          f"{os.cpu_count()}), {warmup} warm-up + {rounds} rounds, medians, {args.clock} clock")
    task = MedsegTask(MedsegConfig(progress=False, num_threads=torch.get_num_threads()), torch.device("cpu"),
                      DistInfo())
    task.setup()  # the default phantom, as `zoo train medseg` reads it
    test, k = task.volumes["test"], task.num_classes
    torch.manual_seed(0)
    model = task.build_model().eval()
    print(f"default run's test set: {len(test)} phantom cases of {test[0].image.shape} ... voxels, spacing "
          f"{test[0].spacing} ... mm; ours = one pass for both conventions, peer = one pass per convention\n")
    print(HEADER + "\n" + "-" * len(HEADER))
    rows = [bench_evaluate(task, model, warmup, rounds, clock)]
    untrained = [task.evaluator.predict_volume(model, v) for v in test]
    shifted = [np.roll(v.label, (1, 1), axis=(1, 2)) for v in test]
    no_spacing = [replace(v, spacing=None) for v in test]
    cases = [] if args.quick else [("untrained", untrained)]
    for name, preds in [*cases, ("ref. shifted 1 vx", shifted)]:
        rows.append(bench_scoring(f"{name}, spacing known", test, preds, k, warmup, rounds, clock))
        rows.append(bench_scoring(f"{name}, no spacing", no_spacing, preds, k, warmup, rounds, clock))
    summarise(rows, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
