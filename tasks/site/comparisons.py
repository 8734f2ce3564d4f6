"""One page per finished comparison (``zoo compare``'s or ``zoo ablate``'s ``--out``): its report — the table with
intervals and verdicts, the notes on what each number covers — and its metric-vs-cost plot; and one per finished
study (``zoo study``'s ``--out``, which holds ``study.json``): its verdicts, cell tables and forest plots."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from tasks.site.page import markdown_html, page

_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def comparison_entries(folders: list[Path], out: Path) -> list[dict[str, Any]]:
    """A page under ``out/NAME/`` per comparison folder (NAME: the folder's name, numbered when two share one)."""
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
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        text = report.read_text()
        for image in sorted(set(_IMAGE.findall(text))):
            if not (source / image).is_file():
                raise FileNotFoundError(f"{source} lacks {image}, which its report.md shows")
            shutil.copyfile(source / image, folder / Path(image).name)
            text = text.replace(f"]({image})", f"]({Path(image).name})")
        title = text.splitlines()[0].lstrip("# ").strip() if text.strip() else name
        (folder / "index.html").write_text(page(title, markdown_html(text), 2))
        kind = "study" if (source / "study.json").is_file() else "comparison"
        entries.append({"name": name, "title": title, "page": f"comparisons/{name}/index.html", "kind": kind})
    return entries
