"""One page per lesson of ``zoo lab``: its question, verdict, numbers and plots, read from the ``lesson.md`` (or, on
a Chinese page, ``lesson.zh.md``) and ``result.json`` a run of the lesson wrote."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from tasks.i18n import ui
from tasks.lab.lesson import LESSONS, LabSettings, Lesson, run_lesson
from tasks.site.page import Roots, escape, markdown_html, sections_line

LESSON_FILES = ("lesson.md", "result.json")
MARKDOWN = {"en": "lesson.md", "zh": "lesson.zh.md"}  # what run_lesson writes in each language
LAB = Path("runs/lab")  # where `zoo lab NAME` writes by default


def lesson_entries(lessons: Path, runs: Path, roots: Roots, run_missing: bool = False,
                   progress: bool = False) -> list[dict[str, Any]]:
    """A page at ``lessons/NAME/`` under each of ``roots`` for each lesson that has a result; one entry per lesson
    for the index.

    A lesson's result is read from ``lessons/NAME/`` (``zoo lab``'s folders), else from ``runs/NAME/`` (where an
    earlier build ran it). A lesson found in neither is run into ``runs/NAME/`` with ``--quick`` when
    ``run_missing`` (each takes minutes, so never by default); otherwise its entry has ``page`` None and the
    ``command`` that runs it, for the index.
    """
    entries = []
    for lesson in LESSONS.values():
        found = next((f for f in (lessons / lesson.name, runs / lesson.name) if _has_result(f)), None)
        if found is None and run_missing:
            found = runs / lesson.name
            run_lesson(lesson.name, LabSettings(out=found, quick=True, progress=progress))
        if found is not None:
            entries.append({"lesson": lesson, **_lesson_page(lesson, found, roots)})
        else:
            entries.append({"lesson": lesson, "page": None, "holds": None, "command": _command(lesson, lessons)})
    return entries


def _has_result(folder: Path) -> bool:
    return all((folder / f).is_file() for f in LESSON_FILES)


def _command(lesson: Lesson, lessons: Path) -> str:
    """The command that writes ``lesson``'s result where the site reads it (``lessons/NAME``)."""
    where = "" if lessons == LAB else f" --out {shlex.quote((lessons / lesson.name).as_posix())}"
    return f"zoo lab {lesson.name} --quick{where}"


def _lesson_page(lesson: Lesson, source: Path, roots: Roots) -> dict[str, Any]:
    try:
        result = json.loads((source / "result.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{source / 'result.json'} is corrupt ({error}); run `zoo lab {lesson.name}` again") from None
    folder = f"lessons/{lesson.name}"
    for figure in result.get("figures", []):
        if not (source / figure).is_file():
            raise FileNotFoundError(f"{source} lacks {figure}, a plot its lesson.md shows; run `zoo lab "
                                    f"{lesson.name}` again")
        roots.copy(source / figure, f"{folder}/{figure}")
    findings = json.dumps(result.get("findings", {}), indent=2, sort_keys=True, default=str)
    for lang in roots.langs:
        text, note = _lesson_markdown(lesson, source, lang)
        body = note + sections_line(lesson.sections, lang, 2) if not _names_sections(text, lesson) else note
        body += markdown_html(text)
        body += (f"\n<details><summary>{ui('The measured numbers', lang)} (<code>result.json</code>)</summary>"
                 f"<pre><code>{escape(findings)}</code></pre></details>")
        title = lesson.title_zh if lang == "zh" and lesson.title_zh else lesson.title
        roots.write(f"{folder}/index.html", lang, ui("Lesson: {title}", lang).format(title=title), body)
    return {"page": f"{folder}/index.html", "holds": result.get("holds"),
            "verdict": list(result.get("verdict", []))}


def _lesson_markdown(lesson: Lesson, source: Path, lang: str) -> tuple[str, str]:
    """The lesson's markdown in ``lang``, and a note when it is not there: a result written before the lessons had
    Chinese text has no ``lesson.zh.md``, so its Chinese page shows the English one and says how to get the
    Chinese (run the lesson again)."""
    file = source / MARKDOWN[lang]
    if file.is_file():
        return file.read_text(), ""
    note = ui("This result has no Chinese text (it was written before the lessons had one); run {command} again to "
              "get it. The English page follows.", lang).format(command=f"<code>zoo lab {escape(lesson.name)}</code>")
    return (source / MARKDOWN["en"]).read_text(), f"<p class='note'>{note}</p>\n"


def _names_sections(text: str, lesson: Lesson) -> bool:
    """Whether the lesson's own markdown already names its article sections (``§2.3``), so the page does not
    name them twice."""
    return bool(lesson.sections) and all(f"§{number} " in text for number in lesson.sections)
