"""``zoo cv TASK [train options]``: cross-validation, each fold a training run in ``OUT/fold_k``.

Offered for the tasks whose config has ``folds`` and ``fold`` fields (today: medseg); the task's
``tasks.<task>.cv.cross_validate(config, launch)`` trains the folds (as one sweep: ``--launcher``, ``--jobs``, ...)
and writes the summary.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import fields

from tasks.engine.registry import TASKS, task_class


def _cmd_cv(args: argparse.Namespace) -> int:
    from tasks.cli.sweep import launch_from_args
    from tasks.engine.config import config_from_args

    cls = task_class(args.task)
    config = config_from_args(cls.config_class, args)
    _, lines = importlib.import_module(f"tasks.{args.task}.cv").cross_validate(config, launch_from_args(args))
    print("\n".join(lines))
    return 0


def add_cv_command(sub: argparse._SubParsersAction) -> None:
    from tasks.engine.config import add_config_arguments

    cv = sub.add_parser("cv", help="cross-validation: train every fold (each in OUT/fold_k) and summarise them")
    tasks = cv.add_subparsers(dest="task", metavar="TASK", required=True)
    for name in TASKS:
        cls = task_class(name)
        if not {"folds", "fold"} <= {f.name for f in fields(cls.config_class)}:
            continue
        p = tasks.add_parser(name, help=f"cross-validate on the {name} task (the options of zoo train {name}; "
                             "--fold all by default)")
        add_config_arguments(p, cls.config_class, skip=("task",))
        from tasks.cli.sweep import add_launch_arguments

        add_launch_arguments(p)
        p.set_defaults(func=_cmd_cv)
