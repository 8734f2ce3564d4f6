"""What a comparison writes: the tables (markdown), ``report.md``, ``results.json`` and the plots.

A comparison (:mod:`tasks.compare.sweep`) hands over a dict: ``title``, ``preamble``, ``kind`` (compare or
ablate), ``reference`` (the baseline, or the ablated variant), ``alpha``, ``metrics`` (key -> title, unit,
direction, role, test description) and ``rows`` (one per variant, see :func:`tasks.compare.sweep.build_comparison`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plumbing.tables import markdown_table
from tasks.compare.paired import OTHER_TESTS
from tasks.compare.stats import MIN_SEEDS
from tasks.runs.records import _plain

COST_LINE = ("- Cost: GFLOPs = forward FLOPs of one input at the task's size (zoo diff's counter: 2·MACs of "
             "matmuls, convolutions and attention); steps = optimizer steps; train TFLOPs (FLOP budgets) = 3 × "
             "the forward FLOPs of every step's batches; items/s and wall s = training throughput and time (under "
             "--folds: of all folds together); peak MiB = the largest peak memory of the runs "
             "(torch.cuda.max_memory_allocated on a GPU, else the process's peak RSS, which under --launcher serial "
             "includes the runs before it in the process). All means over seeds.")


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


def _level(comparison: dict[str, Any]) -> str:
    """The confidence of the Δ intervals, 1 − α: they are the intervals the verdicts' tests invert."""
    return f"{100 * (1 - comparison['alpha']):.4g}%"


def _other_p(stat: dict[str, Any], keys: list[str]) -> dict[str, str]:
    """The p-values reported beside the verdict's, one column per test."""
    return {f"p ({OTHER_TESTS[k]})": p_text(stat.get("other_p_values", {}).get(k)) for k in keys}


def _other_keys(stats: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(k for stat in stats for k in stat.get("other_p_values", {})))


def main_table(comparison: dict[str, Any]) -> str:
    """One row per variant: its training recipe (tasks whose runs record one), what changed, cost, the headline
    metric with its interval, Δ, p, verdict, and the seed-aware verdict."""
    key, kind = comparison["headline"], comparison["kind"]
    meta = comparison["metrics"][key]
    effect = f"Δ vs {comparison['reference']}" if kind == "compare" else "bought by the change"
    verdict = "verdict" if kind == "compare" else "with the change vs without"
    secondary = [k for k, m in comparison["metrics"].items() if m["role"] == "secondary"]
    flops = any(r.get("train_TFLOPs") is not None for r in comparison["rows"])
    memory = any(r.get("peak MiB") is not None for r in comparison["rows"])  # runs before metrics.json had it: none
    recipes = any(r.get("recipe") is not None for r in comparison["rows"])  # a task whose runs record a recipe
    others = _other_keys([r["metrics"][key] for r in comparison["rows"]])
    rows = []
    for r in comparison["rows"]:
        stat = r["metrics"][key]
        row = {"variant": r["variant"], **({"recipe": r.get("recipe") or "–"} if recipes else {}),
               "parts changed": r["parts changed"], "params": r["params"], "GFLOPs": r["GFLOPs"], "steps": r["steps"]}
        if flops:
            row["train TFLOPs"] = r.get("train_TFLOPs")
        row.update({f"{_title(meta)} [95% CI]": with_interval(stat["mean"], stat["ci95"]),
                    f"{effect} [{_level(comparison)} CI]": with_interval(stat.get("delta"), stat.get("delta_ci95"),
                                                                          signed=True),
                    "p": p_text(stat.get("p_value")), "p (Holm)": p_text(stat.get("p_value_holm")),
                    verdict: r["verdict"], **_other_p(stat, others), "seeds agreeing": stat.get("seeds_agree", "–"),
                    "seed-aware verdict": stat.get("seed_verdict", "–")})
        for k in secondary:
            row[_title(comparison["metrics"][k])] = r["metrics"].get(k, {}).get("mean")
        if "over_folds" in r:  # a cross-validation (tasks.compare.folds): each fold's own score, mean ± SD
            row[f"{_title(meta)} over folds (mean ± SD)"] = mean_sd(r["over_folds"].get(key, {}))
        row.update({"items/s": r["items/s"], "wall s": r["wall s"]})
        if memory:
            row["peak MiB"] = r.get("peak MiB")
        rows.append(row)
    return markdown_table(rows)


def mean_sd(stats: dict[str, Any]) -> str:
    """``0.8123 ± 0.01`` of ``{"mean", "sd"}`` (``–`` without a mean; the mean alone without an SD)."""
    if stats.get("mean") is None:
        return "–"
    return _num(stats["mean"]) + (f" ± {_num(stats['sd'])}" if stats.get("sd") is not None else "")


def _tested(comparison: dict[str, Any], keys: list[str]) -> list[tuple[str, dict, dict]]:
    """(variant, its statistics, the metric's description) of every tested row and metric of ``keys``."""
    return [(r["variant"], r["metrics"][key], comparison["metrics"][key]) for r in comparison["rows"]
            for key in keys if "delta" in r["metrics"].get(key, {})]


