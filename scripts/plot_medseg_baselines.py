"""The figure of README's "Measured: configured baselines" (``docs/medseg-baselines.png``).

``plot`` draws, for every comparison given (a ``results.json`` that ``zoo compare`` wrote), each row's Δ against the
comparison's reference with its paired-bootstrap 95 % interval, one panel per metric (Dice and NSD by default),
coloured by the verdict the comparison printed. Nothing is recomputed: the figure shows the numbers of the tables.

Usage::

    R=runs/baselines-39
    python scripts/plot_medseg_baselines.py plot --out docs/medseg-baselines.png \\
        "phantom3d=$R/recipe-p3d/results.json" "2D phantom=$R/cmp2d-e10/results.json"
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from plumbing.errors import check_positive

VERDICT_COLOURS = {"better": "tab:green", "worse": "tab:red"}  # anything else ("no significant difference"): grey


def split_pair(text: str, flag: str) -> tuple[str, str]:
    """``NAME=VALUE`` of a command-line argument as ``(NAME, VALUE)``, both non-empty."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise ValueError(f"{flag} {text!r} is not NAME=VALUE; give e.g. {flag} 'phantom3d=runs/x/results.json'")
    return name.strip(), value.strip()


def forest_rows(comparison: dict[str, Any], name: str, metric: str) -> list[dict[str, Any]]:
    """Every non-reference row of a comparison (``results.json``) as ``{label, delta, low, high, verdict}`` for
    ``metric``; ``label`` names the comparison, the row and its reference. A row without an interval keeps its Δ."""
    if metric not in comparison["metrics"]:
        known = ", ".join(comparison["metrics"])
        raise ValueError(f"{name}: no metric {metric!r} in its results.json (it has {known}); "
                         "pass --metrics with those")
    rows = []
    for row in comparison["rows"]:
        if row["variant"] == comparison["reference"]:
            continue
        stat = row["metrics"][metric]
        low, high = stat["delta_ci95"] or (stat["delta"], stat["delta"])
        rows.append({"label": f"{name}: {row['variant']} vs {comparison['reference']}", "delta": stat["delta"],
                     "low": low, "high": high, "verdict": stat["verdict"]})
    return rows


def plot(comparisons: dict[str, dict[str, Any]], metrics: list[str], out: Path) -> Path:
    """One panel per metric: the rows' Δ with 95 % intervals, coloured by verdict, over ``comparisons`` (name ->
    results.json contents). Writes ``out`` (PNG) and returns it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    check_positive("metrics", len(metrics))
    panels = [[r for name, c in comparisons.items() for r in forest_rows(c, name, m)] for m in metrics]
    height = 1.2 + 0.45 * max(len(rows) for rows in panels)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), height), squeeze=False, sharey=True)
    for ax, metric, rows in zip(axes[0], metrics, panels):
        for y, r in enumerate(reversed(rows)):  # the first comparison on top
            colour = VERDICT_COLOURS.get(r["verdict"], "tab:grey")
            # a percentile interval need not hold its estimate: clipped, the bar then ends at the point
            xerr = [[max(r["delta"] - r["low"], 0.0)], [max(r["high"] - r["delta"], 0.0)]]
            ax.errorbar(r["delta"], y, xerr=xerr, fmt="o", color=colour, capsize=3)
            ax.annotate(r["verdict"], (r["delta"], y), textcoords="offset points", xytext=(0, 6), ha="center",
                        fontsize=7, color=colour)
        ax.axvline(0, color="black", lw=0.8)
        ax.set_yticks(range(len(rows)), [r["label"] for r in reversed(rows)], fontsize=8)
        title = next(iter(comparisons.values()))["metrics"][metric]["title"]
        ax.set(xlabel="row − reference (paired bootstrap 95 % interval)", title=f"Δ {title}")
        ax.margins(y=0.12)  # room for the top row's verdict under the title
        ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("plot", help="the rows' Δ with their intervals, from results.json files")
    p.add_argument("results", nargs="+", metavar="NAME=RESULTS_JSON", help="a comparison's name and results.json")
    p.add_argument("--metrics", default="dice,nsd", help="comma-separated metric keys (default: dice,nsd)")
    p.add_argument("--out", type=Path, default=Path("docs/medseg-baselines.png"))
    args = parser.parse_args(argv)
    comparisons = {}
    for name, path in (split_pair(r, "results") for r in args.results):
        if name in comparisons:
            raise ValueError(f"two comparisons named {name!r}; give each NAME=RESULTS_JSON its own name")
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path} does not exist; pass the results.json a comparison wrote (--out)")
        comparisons[name] = json.loads(Path(path).read_text())
    print(f"written {plot(comparisons, args.metrics.split(','), args.out)}")


if __name__ == "__main__":
    main()
