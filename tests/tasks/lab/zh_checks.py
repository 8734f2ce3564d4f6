"""Checks of a lesson's Chinese text, shared by the lesson tests (each calls them on the run it already makes)."""

from __future__ import annotations

import re
from pathlib import Path

from tasks.i18n.article import section
from tasks.i18n.glossary import check_terms
from tasks.lab import LessonResult, get_lesson

CJK = re.compile(r"[\u4e00-\u9fff]")
# a number as the verdicts print it: 0.93, 1e-3, 45 (of 45%), 16,384 (not the "0," of "seed 0, 300 steps": Chinese
# text ends that clause with "，"); the sign is left out (a +5% gap and −∞ are written the same in both languages)
NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?")


# English prose: four or more English words in a row (a name like "Haviv et al." or "z-loss" is shorter)
ENGLISH_RUN = re.compile(r"[A-Za-z][A-Za-z'-]*(?:[ ,]+[A-Za-z][A-Za-z'-]*){3,}")
# what a Chinese page keeps as written: code spans, quoted titles and prompts, table rows (their cells may quote a
# library's error message), image links
KEPT = re.compile(r"`[^`]*`|\"[^\"]*\"|^\|.*$|!\[[^\]]*\]\([^)]*\)", re.MULTILINE)


def english_prose(text: str) -> list[str]:
    """Runs of English prose left in ``text`` outside what a Chinese page keeps as written (see ``KEPT``)."""
    return ENGLISH_RUN.findall(KEPT.sub(" ", text))


def numbers(text: str) -> list[str]:
    """The numbers of ``text`` in order of appearance, as written."""
    return NUMBER.findall(text)


def assert_same_numbers(english: tuple[str, ...], chinese: tuple[str, ...]) -> None:
    """Each Chinese verdict line holds the numbers of its English line, as a multiset (word order may differ)."""
    assert len(chinese) == len(english) == 2
    for en, zh in zip(english, chinese, strict=True):
        assert sorted(numbers(zh)) == sorted(numbers(en)), (en, zh)


def assert_chinese(name: str, result: LessonResult, out: Path | None = None) -> None:
    """Lesson ``name``'s Chinese text: Chinese, the glossary's terms, the English numbers; its page written."""
    lesson = get_lesson(name)
    texts = [lesson.title_zh, lesson.question_zh, *result.verdict_zh, result.body_zh]
    for text in texts:
        assert CJK.search(text), text
    assert check_terms("\n".join(texts)) == []
    assert english_prose("\n".join(texts)) == []
    assert lesson.sections and all(section(number) for number in lesson.sections)
    assert_same_numbers(result.verdict, result.verdict_zh)
    missing = set(numbers(result.body)) - set(numbers(result.body_zh))
    assert not missing, f"numbers of the English body missing in the Chinese one: {sorted(missing)}"
    if out is not None:
        page = (out / "lesson.zh.md").read_text()
        assert result.verdict_zh[0] in page and lesson.title_zh in page
