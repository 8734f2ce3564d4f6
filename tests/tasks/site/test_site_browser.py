"""The site in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright, in English and in
Chinese. Every page loads without a console error or a failed request, every image has pixels and every link
resolves, code panes hold code, nothing overflows a phone's width, a screenshot of each kind of page is not blank,
and on a Chinese page it shows Chinese: every character drawn by a CJK font, none as a missing-glyph box.

The browser and the font are not installed by the test: ``.ci/run`` installs Debian's chromium and
fonts-wqy-microhei first and sets ``ZOO_REQUIRE_BROWSER=1``, which turns a missing browser into a failure instead of
a skip (a missing font fails the glyph test either way).
"""

from __future__ import annotations

import io
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tasks.site.page import CJK_FAMILIES

pytestmark = pytest.mark.slow  # drives Chromium over a built site

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
KINDS = {"index": "index.html", "variant": "variants/vit/index.html", "lesson": "lessons/params/index.html",
         "comparison": "comparisons/comparison/index.html"}
CJK = re.compile(r"[\u4e00-\u9fff]")


def site_root(request, lang: str) -> Path:
    """The English small site, or the Chinese pages of the two-language one (see conftest.py)."""
    return request.getfixturevalue("site").out if lang == "en" else request.getfixturevalue("site_both").zh


@pytest.fixture(scope="module")
def playwright():
    """Playwright, and the options that launch Debian's chromium with it; a skip, or a failure under
    ZOO_REQUIRE_BROWSER, when either is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    missing = "Playwright (pip install -e '.[dev]')" if sync_playwright is None else \
        "Debian's chromium (apt-get install chromium)" if CHROMIUM is None else None
    if missing:
        if os.environ.get("ZOO_REQUIRE_BROWSER"):
            pytest.fail(f"ZOO_REQUIRE_BROWSER is set but {missing} is missing")
        pytest.skip(f"the browser tests need {missing}")
    with sync_playwright() as started:
        yield started, {"executable_path": CHROMIUM, "args": ["--no-sandbox"]}


@pytest.fixture(scope="module")
def browser(playwright):
    started, options = playwright
    chromium = started.chromium.launch(**options)
    yield chromium
    chromium.close()


def visit(browser, file: Path, width: int = 1200):
    """Open ``file``; returns the page and the console errors and failed requests seen while loading it."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("requestfailed", lambda request: problems.append(f"failed: {request.url}"))
    page.goto(file.as_uri(), wait_until="load")
    return page, problems


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_page_loads_cleanly_with_its_images_links_and_code(browser, request, lang):
    for file in sorted(site_root(request, lang).rglob("*.html")):
        page, problems = visit(browser, file)
        assert problems == [], (file, problems)
        broken = page.eval_on_selector_all("img", "imgs => imgs.filter(i => !(i.complete && i.naturalWidth > 0))"
                                                  ".map(i => i.getAttribute('src'))")
        assert broken == [], (file, broken)
        links = page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)")
        for link in links:
            if link.startswith("file://"):
                target = Path(link.removeprefix("file://").split("#")[0])
                assert target.is_file(), (file, link)
        if "variants" in file.parts:
            panes = page.eval_on_selector_all(".code pre", "ps => ps.map(p => p.innerText.trim().length)")
            assert panes and min(panes) > 0, (file, panes)
        page.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_screenshot_of_each_kind_of_page_is_not_blank_and_fits_a_phone(browser, request, kind, lang):
    for width in (1200, 390):
        page, problems = visit(browser, site_root(request, lang) / KINDS[kind], width)
        assert problems == []
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, (kind, width, overflow)  # wide tables and code scroll inside themselves
        if lang == "zh":  # the screenshot's first screen shows Chinese: the title and the words around it
            assert CJK.search(page.inner_text("h1") + page.inner_text("header")), kind
            assert len(CJK.findall(visible_text(page))) > 10, kind
        shot = np.asarray(Image.open(io.BytesIO(page.screenshot(full_page=False))).convert("L"), dtype=float)
        page.close()
        dark = (shot < 128).mean()
        assert shot.std() > 10 and 0.01 < dark < 0.5, (kind, width, shot.std(), dark)  # text on a page


