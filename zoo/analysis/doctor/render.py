"""``doctor.md``, ``doctor.json`` and one figure per check, from a :class:`~zoo.analysis.doctor.findings.Diagnosis`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from plumbing.atomic import write_text_atomic
from zoo.analysis.doctor.findings import CHECKS, CheckResult, Diagnosis

LESSON_LINKS = "`zoo lab {}`"


def summary(check: CheckResult) -> str:
    """The numbers a check measured, in one line (what "nothing found" was based on)."""
    m = check.measured
    if check.status == "skipped":
        return f"skipped: {check.note}"
    if check.name == "attention":
        layers = [s for s in m["layers"].values() if "saturation" in s]
        sat = max(max(s["saturation"]) for s in layers)
        ent = min(min(s["entropy"]) for s in layers)
        gain = min(min(s["gain"]) for s in layers)
        return (f"{sum(len(s['saturation']) for s in layers)} heads in {len(layers)} layers: most saturated head "
                f"{sat:.1%} of rows, lowest entropy {ent:.2f} of uniform, lowest softmax gain {gain:.3f}")
    if check.name == "score_scale":
        scales = [v for v in m.get("effective_scales", {}).values() if v == v]
        text = (f"effective scale {min(scales):.4f}–{max(scales):.4f} (1 = softmax(q·k/√d_k)); largest within-row "
                f"score variance {m.get('max_score_variance', math.nan):.3g}") if scales else "no weights to fit"
        if "temperature_losses" in m:
            losses = m["temperature_losses"]
            text += "; loss at score scale τ: " + ", ".join(f"{t}: {v:.3f}" for t, v in losses.items())
        return text
    if check.name == "mask":
        padding = (f"padding leak {m['padding_leak']:.1e}" if "padding_leak" in m else
                   "no padding leak to measure (every position a real token)")
        return f"causal leak {max(m['causal_leak'].values()):.1e}, {padding} (relative drift)"
    if check.name == "position":
        text = f"encoder permutation gap {m['encoder_permutation_gap']:.3g}"
        if "decoder_position_gap" in m:
            text += f", decoder outputs without positions moved by {m['decoder_position_gap']:.3g}"
        if "ratio" in m:
            text += f", |position| / |token| {m['ratio']:.2f}"
        if "table" in m:
            text += f", table vs sinusoid {m['table']['max_diff']:.1e}"
        return text
    if check.name == "init":
        text = f"loss {m['loss']:.3f}, gradient norm {m['grad_norm']:.3g}"
        if m.get("weights"):
            ratios = [r["ratio"] for r in m["weights"]]
            text += f", weight std / {m['scheme']} {min(ratios):.2f}–{max(ratios):.2f}×"
        if m.get("grad_ratio"):
            text += ", last/first layer ‖∇‖ " + ", ".join(f"{s} {r:.2f}" for s, r in m["grad_ratio"].items())
        return text
    if check.name == "generation":
        return (f"token accuracy {m['teacher_forced_accuracy']:.1%} teacher-forced / {m['greedy_accuracy']:.1%} "
                f"greedy, {m['early_divergence_share']:.1%} of sentences diverging early, KV-cache drift "
                f"{m['cache_drift']:.1e}")
    if check.name == "curve":
        parts = [f"{m['epochs']} epochs, {m['steps']} logged steps"]
        if "first_loss" in m:
            parts.append(f"loss {m['first_loss']:.3f} → {m['final_loss']:.3f} ({m['series']}), {m['spikes']} climbs")
        if m.get("plateau") is not None:
            parts.append(f"unigram plateau {m['plateau']:.3f}")
        if "shape" in m:
            parts.append(m["shape"])
        if "gap" in m:
            parts.append(f"held-out/training loss {m['gap']['valid']:.3f}/{m['gap']['train']:.3f}")
        return ", ".join(parts)
    return ""


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r.get(c, "")).replace("|", "\\|") for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def diagnosis_markdown(d: Diagnosis) -> str:
    """The markdown of ``doctor.md``."""
    c = d.context
    lines = ["# Doctor", "", f"Examined: `{c.get('model')}` ({c.get('parameters', 0):,} parameters, "
             f"{'trained' if c.get('trained') else 'at initialisation'}) on a {c.get('batch')}"
             + (f"; {c['source']}" if c.get("source") else "") + ".", ""]
    findings = d.findings
    if findings:
        lines += [f"## Findings ({len(findings)}, most severe first)", "",
                  _table([{"#": i, "severity": f.severity, "problem": f.problem, "evidence": f.evidence,
                           "likely cause": f.cause, "fix": f.fix,
                           "lesson": LESSON_LINKS.format(f.lesson) if f.lesson else ""}
                          for i, f in enumerate(findings, 1)]), ""]
    else:
        lines += ["## Nothing found", "", "Every check ran within its thresholds. What they measured:", ""]
        lines += [f"- **{ch.title}**: {summary(ch)}" for ch in d.checks]
        lines.append("")
    lines += ["## Checks", ""]
    for ch in d.checks:
        lesson = LESSON_LINKS.format(CHECKS[ch.name][1])
        lines += [f"### {ch.title} — {ch.status}", "", summary(ch), "",
                  *(f"- threshold, {k}: {v}" for k, v in ch.thresholds.items()), f"- lesson: {lesson}", ""]
        figure = f"doctor_{ch.name}.png"
        if figure in d.figures:
            lines += [f"![{ch.name}]({figure})", ""]
    lines.append("All measured numbers: `doctor.json`.")
    return "\n".join(lines) + "\n"


def write_diagnosis(d: Diagnosis, out, figures: bool = True) -> list[str]:
    """Write the figures, ``doctor.md`` and ``doctor.json`` under ``out``; return the file names."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for the doctor's report")
    out.mkdir(parents=True, exist_ok=True)
    if figures:
        from zoo.analysis.doctor.figures import draw

        d.figures = draw(d, out)
    write_text_atomic(out / "doctor.md", diagnosis_markdown(d))
    write_text_atomic(out / "doctor.json", json.dumps(plain(d.to_dict()), indent=2) + "\n")
    return [*d.figures, "doctor.md", "doctor.json"]


def plain(value: Any) -> Any:
    """``value`` as strict JSON: NaN and infinities become ``None``, tuples lists, other objects strings."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)
