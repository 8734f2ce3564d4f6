"""The volume files ``zoo predict`` reads and writes: one reader and one writer per format.

Formats, told apart by how the file name ends (the layouts of :mod:`tasks.medseg.reading.data`):

    .h5    Synapse ``test_vol_h5/caseXXXX.npy.h5`` and ACDC's SSL4MIS volumes: datasets ``image`` (D, H, W) and maybe
           ``label``; an attribute ``spacing`` (z, y, x) in mm when present. Prediction: an .h5 with the dataset
           ``label`` (uint8) and the input's ``spacing``.
    .npz   ACDC's MT-UNet volumes ``case_XXX_volume_ED.npz``: keys ``img`` (or ``image``) and maybe ``label``.
           Prediction: an .npz with the key ``label`` (uint8).
    .nii, .nii.gz   NIfTI, read here as stored (the file's array axes, spacing from the header, the affine kept in
           ``meta``); a prediction is a uint8 NIfTI with the input's affine. Runs trained on NIfTI data predict
           through :mod:`tasks.medseg.inference.nifti_predict`, which applies the training's reorientation, resampling
           and intensity rules, and maps each prediction back onto its input's grid before it is written here.

A format is added by one reader in :data:`READERS` and one writer in :data:`WRITERS` under its file ending.
Files keep their names: the prediction of ``in/case0001.npy.h5`` is ``OUT/case0001.npy.h5``.

Shape legend: ``D, H, W`` slices, rows, columns.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import nibabel as nib
import numpy as np

from tasks.medseg.reading.data import _as_image, _as_label, _read_h5, _read_npz, _volume_case
from tasks.medseg.reading.nifti_layout import nifti_stem, read_header


@dataclass(eq=False)
class VolumeFile:
    """One array read from a volume file, with what a writer copies to the prediction of that file."""

    path: Path
    key: str  # the dataset or key the array came from
    array: np.ndarray = field(repr=False)  # (D, H, W)
    spacing: tuple[float, float, float] | None = None  # (z, y, x) in mm, when the file says
    meta: dict[str, Any] = field(default_factory=dict)  # format-specific header (e.g. a NIfTI affine)

    @property
    def case(self) -> str:
        return case_name(self.path)


def case_name(path: Path) -> str:
    """The case name the loaders give a volume file (``case0001.npy.h5`` -> ``case0001``, ``case_002_volume_ED.npz``
    -> ``case_002_ED``, ``liver_3.nii.gz`` -> ``liver_3``): the names of the evaluation's records."""
    return nifti_stem(path) or _volume_case(path)


# role ("image" or "label") -> the keys that may hold it, per format
_KEYS = {".h5": {"image": ("image",), "label": ("label",)}, ".npz": {"image": ("img", "image"), "label": ("label",)}}


def _read_h5_volume(path: Path, role: str) -> VolumeFile:
    [(key, array)], spacing = _read_h5(path, (_KEYS[".h5"][role],))
    return VolumeFile(path, key, array, spacing)


def _read_npz_volume(path: Path, role: str) -> VolumeFile:
    [(key, array)] = _read_npz(path, (_KEYS[".npz"][role],))
    return VolumeFile(path, key, array)


def _write_h5_label(path: Path, label: np.ndarray, source: VolumeFile) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("label", data=label, compression="gzip")
        if source.spacing is not None:
            f.attrs["spacing"] = np.asarray(source.spacing, dtype=np.float64)


def _write_npz_label(path: Path, label: np.ndarray, source: VolumeFile) -> None:
    with path.open("wb") as f:  # a file object: np.savez would append .npz to a name lacking it
        np.savez_compressed(f, label=label)


def _read_nifti_volume(path: Path, role: str) -> VolumeFile:
    from tasks.medseg.evaluation.nnunet_eval import read_label_map

    if role == "label":
        array, affine = read_label_map(path)
    else:
        _, affine = read_header(path)
        try:
            array = np.asarray(nib.load(path).dataobj, dtype=np.float32)
        except (OSError, EOFError, ValueError, zlib.error) as exc:
            raise ValueError(f"{path}: cannot read its voxel data ({type(exc).__name__}: {exc})") from exc
        if array.ndim == 4 and array.shape[3] == 1:
            array = array[..., 0]
    spacing = tuple(float(v) for v in nib.affines.voxel_sizes(affine))  # of the file's array axes
    return VolumeFile(path, role, array, (spacing[0], spacing[1], spacing[2]), {"affine": affine})


