"""``zoo site --out DIR [--runs DIR ...] [--lessons DIR] [--run-lessons [--lesson-runs DIR]] [--lang en|zh|both]``:
the package as a static site (:mod:`tasks.site`), in English, Chinese or both."""

from __future__ import annotations

import argparse

from tasks.i18n import LANGS


def add_site_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("site", help="write every variant's changes and code, the lessons and comparisons as a "
                       "static site (plain HTML, no server)")
    p.add_argument("--out", default="site", help="the site's folder (default: site/); open OUT/index.html")
    p.add_argument("--runs", nargs="*", default=[], metavar="DIR", help="finished comparisons (zoo compare --out) "
                   "to give a page each")
    p.add_argument("--lessons", default="runs/lab", metavar="DIR", help="where lessons' results are read (zoo "
                   "lab's runs/lab/LESSON, the default); nothing is written there")
    p.add_argument("--run-lessons", action="store_true", help="run each lesson not found (with --quick, minutes "
                   "each) into --lesson-runs; without it a missing lesson is listed with the command that runs it")
    p.add_argument("--lesson-runs", default=None, metavar="DIR", help="where --run-lessons writes lesson runs, and "
                   "where they are read from again (default: OUT/lab)")
    p.add_argument("--variants", default=None, help="comma-separated variants that get a page (default: all)")
    p.add_argument("--no-check", action="store_true", help="leave out the conformance suite (zoo check)")
    p.add_argument("--lang", default="en", choices=(*LANGS, "both"), help="the site's language: en (default), "
                   "zh (Chinese), or both (English in OUT/, Chinese in OUT/zh/, each page linking to the other); "
                   "code, numbers and plots are the same in both")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_site)


def _cmd_site(args: argparse.Namespace) -> int:
    from tasks.site.build import build_site

    variants = [v.strip() for v in args.variants.split(",") if v.strip()] if args.variants else None
    summary = build_site(args.out, args.runs, args.lessons, variants, run_lessons=args.run_lessons,
                         lesson_runs=args.lesson_runs, check=not args.no_check, progress=not args.quiet,
                         lang=args.lang)
    print(f"wrote {summary['variants']} variant pages, {summary['lessons']} lessons and {summary['comparisons']} "
          f"comparisons to {summary['out']}/; open {summary['out']}/index.html in a browser")
    if summary["not_run"]:
        print(f"{len(summary['not_run'])} lessons not run ({', '.join(summary['not_run'])}): the index shows the "
              "command for each; --run-lessons runs them (minutes each)")
    return 0
