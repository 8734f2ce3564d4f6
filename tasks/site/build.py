"""Build the site: the variant pages, the lesson pages, the comparison pages and the index that links them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from plumbing.errors import unknown_name
from tasks.engine.progress import progress_bar
from tasks.i18n import LANGS, ui
from tasks.i18n.article import SECTIONS, VARIANT_SECTIONS
from tasks.site.comparisons import comparison_entries
from tasks.site.lessons import LAB, lesson_entries
from tasks.site.page import STYLE, Roots, escape, stylesheet, table
from tasks.site.variant import part_name, variant_page
from zoo.analysis.catalogue import millions, variant_rows

log = logging.getLogger(__name__)
SITE_LANGS = (*LANGS, "both")  # "both": English at the root, Chinese under zh/, each page linking to the other


def build_site(out: str | Path, runs: list[str | Path] = (), lessons: str | Path = LAB,
               variants: list[str] | None = None, *, run_lessons: bool = False, lesson_runs: str | Path | None = None,
               check: bool = True, progress: bool = True, lang: str = "en") -> dict[str, Any]:
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
        lang: "en", "zh" (the site in that language at ``out``) or "both" (English at ``out``, Chinese at
            ``out/zh``, every page linking to its counterpart). Everything measured is computed once: code,
            numbers and plots are the same bytes in both languages.

    Returns:
        the number of variant pages, lesson pages and comparison pages, ``out``, and the names of the lessons
        not run (``not_run``).
    """
    if lang not in SITE_LANGS:
        raise unknown_name("site language (--lang)", lang, SITE_LANGS)
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
            raise unknown_name("variant", name, known)
    roots = Roots.of(out, lang)
    for folder in roots.folders.values():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / STYLE).write_text(stylesheet())
    pages = {}
    folders = page_folders(rows)
    chosen = [r for r in rows if variants is None or r["name"] in variants]
    for row in progress_bar(chosen, desc="variant pages", unit="variant", disable=not progress, leave=False):
        pages[folders[_key(row)]] = variant_page(row, roots, f"variants/{folders[_key(row)]}/index.html", check)
    lesson_runs = out / "lab" if lesson_runs is None else Path(lesson_runs)
    lesson_list = lesson_entries(Path(lessons), lesson_runs, roots, run_lessons, progress)
    comparisons = comparison_entries(runs, roots)
    for site_lang in roots.langs:
        roots.write("index.html", site_lang, ui("The Transformer variant zoo", site_lang),
                    _index(rows, pages, lesson_list, comparisons, site_lang))
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


