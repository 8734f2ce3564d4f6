"""nnU-Net v2's ``summary.json``: per-case and mean Dice, IoU and voxel counts, with its conventions.

Written from a reading of ``nnunetv2/evaluation/evaluate_predictions.py`` (``compute_metrics``,
``compute_metrics_on_folder``, ``save_summary_json``); the conventions reproduced:

- each label (or region, a tuple of labels counted as one mask) is scored per case from the voxel counts TP, FP,
  FN, TN (voxels of the ignore label, when there is one, left out of all four); ``Dice = 2TP / (2TP + FP + FN)``,
  ``IoU = TP / (TP + FP + FN)``, both **NaN when TP + FP + FN = 0** (the label absent from reference and
  prediction); ``n_pred = TP + FP``, ``n_ref = TP + FN``;
- ``mean[label][metric]`` is the mean over cases ignoring NaN (``np.nanmean``: NaN only when every case is NaN);
- ``foreground_mean[metric]`` is the plain mean of ``mean[label][metric]`` over the labels other than 0 (NaN
  propagates); nnU-Net scores only the foreground labels, so 0 is usually not among them anyway;
- the file: labels as string keys (``"1"``, ``"(1, 2)"``), ``json.dump(..., sort_keys=True, indent=4)``, NaN
  written as ``NaN``; ``reference_file`` and ``prediction_file`` are the paths as given.

Predictions are paired with references by file name (as nnU-Net does, for the files ending in the same NIfTI
ending), and each pair must share shape and affine.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import nibabel as nib
import numpy as np

from plumbing.atomic import write_text_atomic
from tasks.medseg.reading.nifti_layout import AFFINE_ATOL, NIFTI_ENDINGS, nifti_stem, read_header

METRICS = ("Dice", "IoU", "FP", "TP", "FN", "TN", "n_pred", "n_ref")
Label = int | tuple[int, ...]


def label_metrics(reference: np.ndarray, prediction: np.ndarray, label: Label, ignore_label: int | None = None
                  ) -> dict[str, float | int]:
    """nnU-Net's metrics of one label (or region) in one case (see the module docstring)."""
    ref, pred = _mask(reference, label), _mask(prediction, label)
    use = np.ones_like(ref) if ignore_label is None else reference != ignore_label
    tp, fp = int(np.sum(ref & pred & use)), int(np.sum(~ref & pred & use))
    fn, tn = int(np.sum(ref & ~pred & use)), int(np.sum(~ref & ~pred & use))
    empty = tp + fp + fn == 0
    return {"Dice": math.nan if empty else 2 * tp / (2 * tp + fp + fn),
            "IoU": math.nan if empty else tp / (tp + fp + fn),
            "FP": fp, "TP": tp, "FN": fn, "TN": tn, "n_pred": fp + tp, "n_ref": fn + tp}


def nnunet_summary(
    pairs: Iterable[tuple[str | Path, str | Path, np.ndarray, np.ndarray]], labels: Sequence[Label],
    ignore_label: int | None = None,
) -> dict:
    """The ``summary.json`` dict of nnU-Net v2's evaluation.

    Args:
        pairs: ``(reference_file, prediction_file, reference, prediction)`` per case; arrays of one shape. May be a
            generator, so that only one case's arrays are in memory at a time.
        labels: the labels (ints) or regions (tuples of ints) to score, e.g. the foreground labels 1 .. K-1.
        ignore_label: a reference label whose voxels are left out, as nnU-Net's ``ignore_label``.

    Returns:
        ``{"metric_per_case": [{"reference_file", "prediction_file", "metrics": {label: {metric: value}}}],
        "mean": {label: {metric: value}}, "foreground_mean": {metric: value}}``, labels as ints / tuples like
        nnU-Net's in memory (:func:`write_summary_json` turns them into its file's string keys).
    """
    labels = check_labels(labels)
    return aggregate([case_metrics(*pair, labels, ignore_label) for pair in pairs], labels)


def check_labels(labels: Sequence[Label]) -> list[Label]:
    """The labels to score, checked (ints, or non-empty tuples of ints for regions; at least one)."""
    labels = [_check_label(label) for label in labels]
    if not labels:
        raise ValueError("labels must name at least one label to score, e.g. the foreground labels [1, ..., K-1]")
    return labels


def case_metrics(ref_file: str | Path, pred_file: str | Path, reference: np.ndarray, prediction: np.ndarray,
                 labels: Sequence[Label], ignore_label: int | None = None) -> dict:
    """One entry of ``metric_per_case``: ``{"reference_file", "prediction_file", "metrics": {label: {...}}}``."""
    reference, prediction = np.asarray(reference), np.asarray(prediction)
    if reference.shape != prediction.shape:
        raise ValueError(f"{pred_file}: prediction shape {prediction.shape} differs from its reference {ref_file} "
                         f"{reference.shape}")
    metrics = {label: label_metrics(reference, prediction, label, ignore_label) for label in labels}
    return {"reference_file": str(ref_file), "prediction_file": str(pred_file), "metrics": metrics}


def aggregate(per_case: Sequence[dict], labels: Sequence[Label]) -> dict:
    """The summary of :func:`case_metrics` entries: ``mean`` per label (NaN-skipping) and ``foreground_mean``."""
    if not per_case:
        raise ValueError("no (reference, prediction) pairs to score")
    per_case = list(per_case)
    mean = {label: {m: _nanmean([c["metrics"][label][m] for c in per_case]) for m in METRICS} for label in labels}
    foreground = [label for label in labels if label != 0]
    foreground_mean = {m: float(np.mean([mean[label][m] for label in foreground])) if foreground else math.nan
                       for m in METRICS}
    return {"metric_per_case": per_case, "mean": mean, "foreground_mean": foreground_mean}


