"""The site in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright. Every page loads
without a console error or a failed request, every image has pixels and every link resolves, code panes hold code,
nothing overflows a phone's width, and a screenshot of each kind of page is not blank.

The browser is not installed by the test: ``.ci/run`` installs Debian's chromium first and sets
``ZOO_REQUIRE_BROWSER=1``, which turns a missing browser into a failure instead of a skip.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.slow  # drives Chromium over a built site

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
KINDS = {"index": "index.html", "variant": "variants/vit/index.html", "lesson": "lessons/params/index.html",
         "comparison": "comparisons/comparison/index.html"}


@pytest.fixture(scope="module")
def browser():
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
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
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


def test_every_page_loads_cleanly_with_its_images_links_and_code(browser, site):
    for file in sorted(site.out.rglob("*.html")):
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


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_screenshot_of_each_kind_of_page_is_not_blank_and_fits_a_phone(browser, site, kind, tmp_path):
    for width in (1200, 390):
        page, problems = visit(browser, site.out / KINDS[kind], width)
        assert problems == []
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, (kind, width, overflow)  # wide tables and code scroll inside themselves
        shot = np.asarray(Image.open(io.BytesIO(page.screenshot(full_page=False))).convert("L"), dtype=float)
        page.close()
        dark = (shot < 128).mean()
        assert shot.std() > 10 and 0.01 < dark < 0.5, (kind, width, shot.std(), dark)  # text on a page