def _write_nifti_label(path: Path, label: np.ndarray, source: VolumeFile) -> None:
    from tasks.medseg.preprocessing.nifti_geometry import save_label

    if label.shape != source.array.shape[-3:]:
        raise ValueError(f"a prediction {label.shape} for {source.path} must be on its grid {source.array.shape}")
    save_label(path, label, source.meta["affine"])


# file ending -> reader(path, role) / writer(path, label volume, the input it was predicted from)
READERS: dict[str, Callable[[Path, str], VolumeFile]] = {".h5": _read_h5_volume, ".npz": _read_npz_volume,
                                                         ".nii": _read_nifti_volume, ".nii.gz": _read_nifti_volume}
WRITERS: dict[str, Callable[[Path, np.ndarray, VolumeFile], None]] = {
    ".h5": _write_h5_label, ".npz": _write_npz_label, ".nii": _write_nifti_label, ".nii.gz": _write_nifti_label}
NIFTI_FORMATS = (".nii", ".nii.gz")


def volume_format(path: Path) -> str | None:
    """The file ending of a readable format that ``path`` has (the longest one), else None."""
    endings = [e for e in READERS if path.name.lower().endswith(e)]
    return max(endings, key=len) if endings else None


def find_volumes(inputs: Sequence[str | Path]) -> list[Path]:
    """The volume files named by ``inputs`` (files, or folders whose volume files are taken in name order)."""
    known = ", ".join(f"*{e}" for e in READERS)
    if not inputs:
        raise ValueError(f"no input volumes: give volume files ({known}) or folders holding them, e.g. "
                         "`zoo predict RUN data/test_vol_h5/`")
    files: list[Path] = []
    for item in inputs:
        path = Path(item).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"input {path} does not exist")
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and volume_format(p) and not p.name.startswith("."))
            if not found:
                folders = sorted(p.name + "/" for p in path.iterdir() if p.is_dir())[:5]
                hint = f" (it has the folders {', '.join(folders)}: give one of them)" if folders else ""
                raise FileNotFoundError(f"no volume files ({known}) in {path}{hint}")
            files += found
        elif volume_format(path) is None:
            raise ValueError(f"{path} is not a volume file zoo predict reads ({known}); convert it to one of those")
        else:
            files.append(path)
    seen: dict[str, Path] = {}
    for path in files:
        if path.name in seen:
            raise ValueError(f"{seen[path.name]} and {path} have the same name, so their predictions would "
                             "overwrite each other; predict them into different --out folders")
        seen[path.name] = path
    return files


def _checked_volume(volume: VolumeFile) -> VolumeFile:
    shape = volume.array.shape
    if volume.array.ndim == 2:
        raise ValueError(f"{volume.path}: {volume.key!r} is {shape}, a 2D slice; zoo predict takes whole volumes "
                         "(D, H, W): stack the slices of a case into one file, or give the test volumes")
    if volume.array.ndim != 3:
        hint = "; drop its length-1 axis" if volume.array.ndim == 4 and 1 in shape else ""
        raise ValueError(f"{volume.path}: {volume.key!r} has shape {shape}; expected a 3D volume (D, H, W){hint}")
    if 0 in shape:
        raise ValueError(f"{volume.path}: {volume.key!r} has shape {shape}: an empty volume")
    return volume


def read_image(path: Path) -> VolumeFile:
    """The image volume of a file, as float32 (D, H, W); one-line errors naming the file."""
    volume = _checked_volume(READERS[volume_format(path)](path, "image"))
    volume.array = _as_image(volume.array, path, volume.key)
    return volume


def read_label(path: Path, num_classes: int) -> VolumeFile:
    """The label volume of a file, as uint8 (D, H, W) with values in [0, num_classes)."""
    fmt = volume_format(path)
    if fmt is None:
        raise ValueError(f"{path} is not a volume file zoo predict reads ({', '.join(f'*{e}' for e in READERS)})")
    volume = _checked_volume(READERS[fmt](path, "label"))
    volume.array = _as_label(volume.array, path, volume.key, num_classes)
    return volume


def write_label(path: Path, label: np.ndarray, source: VolumeFile) -> None:
    """Write a predicted label volume to ``path`` in the format of its input ``source``."""
    WRITERS[volume_format(source.path)](path, label.astype(np.uint8, copy=False), source)
