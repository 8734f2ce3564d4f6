"""The glossary: one Chinese form per concept, never one concept's form avoided by another, and check_terms finds
each avoided form; the language helpers refuse unknown languages and missing Chinese text."""

from __future__ import annotations

import pytest

from tasks.i18n import LANGS, check_lang, ui
from tasks.i18n.glossary import GLOSSARY, Term, check_terms
from tasks.i18n.ui_zh import UI


def test_the_glossary_covers_the_issue_terms_with_something_to_avoid():
    assert len(GLOSSARY) >= 30
    for english, zh in [("self-attention", "自注意力"), ("mask", "掩码"), ("residual", "残差"),
                        ("LayerNorm", "层归一化"), ("positional encoding", "位置编码"), ("encoder", "编码器"),
                        ("decoder", "解码器"), ("window attention", "窗口注意力"), ("expert routing", "专家路由")]:
        assert GLOSSARY[english].zh == zh
    assert all(isinstance(t, Term) and t.avoid for t in GLOSSARY.values())


def test_no_avoided_form_is_or_contains_a_form_the_package_uses():
    # an avoided form inside a used one would flag every correct sentence; one equal to a used one, two entries fight
    used = {t.zh for t in GLOSSARY.values()}
    clashes = [(bad, good) for t in GLOSSARY.values() for bad in t.avoid for good in used if bad in good]
    assert clashes == []
    assert check_terms("\n".join(sorted(used))) == []


def test_check_terms_lists_each_avoided_form_once():
    assert check_terms("用遮罩屏蔽未来的位置，再加层标准化；遮罩填 −1e9") == ["遮罩", "层标准化"]
    assert check_terms("用掩码屏蔽未来的位置，再加层归一化") == []


def test_languages_and_ui_text():
    assert LANGS == ("en", "zh") and check_lang("zh") == "zh"
    with pytest.raises(ValueError, match="'zn'.*Known: en, zh"):
        check_lang("zn")
    assert ui("English", "en") == "English"
    with pytest.raises(KeyError, match="tasks/i18n/ui_zh.py"):
        ui("a string nobody translated", "zh")


def test_the_ui_text_uses_the_glossary():
    assert check_terms("\n".join(UI.values())) == []
