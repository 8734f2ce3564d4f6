"""The extrapolation measurements of :mod:`tasks.lm.extrapolation` shown: ``curves.png`` (perplexity against the
evaluation length, one line per run or scheme, the training length marked) and the report's Markdown."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from plumbing.atomic import atomic_open
from plumbing.tables import markdown_table
from tasks.compare.report import with_interval
from tasks.lm.extrapolation import headline


def plot_curves(rows_by_name: dict[str, list[dict[str, Any]]], train_length: int, path: str | Path) -> Path:
    """Perplexity (log scale) against evaluation length, one line per name, written atomically to ``path`` (PNG).

    Each line is the sliding-window perplexity where measured, else the non-overlapping one; lengths the model
    cannot run at are left out of its line and named in its legend entry. A dotted vertical line marks
    ``train_length``.
    """
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, rows in rows_by_name.items():
        points = [(row["length"], headline(row)["perplexity"]) for row in rows if row["defined"]]
        missing = [str(row["length"]) for row in rows if not row["defined"]]
        label = name + (f" (not defined at {', '.join(missing)})" if missing else "")
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=label)
        else:
            ax.plot([], [], label=label)  # in the legend, to say it was evaluated
    ax.axvline(train_length, color="grey", linestyle=":", label=f"training length {train_length}")
    lengths = sorted({row["length"] for rows in rows_by_name.values() for row in rows})
    ax.set(yscale="log", xlabel="evaluation length (tokens)", ylabel=f"perplexity ({protocol(rows_by_name)})",
           title="perplexity against evaluation length")
    ax.set_xscale("log", base=2)  # the reference's lengths double
    ax.set_xticks(lengths, [str(length) for length in lengths])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_open(path, binary=True) as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
    return Path(path)


def protocol(rows_by_name: dict[str, list[dict[str, Any]]]) -> str:
    """How the plotted perplexities were measured: the sliding window's stride, or non-overlapping windows."""
    strides = {row["sliding"]["stride"] for rows in rows_by_name.values() for row in rows
               if row["defined"] and row["sliding"]}
    return f"sliding window, stride {', '.join(map(str, sorted(strides)))}" if strides else "non-overlapping windows"


def _cell(scores: dict[str, Any] | None, key: str) -> Any:
    return None if scores is None else scores[key]


def markdown_section(rows: list[dict[str, Any]], train_length: int, title: str = "Extrapolation") -> str:
    """The report's section: a table of perplexity per evaluation length (non-overlapping and sliding windows)
    with bits per character, and a one-line reading of the longest length against the training length."""
    stride = next((row["sliding"]["stride"] for row in rows if row["defined"] and row["sliding"]), None)
    sliding = f"sliding ppl (stride {stride})"
    table = [{
        "length": row["length"], "× training": f"{row['length'] / train_length:g}×",
        "non-overlapping ppl": _cell(row["non_overlapping"], "perplexity"),
        sliding: _cell(row["sliding"], "perplexity"),
        "bits/char": _cell(headline(row), "bits_per_char"),
        "note": "" if row["defined"] else row["reason"],
    } for row in rows]
    columns = ["length", "× training", "non-overlapping ppl"] + [sliding] * (stride is not None) + ["bits/char"]
    columns += ["note"] * any(not row["defined"] for row in rows)
    how = ("Non-overlapping: windows of L tokens run alone, each token scored with its window's earlier tokens."
           + (f" Sliding: windows advanced by {stride}, each token scored once with at least L − {stride} tokens of "
              "context (Press et al. 2022)." if stride is not None else "")
           + " Bits per character: " + ("the sliding window's." if stride is not None else "non-overlapping."))
    return (f"## {title}\n\nTrained at {train_length} tokens.\n\n{markdown_table(table, columns)}\n\n"
            f"{reading(rows, train_length)} {how}\n")


def reading(rows: list[dict[str, Any]], train_length: int) -> str:
    """One sentence: perplexity at the longest defined length as a multiple of that at the training length (or at
    the shortest defined length when the training length was not evaluated)."""
    defined = sorted((row for row in rows if row["defined"]), key=lambda row: row["length"])
    if len(defined) < 2:
        return "Fewer than two lengths are defined for this model: no trend to read."
    low = next((row for row in defined if row["length"] == train_length), defined[0])
    high = defined[-1]
    if high is low:
        return f"Not defined past the training length ({train_length} tokens): no longer length to compare."
    ratio = headline(high)["perplexity"] / headline(low)["perplexity"]
    base = "the training length" if low["length"] == train_length else f"length {low['length']}"
    return (f"At {high['length'] / train_length:g}× the training length ({high['length']} tokens) perplexity is "
            f"{ratio:.3g}× that at {base} ({headline(low)['perplexity']:.4g} → {headline(high)['perplexity']:.4g}).")


def schemes_markdown(table: Sequence[dict[str, Any]]) -> str:
    """:func:`~tasks.lm.extrapolation.compare_schemes`' table with one row per scheme and one column per length:
    ``mean [low, high]`` (a scheme of one seed says so once, in its seeds column), or why a length has no value."""
    by_scheme: dict[str, dict[str, Any]] = {}
    for entry in table:
        seeds = entry["seeds"] if entry["seeds"] > 1 else "1 (no interval)"
        row = by_scheme.setdefault(entry["scheme"], {"scheme": entry["scheme"], "seeds": seeds})
        cell = entry["note"] if entry["mean"] is None else with_interval(entry["mean"], entry["interval"])
        row[f"{entry['multiple']}× ({entry['length']})"] = cell
    return markdown_table(list(by_scheme.values()))
