"""The ``zoo`` command: the front door to the package.

Subcommands are added by each capability; run ``zoo --help`` to see them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence


def _cmd_list(args: argparse.Namespace) -> int:
    import zoo

    rows = []
    for name in zoo.list_variants(args.task):
        variant = zoo.get_variant(name)
        rows.append(
            {
                "name": name,
                "paper": f"{variant.paper.title} ({variant.paper.year})",
                "parts_changed": list(variant.parts_changed),
                "tasks": list(variant.tasks),
                "summary": variant.summary,
            }
        )
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'variant':<14} {'parts changed':<22} {'tasks':<24} paper")
    for row in rows:
        parts = ", ".join(row["parts_changed"]) or "(the base)"
        print(f"{row['name']:<14} {parts:<22} {', '.join(row['tasks']):<24} {row['paper']}")
    return 0


def _cmd_params(args: argparse.Namespace) -> int:
    import zoo
    from core.accounting import article_estimate, classic_parameters
    from core.parts import parameters_by_part

    variant = zoo.get_variant(args.variant)
    config = variant.config(args.preset)
    model = variant.build(config)
    measured = parameters_by_part(model)
    total = sum(measured.values())
    print(f"{args.variant} ({args.preset or variant.default_preset}): {total:,} parameters")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zoo",
        description="The Transformer variant zoo: the classic Transformer and its variants as measured patches.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", help="list the registered variants")
    p.add_argument("--task", default=None, help="only variants that run on this task")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("params", help="exact parameter count per part of a variant")
    p.add_argument("variant", nargs="?", default="classic")
    p.add_argument("--preset", default="base")
    p.set_defaults(func=_cmd_params)

    from tasks import commands

    commands.add_task_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"zoo {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
