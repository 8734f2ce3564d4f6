"""NIfTI datasets as users hold them: which files make up each case, in three layouts.

Medical Segmentation Decathlon task folder (also nnU-Net v1's raw layout)::

    <root>/dataset.json     modality {"0": "CT"}, labels {"0": "background", "1": "liver"},
                            training [{"image": "./imagesTr/x.nii.gz", "label": "./labelsTr/x.nii.gz"}],
                            test ["./imagesTs/y.nii.gz"]          (optional)
    <root>/imagesTr/  labelsTr/  imagesTs/                        4D images hold their channels on the last axis

nnU-Net v2 raw folder::

    <root>/dataset.json     channel_names {"0": "T1"}, labels {"background": 0, "tumour": 1}, numTraining,
                            file_ending ".nii.gz"
    <root>/imagesTr/{CASE}_{XXXX}{file_ending}                    one 3D file per channel XXXX = 0000, 0001, ...
    <root>/labelsTr/{CASE}{file_ending}
    <root>/imagesTs/                                              optional, as imagesTr

A plain pair of folders ``<root>/images/`` and ``<root>/labels/`` with matching file names (``.nii`` or
``.nii.gz``): the modality is unknown (z-scored like MRI unless the caller names it) and so are the class names
(``class 1``, ... from the largest label value unless given).

In the Decathlon and nnU-Net layouts an optional ``labelsTs/`` next to ``imagesTs/`` (a common convention,
e.g. for the generated phantom) turns the test images that have a label there into a labelled test split.
Hidden files (macOS ``._x.nii.gz`` copies in the Decathlon tarballs) are skipped.

This module reads only ``dataset.json``, folder listings and NIfTI headers (nibabel, no voxel data): every
problem found there raises a one-line error naming the file before any volume is read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np

from plumbing.errors import unknown_name

NIFTI_LAYOUTS = ("decathlon", "nnunet", "pairs")
NIFTI_ENDINGS = (".nii.gz", ".nii")
AFFINE_ATOL = 1e-3
"""Two affines are the same grid when every entry agrees within this (mm): headers store them as float32,
and tools that write qform and sform round differently."""

_CHANNEL_FILE = re.compile(r"^(?P<case>.+)_(?P<channel>\d{4})$")
_DECATHLON_FIELDS = ("modality", "labels", "training")
_NNUNET_FIELDS = ("channel_names", "labels", "numTraining", "file_ending")


@dataclass(frozen=True)
class CaseFiles:
    """The files of one case: its image file(s) and label file."""

    case: str
    images: tuple[Path, ...]  # one file per channel (nnU-Net), or one file (3D, or 4D with channels last)
    label: Path | None  # None for an unlabelled test image
    split: str  # "train" or "test"


@dataclass(frozen=True)
class NiftiLayout:
    """What a NIfTI dataset folder holds: its layout, classes, channels and cases."""

    layout: str  # one of NIFTI_LAYOUTS
    root: Path
    name: str  # dataset.json's "name", else the folder's name
    class_names: tuple[str, ...] | None  # index = label value, 0 background; None: unknown until labels are read
    channel_names: tuple[str, ...]  # e.g. ("CT",), ("T1", "T2"); "unknown" where the layout does not say
    cases: tuple[CaseFiles, ...]

    @property
    def num_channels(self) -> int:
        return len(self.channel_names)


@dataclass(frozen=True)
class Header:
    """The grid of one case read from its headers: spatial shape and affine (shared by all its files)."""

    shape: tuple[int, int, int]  # spatial shape in the file's array order
    affine: np.ndarray  # (4, 4) voxel -> RAS+ world (mm)
    channels: int


def nifti_stem(path: Path) -> str | None:
    """The file name without its NIfTI ending, or None when it is not a NIfTI file."""
    name = path.name
    return next((name[: -len(e)] for e in NIFTI_ENDINGS if name.lower().endswith(e)), None)


def detect_nifti_layout(root: str | Path) -> str | None:
    """``"decathlon"``, ``"nnunet"`` or ``"pairs"`` from the contents of ``root``; None when it is none of them.

    A ``dataset.json`` with nnU-Net v2's fields (``channel_names`` or ``file_ending``) makes it nnU-Net, one with
    the Decathlon's (``modality`` or ``training``) makes it a Decathlon folder; ``images/`` and ``labels/``
    folders holding NIfTI files make it a pair of folders.

    Raises:
        ValueError: ``dataset.json`` is not a JSON object, or has the fields of neither layout.
    """
    root = Path(root)
    meta_file = root / "dataset.json"
    if meta_file.is_file():
        meta = _read_json(meta_file)
        if "channel_names" in meta or "file_ending" in meta:
            return "nnunet"
        if "modality" in meta or "training" in meta:
            return "decathlon"
        raise ValueError(f"{meta_file} has the fields of neither a Decathlon task ({', '.join(_DECATHLON_FIELDS)}) "
                         f"nor an nnU-Net v2 dataset ({', '.join(_NNUNET_FIELDS)}); found: {sorted(meta)}")
    if _nifti_files(root / "images") and (root / "labels").is_dir():
        return "pairs"
    return None


def read_nifti_layout(
    root: str | Path, layout: str = "auto", *, modality: str | None = None,
    class_names: tuple[str, ...] | list[str] | None = None,
) -> NiftiLayout:
    """List the cases of a NIfTI dataset folder (see the module docstring).

    Args:
        root: the dataset folder.
        layout: one of :data:`NIFTI_LAYOUTS`, or ``"auto"`` (:func:`detect_nifti_layout`).
        modality: the modality of every channel of a pair of folders (e.g. ``"CT"``); ignored by the others.
        class_names: the class names of a pair of folders (index = label value); the others read dataset.json.

    Raises:
        FileNotFoundError: no known layout, or a file named by the layout is missing.
        ValueError: dataset.json lacks a field or holds a wrong value; files do not pair up.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"NIfTI dataset folder {root} does not exist or is not a folder")
    if layout == "auto":
        layout = detect_nifti_layout(root)
        if layout is None:
            found = sorted(p.name + ("/" if p.is_dir() else "") for p in root.iterdir())[:20]
            raise FileNotFoundError(
                f"no NIfTI layout in {root} (it holds: {', '.join(found) or 'nothing'}). Looked for dataset.json "
                f"(Decathlon or nnU-Net v2) or images/ and labels/ folders of .nii/.nii.gz files")
    elif layout not in NIFTI_LAYOUTS:
        raise unknown_name("NIfTI layout", layout, ("auto", *NIFTI_LAYOUTS))
    if layout == "decathlon":
        return _decathlon(root)
    if layout == "nnunet":
        return _nnunet(root)
    return _pairs(root, modality, class_names)


