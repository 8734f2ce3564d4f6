"""One page per variant: its declared changes with their code beside the classic code, the measured delta (tables
and a plot) and the conformance suite's result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.parts import PARTS
from tasks.i18n import ui
from tasks.i18n.article import VARIANT_SECTIONS
from tasks.i18n.reports_zh import translate_report
from tasks.i18n.variants_zh import PARTS as PARTS_ZH
from tasks.i18n.variants_zh import change_text, no_revert_text, reach_text, scope_text, variant_text
from tasks.site.code import ChangeCode, build, change_code, part_code
from tasks.site.page import Roots, code_html, escape, markdown_html, sections_line, table
from zoo.analysis.catalogue import millions
from zoo.registry import Change, Variant, get_variant

PLOT = "delta.png"


def variant_page(row: dict[str, Any], roots: Roots, rel: str, check: bool = True) -> dict[str, Any]:
    """Write the page of the catalogue row ``row`` (and its plot) at ``rel`` (``variants/NAME/index.html``) under
    each of ``roots``' languages; returns what the index shows of it (the conformance verdict).

    Everything measured (the code panes, the delta, the plot, the conformance suite) is computed once and shown in
    every language: only the words differ.
    """
    from tasks.engine.registry import task_shape
    from zoo.analysis.delta import measure
    from zoo.analysis.probes import probe_preset

    variant = get_variant(row["name"], row["tasks"][0])
    task = variant.tasks[0]
    code_preset = probe_preset(variant)  # the smallest builds fastest, and its modules have the same code
    model = build(variant, variant.config(code_preset))  # shared by every change's code
    codes = [change_code(variant, change, code_preset, model) for change in variant.changes]
    classic_parts = [] if variant.changes else [(part, side) for part in PARTS
                                                if (side := part_code(model, part)).classes]
    report = measure(variant, task_shape(task), variant.default_preset)
    first = roots.folders[roots.langs[0]] / rel
    first.parent.mkdir(parents=True, exist_ok=True)
    plotted = _plot(report, first.parent / PLOT)
    if plotted:
        roots.copy(first.parent / PLOT, str(Path(rel).parent / PLOT))
    checked = _check_report(variant.name, task, code_preset) if check else None
    for lang in roots.langs:
        read = ui("Code of the modules each change builds, read from the source (at preset {preset}), beside the "
                  "classic code the change replaces.", lang).format(preset=_code(code_preset))
        parts = [_header(variant, row, lang), sections_line(VARIANT_SECTIONS.get(variant.name, ()), lang, 2),
                 f"<h2 id='changes'>{ui('What changed, and the code', lang)}</h2>", f"<p class='muted'>{read}</p>"]
        parts += [_change(variant, change, code, lang) for change, code in zip(variant.changes, codes, strict=True)]
        if not variant.changes:
            base = ui("The classic model itself: the base every variant patches. Its code, part by part:", lang)
            parts.append(f"<p>{base}</p>")
            parts += [f"<section class='change' id='part-{part}'><h3>{escape(part_name(part, lang))}</h3>"
                      f"{_pane(variant.name, side.sources, side.classes, lang=lang)}</section>"
                      for part, side in classic_parts]
        measured = ui("The delta analysis ({command}) at preset {preset} on {task}.", lang).format(
            command=_code(f"zoo diff {variant.name}"), preset=_code(report["preset"]), task=escape(task))
        parts += [f"<h2 id='measured'>{ui('Measured', lang)}</h2>", f"<p class='muted'>{measured}</p>"]
        if plotted:
            alt = ui("parameters and FLOPs per part, classic vs {variant}", lang).format(variant=escape(variant.name))
            parts.append(f"<img src='{PLOT}' alt='{alt}'>")
        parts.append(markdown_html(_delta_markdown(report, lang)))
        if checked is not None:
            parts.append(_check_html(variant.name, code_preset, checked, lang))
        roots.write(rel, lang, ui("{variant}: what changed", lang).format(variant=variant.name), "\n".join(parts))
    return {"check": None if checked is None else ("FAIL" if checked.failed else "PASS")}


def _code(text: str) -> str:
    return f"<code>{escape(text)}</code>"


def part_name(part: str, lang: str) -> str:
    """A part's name in ``lang``: a model's part (:data:`core.parts.PARTS`), a lesson's "training" or "decoding", or
    a plugin's own part (as it is: the Chinese names do not know it)."""
    if lang == "en":
        return part
    if part in ("training", "decoding"):  # the lessons' parts that are not a model's
        return ui(part, lang)
    return PARTS_ZH.get(part, part)


def _translated(english: Any, lang: str, chinese: Any) -> Any:
    """``chinese()`` for a Chinese page, ``english`` otherwise; a plugin variant, which has no Chinese text
    (:mod:`tasks.i18n.variants_zh` raises KeyError), keeps its English."""
    if lang == "en":
        return english
    try:
        return chinese()
    except KeyError:
        return english


def _in_own_language(english: str, text: str, lang: str) -> str:
    """``text`` escaped, marked as English where a Chinese page shows the English text (a plugin's, untranslated)."""
    return f"<span lang='en'>{escape(text)}</span>" if lang != "en" and text == english else escape(text)


def _delta_markdown(report: dict[str, Any], lang: str) -> str:
    """The delta analysis' markdown in ``lang``: ``zoo diff``'s own text, translated for a Chinese page."""
    from zoo.analysis.report import render_markdown

    text = render_markdown(report, heading="###")
    return text if lang == "en" else translate_report(text)