def evaluate_folders(
    pred_dir: str | Path, label_dir: str | Path, labels: Sequence[Label] | Mapping[str, int],
    *, ignore_label: int | None = None, chill: bool = False, output_file: str | Path | None = None,
) -> dict:
    """Score every prediction in ``pred_dir`` against the label of the same name in ``label_dir``.

    Args:
        labels: the labels to score, or a dataset.json ``labels`` mapping (nnU-Net's name -> value or the
            Decathlon's "value" -> name), whose foreground labels are scored.
        chill: as nnU-Net's ``--chill``: allow references that have no prediction (otherwise an error).
        output_file: where to write ``summary.json`` too (nnU-Net writes ``pred_dir/summary.json``).

    Raises:
        FileNotFoundError: a folder, or the reference of a prediction, is missing. ValueError: a pair differs in
        shape or affine, a file is unreadable or not a label map.
    """
    pred_dir, label_dir = Path(pred_dir), Path(label_dir)
    for folder in (pred_dir, label_dir):
        if not folder.is_dir():
            raise FileNotFoundError(f"folder {folder} does not exist")
    if isinstance(labels, Mapping):  # nnU-Net's {name: value} or the Decathlon's {"value": name}
        labels = sorted({v if isinstance(v, int) else int(k) for k, v in labels.items()} - {0})
    predictions = _label_files(pred_dir)
    if not predictions:
        raise FileNotFoundError(f"no predictions ({', '.join('*' + e for e in NIFTI_ENDINGS)}) in {pred_dir}")
    references = {p.name for p in _label_files(label_dir)}
    missing = [p for p in predictions if p.name not in references]
    if missing:
        raise FileNotFoundError(f"{missing[0]} has no reference: no {label_dir / missing[0].name}")
    unpredicted = sorted(references - {p.name for p in predictions})
    if unpredicted and not chill:
        raise FileNotFoundError(f"{len(unpredicted)} reference(s) in {label_dir} have no prediction in {pred_dir} "
                                f"(e.g. {unpredicted[0]}); pass chill=True to score only the predicted cases")
    pairs = (read_pair(label_dir / pred_file.name, pred_file) for pred_file in predictions)  # one case at a time
    summary = nnunet_summary(pairs, labels, ignore_label)
    if output_file is not None:
        write_summary_json(summary, output_file)
    return summary


def read_pair(ref_file: Path, pred_file: Path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """``(ref_file, pred_file, reference, prediction)`` read and checked to lie on the same grid (shape, affine)."""
    reference, ref_affine = read_label_map(ref_file)
    prediction, pred_affine = read_label_map(pred_file)
    if reference.shape != prediction.shape:
        raise ValueError(f"{pred_file}: shape {prediction.shape} differs from its reference {ref_file} "
                         f"{reference.shape}")
    if not np.allclose(ref_affine, pred_affine, rtol=0, atol=AFFINE_ATOL):
        raise ValueError(f"{pred_file}: affine differs from its reference {ref_file}'s by up to "
                         f"{float(np.abs(ref_affine - pred_affine).max()):.4g} mm: not on the same grid")
    return ref_file, pred_file, reference, prediction


def write_summary_json(summary: dict, path: str | Path) -> Path:
    """Write ``summary`` as nnU-Net's ``summary.json`` (labels as string keys, sorted keys, indent 4), atomically."""
    converted = {
        "metric_per_case": [{**case, "metrics": {str(k): v for k, v in case["metrics"].items()}}
                            for case in summary["metric_per_case"]],
        "mean": {str(k): v for k, v in summary["mean"].items()},
        "foreground_mean": summary["foreground_mean"],
    }
    return write_text_atomic(path, json.dumps(converted, sort_keys=True, indent=4))


def summary_lines(summary: dict, class_names: Sequence[str] | None = None) -> list[str]:
    """Markdown table lines of the mean Dice and IoU per label, named when ``class_names`` is given."""
    lines = ["| label | Dice | IoU |", "|---|---|---|"]
    for label, metrics in summary["mean"].items():
        name = class_names[label] if class_names is not None and isinstance(label, int) else str(label)
        lines.append(f"| {name} | {metrics['Dice']:.4f} | {metrics['IoU']:.4f} |")
    fg = summary["foreground_mean"]
    lines.append(f"| foreground mean | {fg['Dice']:.4f} | {fg['IoU']:.4f} |")
    return lines


def _mask(segmentation: np.ndarray, label: Label) -> np.ndarray:
    return segmentation == label if isinstance(label, int) else np.isin(segmentation, label)


def _check_label(label: object) -> Label:
    if isinstance(label, bool) or not isinstance(label, int | tuple | np.integer):
        raise TypeError(f"each label must be an int or a tuple of ints (a region), got {label!r}")
    if isinstance(label, tuple):
        if not label or not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in label):
            raise TypeError(f"a region must be a non-empty tuple of ints, got {label!r}")
        return tuple(int(v) for v in label)
    return int(label)


def _nanmean(values: Sequence[float]) -> float:
    kept = [float(v) for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def _label_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and nifti_stem(p) is not None
                  and not p.name.startswith("."))


def read_label_map(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(label array as stored, affine) of a NIfTI label map; one-line errors naming the file."""
    _, affine = read_header(path)
    try:
        array = np.asarray(nib.load(path).dataobj)
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        raise ValueError(f"{path}: cannot read its voxel data ({type(exc).__name__}: {exc})") from exc
    if array.dtype.kind not in "biuf" or (array.dtype.kind == "f" and not np.array_equal(array, np.rint(array))):
        raise ValueError(f"{path}: not a label map (dtype {array.dtype}, values must be integers)")
    if array.ndim == 4 and array.shape[3] == 1:
        array = array[..., 0]
    return array, affine
