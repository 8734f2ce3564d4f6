"""Render a delta report (:func:`zoo.delta.measure`) as Markdown a learner can read top to bottom."""

from __future__ import annotations

from typing import Any


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:+.{digits}f}%"


def _types(counts: dict[str, int]) -> str:
    return ", ".join(f"{n}×{t}" if n > 1 else t for t, n in counts.items()) or "–"


def _mb(value: int) -> str:
    return f"{value / 2**20:.2f} MiB"


def render_markdown(report: dict[str, Any], heading: str = "#") -> str:
    r = report
    paper = r["paper"]
    lines = [
        f"{heading} What changed: `{r['variant']}` vs the classic Transformer",
        "",
        f"Paper: [{paper['title']}]({paper['url']}) ({paper['year']}). Task `{r['task']}`, preset "
        f"`{r['preset']}`, measured on {r['input']['description']}.",
        "",
        r["summary"],
        "",
    ]
    if not r["changes"]:
        lines += ["This *is* the classic base: nothing to compare.", ""]
    for change in r["changes"]:
        lines += [
            f"{heading}# {change['part']} ({change['scope']})",
            "",
            f"The classic model uses {change['classic']}; this variant uses {change['variant']}. "
            f"Why: {change['flaw']}.",
            "",
        ]
    lines += [
        f"{heading}# Measured, part by part",
        "",
        "| part | declared | structure | removed | added | params classic | params variant | Δ params "
        "| MFLOPs classic | MFLOPs variant | Δ FLOPs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in r["parts"]:
        lines.append(
            f"| {p['part']} | {'yes' if p['declared'] else 'no'} "
            f"| {'FLOPs only' if p.get('flops_only') else p['structure']} | {_types(p['removed'])} "
            f"| {_types(p['added'])} | {p['params']['classic']:,} | {p['params']['variant']:,} "
            f"| {p['params']['delta']:+,} ({_num(p['params']['delta_pct'])}) | {p['flops']['classic'] / 1e6:.2f} "
            f"| {p['flops']['variant'] / 1e6:.2f} | {_num(p['flops']['delta_pct'])} |"
        )
    t = r["totals"]
    lines += [
        f"| **total** | | | | | {t['params']['classic']:,} | {t['params']['variant']:,} "
        f"| {t['params']['variant'] - t['params']['classic']:+,} | {t['flops']['classic'] / 1e6:.2f} "
        f"| {t['flops']['variant'] / 1e6:.2f} | |",
        "",
    ]
    growth = r["attention_growth"]
    scales = "/".join(f"{s}×" for s in growth["variant"]["scales"])
    for who in ("classic", "variant"):
        g = growth[who]
        kernel = ", ".join(f"{f / 1e6:.2f}" for f in g["kernel_flops"])
        exp = g["kernel_exponent"]
        lines.append(
            f"- attention kernel MFLOPs at {scales} the tokens, {who}: {kernel} "
            f"(∝ N^{exp:.2f})" if exp is not None else f"- attention kernel FLOPs, {who}: not counted"
        )
    if "activation_bytes" in r:
        a = r["activation_bytes"]
        lines.append(f"- activation memory of a training step: classic {_mb(a['classic'])}, "
                     f"variant {_mb(a['variant'])}")
    active = t.get("active_params")
    if active and active["variant"] != t["params"]["variant"]:
        lines.append(f"- parameters used per token (active): classic {active['classic']:,}, variant "
                     f"{active['variant']:,} of {t['params']['variant']:,} in total (sparse layers count what one "
                     "token runs, e.g. k of E experts)")
    lines += ["", f"Conventions: {r['conventions']['flops']}; {r['conventions']['memory']}.", ""]
    return "\n".join(lines)