# ---- the three layouts -------------------------------------------------------------------------------------


def _decathlon(root: Path) -> NiftiLayout:
    meta_file = root / "dataset.json"
    meta = _dataset_json(meta_file, _DECATHLON_FIELDS)
    channels = _indexed_names(meta_file, meta, "modality")
    classes = _indexed_names(meta_file, meta, "labels")
    training = meta["training"]
    if not isinstance(training, list) or not training:
        raise ValueError(f"{meta_file}: 'training' must be a non-empty list of {{'image': ..., 'label': ...}}")
    cases = []
    for i, entry in enumerate(training):
        if not isinstance(entry, dict) or not isinstance(entry.get("image"), str):
            raise ValueError(f"{meta_file}: training entry {i} is {entry!r}; expected {{'image': ..., 'label': ...}}")
        image = _listed_file(root, meta_file, entry["image"], f"training entry {i}")
        if not isinstance(entry.get("label"), str):
            raise ValueError(f"{meta_file}: training entry {i} ({image.name}) has no 'label': an image without a label")
        label = root / entry["label"]
        if not label.is_file():
            raise FileNotFoundError(f"{image} has no label: {label} (named in {meta_file}) does not exist")
        cases.append(CaseFiles(_case_name(image), (image,), label, "train"))
    test = meta.get("test", [])
    if not isinstance(test, list):
        raise ValueError(f"{meta_file}: 'test' must be a list of image paths, got {type(test).__name__}")
    for i, entry in enumerate(test):
        path = entry.get("image") if isinstance(entry, dict) else entry
        if not isinstance(path, str):
            raise ValueError(f"{meta_file}: test entry {i} is {entry!r}; expected an image path")
        image = _listed_file(root, meta_file, path, f"test entry {i}")
        label = root / "labelsTs" / image.name
        cases.append(CaseFiles(_case_name(image), (image,), label if label.is_file() else None, "test"))
    _unique_cases(cases, meta_file)
    return NiftiLayout("decathlon", root, str(meta.get("name") or root.name), classes, channels, tuple(cases))


