"""The page frame: one stylesheet, a navigation bar, a language switch, markdown and code rendered to HTML.

Markdown is rendered with Python-Markdown (tables, fenced code) and code with Pygments, both deterministic.
Links are relative: a page ``depth`` folders below its language's root reaches it through ``../`` × depth. A site in
both languages has the English pages at its root and the Chinese ones under ``zh/`` (:data:`ZH`), each page linking
to its counterpart (:class:`Roots`).
"""

from __future__ import annotations

import html
import shutil
from dataclasses import dataclass
from pathlib import Path

import markdown
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from tasks.i18n import check_lang, ui

STYLE = "style.css"
ZH = "zh"  # the Chinese pages' folder in a site of both languages
# The CJK faces, after the Latin ones so Latin text keeps its face: the Debian packages fonts-wqy-microhei (the one
# CI installs: 5 MB, covers the glossary) and fonts-noto-cjk, and the faces of macOS and Windows.
CJK_FAMILIES = ('"WenQuanYi Micro Hei"', '"Noto Sans CJK SC"', '"PingFang SC"', '"Microsoft YaHei"')
HTML_LANG = {"en": "en", "zh": "zh-CN"}
_FORMATTER = HtmlFormatter(cssclass="code", nowrap=False)

CSS = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --paper: #ffffff; --band: #f6f8fa; --accent: #0b5cad; }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.55 system-ui, -apple-system, "Segoe UI", CJK, sans-serif;
       color: var(--ink); background: var(--paper); }
