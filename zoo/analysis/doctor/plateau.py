"""Where a stuck run sits: the loss of a model that reads nothing and predicts the targets' frequencies.

A task gives its training targets' counts (``Task.target_entropy``); the curve check flags a training loss that
stays at this entropy (:func:`zoo.analysis.doctor.curve.curve_checks`, ``plateau=``).
"""

from __future__ import annotations

import math
from collections import Counter


def entropy(counts: Counter) -> float:
    """Entropy in nats of the frequencies ``counts`` (value -> occurrences)."""
    total = sum(counts.values())
    if total == 0:
        raise ValueError("entropy of no targets: the counts are empty")
    return -sum(c / total * math.log(c / total) for c in counts.values() if c)
