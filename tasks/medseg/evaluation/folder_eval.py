"""``zoo evaluate medseg --pred DIR --labels DIR``: score a folder of predicted NIfTI label maps, no model needed.

Predictions are paired with references by file name, and each pair must share shape and affine
(:func:`~tasks.medseg.evaluation.nnunet_eval.evaluate_folders`, nnU-Net v2's ``evaluate_folder``). Written to the
output folder (default: the predictions' folder, where nnU-Net writes it):

- ``summary.json``: nnU-Net's per-case and mean Dice, IoU and voxel counts per class;
- ``metrics.json``: this package's per-class Dice and HD95 in both conventions
(:mod:`tasks.medseg.evaluation.metrics`), the
  ``mm`` one with each file's voxel spacing from its header and the normalised surface Dice (NSD) at
  ``nsd_tolerance`` mm.

The classes come from ``dataset_json`` when given, else from a ``dataset.json`` in the labels' folder or the one above
it (a ``labelsTr/`` or ``labelsTs/`` inside a Decathlon or nnU-Net folder), else from the label values found in the
references (``class 1``, ...).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np

from plumbing.atomic import write_text_atomic
from tasks.medseg.config import MedsegConfig
from tasks.medseg.evaluation.metrics import (
    CONVENTIONS,
    case_scores_per_convention,
    case_status,
    check_nsd_tolerance,
    summarise,
)
from tasks.medseg.evaluation.nifti_scoring import SUMMARY_FILE
from tasks.medseg.evaluation.nnunet_eval import (
    evaluate_folders,
    read_label_map,
    read_pair,
    summary_lines,
    write_summary_json,
)
from tasks.medseg.reading.nifti_layout import dataset_class_names


def class_names_for(label_dir: Path, dataset_json: str | Path | None = None) -> tuple[list[str], str]:
    """(class names, where they came from) for the references in ``label_dir`` (see the module docstring)."""
    if dataset_json is not None:
        return list(dataset_class_names(Path(dataset_json).expanduser())), str(dataset_json)
    for candidate in (label_dir / "dataset.json", label_dir.parent / "dataset.json"):
        if candidate.is_file():
            return list(dataset_class_names(candidate)), str(candidate)
    values: set[int] = set()
    for path in sorted(label_dir.iterdir()):
        if path.is_file() and path.name.endswith((".nii", ".nii.gz")) and not path.name.startswith("."):
            values |= {int(v) for v in np.unique(read_label_map(path)[0])}
    if not values - {0}:
        raise ValueError(f"the references in {label_dir} hold no label other than 0, and no dataset.json names the "
                         "classes; pass --dataset-json")
    return ["background", *(f"class {k}" for k in range(1, max(values) + 1))], f"the label values in {label_dir}"


def score_folders(pred_dir: str | Path, label_dir: str | Path, dataset_json: str | Path | None = None,
                  out: str | Path | None = None, chill: bool = False, nsd_tolerance: float | None = None
                  ) -> tuple[dict[str, Any], Path, list[str]]:
    """Score ``pred_dir`` against ``label_dir``; returns (metrics, output folder, summary lines to print).

    ``nsd_tolerance``: the NSD's tolerance in mm; ``None``: a training run's default (``MedsegConfig``).

    Raises:
        FileNotFoundError: a folder, or the reference of a prediction, is missing. ValueError: a pair differs in
        shape or affine, a file is unreadable, or holds label values outside the classes.
    """
    tolerance = check_nsd_tolerance(MedsegConfig.nsd_tolerance if nsd_tolerance is None else nsd_tolerance)
    pred_dir, label_dir = Path(pred_dir).expanduser(), Path(label_dir).expanduser()
    for flag, folder in (("--pred", pred_dir), ("--labels", label_dir)):
        if not folder.is_dir():
            raise FileNotFoundError(f"{flag} {folder} does not exist or is not a folder; give a folder of .nii.gz "
                                    "label maps")
    names, origin = class_names_for(label_dir, dataset_json)
    out = Path(out).expanduser() if out is not None else pred_dir
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for summary.json and metrics.json")
    k = len(names)
    summary = evaluate_folders(pred_dir, label_dir, list(range(1, k)), chill=chill)  # written once all is checked
    per_case: dict[str, dict[str, dict]] = {name: {} for name in CONVENTIONS}
    status = {}
    for entry in summary["metric_per_case"]:
        ref_file, pred_file, reference, prediction = read_pair(Path(entry["reference_file"]),
                                                               Path(entry["prediction_file"]))
        case = Path(pred_file).name
        for path, array in ((ref_file, reference), (pred_file, prediction)):
            if array.min() < 0 or array.max() >= k:
                raise ValueError(f"{path}: label values {int(array.min())} .. {int(array.max())} fall outside the "
                                 f"{k} classes of {origin} (0 .. {k - 1})")
        reference, prediction = reference.astype(np.uint8), prediction.astype(np.uint8)
        spacing = tuple(float(v) for v in nib.affines.voxel_sizes(nib.load(ref_file).affine))
        for convention, scores in case_scores_per_convention(prediction, reference, k, spacing, tolerance).items():
            per_case[convention][case] = scores  # each organ's distances computed once for both conventions
        status[case] = case_status(prediction, reference, k)
    summaries = {c: summarise(per_case[c], names, c, status=status, nsd_tolerance=tolerance if c == "mm" else None)
                 for c in CONVENTIONS}
    fg = summary["foreground_mean"]["Dice"]
    metrics = {"pred": str(pred_dir), "labels": str(label_dir), "classes": names, "classes_from": origin,
               "cases": len(summary["metric_per_case"]), "nnunet_dice": float(fg) if np.isfinite(fg) else None,
               "dice": summaries["papers"]["mean_dice"], "hd95": summaries["papers"]["mean_hd95"],
               "dice_mm": summaries["mm"]["mean_dice"], "hd95_mm": summaries["mm"]["mean_hd95"],
               "nsd": summaries["mm"]["mean_nsd"], "nsd_tolerance_mm": tolerance, "conventions": summaries}
    write_summary_json(summary, out / SUMMARY_FILE)  # only now: a refused input leaves no file behind
    write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    lines = [f"{metrics['cases']} cases of {pred_dir} scored against {label_dir} (classes from {origin}):",
             *summary_lines(summary, names),
             f"this package's conventions: Dice {_number(metrics['dice'])}, HD95 {_number(metrics['hd95'])} voxels "
             f"(papers); Dice {_number(metrics['dice_mm'])}, HD95 {_number(metrics['hd95_mm'])} mm, "
             f"NSD @ {tolerance:g} mm {_number(metrics['nsd'])} (mm)"]
    return metrics, out, lines


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
