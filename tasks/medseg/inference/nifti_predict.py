"""``zoo predict`` on NIfTI files with a run trained on NIfTI data: one label map per case, on the input's grid.

Each case is read with exactly the training's preprocessing, as run.json records it (``preprocessing["nifti"]``):
reoriented to RAS, resampled to the run's spacing, each channel normalised by the run's rule (the CT window, or
the statistics the training fitted), and sliced across the same axis
(:func:`~tasks.medseg.preprocessing.nifti_data.preprocess_case`). It is predicted slice by slice as the evaluation
predicts a case (:meth:`MedsegTask.predict_volume`), mapped back onto the input's grid
(:func:`~tasks.medseg.preprocessing.nifti_geometry.to_original`) and written as ``OUT/CASE.nii.gz`` (the input's
ending): uint8, the input's shape, affine and orientation. Saved probabilities (``CASE.npz``) are mapped onto the same
grid the same way (:func:`~tasks.medseg.preprocessing.nifti_geometry.probabilities_to_original`), as nnU-Net exports
them: their arg-max is the written label map.

Cases: a run trained on an nnU-Net v2 folder reads its inputs as nnU-Net does, one file per channel
``{CASE}_{XXXX}.nii.gz`` grouped by case (every channel required); any other NIfTI run reads one file per case (a 4D
file holds the channels on its last axis).

With ``labels`` (a folder with ``CASE.nii.gz`` label files, e.g. ``labelsTs/``, or one file for one case), every case
is also scored: the task's records on the canonical grid, as the evaluation scores (``OUT/predictions/predict.jsonl``,
``OUT/metrics.json``), and nnU-Net's ``OUT/summary.json`` in the original geometry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import nibabel as nib
import numpy as np

from tasks.engine.progress import progress_bar
from tasks.medseg.reading.nifti_layout import NIFTI_ENDINGS, CaseFiles, nifti_stem
from tasks.medseg.reading.volume import Volume
from tasks.runs.records import split_hash, write_records
from tasks.runs.run import Run

SPLIT = "predict"
_CHANNEL_FILE = re.compile(r"^(?P<case>.+)_(?P<channel>\d{4})$")


def predict_nifti(run: Run, files: Sequence[Path], out: Path, labels: str | Path | bool | None = None,
                  progress: bool = True, batch_size: int | None = None, save_probabilities: bool = False,
                  members: Sequence[Run] | None = None) -> str:
    """Predict every case of ``files`` (NIfTI) into ``out``; returns a one-line summary (see the module docstring).

    ``members`` and ``save_probabilities``: an ensemble and ``CASE.npz`` files as
    :func:`tasks.medseg.inference.predict.predict` describes them (probabilities mapped onto the input's grid as the
    label map is, so that they agree voxel for voxel; spacing: the input's voxel sizes along its array axes)."""
    from tasks.medseg.evaluation.nifti_scoring import OriginalGeometryScores
    from tasks.medseg.inference.case_prediction import mirroring_suffix, predict_case
    from tasks.medseg.preprocessing.nifti_data import Preprocessing, preprocess_case
    from tasks.medseg.preprocessing.nifti_geometry import probabilities_to_original, to_original, write_label_nifti

    task, info = run.task, run.preprocessing["nifti"]
    prep = Preprocessing.from_dict(info["preprocessing"])
    cases = group_cases(files, info["layout"], len(prep.rules))
    references = _label_files(cases, labels, out)
    clash = next((p for case, ending, paths in cases for p in paths if (out / f"{case}{ending}").resolve()
                  == p.resolve()), None)
    if clash is not None:
        raise ValueError(f"--out {out} holds the input {clash}, which its prediction would replace; choose another "
                         "--out folder")
    out.mkdir(parents=True, exist_ok=True)
    scores = OriginalGeometryScores(out, task.num_classes) if references[0] is not None else None
    records, hashed = [], []
    bar = progress_bar(list(zip(cases, references)), desc="predict", unit="case",
                       disable=not progress or len(cases) < 2, dynamic_ncols=True)
    for (case, ending, paths), reference in bar:
        loaded = preprocess_case(CaseFiles(case, paths, reference, "test"), prep, num_classes=task.num_classes)
        image = loaded.image[0] if loaded.image.shape[0] == 1 else loaded.image  # (D, H, W) or (C, D, H, W)
        label = loaded.label if loaded.label is not None else np.zeros(image.shape[-3:], np.uint8)  # unused zeros
        volume = Volume(case, image, label, loaded.spacing)
        model = [m.model for m in members] if members and len(members) > 1 else run.model
        geometry = loaded.geometry
        on_input_grid = partial(probabilities_to_original, geometry=geometry)  # as to_original maps the labels
        with run.context():  # the precision the run trained in
            pred = predict_case(task, model, volume, batch_size, out / f"{case}.npz" if save_probabilities else None,
                                "the input file's own array grid: its axis order and shape, the written label map's "
                                "affine", on_input_grid,
                                nib.affines.voxel_sizes(np.asarray(geometry.affine)))  # (D, H, W) canonical
        if scores is None:
            write_label_nifti(out / f"{case}{ending}", to_original(pred, geometry), geometry)
            continue
        scores.add(loaded, pred)  # maps back, writes OUT/<label file name>, scores in the original geometry
        records.append(task.evaluator.case_record(volume, pred))
        hashed += [volume.case, volume.image, volume.label]
    wrote = f"wrote {len(cases)} label map{'s' * (len(cases) != 1)} to {out}/{mirroring_suffix(task)}"
    if scores is None:
        return f"{wrote} ({', '.join(c for c, _, _ in cases[:3])}{', ...' if len(cases) > 3 else ''})"
    nnunet = scores.finish()
    path = write_records(out, SPLIT, records, split_hash(hashed))
    summaries = task.evaluator.summaries(records)
    metrics = {**task.evaluator.headline_metrics(summaries), "conventions": summaries}
    fg = nnunet["foreground_mean"]["Dice"]
    metrics["nnunet_dice"] = float(fg) if np.isfinite(fg) else None
    (out / "metrics.json").write_text(json.dumps({"run": str(run.path), "weights": str(run.weights),
                                                  "cases": len(records), "final": {SPLIT: metrics}}, indent=2) + "\n")
    return (f"{wrote}; mean Dice {_number(metrics['dice'], 4)}, HD95 {_number(metrics['hd95'], 2)} "
            f"({task.config.hd95} convention, canonical grid), nnU-Net Dice {_number(metrics['nnunet_dice'], 4)} "
            f"(original geometry, {out / 'summary.json'}) over {len(records)} case{'s' * (len(records) != 1)}; "
            f"records in {path}")


def group_cases(files: Sequence[Path], layout: str, channels: int) -> list[tuple[str, str, tuple[Path, ...]]]:
    """``(case, ending, channel files)`` per case: nnU-Net's ``{CASE}_{XXXX}`` files grouped (``layout`` "nnunet"),
    else one file per case."""
    cases: dict[str, tuple[str, dict[int, Path]]] = {}
    for path in files:
        stem = nifti_stem(path)
        if stem is None:
            raise ValueError(f"{path} is not a NIfTI file; this run was trained on NIfTI data and predicts "
                             f"{' / '.join(NIFTI_ENDINGS)} files")
        ending = path.name[len(stem):]
        if layout != "nnunet":
            if stem in cases:
                raise ValueError(f"{cases[stem][1][0]} and {path} are both case {stem!r}; predict them into "
                                 "different --out folders")
            cases[stem] = (ending, {0: path})
            continue
        match = _CHANNEL_FILE.match(stem)
        if match is None:
            raise ValueError(f"{path}: the run was trained on an nnU-Net folder, whose images are named "
                             f"{{CASE}}_{{XXXX}}{ending} (XXXX the channel: 0000 ...); rename it, e.g. "
                             f"{stem}_0000{ending}")
        channel = int(match["channel"])
        if channel >= channels:
            raise ValueError(f"{path}: channel {channel}, but the run was trained on {channels} channel(s)")
        _, found = cases.setdefault(match["case"], (ending, {}))
        if channel in found:
            raise ValueError(f"{found[channel]} and {path} are both channel {channel} of case {match['case']!r}")
        found[channel] = path
    grouped = []
    for case, (ending, found) in cases.items():
        if layout == "nnunet":
            missing = [c for c in range(channels) if c not in found]
            if missing:
                first = next(iter(found.values()))
                raise FileNotFoundError(f"{first.parent / f'{case}_{missing[0]:04d}{ending}'} is missing: case {case} "
                                        f"has {len(found)} of the run's {channels} channel files")
        grouped.append((case, ending, tuple(found[c] for c in sorted(found))))
    return grouped


def _label_files(cases: list[tuple[str, str, tuple[Path, ...]]], labels: str | Path | bool | None,
                 out: Path) -> list[Path | None]:
    """The reference label file of each case (``CASE.nii.gz`` or ``CASE.nii``), or None each without labels."""
    if labels is None or labels is False:
        return [None] * len(cases)
    if labels is True:
        raise ValueError("NIfTI images do not hold their labels: give --labels the folder of the label files "
                         "(e.g. labelsTs/)")
    folder = Path(labels).expanduser()
    if not folder.exists():
        raise FileNotFoundError(f"--labels {folder} does not exist; give the folder of the label files")
    if folder.is_file():
        if len(cases) != 1:
            raise ValueError(f"--labels {folder} is one file for {len(cases)} cases; give the folder of the label "
                             "files, named CASE.nii.gz")
        return [folder]
    if folder.resolve() == out.resolve():
        raise ValueError(f"--out {out} is the --labels folder: the predictions would replace the references; choose "
                         "another --out folder")
    found = []
    for case, ending, _ in cases:
        path = next((folder / f"{case}{e}" for e in (ending, *NIFTI_ENDINGS) if (folder / f"{case}{e}").is_file()),
                    None)
        if path is None:
            raise FileNotFoundError(f"--labels {folder} has no label file for case {case} (looked for "
                                    f"{folder / f'{case}{ending}'})")
        found.append(path)
    return found


def _number(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