def _index(rows: list[dict], pages: dict, lessons: list[dict], comparisons: list[dict], lang: str) -> str:
    folders, variant_rows_html = page_folders(rows), []
    for r in rows:
        name, folder = escape(r["name"]), folders[_key(r)]
        link = f"<a href='variants/{escape(folder)}/index.html'>{name}</a>" if folder in pages else name
        verdict = (pages.get(folder) or {}).get("check")
        variant_rows_html.append([
            link, f"<a href='{escape(r['paper']['url'])}'>{escape(r['paper']['title'])}</a> ({r['paper']['year']})",
            escape(", ".join(part_name(p, lang) for p in r["parts_changed"]) or ui("(the base)", lang)),
            escape(", ".join(r["tasks"]) + (" (3D)" if r["spatial_dims"] == 3 else "")),
            escape(", ".join(f"{k} {millions(v)}" for k, v in r["parameters"].items())),
            f"<span class='{verdict.lower()}'>{verdict}</span>" if verdict else "–"])
    lesson_rows = []
    for e in lessons:
        lesson = e["lesson"]
        title = _lesson_title(e, lang)
        state = ui("holds" if e["holds"] else "does not hold in this run", lang) if e["page"] else \
            ui("not run yet: {command}", lang).format(command=f"<code>{escape(e['command'])}</code>")
        question = lesson.question_zh if lang == "zh" and lesson.question_zh else lesson.question
        part = part_name(lesson.part, lang)
        lesson_rows.append([title, escape(part), escape(question), state])
    missing = "" if all(e["page"] for e in lessons) else "<p class='muted'>" + ui(
        "A lesson not run yet shows the command that runs it (minutes each); {site} runs every missing one into the "
        "site's {lab} folder (or {runs}).", lang).format(
        site="<code>zoo site --run-lessons</code>", lab="<code>lab/</code>", runs="<code>--lesson-runs DIR</code>") + \
        "</p>\n"

    def listed(kind: str, command: str) -> str:
        return "".join(f"<li><a href='{c['page']}'>{escape(c['title'][lang])}</a> <span class='muted'>"
                       f"({escape(c['name'])})</span></li>" for c in comparisons if c["kind"] == kind) or \
            f"<li class='muted'>{ui('None given (zoo site --runs DIR, DIR a {command} output)', lang)}</li>".format(
                command=f"<code>{command}</code>")

    return (
        f"<h1>{ui('The Transformer variant zoo', lang)}</h1>\n<p>{ui(INTRO, lang)}</p>\n"
        f"<h2 id='variants'>{ui('Variants', lang)}</h2>\n" +
        table([ui(h, lang) for h in ("variant", "paper", "parts changed", "tasks", "parameters per preset",
                                     "zoo check")], variant_rows_html) +
        f"\n<h2 id='lessons'>{ui('Lessons', lang)}</h2>\n" + missing +
        table([ui(h, lang) for h in ("lesson", "part", "question", "expected direction")], lesson_rows) +
        f"\n<h2 id='article'>{ui('The article, section by section', lang)}</h2>\n"
        f"<p>{ui(ARTICLE, lang)}</p>\n{_outline(rows, pages, lessons, lang)}"
        f"\n<h2 id='comparisons'>{ui('Comparisons', lang)}</h2>\n<ul>{listed('comparison', 'zoo compare')}</ul>"
        f"\n<h2 id='studies'>{ui('Studies: general or task-specific?', lang)}</h2>\n<p>{ui(STUDIES, lang)}</p>\n"
        f"<ul>{listed('study', 'zoo study')}</ul>"
    )


INTRO = ("The classic Transformer and its famous variants, each a declared patch on it: what each changed and why, "
         "the code beside the classic code, and what the change measures. Every number here was computed by the "
         "package that wrote this site.")
ARTICLE = ("The article this package teaches reads the classic Transformer part by part, then its variants against "
           "it. Each of its sections with the lessons that measure its claims and the variant pages that show its "
           "parts:")
STUDIES = ("One change across tasks, datasets and presets against a noise floor, its pooled effect and its measured "
           "scope beside the declared one.")


def _lesson_title(entry: dict, lang: str) -> str:
    """The lesson's title in ``lang``, linked to its page when it has one."""
    lesson = entry["lesson"]
    title = escape(lesson.title_zh if lang == "zh" and lesson.title_zh else lesson.title)
    return f"<a href='{entry['page']}'>{title}</a>" if entry["page"] else title


def _outline(rows: list[dict], pages: dict, lessons: list[dict], lang: str) -> str:
    """The article's outline: each section with the lessons that measure it and the variant pages that show it
    (linked where the site has the page); a section with neither says so."""
    folders = page_folders(rows)
    items = []
    for section in SECTIONS:
        taught = [_lesson_title(e, lang) for e in lessons if section.number in e["lesson"].sections]
        shown = [f"<a href='variants/{escape(r['name'])}/index.html'>{escape(r['name'])}</a>" if r["name"] in pages
                 else escape(r["name"]) for r in rows  # a name's first registration: its page is variants/NAME
                 if section.number in VARIANT_SECTIONS.get(r["name"], ()) and folders[_key(r)] == r["name"]]
        what = [ui(label, lang).format(names=ui(", ", lang).join(names))
                for label, names in (("lessons: {names}", taught), ("variant pages: {names}", shown)) if names]
        what = ui("; ", lang).join(what) or \
            f"<span class='muted'>{ui('no lesson or variant page measures it yet', lang)}</span>"
        items.append(f"<li id='section-{section.number}'><strong>§{section.number} "
                     f"{escape(section.title(lang))}</strong> — {what}</li>")
    return "<ul class='outline'>" + "".join(items) + "</ul>"
