"""The ``zoo check`` subcommand (the suite itself is :mod:`tasks.plugins.check`, imported when the command runs)."""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import asdict


def _cmd_check(args: argparse.Namespace) -> int:
    presets = [p.strip() for item in args.preset or () for p in item.split(",") if p.strip()]
    from tasks.plugins.check import check_variant, render
    from tasks.plugins.loader import user_dirs_of

    reports = check_variant(args.variant, args.task, presets, progress=not args.quiet)
    if args.format == "json":
        print(json.dumps([{**asdict(r), "rows": [{**asdict(row), "result": row.result} for row in r.rows]}
                          for r in reports], indent=2))
    else:
        options = "".join(f" --user-dir {shlex.quote(folder)}" for folder in user_dirs_of(args))  # a plugin's variant
        print("\n\n".join(render(r, options) for r in reports))
    return 1 if any(r.failed for r in reports) else 0


def add_check_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="the conformance suite: is a variant a fair patch on the classic model?")
    p.add_argument("variant", help="a registered variant, built in or from a plugin (see --user-dir)")
    p.add_argument("--task", default=None, help="check this task's registration only (default: every task)")
    p.add_argument("--preset", action="append", default=None,
                   help="check this preset only (repeatable, or comma-separated; 'all': every preset; default: "
                        "the variant's default preset, the one zoo train trains; the table names the others, with "
                        "their sizes)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="table (default) or json")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_check)
