"""``zoo lab LESSON [--quick]`` and ``zoo lab --list``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tasks.lab.lesson import LESSONS, LabSettings, get_lesson, run_lesson


def add_lab_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lab", help="the classic pitfalls as runnable, measured experiments",
                       description="Run a lesson: the right choice against the classic mistake, same seed and "
                                   "budget, measured on our own models. `zoo lab --list` lists the lessons.")
    p.add_argument("lesson", nargs="?", help=f"one of: {', '.join(LESSONS)}, or 'all'")
    p.add_argument("--list", action="store_true", help="list the lessons and exit")
    p.add_argument("--quick", action="store_true", help="reduced budgets: each lesson in about 3 minutes on 2 cores")
    p.add_argument("--out", default=None, help="output folder (default: runs/lab/LESSON)")
    p.add_argument("--seed", type=int, default=0, help="seed of every run in the lesson (default: 0)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: the lessons' small models run fastest on one thread, and "
                        "several threads slow them down badly on a busy machine)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_lab)


def _cmd_lab(args: argparse.Namespace) -> int:
    if args.list or args.lesson is None:
        width = max(len(name) for name in LESSONS)
        for lesson in LESSONS.values():
            print(f"{lesson.name:<{width}}  [{lesson.part}] {lesson.title}: {lesson.question}")
        if not args.list:
            print("\nrun one with: zoo lab LESSON [--quick]", file=sys.stderr)
        return 0
    names = list(LESSONS) if args.lesson == "all" else [args.lesson]
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    import torch

    torch.set_num_threads(args.threads)
    for name in names:
        lesson = get_lesson(name)  # unknown names fail here, before any work
        out = Path(args.out) / name if args.out and len(names) > 1 else Path(args.out or f"runs/lab/{name}")
        print(f"lesson {name}: {lesson.title}{' (quick)' if args.quick else ''}", file=sys.stderr)
        result = run_lesson(name, LabSettings(out=out, quick=args.quick, seed=args.seed, progress=not args.quiet))
        print(f"\n{lesson.title}\n  {result.verdict[0]}\n  {result.verdict[1]}")
        if not result.holds:
            print("  (the expected direction did not hold in this run; see lesson.md)")
        print(f"  written to {out}/lesson.md" + (f" with {', '.join(result.figures)}" if result.figures else ""))
    return 0