def _nnunet(root: Path) -> NiftiLayout:
    meta_file = root / "dataset.json"
    meta = _dataset_json(meta_file, _NNUNET_FIELDS)
    channels = _indexed_names(meta_file, meta, "channel_names")
    classes = _nnunet_labels(meta_file, meta["labels"])
    ending = meta["file_ending"]
    if ending not in NIFTI_ENDINGS:
        raise ValueError(f"{meta_file}: file_ending is {ending!r}; only NIfTI ({', '.join(NIFTI_ENDINGS)}) is read "
                         f"here")
    cases = _nnunet_split(root / "imagesTr", root / "labelsTr", ending, len(channels), "train", required=True)
    count = meta["numTraining"]
    if count != len(cases):
        raise ValueError(f"{meta_file}: numTraining is {count!r} but {root / 'imagesTr'} holds {len(cases)} cases")
    if (root / "imagesTs").is_dir():
        cases += _nnunet_split(root / "imagesTs", root / "labelsTs", ending, len(channels), "test", required=False)
    _unique_cases(cases, meta_file)
    return NiftiLayout("nnunet", root, str(meta.get("name") or root.name), classes, channels, tuple(cases))


def _nnunet_split(
    images: Path, labels: Path, ending: str, channels: int, split: str, required: bool
) -> list[CaseFiles]:
    """The cases of imagesTr (or imagesTs): files {CASE}_{XXXX}{ending} grouped by case, and their labels."""
    if not images.is_dir():
        raise FileNotFoundError(f"{images} not found: an nnU-Net raw folder holds imagesTr/ and labelsTr/")
    by_case: dict[str, dict[int, Path]] = {}
    for path in _files(images, ending):
        match = _CHANNEL_FILE.match(path.name[: -len(ending)])
        if match is None:
            raise ValueError(f"{path}: expected an image named {{CASE}}_{{XXXX}}{ending} (XXXX the channel, 0000 ...)")
        channel = int(match["channel"])
        if channel >= channels:
            raise ValueError(f"{path}: channel {channel} but dataset.json declares {channels} channel(s)")
        by_case.setdefault(match["case"], {})[channel] = path
    if required and not by_case:
        raise FileNotFoundError(f"no images {{CASE}}_0000{ending} in {images}")
    cases = []
    for case in sorted(by_case):
        missing = [c for c in range(channels) if c not in by_case[case]]
        if missing:
            raise FileNotFoundError(f"{images / f'{case}_{missing[0]:04d}{ending}'} is missing: case {case} has "
                                    f"{len(by_case[case])} of the {channels} channel files")
        label = labels / f"{case}{ending}"
        if not label.is_file():
            if required:
                raise FileNotFoundError(f"{by_case[case][0]} has no label: {label} does not exist")
            label = None
        cases.append(CaseFiles(case, tuple(by_case[case][c] for c in range(channels)), label, split))
    if labels.is_dir():
        for path in _files(labels, ending):
            if path.name[: -len(ending)] not in by_case:
                raise FileNotFoundError(f"{path} is a label without an image: no {images / path.name[:-len(ending)]}"
                                        f"_0000{ending}")
    return cases


