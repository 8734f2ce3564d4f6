"""The ``zoo check`` subcommand (the suite itself is :mod:`tasks.plugins.check`, imported when the command runs)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict


def _cmd_check(args: argparse.Namespace) -> int:
    presets = [p.strip() for item in args.preset or () for p in item.split(",") if p.strip()]
    from tasks.plugins.check import check_variant, render

    reports = check_variant(args.variant, args.task, presets, progress=not args.quiet)
    if args.format == "json":
        print(json.dumps([{**asdict(r), "rows": [{**asdict(row), "result": row.result} for row in r.rows]}
                          for r in reports], indent=2))
    else:
        print("\n\n".join(render(r) for r in reports))
    return 1 if any(r.failed for r in reports) else 0


def add_check_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="the conformance suite: is a variant a fair patch on the classic model?")
    p.add_argument("variant", help="a registered variant, built in or from a plugin (see --user-dir)")
    p.add_argument("--task", default=None, help="check this task's registration only (default: every task)")
    p.add_argument("--preset", action="append", default=None,
                   help="check this preset only (repeatable, or comma-separated; default: every preset)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="table (default) or json")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_check)