def visible_text(page) -> str:
    """The text of the elements whose box lies (partly) in the first screen: what a screenshot shows."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('h1, h2, p, th, td, li, strong, a'))
        .filter(e => { const r = e.getBoundingClientRect(); return r.top < window.innerHeight && r.bottom > 0
                       && r.width > 0; })
        .map(e => e.innerText).join(' ')""")


# Each character drawn on a canvas in the page's own font: a character no font covers is drawn as the missing-glyph
# box, the same bitmap as an unassigned code point (U+0378), or as nothing; every covered character has its own.
GLYPHS = """(chars) => {
    const canvas = document.createElement('canvas'); canvas.width = 40; canvas.height = 40;
    const g = canvas.getContext('2d', {willReadFrequently: true});
    g.font = '28px ' + getComputedStyle(document.body).fontFamily;
    const draw = ch => { g.clearRect(0, 0, 40, 40); g.fillText(ch, 4, 32);
                         return g.getImageData(0, 0, 40, 40).data.filter((_, i) => i % 4 === 3).join(','); };
    const tofu = draw('\\u0378'), blank = new Array(1600).fill(0).join(','), seen = new Map(), missing = [];
    for (const ch of chars) {
        const bitmap = draw(ch);
        if (bitmap === tofu || bitmap === blank || seen.has(bitmap)) missing.push(ch);
        seen.set(bitmap, ch);
    }
    return missing;
}"""


def missing_glyphs(browser, file: Path, chars: str) -> list[str]:
    page, problems = visit(browser, file)
    assert problems == []
    try:
        return page.evaluate(GLYPHS, chars)
    finally:
        page.close()


def platform_fonts(browser, file: Path, selector: str) -> set[str]:
    """The font families Chromium drew ``selector``'s text with (the DevTools protocol's platform fonts)."""
    page, _ = visit(browser, file)
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument")["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    fonts = {f["familyName"] for f in cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]}
    page.close()
    return fonts


def site_characters(root: Path) -> str:
    """Every distinct CJK character on the pages under ``root``, the glossary's terms and the outline's titles."""
    from tasks.i18n.article import SECTIONS
    from tasks.i18n.glossary import GLOSSARY

    text = "".join(f.read_text() for f in root.rglob("*.html")) + "".join(t.zh for t in GLOSSARY.values())
    return "".join(sorted(set(CJK.findall(text + "".join(s.zh for s in SECTIONS)))))


def test_every_chinese_character_is_drawn_by_the_stylesheet_s_cjk_font(browser, site_both):
    chars = site_characters(site_both.zh)
    assert len(chars) > 300  # the check below covers every character the Chinese pages use
    assert missing_glyphs(browser, site_both.zh / "index.html", chars) == []
    families = {name.strip('"') for name in CJK_FAMILIES}
    assert platform_fonts(browser, site_both.zh / "index.html", "h1") & families  # a face the stylesheet names


def test_the_glyph_check_fails_without_a_cjk_font(playwright, site_both, tmp_path):
    """The same check in a browser that sees only the Latin fonts: every Chinese character is missing."""
    latin = [d for d in ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/liberation")
             if Path(d).is_dir()]
    if not latin:
        pytest.skip("no Latin font folder to build a font configuration without CJK from")
    config = tmp_path / "fonts.conf"
    config.write_text("<?xml version='1.0'?>\n<fontconfig>" + "".join(f"<dir>{d}</dir>" for d in latin) +
                      f"<cachedir>{tmp_path / 'cache'}</cachedir></fontconfig>\n")
    started, options = playwright
    chromium = started.chromium.launch(**options, env={**os.environ, "FONTCONFIG_FILE": str(config)})
    try:
        chars = "自注意力掩码残差层归一化"
        assert missing_glyphs(chromium, site_both.zh / "index.html", chars) == list(chars)
        assert not platform_fonts(chromium, site_both.zh / "index.html", "h1") & {
            name.strip('"') for name in CJK_FAMILIES}
    finally:
        chromium.close()