def _pairs(root: Path, modality: str | None, class_names: tuple[str, ...] | list[str] | None) -> NiftiLayout:
    images, labels = root / "images", root / "labels"
    for folder in (images, labels):
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} not found: a pair of folders is images/ and labels/ with matching names")
    image_files = {nifti_stem(p): p for p in _nifti_files(images)}
    label_files = {nifti_stem(p): p for p in _nifti_files(labels)}
    if not image_files:
        raise FileNotFoundError(f"no .nii or .nii.gz files in {images}")
    for stem, path in image_files.items():
        if stem not in label_files:
            raise FileNotFoundError(f"{path} has no label: no {labels / path.name} (labels/ must hold the same names)")
    for stem, path in label_files.items():
        if stem not in image_files:
            raise FileNotFoundError(f"{path} is a label without an image in {images}")
    if class_names is not None:
        class_names = tuple(str(n) for n in class_names)
        if len(class_names) < 2:
            raise ValueError(f"class_names must name the background and at least one class, got {class_names!r}")
    cases = tuple(CaseFiles(s, (image_files[s],), label_files[s], "train") for s in sorted(image_files))
    return NiftiLayout("pairs", root, root.name, class_names, (modality or "unknown",), cases)


# ---- headers -----------------------------------------------------------------------------------------------


def read_header(path: Path) -> tuple[tuple[int, ...], np.ndarray]:
    """(shape, affine) of a NIfTI file from its header; one-line ValueError naming the file when unreadable."""
    try:
        image = nib.load(path)
        return tuple(int(n) for n in image.shape), np.asarray(image.affine, dtype=np.float64)
    except (OSError, EOFError, ValueError, nib.filebasedimages.ImageFileError) as exc:
        raise ValueError(f"{path}: cannot read it as NIfTI ({type(exc).__name__}: {exc})") from exc


def case_header(files: CaseFiles, num_channels: int | None) -> Header:
    """The grid of one case, checked: 3D volumes (4D channels-last in a single file), label and channels alike.

    Args:
        num_channels: the channels the dataset declares, or None when the layout does not say (a pair of folders).
    """
    shapes, affines = [], []
    for path in files.images:
        shape, affine = read_header(path)
        shapes.append(_spatial(path, shape, channels_last=len(files.images) == 1))
        affines.append(affine)
    channels = shapes[0][1] if len(files.images) == 1 else len(files.images)
    if num_channels is not None and channels != num_channels:
        raise ValueError(f"{files.images[0]}: holds {channels} channel(s) on its last axis but dataset.json declares "
                         f"{num_channels}")
    shape, affine = shapes[0][0], affines[0]
    for path, (other, _), other_affine in zip(files.images[1:], shapes[1:], affines[1:]):
        _same_grid(path, other, other_affine, files.images[0], shape, affine, "channel")
    if files.label is not None:
        label_shape, label_affine = read_header(files.label)
        spatial, _ = _spatial(files.label, label_shape, channels_last=False)
        _same_grid(files.label, spatial, label_affine, files.images[0], shape, affine, "label")
    return Header(shape, affine, channels)


def _spatial(path: Path, shape: tuple[int, ...], channels_last: bool) -> tuple[tuple[int, int, int], int]:
    """(spatial shape, channels) of a file's array shape; a length-1 4th axis counts as no channel axis."""
    if len(shape) == 4 and (channels_last or shape[3] == 1):
        return (shape[0], shape[1], shape[2]), shape[3]
    if len(shape) == 3:
        return (shape[0], shape[1], shape[2]), 1
    if len(shape) == 2:
        raise ValueError(f"{path}: a 2D NIfTI {shape}; expected a 3D volume (one file per case, not per slice)")
    hint = "; channels go on the last axis of a single file" if channels_last is False and len(shape) == 4 else ""
    raise ValueError(f"{path}: shape {shape}; expected a 3D volume{hint}")


def _same_grid(path: Path, shape: tuple[int, ...], affine: np.ndarray, ref: Path, ref_shape: tuple[int, ...],
               ref_affine: np.ndarray, what: str) -> None:
    if shape != ref_shape:
        raise ValueError(f"{path}: {what} shape {shape} differs from its image {ref.name} {ref_shape}")
    if not np.allclose(affine, ref_affine, rtol=0, atol=AFFINE_ATOL):
        worst = float(np.abs(affine - ref_affine).max())
        raise ValueError(f"{path}: {what} affine differs from its image {ref.name}'s by up to {worst:.4g} mm "
                         f"(tolerance {AFFINE_ATOL} mm): they are not on the same grid")


