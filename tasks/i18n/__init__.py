"""The package in two languages: English (the default) and Chinese (``zh``), for the site, the lessons and the
notebooks.

Chinese text is written for this package, never machine-translated at run time: the glossary
(:mod:`tasks.i18n.glossary`) fixes one Chinese term per concept, the article's outline (:mod:`tasks.i18n.article`)
names the sections the lessons and variant pages measure, and :func:`ui` looks up the site's fixed words in
:data:`tasks.i18n.ui_zh.UI`. This package imports nothing from ``tasks/`` but plumbing (and, on call, the registries),
so the lab, the site and the command line can all use it.
"""

from __future__ import annotations

from plumbing.errors import unknown_name

LANGS = ("en", "zh")  # the first is the default: the English pages keep their paths, the Chinese go under zh/


def check_lang(lang: str) -> str:
    """``lang`` itself when it is one of :data:`LANGS`; a ValueError naming the known languages otherwise."""
    if lang not in LANGS:
        raise unknown_name("language", lang, LANGS)
    return lang


def ui(text_en: str, lang: str) -> str:
    """The fixed text ``text_en`` (a heading, a label, a note) in ``lang``: itself for "en", its entry in
    :data:`tasks.i18n.ui_zh.UI` for "zh".

    A missing Chinese entry raises KeyError rather than showing English on a Chinese page: the site's tests build the
    Chinese site, so a new English string without its translation fails there, not in front of a reader.
    """
    if check_lang(lang) == "en":
        return text_en
    from tasks.i18n.ui_zh import UI

    try:
        return UI[text_en]
    except KeyError:
        raise KeyError(f"no Chinese text for {text_en!r}: add it to UI in tasks/i18n/ui_zh.py") from None
