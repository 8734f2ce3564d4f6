"""Build the site: the variant pages, the lesson pages, the comparison pages and the index that links them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tasks.engine.progress import progress_bar
from tasks.site.comparisons import comparison_entries
from tasks.site.lessons import LAB, lesson_entries
from tasks.site.page import STYLE, escape, page, stylesheet, table
from tasks.site.variant import variant_page
from zoo.analysis.catalogue import millions, variant_rows

log = logging.getLogger(__name__)


def build_site(out: str | Path, runs: list[str | Path] = (), lessons: str | Path = LAB,
               variants: list[str] | None = None, *, run_lessons: bool = False, lesson_runs: str | Path | None = None,
               check: bool = True, progress: bool = True) -> dict[str, Any]:
    """Write the site to ``out`` (see :mod:`tasks.site`); returns what it holds.

    A build writes only under ``out`` (and ``lesson_runs`` when it is given elsewhere) and trains nothing unless
    ``run_lessons``: a site is rebuilt often, and each lesson takes minutes.

    Args:
        out: the site's folder (created; pages already there are overwritten).
        runs: finished comparison folders (``zoo compare --out``).
        lessons: where lessons' results are read (``zoo lab``'s ``runs/lab/NAME``); nothing is written there.
        variants: the variants that get pages (default: all): one per registration, a name registered for
            several tasks one per task (:func:`page_folders`); the index lists every registered variant.
        run_lessons: run each lesson found neither in ``lessons`` nor in ``lesson_runs`` (``--quick``, minutes
            each) into ``lesson_runs``; without it such a lesson is listed on the index with the command that
            runs it.
        lesson_runs: where ``run_lessons`` writes lesson runs, and a second place results are read from
            (default: ``out/lab``).
        check: run the conformance suite (``zoo check`` at the ``tiny`` preset) for each variant page.

    Returns:
        the number of variant pages, lesson pages and comparison pages, ``out``, and the names of the lessons
        not run (``not_run``).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for the site")
    runs = [Path(r) for r in runs]
    for folder in runs:  # before anything is built: a typo should cost no time
        if not folder.is_dir():
            raise FileNotFoundError(f"--runs {folder} does not exist; give the --out folder of `zoo compare`")
    rows = variant_rows()
    known = [r["name"] for r in rows]
    for name in variants or ():
        if name not in known:
            from plumbing.errors import unknown_name

            raise unknown_name("variant", name, known)
    out.mkdir(parents=True, exist_ok=True)
    (out / STYLE).write_text(stylesheet())
    pages = {}
    folders = page_folders(rows)
    chosen = [r for r in rows if variants is None or r["name"] in variants]
    for row in progress_bar(chosen, desc="variant pages", unit="variant", disable=not progress, leave=False):
        pages[folders[_key(row)]] = variant_page(row, out / "variants" / folders[_key(row)], check)
    lesson_runs = out / "lab" if lesson_runs is None else Path(lesson_runs)
    lesson_list = lesson_entries(Path(lessons), lesson_runs, out / "lessons", run_lessons, progress)
    comparisons = comparison_entries(runs, out / "comparisons")
    (out / "index.html").write_text(page("The Transformer variant zoo", _index(rows, pages, lesson_list,
                                                                                 comparisons), 0))
    summary = {"variants": len(pages), "lessons": sum(e["page"] is not None for e in lesson_list),
               "comparisons": len(comparisons), "out": str(out),
               "not_run": [e["lesson"].name for e in lesson_list if e["page"] is None]}
    log.info("site: %(variants)d variant pages, %(lessons)d lessons, %(comparisons)d comparisons in %(out)s", summary)
    return summary


def _key(row: dict) -> tuple[str, tuple[str, ...]]:
    return row["name"], tuple(row["tasks"])


def page_folders(rows: list[dict]) -> dict[tuple[str, tuple[str, ...]], str]:
    """The folder under ``variants/`` of each registration's page: its name for a name's first registration,
    ``NAME-TASK`` for the registrations of the same name on other tasks (the language model's ``classic``,
    ``rope``...: the same patch on another model, with its own delta and conformance)."""
    folders: dict[tuple[str, tuple[str, ...]], str] = {}
    for row in rows:
        first = all(name != row["name"] for name, _ in folders)
        folders[_key(row)] = row["name"] if first else f"{row['name']}-{'-'.join(row['tasks'])}"
    return folders


def _index(rows: list[dict], pages: dict, lessons: list[dict], comparisons: list[dict]) -> str:
    folders, variant_rows_html = page_folders(rows), []
    for r in rows:
        name, folder = escape(r["name"]), folders[_key(r)]
        link = f"<a href='variants/{escape(folder)}/index.html'>{name}</a>" if folder in pages else name
        verdict = (pages.get(folder) or {}).get("check")
        variant_rows_html.append([
            link, f"<a href='{escape(r['paper']['url'])}'>{escape(r['paper']['title'])}</a> ({r['paper']['year']})",
            escape(", ".join(r["parts_changed"]) or "(the base)"),
            escape(", ".join(r["tasks"]) + (" (3D)" if r["spatial_dims"] == 3 else "")),
            escape(", ".join(f"{k} {millions(v)}" for k, v in r["parameters"].items())),
            f"<span class='{verdict.lower()}'>{verdict}</span>" if verdict else "–"])
    lesson_rows = []
    for e in lessons:
        lesson = e["lesson"]
        title = f"<a href='{e['page']}'>{escape(lesson.title)}</a>" if e["page"] else escape(lesson.title)
        state = ("holds" if e["holds"] else "does not hold in this run") if e["page"] else \
            f"not run yet: <code>{escape(e['command'])}</code>"
        lesson_rows.append([title, escape(lesson.part), escape(lesson.question), state])
    missing = "" if all(e["page"] for e in lessons) else (
        "<p class='muted'>A lesson not run yet shows the command that runs it (minutes each); <code>zoo site "
        "--run-lessons</code> runs every missing one into the site's <code>lab/</code> folder (or "
        "<code>--lesson-runs DIR</code>).</p>\n")
    def listed(kind: str, command: str) -> str:
        return "".join(f"<li><a href='{c['page']}'>{escape(c['title'])}</a> <span class='muted'>({escape(c['name'])})"
                       f"</span></li>" for c in comparisons if c["kind"] == kind) or \
            f"<li class='muted'>None given (zoo site --runs DIR, DIR a <code>{command}</code> output)</li>"

    return (
        "<h1>The Transformer variant zoo</h1>\n<p>The classic Transformer and its famous variants, each a declared "
        "patch on it: what each changed and why, the code beside the classic code, and what the change measures. "
        "Every number here was computed by the package that wrote this site.</p>\n"
        "<h2 id='variants'>Variants</h2>\n" + table(["variant", "paper", "parts changed", "tasks", "parameters per "
                                                     "preset", "zoo check"], variant_rows_html) +
        "\n<h2 id='lessons'>Lessons</h2>\n" + missing + table(["lesson", "part", "question", "expected direction"],
                                                   lesson_rows) +
        f"\n<h2 id='comparisons'>Comparisons</h2>\n<ul>{listed('comparison', 'zoo compare')}</ul>"
        "\n<h2 id='studies'>Studies: general or task-specific?</h2>\n<p>One change across tasks, datasets and "
        "presets against a noise floor, its pooled effect and its measured scope beside the declared one.</p>\n"
        f"<ul>{listed('study', 'zoo study')}</ul>"
    )
