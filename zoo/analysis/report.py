"""Render a delta report (:func:`zoo.analysis.delta.measure`) as Markdown a learner can read top to bottom."""

from __future__ import annotations

from typing import Any

from zoo.registry import Change, change_markdown

KIND_LABELS = {"own": "", "resized": " (sizes)", "also_in": " (also here)", "tokens": " (token count)",
               "undeclared": " (undeclared!)"}


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:+.{digits}f}%"


def _types(counts: dict[str, int]) -> str:
    return ", ".join(f"{n}×{t}" if n > 1 else t for t, n in counts.items()) or "–"


def _mb(value: int) -> str:
    return f"{value / 2**20:.2f} MiB"


def _cells(params: dict[str, Any], flops: dict[str, Any], old: str, new: str) -> str:
    """Parameter and FLOP cells: old, new, Δ (Δ%) of the parameters; old, new, Δ% of the MFLOPs."""
    return (f"{params[old]:,} | {params[new]:,} | {params['delta']:+,} ({_num(params['delta_pct'])}) "
            f"| {flops[old] / 1e6:.2f} | {flops[new] / 1e6:.2f} | {_num(flops['delta_pct'])}")


def _change_section(change: dict[str, Any], heading: str) -> list[str]:
    """A declared change of the report, rendered as everywhere else (:func:`zoo.registry.change_markdown`)."""
    return change_markdown(Change(**change), heading).split("\n")


def _structure(part: dict[str, Any]) -> str:
    if part.get("flops_only"):
        return "FLOPs only"
    return "procedure, no modules" if part.get("procedure_only") else part["structure"]


def _procedure_note(report: dict[str, Any]) -> list[str]:
    """A sentence for each declared part that changed a procedure (the training loss) and built no module."""
    parts = [p["part"] for p in report["parts"] if p.get("procedure_only")]
    if not parts:
        return []
    return [f"The {', '.join(parts)} change{'s' if len(parts) > 1 else ''} alter{'' if len(parts) > 1 else 's'} "
            "a procedure (how the model is trained or decoded), not a layer: no parameters or FLOPs of "
            f"{'their' if len(parts) > 1 else 'its'} own, so this diff shows none; training measures it "
            f"(`zoo ablate {report['variant']} --task {report['task']}`).", ""]


def _breakdown(part: dict[str, Any]) -> list[dict[str, Any]]:
    """The part's own lines when they say more than its row: several changes, or one from another part."""
    lines = [line for line in part.get("attribution", []) if line["kind"] != "resized"]
    return [] if len(lines) == 1 and lines[0]["kind"] == "own" else lines


def _part_rows(report: dict[str, Any]) -> list[str]:
    """One row per part at the variant's sizes, its ↳ lines, and under each change's part the sizes it set."""
    part_of = {c.get("name", c["part"]): c["part"] for c in report["changes"]}
    resized: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for p in report["parts"]:
        for line in p.get("attribution", []):
            if line["kind"] == "resized":
                resized.setdefault(part_of[line["change"]], []).append((p["part"], line))
    rows = []
    for p in report["parts"]:
        own = p.get("at_variant_sizes", p)
        lines = _breakdown(p)
        only_sized = p.get("attribution") and all(line["kind"] == "resized" for line in p["attribution"])
        if not (only_sized and not p["declared"]):  # a part that only changed size is shown under its cause
            rows.append(f"| {p['part']} | {'yes' if p['declared'] else 'no'} "
                        f"| {_structure(p)} | {_types(p['removed'])} "
                        f"| {_types(p['added'])} | {_cells(own['params'], own['flops'], 'classic', 'variant')} |")
        for line in lines:
            rows.append(f"| ↳ by {line['change']}{KIND_LABELS[line['kind']]} | "
                        f"| {'FLOPs only' if line['kind'] == 'tokens' else line['structure']} "
                        f"| {_types(line['removed'])} | {_types(line['added'])} "
                        f"| {_cells(line['params'], line['flops'], 'before', 'after')} |")
        for other, line in resized.pop(p["part"], []):
            rows.append(f"| ↳ {other}, resized by {line['change']} | | same | – | – "
                        f"| {_cells(line['params'], line['flops'], 'before', 'after')} |")
    for cause, leftover in resized.items():  # a cause whose own part did not change (not expected)
        rows += [f"| ↳ {other}, resized by {line['change']} ({cause}) | | same | – | – "
                 f"| {_cells(line['params'], line['flops'], 'before', 'after')} |" for other, line in leftover]
    return rows


