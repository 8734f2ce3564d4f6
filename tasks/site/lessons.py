"""One page per lesson of ``zoo lab``: its question, verdict, numbers and plots, read from the ``lesson.md`` and
``result.json`` a run of the lesson wrote."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

from tasks.lab.lesson import LESSONS, LabSettings, Lesson, run_lesson
from tasks.site.page import escape, markdown_html, page

LESSON_FILES = ("lesson.md", "result.json")
LAB = Path("runs/lab")  # where `zoo lab NAME` writes by default


def lesson_entries(lessons: Path, runs: Path, out: Path, run_missing: bool = False,
                   progress: bool = False) -> list[dict[str, Any]]:
    """A page under ``out/NAME/`` for each lesson that has a result; one entry per lesson for the index.

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
            entries.append({"lesson": lesson, **_lesson_page(lesson, found, out / lesson.name)})
        else:
            entries.append({"lesson": lesson, "page": None, "holds": None, "command": _command(lesson, lessons)})
    return entries


def _has_result(folder: Path) -> bool:
    return all((folder / f).is_file() for f in LESSON_FILES)


def _command(lesson: Lesson, lessons: Path) -> str:
    """The command that writes ``lesson``'s result where the site reads it (``lessons/NAME``)."""
    where = "" if lessons == LAB else f" --out {shlex.quote((lessons / lesson.name).as_posix())}"
    return f"zoo lab {lesson.name} --quick{where}"


def _lesson_page(lesson: Lesson, source: Path, folder: Path) -> dict[str, Any]:
    try:
        result = json.loads((source / "result.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{source / 'result.json'} is corrupt ({error}); run `zoo lab {lesson.name}` again") from None
    folder.mkdir(parents=True, exist_ok=True)
    for figure in result.get("figures", []):
        if not (source / figure).is_file():
            raise FileNotFoundError(f"{source} lacks {figure}, a plot its lesson.md shows; run `zoo lab "
                                    f"{lesson.name}` again")
        shutil.copyfile(source / figure, folder / figure)
    body = markdown_html((source / "lesson.md").read_text())
    findings = json.dumps(result.get("findings", {}), indent=2, sort_keys=True, default=str)
    body += (f"\n<details><summary>The measured numbers (<code>result.json</code>)</summary>"
             f"<pre><code>{escape(findings)}</code></pre></details>")
    (folder / "index.html").write_text(page(f"Lesson: {lesson.title}", body, 2))
    return {"page": f"lessons/{lesson.name}/index.html", "holds": result.get("holds"),
            "verdict": list(result.get("verdict", []))}
