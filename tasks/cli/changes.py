"""The ``zoo changes`` subcommand: the catalogue of changes that travel (:mod:`zoo.changes`), which models each
reaches, and why not the others."""

from __future__ import annotations

import argparse
import json


def _cmd_changes(args: argparse.Namespace) -> int:
    from plumbing.tables import markdown_table
    from zoo.changes import MODELS, change_rows

    rows = change_rows()
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    table = [{"change": r["name"], "part": r["part"], "scope": r["scope"],
              **{m: "yes" if r["models"][m] == "yes" else "no" for m in MODELS}} for r in rows]
    print(markdown_table(table))
    print("\nWhy not:")
    print("\n".join(f"- {r['name']} on {m}: {why}" for r in rows for m, why in r["models"].items() if why != "yes"))
    return 0


def add_changes_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("changes", help="the changes that travel: which models each applies to, and why not")
    p.add_argument("--format", choices=("table", "json"), default="table", help="table (default) or json")
    p.set_defaults(func=_cmd_changes)
