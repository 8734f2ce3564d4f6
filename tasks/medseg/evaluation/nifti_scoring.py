"""nnU-Net's scoring of a NIfTI evaluation: each prediction mapped back onto its file's grid, written, scored.

The task scores its own conventions (Dice and two HD95s, :mod:`tasks.medseg.evaluation.metrics`) on the canonical grid
the model saw. nnU-Net scores the label maps it writes, in the geometry of the original files. This module does the
latter, one case at a time during an evaluation (so that only one case's original arrays are in memory):
:meth:`OriginalGeometryScores.add` maps a canonical prediction back
(:func:`~tasks.medseg.preprocessing.nifti_geometry.to_original`), writes it as ``FOLDER/<the label file's name>`` with
the input's shape and affine, reads the original label file and keeps the case's metrics
(:func:`~tasks.medseg.evaluation.nnunet_eval.case_metrics`); :meth:`~OriginalGeometryScores.finish` writes
``FOLDER/summary.json`` in nnU-Net v2's format.

Shape legend: ``D, H, W`` the canonical slices, rows, columns; ``X, Y, Z`` the file's array axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tasks.medseg.evaluation.nnunet_eval import (
    aggregate,
    case_metrics,
    read_label_map,
    summary_lines,
    write_summary_json,
)

SUMMARY_FILE = "summary.json"


class OriginalGeometryScores:
    """Collects nnU-Net's per-case metrics of one split's predictions in the original geometry.

    Args:
        folder: where the label maps and ``summary.json`` go, e.g. ``RUN/predictions/test``.
        num_classes: K; the foreground labels 1 .. K-1 are scored.
    """

    def __init__(self, folder: str | Path, num_classes: int) -> None:
        self.folder = Path(folder)
        self.labels = list(range(1, num_classes))
        self.per_case: list[dict] = []

    def add(self, case: Any, prediction: np.ndarray) -> Path:
        """Map ``prediction`` (canonical ``(D, H, W)``) of ``case`` (a labelled
        :class:`~tasks.medseg.preprocessing.nifti_data.NiftiCase`) back, write it, score it; returns the file
        written."""
        from tasks.medseg.preprocessing.nifti_geometry import to_original, write_label_nifti

        if case.files is None or case.files.label is None:
            raise ValueError(f"case {case.case!r} has no label file to score its prediction against")
        original = to_original(prediction, case.geometry)  # (X, Y, Z) as the file stores it
        written = write_label_nifti(self.folder / case.files.label.name, original, case.geometry)
        reference, _ = read_label_map(case.files.label)
        self.per_case.append(case_metrics(case.files.label, written, reference, original, self.labels))
        return written

    def finish(self) -> dict:
        """The summary of the cases added (nnU-Net's ``summary.json`` dict), also written to the folder."""
        summary = aggregate(self.per_case, self.labels)
        write_summary_json(summary, self.folder / SUMMARY_FILE)
        return summary

    def report_lines(self, summary: dict, class_names: Sequence[str]) -> list[str]:
        """Markdown: where the label maps are, and nnU-Net's mean Dice and IoU per class."""
        where = "/".join(self.folder.parts[-2:])
        return ["### nnU-Net's evaluation, in the original geometry", "",
                f"Each prediction mapped back onto its file's grid (shape, affine and orientation of the input) is "
                f"in `{where}/`; `{where}/{SUMMARY_FILE}` scores it against the original label file as nnU-Net v2 "
                "does (Dice and IoU from voxel counts; a class absent from both is NaN and left out of the mean).", "",
                *summary_lines(summary, class_names), ""]
