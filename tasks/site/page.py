"""The page frame: one stylesheet, a navigation bar, markdown and code rendered to HTML.

Markdown is rendered with Python-Markdown (tables, fenced code) and code with Pygments, both deterministic.
Links are relative: a page ``depth`` folders below the site's root reaches it through ``../`` × depth.
"""

from __future__ import annotations

import html

import markdown
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

STYLE = "style.css"
_FORMATTER = HtmlFormatter(cssclass="code", nowrap=False)

CSS = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --paper: #ffffff; --band: #f6f8fa; --accent: #0b5cad; }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.55 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink);
       background: var(--paper); }
header { background: var(--band); border-bottom: 1px solid var(--line); padding: 0.6rem 1rem; }
header a { margin-right: 1rem; font-weight: 600; }
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
    return CSS.lstrip() + _FORMATTER.get_style_defs(".code") + "\n"


def page(title: str, body: str, depth: int) -> str:
    """A whole HTML page ``depth`` folders below the root (0: the index)."""
    up = "../" * depth
    nav = (f'<a href="{up}index.html">Transformer variant zoo</a><a href="{up}index.html#variants">Variants</a>'
           f'<a href="{up}index.html#lessons">Lessons</a><a href="{up}index.html#comparisons">Comparisons</a>')
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
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