header { background: var(--band); border-bottom: 1px solid var(--line); padding: 0.6rem 1rem; }
header a { margin-right: 1rem; font-weight: 600; } header a[hreflang] { float: right; margin-right: 0; }
main { max-width: 72rem; margin: 0 auto; padding: 1rem; }
a { color: var(--accent); text-decoration: none; } a:hover { text-decoration: underline; }
h1 { font-size: 1.7rem; margin: 0.4rem 0 0.6rem; } h2 { font-size: 1.3rem; margin-top: 2rem; }
h3 { font-size: 1.1rem; }
.muted { color: var(--muted); }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.9rem; display: block; overflow-x: auto; }
th, td { border: 1px solid var(--line); padding: 0.3rem 0.55rem; text-align: left; vertical-align: top; }
th { background: var(--band); }
img { max-width: 100%; height: auto; border: 1px solid var(--line); }
code { font: 0.88em/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
blockquote { margin: 0.5rem 0; padding: 0.3rem 1rem; border-left: 4px solid var(--accent); background: var(--band); }
.change { border: 1px solid var(--line); border-radius: 6px; padding: 0.2rem 1rem 1rem; margin: 1.2rem 0; }
.choices { display: grid; grid-template-columns: repeat(auto-fit, minmax(16rem, 1fr)); gap: 0.6rem; }
.choices div { background: var(--band); padding: 0.5rem 0.7rem; border-radius: 4px; }
.panes { display: grid; grid-template-columns: repeat(auto-fit, minmax(22rem, 1fr)); gap: 0.8rem; }
.pane { min-width: 0; } .pane h4 { margin: 0.6rem 0 0.3rem; font-size: 0.95rem; overflow-wrap: anywhere; }
pre { overflow-x: auto; } p, li, td { overflow-wrap: anywhere; }
.code { max-height: 32rem; overflow: auto; background: var(--band); border: 1px solid var(--line);
        border-radius: 4px; font-size: 0.82rem; }
.code pre { margin: 0; padding: 0.6rem; }
.pass { color: #1a7f37; font-weight: 600; } .fail { color: #cf222e; font-weight: 600; }
@media (max-width: 40rem) { body { font-size: 15px; } main { padding: 0.6rem; } .panes { grid-template-columns: 1fr; } }
"""


def stylesheet() -> str:
    """The site's one stylesheet: the layout above and Pygments' colours for ``.code``."""
    css = CSS.lstrip().replace(" CJK,", " " + ", ".join(CJK_FAMILIES) + ",")
    return css + _FORMATTER.get_style_defs(".code") + "\n"


def page(title: str, body: str, depth: int, lang: str = "en", switch: str | None = None) -> str:
    """A whole HTML page ``depth`` folders below its language's root (0: the index), its fixed words in ``lang``;
    ``switch``: the relative link to the same page in the other language (none in a one-language site)."""
    up = "../" * depth
    nav = (f'<a href="{up}index.html">{ui("Transformer variant zoo", lang)}</a>'
           f'<a href="{up}index.html#variants">{ui("Variants", lang)}</a>'
           f'<a href="{up}index.html#lessons">{ui("Lessons", lang)}</a>'
           f'<a href="{up}index.html#comparisons">{ui("Comparisons", lang)}</a>'
           f'<a href="{up}index.html#article">{ui("The article", lang)}</a>')
    if switch is not None:
        other = "en" if lang == "zh" else "zh"
        nav += f'<a href="{switch}" hreflang="{HTML_LANG[other]}">{"English" if other == "en" else "中文"}</a>'
    return (f'<!DOCTYPE html>\n<html lang="{HTML_LANG[lang]}">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n"
            f'<link rel="stylesheet" href="{up}{STYLE}">\n</head>\n<body>\n<header>{nav}</header>\n'
            f"<main>\n{body}\n</main>\n</body>\n</html>\n")


def markdown_html(text: str) -> str:
    """Markdown (tables, fenced code) as HTML."""
    return markdown.markdown(text, extensions=["tables", "fenced_code"], output_format="html")


def code_html(source: str) -> str:
    """Python source, syntax-highlighted (a ``div.code`` holding a ``pre``)."""
    return highlight(source, PythonLexer(), _FORMATTER)


def escape(text: object) -> str:
    return html.escape(str(text))


def table(header: list[str], rows: list[list[str]]) -> str:
    """An HTML table of already-escaped cells."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>\n" for row in rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>"


def sections_line(numbers: tuple[str, ...], lang: str, depth: int) -> str:
    """A paragraph naming the article's sections ``numbers`` (number and title in ``lang``), each linked to its
    place in the index's outline ``depth`` folders up."""
    from tasks.i18n.article import section

    if not numbers:
        return f"<p class='muted'>{ui('The article: no section measures this page.', lang)}</p>"
    up = "../" * depth
    named = (ui(", ", lang)).join(f"<a href='{up}index.html#section-{n}'>§{n} {escape(section(n).title(lang))}</a>"
                                  for n in numbers)
    return f"<p class='article'>{ui('The article: {sections}', lang).format(sections=named)}</p>"


@dataclass(frozen=True)
class Roots:
    """Where each language's pages go: ``{"en": OUT}``, ``{"zh": OUT}``, or both (``{"en": OUT, "zh": OUT/zh}``),
    the pages of a two-language site linking each to its counterpart."""

    folders: dict[str, Path]

    @classmethod
    def of(cls, out: Path, lang: str) -> Roots:
        """The roots of a site written to ``out`` in ``lang``: "en", "zh" or "both"."""
        if lang == "both":
            return cls({"en": out, "zh": out / ZH})
        return cls({check_lang(lang): out})

    @property
    def langs(self) -> tuple[str, ...]:
        return tuple(self.folders)

    def write(self, rel: str, lang: str, title: str, body: str) -> None:
        """Write the page at ``rel`` (``variants/vit/index.html``) under ``lang``'s root."""
        depth = rel.count("/")
        switch = None
        if len(self.folders) > 1:  # the English root holds zh/; the Chinese pages climb one folder more
            switch = "../" * depth + f"{ZH}/{rel}" if lang == "en" else "../" * (depth + 1) + rel
        file = self.folders[lang] / rel
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(page(title, body, depth, lang, switch))

    def copy(self, source: Path, rel: str) -> None:
        """Copy ``source`` (a plot) to ``rel`` under every root: the same bytes in each language."""
        for folder in self.folders.values():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            if (folder / rel).resolve() != source.resolve():
                shutil.copyfile(source, folder / rel)
