"""One page per finished comparison (``zoo compare``'s or ``zoo ablate``'s ``--out``): its report — the table with
intervals and verdicts, the notes on what each number covers — and its metric-vs-cost plot; and one per finished
study (``zoo study``'s ``--out``, which holds ``study.json``): its verdicts, cell tables and forest plots. A Chinese
page shows the report through :func:`tasks.i18n.reports_zh.translate_report`: its words translated, its numbers,
names and plots the same bytes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tasks.i18n.reports_zh import translate_report
from tasks.site.page import Roots, markdown_html

_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def comparison_entries(folders: list[Path], roots: Roots) -> list[dict[str, Any]]:
    """A page at ``comparisons/NAME/`` under each of ``roots`` per comparison folder (NAME: the folder's name,
    numbered when two share one); each entry's ``title`` is the report's first heading in each language."""
    entries, names = [], set()
    for source in folders:
        report = source / "report.md"
        if not report.is_file() or not (source / "results.json").is_file():
            raise FileNotFoundError(f"--runs {source} is not a finished comparison (no report.md and results.json); "
                                    "give the --out folder of `zoo compare`, `zoo ablate` or `zoo study`")
        name, k = source.resolve().name, 2
        while name in names:
            name, k = f"{source.resolve().name}-{k}", k + 1
        names.add(name)
        folder = f"comparisons/{name}"
        text = report.read_text()
        for image in sorted(set(_IMAGE.findall(text))):
            if not (source / image).is_file():
                raise FileNotFoundError(f"{source} lacks {image}, which its report.md shows")
            roots.copy(source / image, f"{folder}/{Path(image).name}")
            text = text.replace(f"]({image})", f"]({Path(image).name})")
        titles = {}
        for lang in roots.langs:
            shown = translate_report(text) if lang == "zh" else text
            titles[lang] = shown.splitlines()[0].lstrip("# ").strip() if shown.strip() else name
            roots.write(f"{folder}/index.html", lang, titles[lang], markdown_html(shown))
        kind = "study" if (source / "study.json").is_file() else "comparison"
        entries.append({"name": name, "title": titles, "page": f"{folder}/index.html", "kind": kind})
    return entries
