"""Task subcommands of the ``zoo`` command: ``zoo train TASK [--flags]``.

Each task's flags are derived from its config dataclass (see :mod:`tasks.config`).
"""

from __future__ import annotations

import argparse
import sys

from tasks.registry import TASKS, task_class


def _cmd_train(args: argparse.Namespace) -> int:
    from tasks.config import config_from_args
    from tasks.report import summary_lines
    from tasks.trainer import NonFiniteLossError, Trainer

    cls = task_class(args.task)
    config = config_from_args(cls.config_class, args)
    config.check_paths()  # an --out or --data that is a file fails here, not after the data has loaded
    trainer = Trainer(cls, config)
    try:
        summary = trainer.fit()
    except KeyboardInterrupt:
        print(f"\ninterrupted; resume with: zoo train {args.task} --out {config.out_dir} --resume", file=sys.stderr)
        return 130
    except NonFiniteLossError as error:
        print(f"zoo train: {error}", file=sys.stderr)
        return 1
    if trainer.main:
        print("\n".join(summary_lines(summary)))
        print(f"outputs in {config.out_dir}/ (report.md, metrics.json, curves.png, checkpoints/)")
    return 0


def _budget(args: argparse.Namespace, cls) -> dict:
    from tasks.config import parse_assignments

    config = parse_assignments(args.set, cls.config_class)
    config.update(progress=not args.quiet, epochs=args.epochs, model=parse_assignments(args.model_set))
    return config


def _cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tasks.compare import compare

    cls = task_class(args.task)
    variants = [v.strip() for v in args.variants.split(",")] if args.variants else None
    out = Path(args.out or f"runs/compare-{args.task}")
    rows = compare(args.task, variants, out, args.seeds, **_budget(args, cls))
    from tasks.report import markdown_table

    print(markdown_table(rows))
    print(f"\nwritten to {out}/ (report.md, results.json, metric_vs_cost.png)")
    return 0


def _cmd_ablate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tasks.compare import ablate
    from tasks.report import markdown_table

    cls = task_class(args.task)
    out = Path(args.out or f"runs/ablate-{args.variant}-{args.task}")
    rows = ablate(args.variant, args.task, out, args.seeds, **_budget(args, cls))
    print(markdown_table(rows))
    print(f"\nwritten to {out}/ (report.md, results.json, metric_vs_cost.png)")
    return 0


def _budget_arguments(p: argparse.ArgumentParser, default_epochs: int, out: str) -> None:
    p.add_argument("--epochs", type=int, default=default_epochs, help="epochs for every run (the same budget)")
    p.add_argument("--seeds", type=int, default=1, help="seeds per variant (mean ± spread)")
    p.add_argument("--out", default=None, help=f"output folder (default: {out})")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="task config field for every run")
    p.add_argument("--model-set", action="append", metavar="KEY=VALUE", help="variant config field for every run")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def add_task_commands(sub: argparse._SubParsersAction) -> None:
    from tasks.config import add_config_arguments

    train = sub.add_parser("train", help="train and evaluate a variant on a task")
    tasks = train.add_subparsers(dest="task", metavar="TASK", required=True)
    for name in TASKS:
        cls = task_class(name)
        p = tasks.add_parser(name, help=f"train on the {name} task")
        add_config_arguments(p, cls.config_class, skip=("task",))
        p.set_defaults(func=_cmd_train)

    p = sub.add_parser("compare", help="train several variants with the same budget; one table and a plot")
    p.add_argument("task", choices=sorted(TASKS), help="the task every variant is trained on")
    p.add_argument("--variants", default=None, help="comma-separated (default: every variant of the task)")
    _budget_arguments(p, default_epochs=2, out="runs/compare-TASK")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("ablate", help="leave-one-out: revert each change of a variant alone, same budget")
    p.add_argument("variant", help="the variant whose declared changes are reverted one at a time")
    p.add_argument("--task", required=True, choices=sorted(TASKS), help="the task it is trained on")
    _budget_arguments(p, default_epochs=2, out="runs/ablate-VARIANT-TASK")
    p.set_defaults(func=_cmd_ablate)
