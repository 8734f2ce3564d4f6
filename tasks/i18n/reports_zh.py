"""Reports in Chinese: ``zoo compare`` / ``zoo ablate`` / ``zoo study`` reports and the delta analysis's markdown,
translated by a phrase table built from their generators' own templates.

Numbers, code spans, variant names and image links are kept byte for byte; :func:`numbers` lists a text's numbers, so
a test can check that a translation drops none.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*(?:e[-+]?\d+)?")


def numbers(text: str) -> list[str]:
    """Every number written in ``text`` (``1,372``, ``0.004``, ``4.9e-04``), in order."""
    return _NUMBER.findall(text)
