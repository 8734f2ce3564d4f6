"""The variant pages' Chinese text: every registered variant, declared change and travelling change has it, no entry
outlives its name, the glossary's terms are the only ones used, and every number of the English is in the Chinese."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tasks.i18n import variants_zh
from tasks.i18n.glossary import check_terms
from tasks.i18n.reports_zh import numbers
from tasks.i18n.variants_zh import (
    change_markdown,
    change_text,
    no_revert_text,
    part_text,
    reach_text,
    scope_text,
    stale,
    travelling_text,
    untranslated,
    variant_text,
)
from tests.plugin_helpers import isolated_registry
from zoo.changes import catalogue
from zoo.registry import Change, get_variant, list_variants, register, registrations
from zoo.registry import change_markdown as change_markdown_en

CJK = re.compile(r"[\u4e00-\u9fff]")


def _registrations():
    return [r for name in list_variants() for r in registrations(name)]


def _pairs():
    """(English, Chinese) of every summary, every declared change's three fields, every travelling change's."""
    pairs = []
    for registration in _registrations():
        pairs.append((registration.summary, variant_text(registration, "zh")))
        for change in registration.changes:
            pairs += zip(change_text(registration, change.name, "en"), change_text(registration, change.name, "zh"))
            sections = [change_markdown(registration, change.name, lang).split("\n") for lang in ("en", "zh")]
            pairs += [(e, c) for e, c in zip(*sections, strict=True) if e]  # its reach and why not reverted too
    for name in catalogue():
        pairs += zip(travelling_text(name, "en"), travelling_text(name, "zh"))
    return pairs + list(variants_zh.WHY_NOT.items())


def test_every_variant_change_and_travelling_change_has_chinese_text_and_no_entry_is_stale():
    assert len(_registrations()) >= 40 and sum(len(r.changes) for r in _registrations()) >= 78
    assert untranslated() == []
    assert stale() == []
    for english, chinese in _pairs():
        assert CJK.search(chinese) or english == chinese, (english, chinese)  # "ReLU" -> "ReLU" is Chinese too


def test_the_glossary_is_respected():
    text = "\n".join(chinese for _, chinese in _pairs())
    text += "\n".join([*variants_zh.SCOPES.values(), *variants_zh.PARTS.values()])
    assert check_terms(text) == []


def test_every_number_of_the_english_is_in_the_chinese():
    """Sizes, rates and formulas are facts: a translation may reword, never drop or change one."""
    for english, chinese in _pairs():
        missing = sorted(set(numbers(english)) - set(numbers(chinese)))
        assert not missing, f"{missing} of {english!r} missing from {chinese!r}"


def test_english_is_the_registry_text():
    classic_lm = get_variant("classic", "lm")
    assert variant_text(classic_lm, "en") == classic_lm.summary
    assert variant_text("classic", "zh") != variant_text("classic", "zh", task="lm")  # two models, two summaries
    swin = get_variant("swin")
    attention = swin.change("attention")
    assert change_text("swin", "attention", "en") == (attention.classic, attention.variant, attention.flaw)
    assert change_text("swin", "attention", "zh")[2] == variants_zh.CHANGES["swin"]["attention"][2]
    assert travelling_text("pre-ln", "zh") == change_text("pre-ln", "norm", "zh")  # from the declaring registration
    assert scope_text("task-specific", "en") == "task-specific" and scope_text("general", "zh") == "通用"
    assert part_text("ffn", "zh") == "前馈网络"


def test_a_change_section_reads_line_for_line_as_zoo_diff_writes_it():
    swin = get_variant("swin")
    english = change_markdown(swin, "stacking", "en")
    chinese = change_markdown(swin, "stacking", "zh")
    assert english == change_markdown_en(swin.change("stacking"))  # "en" is zoo diff's own text
    assert len(english.split("\n")) == len(chinese.split("\n"))
    assert chinese.startswith("## stacking（特定于任务）") and "head（分类器读取最后一个阶段，宽 2^(S−1)·D）" in chinese
    assert reach_text(swin, "stacking", "head", "zh") == "分类器读取最后一个阶段，宽 2^(S−1)·D"
    assert reach_text(swin, "stacking", "head", "en") == swin.change("stacking").resizes["head"]
    with pytest.raises(ValueError, match="'embedding'"):
        reach_text(swin, "stacking", "embedding", "zh")  # a part the change does not reach
    assert "无法还原" in change_markdown("unetr", "position", "zh")  # a change MONAI has no switch for
    assert no_revert_text("unetr", "position", "zh") == "MONAI 的 UNETR 构建的 ViT 只支持可学习的位置"
    assert no_revert_text("swin", "attention", "zh") == ""  # it can be reverted
    reach = variants_zh.REACH["swin"]["stacking"].pop("head")
    try:
        assert "swin: stacking (how it reaches other parts, or why it is not reverted)" in untranslated()
        with pytest.raises(KeyError, match="REACH"):
            change_markdown(swin, "stacking", "zh")
    finally:
        variants_zh.REACH["swin"]["stacking"]["head"] = reach


def test_bad_names_get_errors_that_name_them():
    with pytest.raises(ValueError, match="'fr'"):
        variant_text("vit", "fr")
    with pytest.raises(ValueError, match="'atention'.*attention"):
        change_text("swin", "atention", "zh")
    with pytest.raises(ValueError, match="'vitt'"):
        variant_text("vitt", "zh")
    with pytest.raises(ValueError, match="'local'"):
        scope_text("local", "zh")
    with pytest.raises(ValueError, match="'mlp'"):
        part_text("mlp", "zh")


def test_a_new_variant_or_change_without_chinese_text_is_found():
    """What keeps the translation complete: a variant registered tomorrow is listed until it has its entries, and
    one of its changes is listed on its own."""
    swin = get_variant("swin")
    with isolated_registry():
        register(dataclasses.replace(swin, name="swin-new"))
        assert "swin-new (cifar)" in untranslated() and "swin-new: attention" in untranslated()
        with pytest.raises(KeyError, match="swin-new"):
            variant_text("swin-new", "zh")
        extra = Change("head", "a linear head", "an MLP head", "one layer is not enough", name="mlp-head")
        register(dataclasses.replace(swin, name="swin-more", changes=(*swin.changes, extra)))
        variants_zh.SUMMARIES["swin-more"] = "示例"
        variants_zh.CHANGES["swin-more"] = variants_zh.CHANGES["swin"]
        try:
            assert "swin-more: mlp-head" in untranslated()
            with pytest.raises(KeyError, match="mlp-head"):
                change_text("swin-more", "mlp-head", "zh")
        finally:
            del variants_zh.SUMMARIES["swin-more"], variants_zh.CHANGES["swin-more"]
    assert "swin-new (cifar)" not in untranslated()


def test_an_entry_whose_name_is_gone_is_stale():
    variants_zh.CHANGES["swin"]["renamed"] = ("a", "b", "c")
    variants_zh.SUMMARIES["gone"] = "已删除"
    try:
        assert stale() == ["SUMMARIES['gone']", "CHANGES['swin']['renamed']"]
    finally:
        del variants_zh.CHANGES["swin"]["renamed"], variants_zh.SUMMARIES["gone"]
