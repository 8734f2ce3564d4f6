"""``zoo site``: the pages it writes, the code panes, links that resolve, the same bytes on every build, and its
errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import zoo
from tasks.cli.main import main
from tasks.lab.lesson import LESSONS
from tasks.site.build import build_site
from tests.tasks.site.conftest import small_site

pytestmark = pytest.mark.slow  # builds the site, zoo check included, for several variants

LINK = re.compile(r"""(?:href|src)=["']([^"']+)["']""")


def pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def test_the_site_holds_a_page_per_variant_lesson_and_comparison(site):
    not_run = [name for name in LESSONS if name != "params"]
    assert site.summary == {"variants": 3, "lessons": 1, "comparisons": 1, "out": str(site.out), "not_run": not_run}
    names = sorted(p.relative_to(site.out).as_posix() for p in pages(site.out))
    assert names == ["comparisons/comparison/index.html", "index.html", "lessons/params/index.html",
                     "variants/classic-lm/index.html", "variants/classic/index.html",  # classic: translation, lm
                     "variants/vit/index.html"]
    index = (site.out / "index.html").read_text()
    for name in zoo.list_variants():  # every registered variant is listed, with or without a page
        assert f">{name}<" in index, name
    for lesson in LESSONS.values():
        assert lesson.title.replace("'", "&#x27;") in index, lesson.name
    scale = (site.root / "lab" / "scale").as_posix()
    assert f"not run yet: <code>zoo lab scale --quick --out {scale}</code>" in index  # where the site reads it
    assert "<span class='pass'>PASS</span>" in index  # vit's conformance suite


def test_a_variant_page_shows_each_change_with_its_code_beside_the_classic_code(site):
    page = (site.out / "variants" / "vit" / "index.html").read_text()
    for change in zoo.get_variant("vit").changes:
        assert f"id='change-{change.name}'" in page
    embedding = page[page.index("id='change-embedding'"):page.index("id='change-position'")]
    assert "PatchEmbedding" in embedding and "PatchVocabularyEmbedding" in embedding  # variant | classic
    assert embedding.count("<div class=\"code\"><pre>") >= 2  # syntax-highlighted panes (Pygments)
    ffn = page[page.index("id='change-ffn'"):page.index("id='change-stacking'")]
    assert "activation" in ffn and "PositionwiseFFN" in ffn  # a setting: the class that reads it, both sides
    assert "<img src='delta.png'" in page and (site.out / "variants" / "vit" / "delta.png").is_file()
    assert "Conformance" in page and "revert embedding" in page
    lesson = (site.out / "lessons" / "params" / "index.html").read_text()
    assert "Verdict" in lesson and "params.png" in lesson and "result.json" in lesson
    comparison = (site.out / "comparisons" / "comparison" / "index.html").read_text()
    assert "Δ vs vit" in comparison and "metric_vs_cost.png" in comparison


def test_links_are_relative_and_resolve(site):
    papers = {v.paper.url for name in zoo.list_variants() for v in zoo.registry.registrations(name)}
    for file in pages(site.out):
        for target in LINK.findall(file.read_text()):
            if target.startswith(("https://", "http://")):
                assert target in papers, (file, target)  # the papers' own pages: the only links out
                continue
            assert not target.startswith(("/", "file:")), (file, target)
            path = target.split("#")[0]
            assert (file.parent / path).resolve().is_file(), (file, target)


def test_the_same_inputs_give_the_same_bytes(site, tmp_path):
    again = tmp_path / "again"
    small_site(site.root, again)
    first = {p.relative_to(site.out): p.read_bytes() for p in site.out.rglob("*") if p.is_file()}
    second = {p.relative_to(again): p.read_bytes() for p in again.rglob("*") if p.is_file()}
    assert first.keys() == second.keys()
    assert [k for k in first if first[k] != second[k]] == []


def test_bad_inputs_are_refused(site, tmp_path):
    with pytest.raises(FileNotFoundError, match="--runs .*nowhere does not exist"):
        build_site(tmp_path / "s", [tmp_path / "nowhere"], progress=False)
    with pytest.raises(ValueError, match="unknown variant 'vitt'.*'vit'"):
        build_site(tmp_path / "s", [], site.root / "lab", ["vitt"], progress=False)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is a file; give a folder for the site"):
        build_site(tmp_path / "file", progress=False)
    with pytest.raises(FileNotFoundError, match="not a finished comparison"):
        build_site(tmp_path / "s", [site.root / "lab"], site.root / "lab", ["classic"], run_lessons=False,
                   check=False, progress=False)


def test_the_command(site, tmp_path, capsys):
    assert main(["site", "--out", str(tmp_path / "s"), "--lessons", str(site.root / "lab"),
                 "--variants", "classic", "--no-check", "--quiet"]) == 0
    assert "wrote 2 variant pages, 1 lessons and 0 comparisons" in capsys.readouterr().out  # translation, lm
    assert (tmp_path / "s" / "index.html").is_file()


def test_a_plugin_variant_is_on_the_index_and_gets_its_page(site, tmp_path):
    from tasks.plugins.loader import load_user_dir
    from tests.plugin_helpers import EXAMPLE, isolated_registry

    with isolated_registry():
        load_user_dir(EXAMPLE)
        build_site(tmp_path / "s", [], site.root / "lab", ["swiglu"], run_lessons=False, check=False, progress=False)
    index = (tmp_path / "s" / "index.html").read_text()
    assert "<a href='variants/swiglu/index.html'>swiglu</a>" in index
    page = (tmp_path / "s" / "variants" / "swiglu" / "index.html").read_text()
    assert "swiglu.ffn.SwigluFFN" in page and "PositionwiseFFN" in page  # the plugin's FFN beside the classic one


def test_the_conformance_heading_counts_n_a_rows_apart(monkeypatch):
    """A check that does not apply (n/a) is neither passed nor failed: the page says how many there were."""
    import tasks.plugins.check as check
    from tasks.site.variant import _check_html, _check_report

    rows = [check.Row("tiny", "build", True), check.Row("tiny", "changes", None, reason="no change can be reverted"),
            check.Row("tiny", "revert", None)]
    monkeypatch.setattr(check, "check_variant", lambda *args, **kw: [check.Report("x", "cifar", rows, 1.0)])
    html = _check_html("x", "tiny", _check_report("x", "cifar", "tiny"), "en")
    assert "1 of 1 checks passed, 2 n/a: <span class='pass'>PASS</span>" in html


def test_a_study_is_listed_under_studies_with_its_forest_plots(site, tmp_path):
    study = tmp_path / "study-rmsnorm"
    study.mkdir()
    (study / "study.json").write_text("{}")
    (study / "results.json").write_text("{}")
    (study / "forest-rmsnorm-shared.png").write_bytes(b"\x89PNG not really")
    (study / "report.md").write_text("# zoo study: rmsnorm\n\n![forest plot of rmsnorm](forest-rmsnorm-shared.png)\n")
    build_site(tmp_path / "s", [study], site.root / "lab", ["classic"], check=False, progress=False)
    index = (tmp_path / "s" / "index.html").read_text()
    studies = index.split("id='studies'", 1)[1]
    assert "comparisons/study-rmsnorm/index.html" in studies and "zoo study: rmsnorm" in studies
    assert "study-rmsnorm" not in index.split("id='studies'", 1)[0].split("id='comparisons'", 1)[1]
    assert (tmp_path / "s" / "comparisons" / "study-rmsnorm" / "forest-rmsnorm-shared.png").is_file()
