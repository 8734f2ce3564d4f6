"""One case predicted for ``zoo predict``: its label map, ensembled and mirrored as the run's config says, and on
request its class probabilities written beside it (``CASE.npz``, :func:`save_probabilities`). Shared by the NIfTI
and the other volume formats (:mod:`tasks.medseg.inference.predict`, :mod:`tasks.medseg.inference.nifti_predict`).

The saved probabilities and the label map agree voxel for voxel (the label map is their arg-max, as in nnU-Net's
exports): both come from the same probabilities on the model's grid, brought to the label map's grid by the same
nearest-neighbour mapping (each voxel takes the whole probability vector of one model-grid voxel, whose arg-max is
that voxel's label), and the probabilities are stored in float32, the precision the arg-max was taken in (float16
rounding turned near-ties into other labels).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from tasks.medseg.reading.volume import Volume


def predict_case(task, model, volume: Volume, batch_size: int | None, probabilities: Path | None, grid: str,
                 to_grid: Callable[[np.ndarray], np.ndarray] | None = None,
                 spacing: Sequence[float] | None = None) -> np.ndarray:
    """The label map of ``volume`` (ensembled and mirrored as the task's config says); with ``probabilities``,
    its class probabilities are written there too (:func:`save_probabilities`, described by ``grid``).

    Args:
        to_grid: maps the probabilities on the volume's grid onto the grid the label map is finally written on
            (NIfTI: the input file's), with the nearest-neighbour mapping the label map takes there; None: the
            volume's grid is that grid.
        spacing: the voxel size of that grid (default: the volume's).

    Shape:
        -> (D, H, W) uint8 on the volume's grid.
    """
    mirror = task.config.tta == "mirror"
    if probabilities is None:
        return task.evaluator.predict_volume(model, volume, batch_size, mirror)
    probs = task.evaluator.predict_probabilities(model, volume, batch_size, mirror)  # (K, ...) on the model's grid
    on_volume = task.evaluator.probabilities_on_volume(probs, volume)  # (K, D, H, W) float32
    save_probabilities(probabilities, to_grid(on_volume) if to_grid is not None else on_volume, task.class_names,
                       spacing if spacing is not None else volume.spacing, grid)
    return task.evaluator.labels_of(probs, volume)


def save_probabilities(path: Path, probabilities: np.ndarray, class_names: Sequence[str],
                       spacing: Sequence[float] | None, grid: str) -> Path:
    """Write ``CASE.npz``: ``probabilities`` float32 (K, ...) on the label map's grid, ``class_names``, ``spacing``
    (mm along the probabilities' spatial axes, NaN when unknown) and ``grid`` (what the axes are). Written whole or
    not at all."""
    from plumbing.atomic import atomic_open

    arrays = {"probabilities": np.asarray(probabilities, np.float32), "class_names": np.asarray(class_names),
              "spacing": np.asarray(spacing if spacing is not None else (np.nan,) * 3, np.float64),
              "grid": np.asarray(grid)}
    with atomic_open(path, binary=True) as handle:
        np.savez_compressed(handle, **arrays)
    return path


def mirroring_suffix(task) -> str:
    """`` (mirroring: ...)`` after the summary's folder when ``--tta mirror`` is on: which flips, and why those."""
    return f" (mirroring: {task.evaluator.mirroring_note()})" if task.config.tta == "mirror" else ""