def metric_table(comparison: dict[str, Any], keys: list[str]) -> str:
    """One row per (variant, metric) of ``keys`` against the reference: mean, Δ, p, Holm p, verdict, the
    tests reported beside, the seed-aware verdict."""
    tested = _tested(comparison, keys)
    others = _other_keys([stat for _, stat, _ in tested])
    return markdown_table([{"variant": variant, "metric": _title(meta),
                            "mean [95% CI]": with_interval(stat["mean"], stat["ci95"]),
                            f"Δ [{_level(comparison)} CI]": with_interval(stat["delta"], stat["delta_ci95"],
                                                                          signed=True),
                            "p": p_text(stat["p_value"]), "p (Holm)": p_text(stat["p_value_holm"]),
                            "verdict": stat["verdict"], **_other_p(stat, others),
                            "seeds agreeing": stat["seeds_agree"], "seed-aware verdict": stat.get("seed_verdict", "–")}
                           for variant, stat, meta in tested])


def seed_table(comparison: dict[str, Any], keys: list[str]) -> str:
    """One row per (variant, metric) of ``keys``: Δ with its test-set interval and its seed-aware one."""
    level = _level(comparison)
    return markdown_table([{"variant": variant, "metric": _title(meta), "seeds": stat.get("seed_units", "–"),
                            f"Δ [{level} CI, test set]": with_interval(stat["delta"], stat["delta_ci95"], signed=True),
                            f"Δ [{level} CI, seeds and test set]": with_interval(stat["delta"],
                                                                                 stat.get("seed_delta_ci95"),
                                                                                 signed=True),
                            "p": p_text(stat.get("seed_p_value")), "p (Holm)": p_text(stat.get("seed_p_value_holm")),
                            "seed-aware verdict": stat.get("seed_verdict", "–")}
                           for variant, stat, meta in _tested(comparison, keys)])


def explain_tests(comparison: dict[str, Any], roles: tuple[str, ...], general: bool = True) -> list[str]:
    """One line per tested metric of ``roles`` saying which test produced its p-values; with ``general``, the
    lines on the correction, the verdicts and what each number's uncertainty covers."""
    n = sum(1 for r in comparison["rows"] if "delta" in r["metrics"][comparison["headline"]])
    lines = []
    for meta in comparison["metrics"].values():
        if meta["role"] in roles and meta["tests"]:
            lines.append(f"- *{_title(meta)}* ({'higher' if meta['higher_is_better'] else 'lower'} is better): "
                         f"{'; '.join(meta['tests'])}.")
    if not general:
        return lines
    if n == 0:  # the baseline alone: nothing was tested
        lines.append(f"- No comparison: only the baseline was run. Intervals of the means: "
                     f"{comparison['ci95_method']}.")
        return lines
    lines.append(f"- p-values Holm-corrected over the {n} comparison{'s' * (n != 1)} of each metric; verdicts at "
                 f"α = {comparison['alpha']:g}: better or worse only when the corrected p is below α and the "
                 f"(uncorrected, {_level(comparison)}) interval of Δ excludes 0 on the side of Δ.")
    lines.append(f"- What each number's uncertainty covers. *Mean [95% CI]* ({comparison['ci95_method']}): with "
                 "seeds, the seeds' spread (on a test set every seed shares, not the test set's own sampling; where "
                 "the data follow the seed, both); with one seed, the test set's. *Δ [CI], p, p (Holm), verdict*: "
                 "test-set noise only, the seed-averaged systems held fixed. *Seed-aware* interval, p and verdict: "
                 "the seeds' spread and the test set's: a t interval, Welch's over each variant's per-seed scores with "
                 "the test set's bootstrap variance added (where the data follow the seed, a paired t over the seed "
                 f"pairs' Δ); with fewer than {MIN_SEEDS} seeds a side it is not computed and the verdict says "
                 "'test-set noise only'. *Seeds "
                 "agreeing*: the seeds whose Δ alone (against the reference's mean on the same data) has the sign of "
                 "the mean Δ, a count, no test.")
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
    from tasks.engine.registry import task_class

    table = main_table(comparison)
    cost_note = getattr(task_class(comparison["task"]), "cost_note", "")
    lines = [f"# {comparison['title']}", "", comparison["preamble"], "", table, "",
             *explain_tests(comparison, ("headline",)), COST_LINE + (f" {cost_note}" if cost_note else ""), ""]
    secondary = [k for k, m in comparison["metrics"].items() if m["role"] == "secondary"]
    if _tested(comparison, [comparison["headline"]]):
        lines += ["## Across seeds", "", seed_table(comparison, [comparison["headline"], *secondary]), ""]
    if secondary:
        lines += ["## Other metrics", "", metric_table(comparison, secondary), "",
                  *explain_tests(comparison, ("secondary",), general=False), ""]
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
