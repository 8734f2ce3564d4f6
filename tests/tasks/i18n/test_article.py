"""The article's outline: every section of ARTICLE.md once, and every registered variant mapped to sections of it."""

from __future__ import annotations

import re

import pytest

from tasks.i18n.article import SECTIONS, VARIANT_SECTIONS, section, variant_sections
from tasks.i18n.glossary import check_terms
from zoo.registry import list_variants

CJK = re.compile(r"[\u4e00-\u9fff]")


def test_the_outline_is_the_article_s_numbering_in_order():
    numbers = [s.number for s in SECTIONS]
    assert numbers == ["1", "2.1", "2.2", "2.3", "2.4", "3.1", "3.2", "3.3", "4.1", "4.2", "4.3", "5.1", "5.2",
                       "5.3", "5.4", "6.1", "6.2", "6.3", "6.4", "7.1", "7.2", "7.3", "7.4", "7.5"]
    assert all(CJK.search(s.zh) and not CJK.search(s.en) for s in SECTIONS)
    assert check_terms("\n".join(s.zh for s in SECTIONS)) == []
    assert section("2.3").title("zh") == "为什么要除以 √d_k" and section("2.3").title("en").startswith("Why")


def test_an_unknown_section_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"'2\.5'.*Known: 1, 2\.1"):
        section("2.5")


def test_every_registered_variant_and_no_other_has_sections():
    # a new variant without an entry fails here; so does an entry for a variant that no longer exists
    assert set(VARIANT_SECTIONS) == set(list_variants())
    assert all(variant_sections(name) for name in VARIANT_SECTIONS)
    with pytest.raises(ValueError, match="VARIANT_SECTIONS"):
        variant_sections("not-a-variant")
