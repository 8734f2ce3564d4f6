"""The ``zoo study`` subcommand: is a change general or task-specific? (:mod:`tasks.study.study`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _cmd_study(args: argparse.Namespace) -> int:
    from tasks.cli.sweep import launch_from_args
    from tasks.engine.config import parse_assignments
    from tasks.study.study import run_study

    out = Path(args.out or f"runs/study-{'-'.join(_names(args.changes))}")
    results = run_study(_names(args.changes), _names(args.tasks), out, _names(args.presets), args.datasets,
                        args.data, args.seeds, args.budget, args.tune, launch_from_args(args),
                        parse_assignments(args.set), parse_assignments(args.model_set), _names(args.proposed or ""),
                        args.method, args.alpha, command=shlex.join(["zoo", *sys.argv[1:]]))
    verdicts = results["report"].split("## Verdicts", 1)[1].split("\n## ", 1)[0].strip()
    print(verdicts)
    print(f"\nwritten to {out}/ (report.md, results.json, forest-*.png)")
    return 0


def add_study_command(sub: argparse._SubParsersAction) -> None:
    from tasks.cli.sweep import add_launch_arguments

    p = sub.add_parser("study", help="is a change general or task-specific? train it across tasks, datasets and "
                                     "presets against a noise floor; pooled effect and measured scope",
                       description="For every cell (task x dataset x preset) train the task's base with and without "
                                   "each change (same seeds, same budget) and the base again with other seeds (the "
                                   "noise floor); pair them with the task's paired test; pool the cells' standardised "
                                   "effects by a random-effects meta-analysis and call the change general, "
                                   "task-specific, of no effect or inconclusive (the rule is in the report). Run "
                                   "again, it reuses finished runs. `zoo changes` lists the changes.")
    p.add_argument("changes", help="comma-separated names from `zoo changes`, e.g. pre-ln,rmsnorm,swiglu,rope")
    p.add_argument("--tasks", default="translation,lm,cifar", help="comma-separated (default translation,lm,cifar)")
    p.add_argument("--presets", default="tiny",
                   help="comma-separated scales (default tiny): tiny (32 wide), small (128 wide: translation mini, lm "
                        "small, ViT cpu) or a model's own preset")
    p.add_argument("--datasets", default="first", choices=("first", "embedded", "none"),
                   help="embedded data per task: first (default: one), embedded (two: a second difficulty or size), "
                        "none (only --data)")
    p.add_argument("--data", action="append", default=None, metavar="TASK=PATH",
                   help="also a user's dataset for TASK (repeatable): a translation folder, a text corpus, a CIFAR "
                        "or Fashion-MNIST folder")
    p.add_argument("--seeds", type=int, default=3, help="seeds a side per cell (default 3; at least 2)")
    p.add_argument("--budget", default=None, metavar="KIND=VALUE",
                   help="every run's budget: epochs=N, time=SECONDS or flops=X (default: each task's study default: "
                        "translation epochs=3, lm epochs=1, cifar epochs=5)")
    p.add_argument("--tune", default=None, metavar="lr=A,B,C",
                   help="also give each side its own learning rate per cell, chosen on the validation split from "
                        "these; the report shows the verdict at the shared rate and at the tuned ones")
    p.add_argument("--proposed", default=None, metavar="TASK[,TASK]",
                   help="the tasks the changes were proposed on (the task-specific rule reads them; default: the "
                        "tasks where the change is significant)")
    p.add_argument("--method", default="dl", choices=("dl", "pm"),
                   help="the between-cell variance: DerSimonian-Laird (default) or Paule-Mandel")
    p.add_argument("--alpha", type=float, default=0.05, help="level of every test and interval (default 0.05)")
    p.add_argument("--set", action="append", default=None, metavar="KEY=VALUE",
                   help="a task config field of every run (repeatable), e.g. --set num_threads=1")
    p.add_argument("--model-set", action="append", default=None, metavar="KEY=VALUE",
                   help="a model config field of every run's base (repeatable), e.g. --model-set dropout=0.1")
    p.add_argument("--out", default=None, help="the study's folder (default runs/study-CHANGES)")
    add_launch_arguments(p)
    p.set_defaults(func=_cmd_study)
