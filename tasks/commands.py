"""Task subcommands of the ``zoo`` command: ``zoo train TASK [--flags]``.

Each task's flags are derived from its config dataclass (see :mod:`tasks.config`).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from core.errors import unknown_name

# task name -> "module:TaskClass"; imported lazily so that `zoo --help` stays fast.
TASKS: dict[str, str] = {
    "translation": "tasks.translation.task:TranslationTask",
}


def task_class(name: str):
    if name not in TASKS:
        raise unknown_name("task", name, TASKS)
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def _cmd_train(args: argparse.Namespace) -> int:
    from tasks.config import config_from_args
    from tasks.report import summary_lines
    from tasks.trainer import NonFiniteLossError, Trainer

    cls = task_class(args.task)
    config = config_from_args(cls.config_class, args)
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


def add_task_commands(sub: argparse._SubParsersAction) -> None:
    from tasks.config import add_config_arguments

    train = sub.add_parser("train", help="train and evaluate a variant on a task")
    tasks = train.add_subparsers(dest="task", metavar="TASK", required=True)
    for name in TASKS:
        cls = task_class(name)
        p = tasks.add_parser(name, help=f"train on the {name} task")
        add_config_arguments(p, cls.config_class, skip=("task",))
        p.set_defaults(func=_cmd_train)
