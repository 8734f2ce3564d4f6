"""One page per lesson of ``zoo lab``: its question, verdict, numbers and plots, read from the ``lesson.md`` and
``result.json`` a run of the lesson wrote."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tasks.lab.lesson import LESSONS, LabSettings, Lesson, run_lesson
from tasks.site.page import escape, markdown_html, page

LESSON_FILES = ("lesson.md", "result.json")


def lesson_entries(lessons: Path, out: Path, run_missing: bool, progress: bool = False) -> list[dict[str, Any]]:
    """A page under ``out/NAME/`` for each lesson found in ``lessons/NAME/`` (those missing are first run there
    with ``--quick`` when ``run_missing``); one entry per lesson for the index, ``page`` None when not run."""
    entries = []
    for lesson in LESSONS.values():
        folder = lessons / lesson.name
        if not all((folder / f).is_file() for f in LESSON_FILES) and run_missing:
            run_lesson(lesson.name, LabSettings(out=folder, quick=True, progress=progress))
        if all((folder / f).is_file() for f in LESSON_FILES):
            entries.append({"lesson": lesson, **_lesson_page(lesson, folder, out / lesson.name)})
        else:
            entries.append({"lesson": lesson, "page": None, "holds": None})
    return entries


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