def _header(variant: Variant, row: dict[str, Any], lang: str) -> str:
    paper = variant.paper
    params = table([ui("preset", lang), ui("parameters", lang)],
                   [[escape(k), f"{v:,} ({millions(v)})"] for k, v in row["parameters"].items()])
    tasks = ", ".join(variant.tasks) + (" (3D)" if variant.spatial_dims == 3 else "")
    summary = _translated(variant.summary, lang, lambda: variant_text(variant, lang))
    changed = ui(", ", lang).join(part_name(p, lang) for p in variant.parts_changed) or ui("none (the base)", lang)
    colon = ui(": ", lang)
    return (f"<h1>{escape(variant.name)}</h1>\n<p>{escape(summary)}</p>\n"
            f"<p><a href='{escape(paper.url)}'>{escape(paper.title)}</a> ({paper.year}) · {ui('tasks', lang)}{colon}"
            f"{escape(tasks)} · {ui('parts changed', lang)}{colon}{escape(changed)}</p>\n{params}")


def _change(variant: Variant, change: Change, code: ChangeCode, lang: str) -> str:
    classic, chosen, flaw = _translated((change.classic, change.variant, change.flaw), lang,
                                        lambda: change_text(variant, change.name, lang))
    reaches = ui("It also reaches the {part} part:", lang)
    reach = []
    for part, how in [*change.resizes.items(), *change.also_in.items()]:
        text = _translated(how, lang, lambda: reach_text(variant, change.name, part, lang))  # noqa: B023 (called now)
        reach.append(f"<p class='muted'>{reaches.format(part=escape(part_name(part, lang)))} "
                     f"{_in_own_language(how, text, lang)}</p>")
    choices = (f"<div class='choices'><div><strong>{ui('Classic', lang)}</strong><br>{escape(classic)}</div>"
               f"<div><strong>{escape(variant.name)}</strong><br>{escape(chosen)}</div>"
               f"<div><strong>{ui('The flaw it addresses', lang)}</strong><br>{escape(flaw)}</div></div>")
    note = code.note and _translated(code.note, lang, lambda: ui("no classic side: {why}", lang).format(
        why=no_revert_text(variant, change.name, lang)))  # code.note is the English of the same sentence
    panes = [_pane(f"{variant.name}", code.variant.sources, code.variant.classes, lang=lang),
             _pane("classic", code.classic.sources, code.classic.classes, note, lang, english=code.note)]
    setting = f"<h4>{ui('The setting', lang)}</h4>{code_html(code.setting)}" if code.setting else ""
    scope = _translated(change.scope, lang, lambda: scope_text(change.scope, lang))
    where = ui("({part}, {scope})", lang).format(part=escape(part_name(change.part, lang)), scope=escape(scope))
    return (f"<section class='change' id='change-{escape(change.name)}'>\n<h3>{escape(change.name)} "
            f"<span class='muted'>{where}</span></h3>\n{choices}\n"
            f"{''.join(reach)}{setting}<div class='panes'>{''.join(panes)}</div>\n</section>")


def _pane(title: str, sources: list[tuple[str, str]], classes: list[str], note: str = "", lang: str = "en",
          english: str = "") -> str:
    """A code pane: the sources shown, the library classes named, and ``note`` (``english``: its English text)."""
    shown = {name for name, _ in sources}
    named = [c for c in classes if c not in shown]  # library classes (PyTorch, MONAI): named, not shown
    body = "".join(f"<h4><code>{escape(name)}</code></h4>{code_html(source)}" for name, source in sources)
    if named:
        body += (f"<p class='muted'>{ui('Library classes:', lang)} " + ", ".join(f"<code>{escape(c)}</code>"
                                                                                for c in named) + "</p>")
    if note:
        body += f"<p class='muted'>{_in_own_language(english or note, note, lang)}</p>"
    if not body:
        body = f"<p class='muted'>{ui('No module of its own for this part.', lang)}</p>"
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


def _check_report(name: str, task: str, preset: str) -> Any:
    """The conformance suite's report (:func:`tasks.plugins.check.check_variant`) at ``preset``."""
    from tasks.plugins.check import check_variant

    return check_variant(name, task, [preset])[0]


def _check_html(name: str, preset: str, report: Any, lang: str) -> str:
    """The conformance suite's table (without its timing) and its verdict, in ``lang``."""
    rows = [[escape(r.check), f"<span class='{'fail' if r.ok is False else 'pass' if r.ok else 'muted'}'>"
             f"{r.result}</span>", escape(r.measured), f"<span lang='en'>{escape(r.reason)}</span>" if r.reason else
             ""] for r in report.rows]
    applied = report.applied
    not_applicable = len(report.rows) - len(applied)  # counted apart, never as passed (as zoo check's summary)
    verdict = "PASS" if not report.failed else "FAIL"
    passed = ui("{passed} of {applied} checks passed", lang).format(passed=len(applied) - len(report.failed),
                                                                    applied=len(applied))
    n_a = ui(", {count} n/a", lang).format(count=not_applicable) if not_applicable else ""
    head = (f"<h2 id='check'>{ui('Conformance', lang)} (<code>zoo check {escape(name)} --preset {escape(preset)}"
            f"</code>)</h2>\n<p>{passed}{n_a}: <span class='{verdict.lower()}'>{verdict}</span></p>")
    return head + table([ui(h, lang) for h in ("check", "result", "measured", "reason")], rows)
