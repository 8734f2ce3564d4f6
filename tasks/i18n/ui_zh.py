"""The site's fixed words in Chinese, keyed by their English text (see :func:`tasks.i18n.ui`).

Keyed by the English string itself, so the page code reads in English and a changed English string without a new
entry fails the Chinese site's build in the tests. The Chinese uses the glossary's terms
(:mod:`tasks.i18n.glossary`); a test runs :func:`tasks.i18n.glossary.check_terms` over every value.
"""

from __future__ import annotations

UI: dict[str, str] = {
    "English": "English",
    "中文": "中文",
}