# ---- dataset.json and files --------------------------------------------------------------------------------


def dataset_class_names(path: str | Path) -> tuple[str, ...]:
    """The class names (index = label value) of a Decathlon or nnU-Net v2 ``dataset.json``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: give the dataset.json that names the classes")
    meta = _read_json(path)
    if "labels" not in meta:
        raise ValueError(f"{path}: missing required field labels (the class names)")
    labels = meta["labels"]
    if isinstance(labels, dict) and labels and all(isinstance(v, int | list) for v in labels.values()):
        return _nnunet_labels(path, labels)  # {"background": 0, ...}
    return _indexed_names(path, meta, "labels")  # {"0": "background", ...}


def _read_json(path: Path) -> dict:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it as JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    return meta


def _dataset_json(path: Path, fields: tuple[str, ...]) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: this layout describes its cases, classes and channels there")
    meta = _read_json(path)
    missing = [f for f in fields if f not in meta]
    if missing:
        raise ValueError(f"{path}: missing required field(s) {', '.join(missing)} (needs {', '.join(fields)})")
    return meta


def _indexed_names(path: Path, meta: dict, key: str) -> tuple[str, ...]:
    """A {"0": name, "1": name, ...} field as names in index order; the indices must be 0 .. n-1."""
    field = meta[key]
    if not isinstance(field, dict) or not field:
        raise ValueError(f"{path}: {key!r} must be a non-empty object {{\"0\": ..., ...}}, got {field!r}")
    try:
        indexed = {int(k): str(v) for k, v in field.items()}
    except ValueError:
        raise ValueError(f"{path}: the keys of {key!r} must be indices \"0\", \"1\", ...; got {sorted(field)}") \
            from None
    if sorted(indexed) != list(range(len(indexed))):
        raise ValueError(f"{path}: the keys of {key!r} must be 0 .. {len(indexed) - 1}, got {sorted(indexed)}")
    if key == "labels" and len(indexed) < 2:
        raise ValueError(f"{path}: 'labels' must hold the background \"0\" and at least one class")
    return tuple(indexed[i] for i in range(len(indexed)))


def _nnunet_labels(path: Path, labels: object) -> tuple[str, ...]:
    """nnU-Net's {"background": 0, "name": 1, ...} as names in value order; values must be 0 .. K-1."""
    if not isinstance(labels, dict) or not labels:
        raise ValueError(f"{path}: 'labels' must be an object {{\"background\": 0, ...}}, got {labels!r}")
    by_value: dict[int, str] = {}
    for name, value in labels.items():
        if isinstance(value, list):
            raise ValueError(f"{path}: label {name!r} is a region {value}; region-based labels are not supported")
        if isinstance(value, bool) or not isinstance(value, int) or value in by_value:
            raise ValueError(f"{path}: label {name!r} has value {value!r}; values must be distinct ints 0, 1, ...")
        by_value[value] = str(name)
    if sorted(by_value) != list(range(len(by_value))) or len(by_value) < 2:
        raise ValueError(f"{path}: label values must be 0 (background) .. K-1 with K >= 2, got {sorted(by_value)}")
    return tuple(by_value[i] for i in range(len(by_value)))


def _listed_file(root: Path, meta_file: Path, name: str, what: str) -> Path:
    path = root / name
    if nifti_stem(path) is None:
        raise ValueError(f"{meta_file}: {what} names {name!r}, not a .nii or .nii.gz file")
    if not path.is_file():
        raise FileNotFoundError(f"{path} (named by {what} of {meta_file}) does not exist")
    return path


def _case_name(path: Path) -> str:
    return nifti_stem(path) or path.name


def _unique_cases(cases: list[CaseFiles], meta_file: Path) -> None:
    seen: dict[str, Path] = {}
    for case in cases:
        if case.case in seen:
            raise ValueError(f"{meta_file}: case {case.case!r} appears twice ({seen[case.case]} and {case.images[0]})")
        seen[case.case] = case.images[0]


def _files(folder: Path, ending: str) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(ending) and not p.name.startswith("."))


def _nifti_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if nifti_stem(p) is not None and not p.name.startswith("."))
