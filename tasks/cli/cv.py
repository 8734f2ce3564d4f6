"""``zoo cv TASK [train options]``: cross-validation, each fold a training run in ``OUT/fold_k``.

Offered for the tasks whose runner overrides :meth:`Task.cross_validate <tasks.engine.task.Task.cross_validate>`
(today: medseg), which trains the folds (as one sweep: ``--launcher``, ``--jobs``, ...) and writes the summary.
"""

from __future__ import annotations

import argparse

from tasks.engine.registry import task_class, tasks_with


def _cmd_cv(args: argparse.Namespace) -> int:
    from tasks.cli.sweep import launch_from_args
    from tasks.engine.config import config_from_args

    cls = task_class(args.task)
    config = config_from_args(cls.config_class, args)
    _, lines = cls.cross_validate(config, launch_from_args(args))
    print("\n".join(lines))
    return 0


def add_cv_command(sub: argparse._SubParsersAction) -> None:
    from tasks.engine.config import add_config_arguments

    cv = sub.add_parser("cv", help="cross-validation: train every fold (each in OUT/fold_k) and summarise them")
    tasks = cv.add_subparsers(dest="task", metavar="TASK", required=True)
    for name in tasks_with("cross_validate"):
        cls = task_class(name)
        p = tasks.add_parser(name, help=f"cross-validate on the {name} task (the options of zoo train {name}; "
                             "--fold all by default)")
        add_config_arguments(p, cls.config_class, skip=("task",))
        from tasks.cli.sweep import add_launch_arguments

        add_launch_arguments(p)
        p.set_defaults(func=_cmd_cv)
