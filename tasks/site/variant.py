"""One page per variant: its declared changes with their code beside the classic code, the measured delta (tables
and a plot) and the conformance suite's result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.parts import PARTS
from tasks.site.code import ChangeCode, build, change_code, part_code
from tasks.site.page import code_html, escape, markdown_html, page, table
from zoo.analysis.catalogue import millions
from zoo.registry import Change, Variant, get_variant

PLOT = "delta.png"


def variant_page(row: dict[str, Any], folder: Path, check: bool = True) -> dict[str, Any]:
    """Write ``folder/index.html`` (and its plot) for the catalogue row ``row``; returns what the index shows of it
    (the conformance verdict)."""
    from tasks.engine.registry import task_shape
    from zoo.analysis.delta import measure
    from zoo.analysis.probes import probe_preset
    from zoo.analysis.report import render_markdown

    variant = get_variant(row["name"], row["tasks"][0])
    task = variant.tasks[0]
    code_preset = probe_preset(variant)  # the smallest builds fastest, and its modules have the same code
    folder.mkdir(parents=True, exist_ok=True)
    parts = [_header(variant, row)]
    parts += ["<h2 id='changes'>What changed, and the code</h2>",
              f"<p class='muted'>Code of the modules each change builds, read from the source (at preset "
              f"<code>{escape(code_preset)}</code>), beside the classic code the change replaces.</p>"]
    model = build(variant, variant.config(code_preset))  # shared by every change's code
    parts += [_change(variant, change, change_code(variant, change, code_preset, model)) for change in variant.changes]
    if not variant.changes:
        parts.append("<p>The classic model itself: the base every variant patches. Its code, part by part:</p>")
        for part in PARTS:
            side = part_code(model, part)
            if side.classes:
                parts.append(f"<section class='change' id='part-{part}'><h3>{part}</h3>"
                             f"{_pane(variant.name, side.sources, side.classes)}</section>")
    report = measure(variant, task_shape(task), variant.default_preset)
    parts += ["<h2 id='measured'>Measured</h2>",
              f"<p class='muted'>The delta analysis (<code>zoo diff {escape(variant.name)}</code>) at preset "
              f"<code>{escape(report['preset'])}</code> on {escape(task)}.</p>"]
    if _plot(report, folder / PLOT):
        parts.append(f"<img src='{PLOT}' alt='parameters and FLOPs per part, classic vs {escape(variant.name)}'>")
    parts.append(markdown_html(render_markdown(report, heading="###")))
    verdict = None
    if check:
        section, verdict = _check(variant.name, task, code_preset)
        parts.append(section)
    (folder / "index.html").write_text(page(f"{variant.name}: what changed", "\n".join(parts), 2))
    return {"check": verdict}


def _header(variant: Variant, row: dict[str, Any]) -> str:
    paper = variant.paper
    params = table(["preset", "parameters"], [[escape(k), f"{v:,} ({millions(v)})"]
                                               for k, v in row["parameters"].items()])
    tasks = ", ".join(variant.tasks) + (" (3D)" if variant.spatial_dims == 3 else "")
    return (f"<h1>{escape(variant.name)}</h1>\n<p>{escape(variant.summary)}</p>\n"
            f"<p><a href='{escape(paper.url)}'>{escape(paper.title)}</a> ({paper.year}) · tasks: {escape(tasks)} · "
            f"parts changed: {escape(', '.join(variant.parts_changed) or 'none (the base)')}</p>\n{params}")


def _change(variant: Variant, change: Change, code: ChangeCode) -> str:
    reach = [f"<p class='muted'>It also reaches the {escape(part)} part: {escape(how)}.</p>" for part, how in
             [*change.resizes.items(), *change.also_in.items()]]
    choices = (f"<div class='choices'><div><strong>Classic</strong><br>{escape(change.classic)}</div>"
               f"<div><strong>{escape(variant.name)}</strong><br>{escape(change.variant)}</div>"
               f"<div><strong>The flaw it addresses</strong><br>{escape(change.flaw)}</div></div>")
    panes = [_pane(f"{variant.name}", code.variant.sources, code.variant.classes),
             _pane("classic", code.classic.sources, code.classic.classes, code.note)]
    setting = f"<h4>The setting</h4>{code_html(code.setting)}" if code.setting else ""
    return (f"<section class='change' id='change-{escape(change.name)}'>\n<h3>{escape(change.name)} "
            f"<span class='muted'>({escape(change.part)}, {escape(change.scope)})</span></h3>\n{choices}\n"
            f"{''.join(reach)}{setting}<div class='panes'>{''.join(panes)}</div>\n</section>")


def _pane(title: str, sources: list[tuple[str, str]], classes: list[str], note: str = "") -> str:
    shown = {name for name, _ in sources}
    named = [c for c in classes if c not in shown]  # library classes (PyTorch, MONAI): named, not shown
    body = "".join(f"<h4><code>{escape(name)}</code></h4>{code_html(source)}" for name, source in sources)
    if named:
        body += "<p class='muted'>Library classes: " + ", ".join(f"<code>{escape(c)}</code>" for c in named) + "</p>"
    if note:
        body += f"<p class='muted'>{escape(note)}</p>"
    if not body:
        body = "<p class='muted'>No module of its own for this part.</p>"
    return f"<div class='pane'><h4>{escape(title)}</h4>{body}</div>"


def _plot(report: dict[str, Any], file: Path) -> bool:
    """Parameters and forward FLOPs per part, classic vs variant, as horizontal bars; False when nothing differs."""
    rows = [p for p in report["parts"] if p["params"]["classic"] or p["params"]["variant"]
            or p["flops"]["classic"] or p["flops"]["variant"]]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [p["part"] for p in rows]
    y = np.arange(len(rows))
    fig, axes = plt.subplots(1, 2, figsize=(9, 0.45 * len(rows) + 1.4), sharey=True)
    for ax, key, unit in ((axes[0], "params", "parameters"), (axes[1], "flops", "forward FLOPs")):
        ax.barh(y - 0.2, [p[key]["classic"] for p in rows], 0.4, label="classic", color="#9aa5b1")
        ax.barh(y + 0.2, [p[key]["variant"] for p in rows], 0.4, label=report["variant"], color="#0b5cad")
        ax.set_xlabel(unit)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, names)
    axes[0].invert_yaxis()
    axes[1].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(file, dpi=90, metadata={"Software": None})  # no version stamp: the same bytes every build
    plt.close(fig)
    return True


def _check(name: str, task: str, preset: str) -> tuple[str, str]:
    """The conformance suite's table (without its timing) and its verdict."""
    from tasks.plugins.check import check_variant

    report = check_variant(name, task, [preset])[0]
    rows = [[escape(r.check), f"<span class='{'fail' if r.ok is False else 'pass' if r.ok else 'muted'}'>"
             f"{r.result}</span>", escape(r.measured), escape(r.reason)] for r in report.rows]
    applied = report.applied
    not_applicable = len(report.rows) - len(applied)  # counted apart, never as passed (as zoo check's summary)
    verdict = "PASS" if not report.failed else "FAIL"
    head = (f"<h2 id='check'>Conformance (<code>zoo check {escape(name)} --preset {escape(preset)}</code>)</h2>\n"
            f"<p>{len(applied) - len(report.failed)} of {len(applied)} checks passed"
            f"{f', {not_applicable} n/a' if not_applicable else ''}: "
            f"<span class='{verdict.lower()}'>{verdict}</span></p>")
    return head + table(["check", "result", "measured", "reason"], rows), verdict
