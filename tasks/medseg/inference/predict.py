"""``zoo predict`` for medseg runs: label volumes for image volumes, scored when labels are given.

Each input volume (a file, or every volume file of a folder; see :mod:`tasks.medseg.reading.volumes_io` for the
formats) is predicted exactly as the evaluation predicts a case (:meth:`MedsegTask.predict_volume`: slice by
slice at the run's ``image_size``, the arg-max zoomed back to each slice's size with order 0) and written under
``out`` with the input's file name and format: a uint8 label volume of the input's shape. The images must be
what the run was trained on: intensities as its files stored them (Synapse: [0, 1], see run.json's
``preprocessing``).

A run trained on NIfTI data takes NIfTI files (.nii, .nii.gz) and hands them to
:mod:`tasks.medseg.inference.nifti_predict`, which repeats the training's reorientation, resampling and intensity
rules and writes each case's label map on its input's grid (nnU-Net's multi-channel ``{CASE}_{XXXX}`` files grouped by
case); other runs refuse NIfTI files, whose preprocessing they do not know.

With ``labels`` (a folder holding a label file named like each input, a single label file for a single input,
or ``True`` when the inputs hold their labels), every case also gets Dice and HD95 per organ in both
conventions, written as ``OUT/predictions/predict.jsonl`` records (the evaluation's format) with
``OUT/metrics.json``.

Ensembles and mirroring: ``members`` (the runs of a ``zoo cv`` folder, :mod:`tasks.runs.ensemble`) predict with the
mean of their softmax probabilities; the run's ``tta`` setting (``--tta mirror``) averages each over the flips along
the axes its training flipped (:meth:`MedsegTask.mirror_axes`), and the summary says which.

``save_probabilities`` writes ``OUT/CASE.npz`` beside each label map (:func:`save_probabilities`): ``probabilities``
float32 ``(K, ...)`` on the label map's own grid, whose arg-max is the label map voxel for voxel (as in nnU-Net's
exports): a 2D model's are zoomed back with order 0 as its labels are; for NIfTI inputs they are mapped onto the
input's grid as the label map is. With ``class_names``, ``spacing`` and a ``grid`` note.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from plumbing.errors import check_positive
from tasks.engine.progress import progress_bar
from tasks.medseg.inference.case_prediction import mirroring_suffix, predict_case
from tasks.medseg.reading.volume import Volume
from tasks.medseg.reading.volumes_io import (
    NIFTI_FORMATS,
    case_name,
    find_volumes,
    read_image,
    read_label,
    volume_format,
    write_label,
)
from tasks.runs.records import split_hash, write_records
from tasks.runs.run import Run

log = logging.getLogger(__name__)

SPLIT = "predict"  # the records' split name: OUT/predictions/predict.jsonl


def predict(run: Run, inputs: Sequence[str | Path], out: str | Path | None = None, progress: bool = True,
            batch_size: int | None = None, labels: str | Path | bool | None = None, save_probabilities: bool = False,
            members: Sequence[Run] | None = None) -> str:
    """Write the predicted label volume of each input under ``out`` (default ``predictions/``); returns a
    one-line summary (with the mean Dice when ``labels`` are given).

    Args:
        run: a medseg run from :func:`tasks.runs.run.load_run`.
        inputs: volume files or folders of them; outputs follow their order.
        out: the output folder.
        progress: a progress bar over the volumes.
        batch_size: slices per forward pass (default: the run's ``eval_batch_size``).
        labels: reference label volumes to score the predictions with (see the module docstring).
        save_probabilities: also write each case's class probabilities (see the module docstring).
        members: the runs of an ensemble (``run`` among them) whose probabilities are averaged.
    """
    task = run.task
    if task.name != "medseg":
        raise ValueError(f"{run.path} is a {task.name} run; tasks.medseg.inference.predict takes medseg runs")
    if batch_size is not None:
        check_positive("batch_size", batch_size)
    files = find_volumes(inputs)
    out = Path(out if out is not None else "predictions")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for the predicted label volumes")
    nifti = [f for f in files if volume_format(f) in NIFTI_FORMATS]
    if run.preprocessing.get("nifti") is not None:
        other = next((f for f in files if f not in nifti), None)
        if other is not None:
            raise ValueError(f"{other}: {run.path} was trained on NIfTI data (reoriented, resampled and normalised "
                             "as run.json records); give it .nii or .nii.gz files")
        from tasks.medseg.inference.nifti_predict import predict_nifti

        return predict_nifti(run, files, out, labels, progress, batch_size, save_probabilities, members)
    if nifti:
        raise ValueError(f"{nifti[0]} is NIfTI, but {run.path} was trained on {run.preprocessing.get('dataset')} "
                         "volumes as their files store them, with no NIfTI preprocessing (orientation, spacing, "
                         "intensity rule) to repeat; train on a NIfTI folder to predict NIfTI files")
    clash = next((f for f in files if (out / f.name).resolve() == f.resolve()), None)
    if clash is not None:
        raise ValueError(f"--out {out} holds the input {clash}, which its prediction would replace; choose another "
                         "--out folder")
    references = _label_files(files, labels)
    out.mkdir(parents=True, exist_ok=True)
    records, hashed = [], []
    bar = progress_bar(list(zip(files, references)), desc="predict", unit="volume",
                       disable=not progress or len(files) < 2, dynamic_ncols=True)
    for file, reference in bar:
        image = read_image(file)
        label = _reference(reference, image, task.num_classes)
        _check_intensity(image, run)
        volume = Volume(image.case, image.array, label.array if label else np.zeros(image.array.shape, np.uint8),
                        image.spacing or (label.spacing if label else None))  # without labels, unused zeros
        with run.context():  # the precision the run trained in
            pred = predict_case(task, _models(run, members), volume, batch_size,
                                out / f"{image.case}.npz" if save_probabilities else None,
                                "the input file's own array grid")  # (D, H, W) uint8
        write_label(out / file.name, pred, image)
        if label is not None:
            records.append(task.evaluator.case_record(volume, pred))
            hashed += [volume.case, volume.image, volume.label]
    wrote = f"wrote {len(files)} label volume{'s' * (len(files) != 1)} to {out}/{mirroring_suffix(task)}"
    if not records:
        return f"{wrote} ({', '.join(f.name for f in files[:3])}{', ...' if len(files) > 3 else ''})"
    path = write_records(out, SPLIT, records, split_hash(hashed))
    summaries = task.evaluator.summaries(records)
    metrics = {**task.evaluator.headline_metrics(summaries), "conventions": summaries}
    (out / "metrics.json").write_text(json.dumps({"run": str(run.path), "weights": str(run.weights),
                                                  "cases": len(records), "final": {SPLIT: metrics}}, indent=2) + "\n")
    return (f"{wrote}; mean Dice {_number(metrics['dice'], 4)}, HD95 {_number(metrics['hd95'], 2)} "
            f"({task.config.hd95} convention) over {len(records)} case{'s' * (len(records) != 1)}; per-case records "
            f"in {path}")


def _models(run: Run, members: Sequence[Run] | None):
    """The model, or the members' models (an ensemble)."""
    return [m.model for m in members] if members and len(members) > 1 else run.model


def _label_files(files: list[Path], labels: str | Path | bool | None) -> list[Path | None]:
    """The reference label file of each input (``None`` each without labels)."""
    if labels is None or labels is False:
        return [None] * len(files)
    if labels is True:
        return list(files)
    folder = Path(labels).expanduser()
    if not folder.exists():
        raise FileNotFoundError(f"--labels {folder} does not exist; give the folder of the label volumes (the "
                                "inputs' own folder when they hold their labels)")
    if folder.is_file():
        if len(files) != 1:
            raise ValueError(f"--labels {folder} is one file for {len(files)} inputs; give a folder holding a label "
                             "file named like each input")
        return [folder]
    found = []
    for file in files:
        path = folder / file.name
        if not path.is_file():  # another format of the same case, e.g. labels in .npz for .h5 images
            path = next((p for p in sorted(folder.iterdir()) if p.is_file() and volume_format(p)
                         and case_name(p) == case_name(file)), None)
        if path is None:
            raise FileNotFoundError(f"--labels {folder} has no label volume for {file} (looked for "
                                    f"{folder / file.name} or another file of case {case_name(file)!r})")
        found.append(path)
    return found


def _reference(path: Path | None, image, num_classes: int):
    if path is None:
        return None
    label = read_label(path, num_classes)
    if label.array.shape != image.array.shape:
        raise ValueError(f"{path}: label volume {label.array.shape} does not match the input {image.path} "
                         f"{image.array.shape} (nor its prediction); give the labels of the same case")
    return label


def _check_intensity(image, run: Run) -> None:
    """Warn when the intensities are outside the range the training files held (e.g. raw CT in HU)."""
    expected = run.preprocessing.get("intensity_range")
    if expected is None:
        return
    low, high = float(image.array.min()), float(image.array.max())
    if low < expected[0] - 0.05 or high > expected[1] + 0.05:
        log.warning("%s: intensities span [%.4g, %.4g] but the run was trained on %s; preprocess the volumes "
                    "the same way", image.path, low, high, run.preprocessing.get("intensity", expected))


def _number(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
