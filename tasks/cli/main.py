"""The ``zoo`` command: the front door to the package.

Subcommands are added by each capability; run ``zoo --help`` to see them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import typing
from collections.abc import Sequence


def _cmd_list(args: argparse.Namespace) -> int:
    from zoo.analysis.catalogue import millions, variant_rows, variants_markdown

    rows = variant_rows(args.task)
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    elif args.format == "md":
        print(variants_markdown(rows))
    else:
        print(f"{'variant':<14} {'parts changed':<22} {'tasks':<24} {'parameters per preset':<48} paper")
        for r in rows:
            parts = ", ".join(r["parts_changed"]) or "(the base)"
            params = ", ".join(f"{k} {millions(v)}" for k, v in r["parameters"].items())
            paper = f"{r['paper']['title']} ({r['paper']['year']})"
            tasks = ", ".join(r["tasks"]) + (" (3D)" if r["spatial_dims"] == 3 else "")
            print(f"{r['name']:<14} {parts:<22} {tasks:<24} {params:<48} {paper}")
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from tasks.engine.registry import task_shape
    from zoo.analysis.delta import measure
    from zoo.analysis.report import render_markdown
    from zoo.registry import get_variant

    shape = task_shape(args.task) if args.task else None  # an unknown task: "did you mean" among the tasks
    variant = get_variant(args.variant, args.task)  # looked up once, and measured as it is
    report = measure(variant, shape or task_shape(variant.tasks[0]), args.preset)
    print(json.dumps(report, indent=2) if args.format == "json" else render_markdown(report))
    return 0


def _cmd_params(args: argparse.Namespace) -> int:
    import torch

    from core.accounting import article_estimate, classic_parameters
    from core.parts import parameters_by_part
    from zoo.registry import get_variant

    variant = get_variant(args.variant)
    preset = args.preset or variant.default_preset
    config = variant.config(preset)
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        model = variant.build(config)
    measured = parameters_by_part(model)
    total = sum(measured.values())
    print(f"{args.variant} ({preset}): {total:,} parameters")
    print(f"{'part':<12} {'parameters':>14} {'share':>8}")
    for part, count in measured.items():
        if count:
            print(f"{part:<12} {count:>14,} {count / total:>8.1%}")
    if variant.config_class.__name__ == "TransformerConfig":
        formula = classic_parameters(config)
        status = "matches" if formula == measured else "DIFFERS FROM"
        print(f"\nhand-derived formula {status} the built model ({sum(formula.values()):,})")
        est = article_estimate(config)
        print(
            f"article-style estimate: {est['article_per_layer']:,} per layer x "
            f"{config.encoder_layers + config.decoder_layers} layers = {est['article_total']:,}; "
            f"exact layers {est['exact_layers']:,} (decoder cross-attention alone: "
            f"{est['missed_cross_attention']:,}), plus embeddings {est['exact_embeddings_and_head']:,}"
        )
    return 0


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (the usage of ``zoo train TASK`` alone is a screenful)."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


# Errors that mean bad input (a value, a path) rather than a bug: one line, exit status 2, no traceback.
USER_ERRORS = (ValueError, TypeError, FileNotFoundError, NotADirectoryError, FileExistsError, PermissionError,
               ConnectionError)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="zoo",
        description="The Transformer variant zoo: the classic Transformer and its variants as measured patches.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", help="list the registered variants")
    p.add_argument("--task", default=None, help="only variants that run on this task")
    p.add_argument("--format", choices=("table", "json", "md"), default="table",
                   help="table (default), json, or md (the README's table)")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("diff", help="what a variant changed, measured against the classic model")
    p.add_argument("variant", help="a registered variant (see zoo list)")
    p.add_argument("--task", default=None, help="task whose input size is measured (default: the variant's first)")
    p.add_argument("--preset", default=None, help="preset (default: the task's)")
    p.add_argument("--format", choices=("md", "json"), default="md", help="md (default) or json")
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser("params", help="exact parameter count per part of a variant")
    p.add_argument("variant", nargs="?", default="classic", help="a registered variant (default: classic)")
    p.add_argument("--preset", default=None, help="preset (default: the variant's own, e.g. classic: small)")
    p.set_defaults(func=_cmd_params)

    import tasks.cli.train as commands

    commands.add_task_commands(sub)
    from tasks.cli.runs import add_run_commands

    add_run_commands(sub)
    from tasks.cli.cv import add_cv_command

    add_cv_command(sub)
    from tasks.cli.sweep import add_sweep_command

    add_sweep_command(sub)
    from tasks.cli.lab import add_lab_command

    add_lab_command(sub)
    from tasks.cli.site import add_site_command

    add_site_command(sub)
    from tasks.cli.doctor import add_doctor_command

    add_doctor_command(sub)
    from tasks.cli.changes import add_changes_command
    from tasks.cli.check import add_check_command
    from tasks.cli.study import add_study_command
    from tasks.plugins.scaffold import add_scaffold_command

    add_changes_command(sub)
    add_study_command(sub)
    add_check_command(sub)
    add_scaffold_command(sub)
    from tasks.plugins.loader import add_user_dir_flag

    add_user_dir_flag(parser, dest="user_dir_global")  # on every command, before or after its name
    return parser


def _load_plugins_first(argv: Sequence[str]) -> Exception | None:
    """Load the plugins (``--user-dir`` anywhere in ``argv``, ``ZOO_USER_DIR``, entry points) before the parser is
    built, so that a task a plugin registers is a choice of ``zoo train`` / ``zoo cv``. A plugin that cannot be
    loaded is returned, to be reported once the command's name is known."""
    from tasks.plugins.loader import load_plugins

    folders = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--user-dir"]
    folders += [arg.partition("=")[2] for arg in argv if arg.startswith("--user-dir=")]
    try:
        load_plugins(folders)
    except USER_ERRORS as error:
        return error
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    plugin_error = _load_plugins_first(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, or a flag argparse refused (already reported on one line)
        return stop.code
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    if args.command is None:
        parser.print_help()
        return 0
    try:
        from tasks.plugins.loader import load_plugins, user_dirs_of

        if plugin_error is not None:
            raise plugin_error
        load_plugins(user_dirs_of(args))  # a --user-dir the early scan missed (an abbreviated flag); else no-op
        return args.func(args)
    except BrokenPipeError:  # the reader went away (`zoo list | head`): stop quietly, as the docs of signal advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except USER_ERRORS as error:
        print(f"zoo {args.command}: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # a sweep that was pre-empted, or whose runs failed: said plainly, no traceback
        from tasks.engine.trainer import REQUEUE_EXIT, PreemptedError
        from tasks.sweeps.driver import SweepFailedError, SweepStoppedError

        if isinstance(error, PreemptedError | SweepStoppedError):
            print(f"zoo {args.command}: {error}; the same command resumes", file=sys.stderr)
            return REQUEUE_EXIT
        if isinstance(error, SweepFailedError):
            print(f"zoo {args.command}: {error}", file=sys.stderr)
            return 1
        raise
    except KeyboardInterrupt:
        print(f"\nzoo {args.command}: interrupted; running runs saved their checkpoints, the same command resumes",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
