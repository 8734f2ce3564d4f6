"""The generated phantom as NIfTI folders in the Decathlon and nnU-Net v2 raw layouts, for the offline NIfTI path.

The patients are those of :func:`tasks.medseg.reading.phantom.phantom_case` (same seed, same anatomy, the 9 Synapse
classes), stored the way real CT arrives, so that the NIfTI loader's geometry code is exercised:

- intensities back in Hounsfield units (the phantom's [0, 1] mapped onto the -125 .. 275 HU window), int16;
- realistic spacings: most cases anisotropic, in-plane 0.70-0.90 mm and 2.5 mm between slices (the generator's
  own slices); every third case isotropic (its slices interpolated to the in-plane spacing, labels nearest);
- stored in varied orientations, cycled over the cases: ``LPS`` (as ITK-based DICOM converters write), ``RAS``
  (x and y flipped), ``LPI`` (slices stored top to bottom) and ``SAR`` (axes permuted: slices first). The affine
  of each says where the same anatomy lies, so every case comes out in the same orientation once loaded.

Training cases go to ``imagesTr/`` + ``labelsTr/``, test cases to ``imagesTs/`` + ``labelsTs/`` (the labelled test
split the loader recognises), with the ``dataset.json`` of the layout. The folder is built next to its final
place and renamed into it, reused when complete, and rebuilt when the settings or the generator changed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import nibabel as nib
import numpy as np
from scipy import ndimage

from plumbing.atomic import write_folder_atomic
from tasks.medseg.reading.phantom import HU_WINDOW, default_phantom_dir, phantom_case
from tasks.medseg.reading.synapse import SYNAPSE_CLASSES, SYNAPSE_TEST_CASES, SYNAPSE_TRAIN_CASES

log = logging.getLogger(__name__)

PHANTOM_NIFTI_VERSION = 1
ORIENTATIONS = ("LPS", "RAS", "LPI", "SAR")
"""Storage orientations, cycled over the cases (case i is stored in ORIENTATIONS[i % 4])."""
SLICE_SPACING = 2.5  # mm between the generator's slices
ISOTROPIC_EVERY = 3  # case i is isotropic when i % 3 == 2
MANIFEST = "phantom.json"
_PHANTOM_AXES = ("S", "P", "L")  # the generator's (D, H, W): slices bottom-up, rows front to back, columns to the left


def default_phantom_nifti_dir(layout: str = "decathlon", seed: int = 0, form: str = "") -> Path:
    """``$ZOO_CACHE/medseg-phantom-nifti-v<version>-<layout>[-<form>]-seed<seed>`` (default
    ``~/.cache/transformer-zoo``); ``form`` names other sizes (``"3d"``: the 3D form's smaller cases)."""
    cache = default_phantom_dir(seed).parent  # the Synapse-layout phantom's cache folder
    return cache / f"medseg-phantom-nifti-v{PHANTOM_NIFTI_VERSION}-{layout}{'-' + form if form else ''}-seed{seed}"


def phantom_nifti_case(
    seed: int, case: str, index: int, *, slices: int = 24, size: tuple[int, int] = (96, 128)
) -> tuple[nib.Nifti1Image, nib.Nifti1Image]:
    """(image, label) NIfTI images of one phantom patient, stored as case number ``index`` of the folder is."""
    image, label, _ = phantom_case(seed, case, slices=slices, size=size)  # (D, H, W), in [0, 1]
    rng = np.random.default_rng([seed, index, 7])
    pixel = round(float(rng.uniform(0.70, 0.90)), 2)
    spacing = (SLICE_SPACING, pixel, pixel)  # (D, H, W)
    if index % ISOTROPIC_EVERY == ISOTROPIC_EVERY - 1:
        factor = SLICE_SPACING / pixel
        image = ndimage.zoom(image, (factor, 1, 1), order=1)
        label = ndimage.zoom(label, (factor, 1, 1), order=0)
        spacing = (pixel, pixel, pixel)
    low, high = HU_WINDOW
    hu = np.rint(low + image * (high - low)).astype(np.int16)
    # Stored first as LPS: array axes (i, j, k) = (W, H, D) -> world -x, -y, +z; centred on the world origin.
    directions = np.diag([-spacing[2], -spacing[1], spacing[0]])
    shape = np.array(hu.shape[::-1])
    affine = np.eye(4)
    affine[:3, :3] = directions
    affine[:3, 3] = -directions @ (shape - 1) / 2
    target = ORIENTATIONS[index % len(ORIENTATIONS)]
    ornt = nib.orientations.ornt_transform(nib.orientations.axcodes2ornt("LPS"), nib.orientations.axcodes2ornt(target))
    out = []
    for array in (hu, label.astype(np.uint8)):
        stored = nib.Nifti1Image(np.ascontiguousarray(array.transpose(2, 1, 0)), affine)
        stored = stored.as_reoriented(ornt)
        stored.set_qform(stored.affine, code=1)
        stored.set_sform(stored.affine, code=1)
        out.append(stored)
    return out[0], out[1]


def write_phantom_nifti(
    root: str | os.PathLike | None = None,
    layout: str = "decathlon",
    seed: int = 0,
    *,
    slices: int = 24,
    size: tuple[int, int] = (96, 128),
    train_cases: tuple[str, ...] = SYNAPSE_TRAIN_CASES,
    test_cases: tuple[str, ...] = SYNAPSE_TEST_CASES,
) -> Path:
    """Write the phantom as a NIfTI dataset folder, or reuse a complete one already there.

    Args:
        root: the folder (default :func:`default_phantom_nifti_dir`).
        layout: ``"decathlon"`` or ``"nnunet"``.
        seed, slices, size: see :func:`tasks.medseg.reading.phantom.phantom_case`.
        train_cases, test_cases: the case names of each split (default: the Synapse splits).

    Returns:
        ``root`` as a Path.
    """
    if layout not in ("decathlon", "nnunet"):
        raise ValueError(f"layout must be 'decathlon' or 'nnunet', got {layout!r}")
    overlap = sorted(set(train_cases) & set(test_cases))
    if overlap:
        raise ValueError(f"cases {overlap} are in both train_cases and test_cases")
    root = Path(root).expanduser() if root is not None else default_phantom_nifti_dir(layout, seed)
    manifest = {"version": PHANTOM_NIFTI_VERSION, "generator": _generator_fingerprint(), "layout": layout,
                "seed": seed, "slices": slices, "size": list(size), "train_cases": list(train_cases),
                "test_cases": list(test_cases)}
    if _is_complete(root, manifest):
        return root
    if root.is_file() or (root.is_dir() and any(root.iterdir()) and not (root / MANIFEST).is_file()):
        raise FileExistsError(f"{root} exists and is not a phantom folder (no {MANIFEST}); pass another folder")
    def fill(tmp: Path) -> None:
        _write_layout(tmp, layout, seed, slices, size, train_cases, test_cases)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")

    write_folder_atomic(root, fill, lambda folder: _is_complete(folder, manifest))
    log.info("wrote the %s NIfTI phantom (seed %d) to %s", layout, seed, root)
    return root


def _files(layout: str, case: str, split: str) -> tuple[str, str]:
    """(image, label) paths of a case inside the folder."""
    images, labels = ("imagesTr", "labelsTr") if split == "train" else ("imagesTs", "labelsTs")
    channel = "_0000" if layout == "nnunet" else ""
    return f"{images}/{case}{channel}.nii.gz", f"{labels}/{case}.nii.gz"


def _write_layout(folder: Path, layout: str, seed: int, slices: int, size: tuple[int, int],
                  train_cases: tuple[str, ...], test_cases: tuple[str, ...]) -> None:
    for sub in ("imagesTr", "labelsTr", "imagesTs", "labelsTs"):
        (folder / sub).mkdir()
    cases = [(c, "train") for c in train_cases] + [(c, "test") for c in test_cases]
    for index, (case, split) in enumerate(cases):
        image, label = phantom_nifti_case(seed, case, index, slices=slices, size=size)
        image_file, label_file = _files(layout, case, split)
        nib.save(image, folder / image_file)
        nib.save(label, folder / label_file)
    classes = list(SYNAPSE_CLASSES)
    meta: dict = {"name": "PhantomAbdomen", "description": "generated multi-organ phantom (transformer zoo)",
                  "licence": "generated", "reference": "tasks/medseg/reading/phantom.py", "tensorImageSize": "3D"}
    if layout == "decathlon":
        meta.update({
            "modality": {"0": "CT"}, "labels": {str(i): n for i, n in enumerate(classes)},
            "numTraining": len(train_cases), "numTest": len(test_cases),
            "training": [{"image": f"./{_files(layout, c, 'train')[0]}", "label": f"./{_files(layout, c, 'train')[1]}"}
                         for c in train_cases],
            "test": [f"./{_files(layout, c, 'test')[0]}" for c in test_cases],
        })
    else:
        meta.update({"channel_names": {"0": "CT"}, "labels": {n: i for i, n in enumerate(classes)},
                     "numTraining": len(train_cases), "file_ending": ".nii.gz"})
    (folder / "dataset.json").write_text(json.dumps(meta, indent=4) + "\n")


def _is_complete(root: Path, manifest: dict) -> bool:
    try:
        if json.loads((root / MANIFEST).read_text()) != manifest:
            return False
    except (OSError, ValueError):
        return False
    cases = [(c, "train") for c in manifest["train_cases"]] + [(c, "test") for c in manifest["test_cases"]]
    return (root / "dataset.json").is_file() and all(
        (root / f).is_file() for c, split in cases for f in _files(manifest["layout"], c, split))


def _generator_fingerprint() -> str:
    """A hash of the generator's source and this writer's: a folder made by other code is rebuilt."""
    digest = hashlib.sha256()
    for module in ("phantom.py", "phantom_nifti.py"):
        digest.update((Path(__file__).parent / module).read_bytes())
    return digest.hexdigest()[:16]
