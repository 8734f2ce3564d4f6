"""What a comparison writes: the tables (markdown), ``report.md``, ``results.json`` and the plots.

A comparison (:mod:`tasks.compare`) hands over a dict: ``title``, ``preamble``, ``kind`` (compare or
ablate), ``reference`` (the baseline, or the ablated variant), ``alpha``, ``metrics`` (key -> title, unit,
direction, role, test description) and ``rows`` (one per variant, see :func:`tasks.compare.build_comparison`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tasks.records import _plain
from tasks.report import markdown_table

COST_LINE = ("- Cost: GFLOPs = forward FLOPs of one input at the task's size (zoo diff's counter: 2·MACs of "
             "matmuls, convolutions and attention); steps = optimizer steps; train TFLOPs (FLOP budgets) = 3 × "
             "the forward FLOPs of every step's batches; items/s and wall s = training throughput and time. "
             "All means over seeds.")


def _num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.4g}" if signed else f"{value:.4g}"


def with_interval(value: float | None, interval: list[float] | None, signed: bool = False) -> str:
    """``27.31 [26.1, 28.52]``; the interval left out when there is none."""
    if value is None:
        return "–"
    if not interval:
        return _num(value, signed)
    return f"{_num(value, signed)} [{_num(interval[0], signed)}, {_num(interval[1], signed)}]"


def p_text(p: float | None) -> str:
    return "–" if p is None else f"{p:.2g}" if p >= 0.001 else f"{p:.1e}"


def _title(meta: dict[str, Any]) -> str:
    return f"{meta['title']} ({meta['unit']})" if meta.get("unit") else meta["title"]


def main_table(comparison: dict[str, Any]) -> str:
    """One row per variant: what changed, cost, the headline metric with its interval, Δ, p, verdict."""
    key, kind = comparison["headline"], comparison["kind"]
    meta = comparison["metrics"][key]
    effect = f"Δ vs {comparison['reference']}" if kind == "compare" else "bought by the change"
    verdict = "verdict" if kind == "compare" else "with the change vs without"
    secondary = [k for k, m in comparison["metrics"].items() if m["role"] == "secondary"]
    flops = any(r.get("train_TFLOPs") is not None for r in comparison["rows"])
    rows = []
    for r in comparison["rows"]:
        stat = r["metrics"][key]
        row = {"variant": r["variant"], "parts changed": r["parts changed"], "params": r["params"],
               "GFLOPs": r["GFLOPs"], "steps": r["steps"]}
        if flops:
            row["train TFLOPs"] = r.get("train_TFLOPs")
        row.update({f"{_title(meta)} [95% CI]": with_interval(stat["mean"], stat["ci95"]),
                    f"{effect} [95% CI]": with_interval(stat.get("delta"), stat.get("delta_ci95"), signed=True),
                    "p": p_text(stat.get("p_value")), "p (Holm)": p_text(stat.get("p_value_holm")),
                    verdict: r["verdict"], "seeds agreeing": stat.get("seeds_agree", "–")})
        for k in secondary:
            row[_title(comparison["metrics"][k])] = r["metrics"].get(k, {}).get("mean")
        row.update({"items/s": r["items/s"], "wall s": r["wall s"]})
        rows.append(row)
    return markdown_table(rows)


def metric_table(comparison: dict[str, Any], keys: list[str]) -> str:
    """One row per (variant, metric) of ``keys`` against the reference: mean, Δ, p, Holm p, verdict, test."""
    rows = []
    for r in comparison["rows"]:
        for key in keys:
            stat, meta = r["metrics"].get(key), comparison["metrics"][key]
            if stat is None or "delta" not in stat:
                continue
            rows.append({"variant": r["variant"], "metric": _title(meta),
                         "mean [95% CI]": with_interval(stat["mean"], stat["ci95"]),
                         "Δ [95% CI]": with_interval(stat["delta"], stat["delta_ci95"], signed=True),
                         "p": p_text(stat["p_value"]), "p (Holm)": p_text(stat["p_value_holm"]),
                         "verdict": stat["verdict"], "seeds agreeing": stat["seeds_agree"]})
    return markdown_table(rows)


def explain_tests(comparison: dict[str, Any], roles: tuple[str, ...]) -> list[str]:
    """One line per tested metric saying which test produced its p-values."""
    n = sum(1 for r in comparison["rows"] if "delta" in r["metrics"][comparison["headline"]])
    lines = []
    for meta in comparison["metrics"].values():
        if meta["role"] in roles and meta["tests"]:
            lines.append(f"- *{_title(meta)}* ({'higher' if meta['higher_is_better'] else 'lower'} is better): "
                         f"{'; '.join(meta['tests'])}.")
    if n == 0:  # the baseline alone: nothing was tested
        lines.append(f"- No comparison: only the baseline was run. Intervals of the means: "
                     f"{comparison['ci95_method']}.")
        return lines
    lines.append(f"- p-values Holm-corrected over the {n} comparison{'s' * (n != 1)} of each metric; verdicts at "
                 f"α = {comparison['alpha']:g}. Δ intervals: percentile intervals of the same paired bootstrap. "
                 f"Intervals of the means: {comparison['ci95_method']}. The tests measure test-set noise; "
                 "'seeds agreeing' counts the seeds whose Δ alone (against the reference's mean on the same "
                 "data) has the sign of the mean Δ: a verdict whose seeds disagree rests on too few seeds.")
    return lines


def plot_metric_vs_cost(comparison: dict[str, Any], path: Path) -> None:
    """The headline metric (95 % intervals as error bars) against forward GFLOPs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = comparison["headline"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in comparison["rows"]:
        stat = r["metrics"][key]
        if stat["mean"] is None:
            continue
        low, high = stat["ci95"] or (stat["mean"], stat["mean"])
        ax.errorbar(r["GFLOPs"], stat["mean"], yerr=[[stat["mean"] - low], [high - stat["mean"]]], fmt="o",
                    capsize=3)
        ax.annotate(r["variant"], (r["GFLOPs"], stat["mean"]), textcoords="offset points", xytext=(5, 5))
    meta = comparison["metrics"][key]
    ax.set(xlabel="forward GFLOPs at the task's input size", ylabel=f"{_title(meta)} (95 % interval)",
           title=comparison["title"])
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_per_case(comparison: dict[str, Any], path: Path) -> bool:
    """Per-case headline values, each variant against the reference (one point per case); False if none."""
    key = comparison["headline"]
    panels = [(r["variant"], r["metrics"][key]) for r in comparison["rows"] if "per_case" in r["metrics"][key]]
    if not panels:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = comparison["metrics"][key]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.6), squeeze=False)
    for ax, (label, stat) in zip(axes[0], panels):
        x, y = stat["per_case"]["reference"], stat["per_case"]["row"]
        ax.scatter(x, y, s=18)
        values = [v for v in (*x, *y) if v is not None]
        low, high = (min(values), max(values)) if values else (0, 1)
        ax.plot([low, high], [low, high], color="grey", lw=0.8, ls="--")
        ax.set(xlabel=f"{comparison['reference']} ({_title(meta)})", ylabel=f"{label} ({_title(meta)})",
               title=f"{label}: p (Holm) {p_text(stat['p_value_holm'])}\n{stat['verdict']}")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_comparison(comparison: dict[str, Any], out: Path) -> str:
    """Write ``results.json``, ``report.md``, ``metric_vs_cost.png`` (and ``per_case.png``); return the main table."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(_plain(comparison), indent=2) + "\n")
    plot_metric_vs_cost(comparison, out / "metric_vs_cost.png")
    table = main_table(comparison)
    lines = [f"# {comparison['title']}", "", comparison["preamble"], "", table, "",
             *explain_tests(comparison, ("headline",)), COST_LINE, ""]
    secondary = [k for k, m in comparison["metrics"].items() if m["role"] == "secondary"]
    if secondary:
        lines += ["## Other metrics", "", metric_table(comparison, secondary), "",
                  *explain_tests(comparison, ("secondary",)), ""]
    per_class = [k for k, m in comparison["metrics"].items() if m["role"] == "per-class"]
    if per_class:
        lines += ["## Per class", "", metric_table(comparison, per_class), "",
                  "Holm-corrected over the variants within each class and metric (not over the classes)."]
        if any(comparison["metrics"][k].get("unit") == "voxels" for k in per_class):
            lines += ["In the papers' HD95 convention an organ predicted nowhere scores Dice 0 and HD95 0: read an "
                      "organ's HD95 verdict together with its Dice."]
        lines += [""]
    lines += ["![metric vs cost](metric_vs_cost.png)", ""]
    if plot_per_case(comparison, out / "per_case.png"):
        lines += ["Per case, each variant against the reference (one point per case; above the diagonal: "
                  "the variant scores higher):", "", "![per case](per_case.png)", ""]
    (out / "report.md").write_text("\n".join(lines))
    return table