def _by_change(attribution: dict[str, Any], heading: str) -> list[str]:
    """What each change did over all parts, measured in the order applied."""
    out = [
        f"{heading}# Each change measured in turn",
        "",
        f"Order: {' → '.join(attribution['order'])}; method: {attribution['method']}.",
        "",
        "| change | part | Δ params | in its own part | in other parts | Δ MFLOPs | in its own part |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in attribution["changes"]:
        p, f = row["params"], row["flops"]
        others = [f"{part} {delta:+,}{KIND_LABELS[row['kinds'][part]]}" for part, delta in p["other"].items()
                  if delta or row["kinds"][part] == "undeclared"]
        out.append(f"| {row['change']} | {row['part']} | {p['total']:+,} | {p['own']:+,} | {', '.join(others) or '–'} "
                   f"| {f['total'] / 1e6:+.2f} | {f['own'] / 1e6:+.2f} |")
    return out + [""]


def _counterpart(report: dict[str, Any]) -> list[str]:
    """Which model the classic side is, when it is another registration's, and why at the variant's sizes."""
    side = report.get("counterpart") or {}
    if not side.get("base"):
        return []
    text = (f"The classic side is `{side['base']}` at preset `{side['preset']}` with every declared change "
            "reverted.")
    return [text + (f" Note: {side['note']}." if side.get("note") else ""), ""]


def _undeclared(report: dict[str, Any], heading: str) -> list[str]:
    """The config fields where the variant differs from the classic side with no change declared (if any)."""
    found = report.get("undeclared") or []
    if not found:
        return []
    return [f"{heading}# Undeclared differences", "",
            "The variant's config differs from the classic side where none of its declared changes says so; every "
            "number below includes what these differences do (the lines *by undeclared differences*), which no "
            "declared change may be credited with:", "",
            *(f"- {d['message']}" for d in found), ""]


def render_markdown(report: dict[str, Any], heading: str = "#") -> str:
    r = report
    paper = r["paper"]
    lines = [
        f"{heading} What changed: `{r['variant']}` vs the classic Transformer",
        "",
        f"Paper: [{paper['title']}]({paper['url']}) ({paper['year']}). Task `{r['task']}`, preset "
        f"`{r['preset']}`, measured on {r['input']['description']}.",
        "",
        *_counterpart(r),
        r["summary"],
        "",
        *_undeclared(r, heading),
    ]
    if not r["changes"]:
        lines += ["This *is* the classic base: nothing to compare.", ""]
    for change in r["changes"]:
        lines += _change_section(change, heading)
    lines += [
        f"{heading}# Measured, part by part",
        "",
        "| part | declared | structure | removed | added | params classic | params variant | Δ params "
        "| MFLOPs classic | MFLOPs variant | Δ FLOPs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *_part_rows(r),
    ]
    t = r["totals"]
    lines += [
        f"| **total** | | | | | {t['params']['classic']:,} | {t['params']['variant']:,} "
        f"| {t['params']['variant'] - t['params']['classic']:+,} | {t['flops']['classic'] / 1e6:.2f} "
        f"| {t['flops']['variant'] / 1e6:.2f} | |",
        "",
    ]
    lines += _procedure_note(r)
    if any(line["kind"] == "resized" for p in r["parts"] for line in p.get("attribution", [])):
        lines += ["A part that another change resizes is compared at the variant's sizes: its *classic* column is the "
                  "classic choice at those sizes, and the size difference is a line of its own (↳ *resized by*) under "
                  "the part of the change that sets it. Every row and ↳ line is the measured difference of two built "
                  "models; the rows sum to the total.", ""]
    if len(r.get("attribution", {}).get("changes", [])) > 1:
        lines += _by_change(r["attribution"], heading)
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
