"""The Synapse multi-abdominal-organ CT split as TransUNet defined it: its classes and its case ids.

Shared by the loader (:mod:`tasks.medseg.reading.data`) and the phantom written in the Synapse layout
(:mod:`tasks.medseg.reading.phantom`), so that neither imports the other for them.
"""

from __future__ import annotations

SYNAPSE_CLASSES = [
    "background", "aorta", "gallbladder", "left_kidney", "right_kidney", "liver", "pancreas", "spleen", "stomach",
]
SYNAPSE_TEST_CASES = tuple(f"case{n:04d}" for n in (1, 2, 3, 4, 8, 22, 25, 29, 32, 35, 36, 38))
"""The 12 test cases of TransUNet's split, used by every Synapse paper."""
SYNAPSE_TRAIN_CASES = tuple(
    f"case{n:04d}" for n in (5, 6, 7, 9, 10, 21, 23, 24, 26, 27, 28, 30, 31, 33, 34, 37, 39, 40)
)
"""The 18 training cases of TransUNet's split (2211 slices in the real data)."""
