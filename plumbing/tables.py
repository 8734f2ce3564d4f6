"""Markdown tables, the one format every report of the package (run reports, comparisons, the delta analysis,
the doctor, the lessons) prints its numbers in."""

from __future__ import annotations

from typing import Any


def markdown_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """A GitHub-style table; floats are shown with 4 significant digits."""
    if not rows:
        return ""
    columns = columns or list(rows[0])

    def cell(value: Any) -> str:
        if value is None:
            return "–"
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)
