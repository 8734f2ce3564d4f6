"""Task subcommands of the ``zoo`` command: ``zoo train TASK [--flags]``.

Each task's flags are derived from its config dataclass (see :mod:`tasks.engine.config`).
"""

from __future__ import annotations

import argparse
import sys

from tasks.engine.registry import task_class, task_names


def _cmd_train(args: argparse.Namespace) -> int:
    from tasks.engine.config import config_from_args, read_config_file
    from tasks.engine.trainer import REQUEUE_EXIT, NonFiniteLossError, PreemptedError, Trainer
    from tasks.runs.report import summary_lines
    from tasks.runs.training import callbacks_for

    cls = task_class(args.task)
    recorded = read_config_file(cls.config_class, args.config) if args.config else {}
    config = config_from_args(cls.config_class, args, base=recorded)
    config.check_paths()  # an --out or --data that is a file fails here, not after the data has loaded
    budget = None
    if args.budget:  # what zoo compare gives each run; epochs=N is the epochs themselves, recorded as a budget
        import dataclasses

        from tasks.engine.budget import parse_budget

        budget = parse_budget(args.budget)
        if budget.kind == "epochs":
            if args.epochs is not None and args.epochs != budget.value:
                raise ValueError(f"--epochs {args.epochs} and --budget {args.budget} disagree; give one of them")
            config = dataclasses.replace(config, epochs=int(budget.value))
    trainer = Trainer(cls, config, budget, callbacks=callbacks_for(config))
    try:
        summary = trainer.fit()
    except KeyboardInterrupt:
        # the run's own config.json: a command rebuilt from defaults would be refused as another run (same_run)
        print(f"\ninterrupted; resume with: zoo train {args.task} --config {config.out_dir}/config.json --resume",
              file=sys.stderr)
        return 130
    except PreemptedError as stop:  # a scheduler's SIGTERM / SIGUSR1: the exit status asks for a requeue
        print(f"zoo train: {stop}; requeue with: zoo train {args.task} --config {config.out_dir}/config.json "
              "--resume", file=sys.stderr)
        return REQUEUE_EXIT
    except NonFiniteLossError as error:
        print(f"zoo train: {error}", file=sys.stderr)
        return 1
    if trainer.main:
        print("\n".join(summary_lines(summary)))
        print(f"outputs in {config.out_dir}/ (report.md, metrics.json, curves.png, checkpoints/)")
    return 0


def _budget(args: argparse.Namespace, cls) -> dict:
    from tasks.engine.config import parse_assignments

    config = parse_assignments(args.set, cls.config_class)
    config.update(progress=not args.quiet, model=parse_assignments(args.model_set))
    if args.epochs is not None:
        config["epochs"] = args.epochs
    if args.recipe is not None:
        from tasks.compare.sweep import check_recipe_flag

        config["recipe"] = check_recipe_flag(cls, args.recipe, config.get("recipe"))
    return config


def _seeds(args: argparse.Namespace) -> int:
    return 1 if args.seeds is None else args.seeds


def _cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tasks.cli.sweep import launch_from_args, print_comparison
    from tasks.compare.sweep import compare, compare_runs

    cls = task_class(args.task)
    out = Path(args.out or f"runs/compare-{args.task}")
    if args.runs:
        given = [flag for flag, value in (("--variants", args.variants), ("--epochs", args.epochs),
                                          ("--seeds", args.seeds), ("--budget", args.budget), ("--set", args.set),
                                          ("--model-set", args.model_set), ("--launcher", args.launcher),
                                          ("--jobs", args.jobs), ("--folds", args.folds), ("--data", args.data),
                                          ("--recipe", args.recipe))
                 if value is not None]
        if given:
            raise ValueError(f"--runs compares finished runs and trains nothing; drop {', '.join(given)}")
        comparison = compare_runs(args.task, args.runs, out, args.alpha, args.baseline)
    else:
        variants = [v.strip() for v in args.variants.split(",")] if args.variants else None
        config = _budget(args, cls)
        if args.data:
            config["data"] = args.data  # one folder, or several compared under --folds
        comparison = compare(args.task, variants, out, _seeds(args), args.budget, args.alpha, args.baseline,
                             args.allow_undeclared, launch_from_args(args), args.folds, **config)
    if "datasets" in comparison:  # --folds on several datasets: a table per dataset, then across them
        print(comparison["table"])
        print(f"written to {out}/ (report.md, results.json; each dataset's report in its folder)")
    else:
        print_comparison(comparison, out)
    return 0


