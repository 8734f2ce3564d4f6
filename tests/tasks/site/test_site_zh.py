"""``zoo site --lang zh|both``: the Chinese pages use the glossary's one term for each concept and have every fixed
word translated; a site in both languages links each page to its counterpart and shows the same code, numbers and
plots in both; every lesson and variant page names the article's sections it measures, and the index has the
article's outline."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

from tasks.cli.main import main
from tasks.i18n.article import SECTIONS, VARIANT_SECTIONS, section
from tasks.i18n.glossary import GLOSSARY, check_terms
from tasks.i18n.ui_zh import UI
from tasks.site.build import build_site
from tasks.site.page import Roots, sections_line

SITE = Path(__file__).resolve().parents[3] / "tasks" / "site"
CJK = re.compile(r"[\u4e00-\u9fff]")
TAG = re.compile(r"<[^>]+>")
SWITCH = re.compile(r"""<a href="([^"]+)" hreflang="([^"]+)">""")
CODE = re.compile(r'<div class="code">.*?</div>', re.S)


def _strings(node: ast.expr, constants: dict[str, str], loops: dict[str, ast.expr]) -> list[str]:
    """The strings an argument of ``ui()`` can be (see :func:`ui_strings`)."""
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body, constants, loops) + _strings(node.orelse, constants, loops)
    if isinstance(node, ast.Name) and node.id in constants:
        return [constants[node.id]]
    if isinstance(node, ast.Name) and isinstance(loops.get(node.id), ast.Tuple):
        return [e.value for e in loops[node.id].elts if isinstance(e, ast.Constant)]
    return []


def ui_strings() -> set[str]:
    """Every English string the site's code passes to ``ui()``: literals, both sides of ``a if c else b``, module
    constants (``ui(INTRO, lang)``) and the items of a literal tuple a comprehension feeds to it."""
    found: set[str] = set()
    for file in sorted(SITE.glob("*.py")):
        tree = ast.parse(file.read_text())
        constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                     if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
        loops = {g.target.id: g.iter for n in ast.walk(tree) if isinstance(n, ast.ListComp | ast.GeneratorExp)
                 for g in n.generators if isinstance(g.target, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ui" and node.args:
                found.update(_strings(node.args[0], constants, loops))
    return found


def test_every_ui_string_the_site_uses_has_its_chinese_and_that_uses_the_glossary():
    used = ui_strings()
    assert {"Variants", "The flaw it addresses", "{passed} of {applied} checks passed", "reason"} <= used
    assert sorted(used - UI.keys()) == []
    assert check_terms("\n".join(UI.values())) == []
    for english, chinese in UI.items():  # a placeholder filled after the lookup is in both forms
        assert sorted(re.findall(r"\{\w+\}", english)) == sorted(re.findall(r"\{\w+\}", chinese)), english


def test_the_conformance_table_in_chinese(monkeypatch):
    import tasks.plugins.check as check
    from tasks.site.variant import _check_html

    rows = [check.Row("tiny", "build", True), check.Row("tiny", "changes", None, reason="no change can be reverted")]
    html = _check_html("x", "tiny", check.Report("x", "cifar", rows, 1.0), "zh")
    assert "1 项检查中通过 1 项，1 项不适用" in html and "<th>原因</th>" in html and "PASS" in html


def test_a_two_language_site_links_each_page_to_its_counterpart(tmp_path):
    roots = Roots.of(tmp_path, "both")
    for lang in roots.langs:
        roots.write("variants/vit/index.html", lang, "vit", "<p>x</p>")
    english, chinese = tmp_path / "variants/vit/index.html", tmp_path / "zh/variants/vit/index.html"
    assert SWITCH.findall(english.read_text()) == [("../../zh/variants/vit/index.html", "zh-CN")]
    assert SWITCH.findall(chinese.read_text()) == [("../../../variants/vit/index.html", "en")]
    assert '<html lang="zh-CN">' in chinese.read_text() and '<html lang="en">' in english.read_text()
    Roots.of(tmp_path / "one", "zh").write("index.html", "zh", "t", "")
    assert "hreflang" not in (tmp_path / "one" / "index.html").read_text()  # nothing to switch to


def test_a_page_names_its_sections_in_its_language():
    assert sections_line(("2.3", "7.2"), "zh", 2) == (
        "<p class='article'>对应文章：<a href='../../index.html#section-2.3'>§2.3 为什么要除以 √d_k</a>、"
        "<a href='../../index.html#section-7.2'>§7.2 掩码要填 −1e9，不能填 0</a></p>")
    assert "The article: <a href='index.html#section-1'>§1 Looking back" in sections_line(("1",), "en", 0)
    assert "no section" in sections_line((), "en", 2)


def test_an_unknown_language_is_refused_before_anything_is_built(tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown site language \\(--lang\\) 'cn'.*Known: both, en, zh"):
        build_site(tmp_path / "s", lang="cn", progress=False)
    assert not (tmp_path / "s").exists()
    assert main(["site", "--out", str(tmp_path / "s"), "--lang", "cn"]) != 0
    assert "--lang: invalid choice: 'cn' (choose from 'en', 'zh', 'both')" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


# The tests below build the small site in both languages (see conftest.py): slow.


def zh_pages(site_both) -> list[Path]:
    return sorted(site_both.zh.rglob("*.html"))


def text(file: Path) -> str:
    """A page's words: its HTML without tags and code panes."""
    return TAG.sub(" ", CODE.sub(" ", file.read_text()))


@pytest.mark.slow
def test_every_chinese_page_is_chinese_and_uses_only_the_glossary_s_terms(site_both):
    pages = zh_pages(site_both)
    assert [p.relative_to(site_both.zh).as_posix() for p in pages] == [
        p.relative_to(site_both.out).as_posix() for p in sorted(site_both.out.rglob("*.html")) if "zh" not in
        p.relative_to(site_both.out).parts]
    used = set()
    for file in pages:
        html, words = file.read_text(), text(file)
        assert '<html lang="zh-CN">' in html and len(CJK.findall(words)) > 20, file
        assert check_terms(words) == [], file
        used |= {english for english, term in GLOSSARY.items() if term.zh in words}
    # the check above bites: the pages use many of the glossary's terms, each in its one form
    assert {"self-attention", "encoder", "decoder", "LayerNorm", "positional encoding", "mask",
            "feed-forward network"} <= used, sorted(used)


@pytest.mark.slow
def test_both_languages_show_the_same_code_numbers_and_plots(site_both):
    plots = sorted(p.relative_to(site_both.out) for p in site_both.out.rglob("*.png") if "zh" not in
                   p.relative_to(site_both.out).parts)
    assert Path("variants/vit/delta.png") in plots and Path("lessons/params/params.png") in plots
    assert Path("comparisons/comparison/metric_vs_cost.png") in plots
    for plot in plots:
        assert (site_both.zh / plot).read_bytes() == (site_both.out / plot).read_bytes(), plot
    for rel in ("variants/vit/index.html", "variants/classic/index.html"):
        english, chinese = (site_both.out / rel).read_text(), (site_both.zh / rel).read_text()
        assert CODE.findall(english) and CODE.findall(chinese) == CODE.findall(english), rel
    findings = re.compile(r"<pre><code>.*?</code></pre>", re.S)  # a lesson's result.json
    rel = "lessons/params/index.html"
    assert findings.findall((site_both.zh / rel).read_text()) == findings.findall((site_both.out / rel).read_text())


@pytest.mark.slow
def test_every_page_switches_to_its_counterpart_and_back(site_both):
    pages = sorted(site_both.out.rglob("*.html"))
    assert len(pages) == 2 * len(zh_pages(site_both))
    for file in pages:
        [(target, _)] = SWITCH.findall(file.read_text())
        counterpart = (file.parent / target).resolve()
        assert counterpart.is_file() and counterpart != file.resolve(), (file, target)
        [(back, _)] = SWITCH.findall(counterpart.read_text())
        assert (counterpart.parent / back).resolve() == file.resolve(), (file, back)


@pytest.mark.slow
def test_variant_and_lesson_pages_name_their_sections_and_the_index_has_the_outline(site_both):
    for root, lang in ((site_both.out, "en"), (site_both.zh, "zh")):
        vit = (root / "variants/vit/index.html").read_text()
        assert f"§6.1 {section('6.1').title(lang)}</a>" in vit and VARIANT_SECTIONS["vit"] == ("6.1",)
        lesson = (root / "lessons/params/index.html").read_text()
        assert lesson.count(f"§5.4 {section('5.4').title(lang)}") == 1  # named once, even where lesson.zh.md does
        index = (root / "index.html").read_text()
        outline = index[index.index("id='article'"):index.index("id='comparisons'")]
        assert re.findall(r"id='section-([\d.]+)'", outline) == [s.number for s in SECTIONS]
        item = outline[outline.index("id='section-5.4'"):].split("</li>")[0]
        assert "href='lessons/params/index.html'" in item  # a lesson with a result, linked
        item = outline[outline.index("id='section-6.1'"):].split("</li>")[0]
        assert "href='variants/vit/index.html'" in item and "deit" in item  # deit listed, no page in this build
        empty = outline[outline.index("id='section-2.1'"):].split("</li>")[0]
        none = "暂无实验课或变体页面对应这一节" if lang == "zh" else "no lesson or variant page measures it yet"
        assert none in empty


@pytest.mark.slow
def test_how_a_change_reaches_another_part_is_in_chinese(site_both):
    from tasks.i18n.variants_zh import reach_text
    from tasks.site.page import escape
    from zoo.registry import get_variant

    change = get_variant("vit", "cifar").change("stacking")
    english, chinese = change.resizes.get("position") or change.also_in["position"], reach_text("vit", "stacking",
                                                                                                "position", "zh")
    page = (site_both.zh / "variants" / "vit" / "index.html").read_text()
    assert escape(chinese) in page and escape(english) not in page
    assert escape(english) in (site_both.out / "variants" / "vit" / "index.html").read_text()


def test_why_a_change_shows_no_classic_code_is_in_chinese():
    from tasks.i18n.variants_zh import no_revert_text
    from tasks.site.code import ChangeCode, Side
    from tasks.site.page import escape
    from tasks.site.variant import _change
    from zoo.registry import get_variant

    variant = get_variant("unetr", "medseg")
    change = variant.change("embedding")
    code = ChangeCode(Side(), Side(), "", f"no classic side: {change.no_revert}")  # as change_code writes it
    chinese = _change(variant, change, code, "zh")
    assert escape(no_revert_text(variant, "embedding", "zh")) in chinese and escape(change.no_revert) not in chinese
    assert escape(code.note) in _change(variant, change, code, "en")


@pytest.mark.slow
def test_the_chinese_comparison_page_is_the_translated_report(site_both):
    from tasks.i18n.reports_zh import translate_report
    from tasks.site.page import markdown_html

    file = site_both.zh / "comparisons/comparison/index.html"
    report = translate_report((site_both.root / "comparison" / "report.md").read_text())
    assert markdown_html(report) in file.read_text() and len(CJK.findall(text(file))) > 50
    title = report.splitlines()[0].lstrip("# ").strip()
    assert f"<title>{title}</title>" in file.read_text()
    assert f">{title}</a>" in (site_both.zh / "index.html").read_text()


@pytest.mark.slow
def test_an_older_lesson_result_shows_the_english_page_with_a_chinese_note(site_both, tmp_path):
    lab = tmp_path / "lab"
    shutil.copytree(site_both.root / "lab" / "params", lab / "params")
    (lab / "params" / "lesson.zh.md").unlink(missing_ok=True)
    build_site(tmp_path / "s", [], lab, [], check=False, progress=False, lang="zh")
    page = (tmp_path / "s" / "lessons/params/index.html").read_text()
    assert "<p class='note'>这份结果没有中文内容" in page and "<code>zoo lab params</code>" in page
    assert (site_both.root / "lab" / "params" / "lesson.md").read_text().splitlines()[0].lstrip("# ") in page
    assert "§5.4 参数量都花在了哪里" in page  # the site names the section the English lesson.md does not


@pytest.mark.slow
def test_the_command_writes_the_chinese_site(site_both, tmp_path, capsys):
    assert main(["site", "--out", str(tmp_path / "s"), "--lessons", str(site_both.root / "lab"), "--variants",
                 "classic", "--no-check", "--quiet", "--lang", "zh"]) == 0
    assert "wrote 2 variant pages, 1 lessons" in capsys.readouterr().out
    assert '<html lang="zh-CN">' in (tmp_path / "s" / "index.html").read_text()


@pytest.mark.slow
def test_a_plugin_variant_without_chinese_text_keeps_its_english_on_a_chinese_page(tmp_path):
    from tasks.plugins.loader import load_user_dir
    from tasks.site.page import escape
    from tests.plugin_helpers import EXAMPLE, isolated_registry
    from zoo.registry import get_variant

    with isolated_registry():
        load_user_dir(EXAMPLE)
        variant = get_variant("swiglu")
        build_site(tmp_path / "s", [], tmp_path / "no-lab", ["swiglu"], check=False, progress=False, lang="zh")
    page = (tmp_path / "s" / "variants" / "swiglu" / "index.html").read_text()
    assert '<html lang="zh-CN">' in page and f"<p>{escape(variant.summary)}</p>" in page
    assert escape(variant.changes[0].flaw) in page and "对应文章：文章中没有哪一节对应这个页面。" in page
