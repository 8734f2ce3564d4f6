"""What a study writes: ``results.json``, ``report.md`` and one forest plot per change and regime.

The report leads with the verdicts: per change, the declared scope beside the measured one at the shared learning
rate and, when tuned, at each side's own, and whether tuning changed it. Then, per change and regime, the table of
cells (each side's mean, the task's paired test, the seed-level effect in seed SDs with its Holm-corrected p), the
pooled effect, heterogeneity and sign consistency, and the forest plot; then the learning rates chosen on
validation, the changes that did not apply (and why), the rule the scope follows and the cost, tuning runs counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plumbing.atomic import write_json_atomic, write_text_atomic
from plumbing.tables import markdown_table
from tasks.compare.meta import plot_forest, rule_text
from tasks.compare.report import p_text, with_interval
from tasks.runs.records import _plain
from tasks.sweeps.plan import slug

RESULTS_FILE = "results.json"
REPORT_FILE = "report.md"
REGIME_TITLES = {"shared": "shared learning rate", "tuned": "each side's tuned learning rate"}


def forest_file(change: str, regime: str) -> str:
    return f"forest-{slug(change)}-{regime}.png"


def verdict_rows(results: dict[str, Any]) -> list[dict[str, str]]:
    """One row per change: the declared scope and the measured one in each regime (and whether tuning changed it)."""
    rows = []
    for change, regimes in results["analyses"].items():
        row = {"change": change, "declared": results["declared"][change]}
        for regime, analysis in regimes.items():
            pooled = analysis.get("pooled")
            effect = with_interval(pooled["estimate"], pooled["interval"], signed=True) if pooled else "–"
            row[f"measured ({REGIME_TITLES[regime]})"] = analysis["scope"]["scope"]
            row[f"pooled effect ({regime})"] = effect
        if "tuned" in regimes:
            same = regimes["shared"]["scope"]["scope"] == regimes["tuned"]["scope"]["scope"]
            row["tuning changes the verdict"] = "no" if same else "**yes**"
        rows.append(row)
    return rows


def cell_table(analysis: dict[str, Any]) -> str:
    """A change's cells in one regime: sides, the task's paired test and the standardised effect."""
    rows = []
    for row in analysis["cells"]:
        test, effect = row["paired_test"], row.get("effect", {})
        rows.append({
            "cell": row["cell"], "metric": row["metric_title"] + ("" if row["higher_is_better"] else " (lower)"),
            "classic side (lr)": f"{row['classic']['label']} {row['classic']['mean']:.4g} ({row['classic']['lr']:g})",
            "change's side (lr)": f"{row['new']['label']} {row['new']['mean']:.4g} ({row['new']['lr']:g})",
            "Δ test-set [CI]": with_interval(test["delta"], test["delta_ci95"], signed=True),
            "p (task's test)": p_text(test["p_value"]),
            "effect (seed SDs)": f"{effect['effect']:+.2f}" if effect else "–",
            "p Holm (seeds)": p_text(effect.get("p_holm")),
        })
    return markdown_table(rows)


def _pooled_lines(analysis: dict[str, Any]) -> list[str]:
    if analysis.get("pooled") is None:
        return [f"- Scope: **{analysis['scope']['scope']}**: {analysis['scope']['reason']}."]
    p = analysis["pooled"]
    signs = ", ".join(f"{k} {'+' if v > 0 else '−' if v < 0 else '0'}" for k, v in analysis["by_task"]["signs"].items())
    sizes = ", ".join(f"{k} {'+' if v > 0 else '−' if v < 0 else '0'}"
                      for k, v in analysis["by_preset"]["signs"].items())
    return [f"- Pooled effect ({p['method'].upper()}): {with_interval(p['estimate'], p['interval'], signed=True)} "
            f"seed SDs; τ² {p['tau2']:.3g}, I² {100 * p['i2']:.0f} %, Cochran's Q {p['q']:.3g} on {p['q_df']} df "
            f"(p {p_text(p['q_p'])}).",
            f"- Signs by task: {signs} ({analysis['by_task']['agreeing']} agree with the pooled sign); by preset: "
            f"{sizes}.",
            f"- Scope: **{analysis['scope']['scope']}**: {analysis['scope']['reason']}."]


def _cost_lines(cost: dict[str, Any]) -> list[str]:
    t, tune, total = cost["verdict"], cost["tuning"], cost["total"]
    return [f"- {total['runs']} run(s), {total['train_seconds']:.0f} s of training, {total['wall_seconds']:.0f} s "
            f"of run wall time; the study took {cost['study_seconds']:.0f} s end to end (runs reused from an earlier "
            "invocation cost it nothing).",
            f"- Of these, {tune['runs']} run(s) only chose learning rates ({tune['train_seconds']:.0f} s of training) "
            f"and {t['runs']} gave the verdicts ({t['train_seconds']:.0f} s)."]


def write_report(results: dict[str, Any], out: Path) -> str:
    """Write ``results.json``, ``report.md`` and the forest plots of ``results`` in ``out``; returns the markdown."""
    lines = [f"# zoo study: {', '.join(results['changes'])}", ""]
    if results.get("command"):
        lines += [f"`{results['command']}`", ""]
    lines += [f"Cells: {len(results['cells'])} ({', '.join(results['cells'])}); {results['seeds']} seeds a side "
              f"and {results['seeds']} more of the classic side for the noise floor; budgets: "
              + ", ".join(f"{t} {b}" for t, b in results["budgets"].items()) + f"; α = {results['alpha']:g}.", "",
              "## Verdicts", "", markdown_table(verdict_rows(results)), ""]
    for change, regimes in results["analyses"].items():
        for regime, analysis in regimes.items():
            lines += [f"## {change}: {REGIME_TITLES[regime]}", "", cell_table(analysis), ""] + _pooled_lines(analysis)
            if analysis.get("study") is not None:
                name = forest_file(change, regime)
                plot_forest(analysis["study"], out / name, f"{change} ({REGIME_TITLES[regime]}): "
                            f"{analysis['scope']['scope']}")
                lines += ["", f"![forest plot of {change}]({name})"]
            lines.append("")
    if results["choices"]:
        rows = [{"cell": c["cell"], "side": c["side"], "validation metric": c["metric"] + ("" if c["higher_is_better"]
                                                                                          else " (lower)"),
                 **{f"@ lr {lr}": f"{v:.4g}" for lr, v in c["valid"].items()}, "chosen lr": f"{c['chosen']:g}",
                 "validation split": (c.get("valid_hash") or "–")[:19]}
                for c in results["choices"]]
        lines += ["## Learning rates chosen on validation", "",
                  "Each side of each cell trained once (seed 0) per rate; the best validation value of the task's main "
                  "metric chose (the test split is not read by the choice).", "", markdown_table(rows), ""]
    if results["not_applied"]:
        lines += ["## Not applied", ""] + [f"- {r['change']} on {r['cell']}: {r['reason']}"
                                           for r in results["not_applied"]] + [""]
    lines += ["## How to read it", "",
              "- Δ test-set: the change's side minus the classic side on the test examples, paired example by "
              "example over the same seeds (the test `zoo compare` reports); p its two-sided p-value.",
              "- Effect: the mean per-seed difference in units of one base run's seed-to-seed SD, estimated from "
              "the noise floor (the classic side against itself with other seeds); positive is better.",
              f"- {rule_text(results['alpha'])}", "", "## Cost", ""] + _cost_lines(results["cost"])
    text = "\n".join(lines) + "\n"
    plain = {**results, "analyses": {c: {r: {k: v for k, v in a.items() if k != "study"} for r, a in regimes.items()}
                                     for c, regimes in results["analyses"].items()}}
    write_json_atomic(out / RESULTS_FILE, _plain(plain))
    write_text_atomic(out / REPORT_FILE, text)
    return text