def _cmd_ablate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tasks.cli.sweep import launch_from_args, print_comparison
    from tasks.compare.sweep import ablate

    cls = task_class(args.task)
    out = Path(args.out or f"runs/ablate-{args.variant}-{args.task}")
    comparison = ablate(args.variant, args.task, out, _seeds(args), args.budget, args.alpha, args.allow_undeclared,
                        launch_from_args(args), **_budget(args, cls))
    print_comparison(comparison, out)
    return 0


def _budget_arguments(p: argparse.ArgumentParser, out: str) -> None:
    p.add_argument("--budget", default=None, metavar="KIND=VALUE",
                   help="what every run gets: epochs=N (default epochs=2), time=SECONDS of training, or flops=X "
                        "training FLOPs (3 x forward FLOPs per step, zoo diff's counter)")
    p.add_argument("--epochs", type=int, default=None,
                   help="epochs for every run (= --budget epochs=N); with a time or FLOP budget, the most a run "
                        "may take (time default: the task's epochs, which also set the LR schedule's horizon)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per variant, 0..K-1 (default 1): mean and 95%% "
                                                            "interval over seeds")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the verdicts (Holm-corrected)")
    p.add_argument("--out", default=None, help=f"output folder (default: {out})")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="task config field for every run")
    p.add_argument("--model-set", action="append", metavar="KEY=VALUE", help="variant config field for every run")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--recipe", default=None, metavar="NAME",
                   help="tasks with training recipes (medseg): `own` trains each variant with the recipe it declares "
                        "(dynunet: nnunet), a recipe's name (default, nnunet) is one recipe shared by every side; the "
                        "table's recipe column and the report say which (zoo compare's default: the task's default "
                        "recipe, shared; zoo ablate's: own, with a row of the variant under the shared default)")
    p.add_argument("--allow-undeclared", action="store_true",
                   help="train a variant whose config differs from its classic counterpart where no declared change "
                        "reverts it (refused by default: see zoo check); the report lists the differences (finished "
                        "--runs are never refused, their differences are listed)")
    from tasks.cli.sweep import add_launch_arguments

    add_launch_arguments(p)


def add_task_commands(sub: argparse._SubParsersAction) -> None:
    from tasks.engine.config import add_config_arguments

    train = sub.add_parser("train", help="train and evaluate a variant on a task")
    tasks = train.add_subparsers(dest="task", metavar="TASK", required=True)
    for name in task_names():
        cls = task_class(name)
        p = tasks.add_parser(name, help=f"train on the {name} task")
        p.add_argument("--config", default=None, metavar="FILE",
                       help="start from a recorded run's settings (RUN/config.json: reruns it exactly); the flags "
                            "given override them")
        p.add_argument("--budget", default=None, metavar="KIND=VALUE",
                       help="stop after epochs=N (the same as --epochs N), time=SECONDS of training or flops=X "
                            "training FLOPs (3 x forward FLOPs per step), as zoo compare's --budget does")
        add_config_arguments(p, cls.config_class, skip=("task",))
        p.set_defaults(func=_cmd_train)

    p = sub.add_parser("compare", help="train several variants with the same budget (or read finished runs); one "
                                       "table with intervals, paired tests and verdicts, and a plot")
    p.add_argument("task", choices=sorted(task_names()), help="the task every variant is trained on")
    p.add_argument("--variants", default=None, help="comma-separated (default: every variant of the task)")
    p.add_argument("--runs", nargs="+", metavar="DIR", default=None,
                   help="compare these finished runs or zoo evaluate folders instead of training (grouped by variant)")
    p.add_argument("--baseline", default=None, help="the variant every other is tested against (default: the task's)")
    p.add_argument("--folds", type=int, default=None, metavar="K",
                   help="cross-validate (tasks with folds: zoo cv's): every variant trains the same K folds, each "
                        "case is predicted once by the fold that held it out, and the variants are paired case by "
                        "case over the folds; the mean over folds is reported beside")
    p.add_argument("--data", action="append", default=None, metavar="DIR",
                   help="the dataset folder of every run; repeat it with --folds for a table per dataset and the "
                        "cross-dataset statistics of zoo study (`embedded`, `embedded:NAME`: the task's own data)")
    _budget_arguments(p, out="runs/compare-TASK")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("ablate", help="leave-one-out: revert each change of a variant alone, same budget")
    p.add_argument("variant", help="the variant whose declared changes are reverted one at a time")
    p.add_argument("--task", required=True, choices=sorted(task_names()), help="the task it is trained on")
    _budget_arguments(p, out="runs/ablate-VARIANT-TASK")
    p.set_defaults(func=_cmd_ablate)
