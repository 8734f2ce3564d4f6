"""One case predicted for ``zoo predict``: its label map, ensembled and mirrored as the run's config says, and on
request its class probabilities written beside it (``CASE.npz``, :func:`save_probabilities`). Shared by the NIfTI
and the other volume formats (:mod:`tasks.medseg.predict`, :mod:`tasks.medseg.nifti_predict`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tasks.medseg.volume import Volume


def predict_case(task, model, volume: Volume, batch_size: int | None, probabilities: Path | None,
                 grid: str) -> np.ndarray:
    """The label map of ``volume`` (ensembled and mirrored as the task's config says); with ``probabilities``,
    its class probabilities are written there too (:func:`save_probabilities`, on ``grid``).

    Shape:
        -> (D, H, W) uint8 on the volume's grid.
    """
    mirror = task.config.tta == "mirror"
    if probabilities is None:
        return task.predict_volume(model, volume, batch_size, mirror)
    probs = task.predict_probabilities(model, volume, batch_size, mirror)  # (K, ...) on the model's grid
    save_probabilities(probabilities, task.probabilities_on_volume(probs, volume), task.class_names, volume.spacing,
                       grid)
    return task.labels_of(probs, volume)


def save_probabilities(path: Path, probabilities: np.ndarray, class_names: Sequence[str],
                       spacing: Sequence[float] | None, grid: str) -> Path:
    """Write ``CASE.npz``: ``probabilities`` float16 (K, D, H, W), ``class_names``, ``spacing`` (z, y, x mm, NaN
    when unknown) and ``grid`` (what the axes are). Written whole or not at all."""
    from core.atomic import atomic_open

    arrays = {"probabilities": probabilities.astype(np.float16), "class_names": np.asarray(class_names),
              "spacing": np.asarray(spacing if spacing is not None else (np.nan,) * 3, np.float64),
              "grid": np.asarray(grid)}
    with atomic_open(path, binary=True) as handle:
        np.savez_compressed(handle, **arrays)
    return path
