"""Data of the medseg task: the Synapse and ACDC layouts read from local files, and the embedded phantom.

``load_medseg(folder)`` reads a dataset into memory as whole volumes (training slices of one case are
stacked in slice order); ``load_medseg(None)`` writes (or reuses) the generated phantom of
:mod:`tasks.medseg.reading.phantom` and reads it with the Synapse loader. Nothing is downloaded.

A folder in one of the NIfTI layouts (Decathlon task, nnU-Net v2 raw, or ``images/`` + ``labels/``; see
:mod:`tasks.medseg.reading.nifti_layout`) is read by :func:`tasks.medseg.preprocessing.nifti_data.load_nifti_dataset`:
reoriented to RAS, resampled to one spacing, normalised by modality, and handed over as the same volumes, sliced
across the axis of the largest spacing; :attr:`SegData.nifti` keeps what maps a prediction back to each file's grid.
``dataset="phantom-nifti"`` (or ``"phantom-nnunet"``) writes the phantom as such a folder first; ``"phantom3d"`` its
3D form, a Decathlon folder of smaller cases (:data:`PHANTOM_3D`) for 3D models on a CPU.

Synapse multi-organ CT as preprocessed by TransUNet (also used by Swin-Unet and MISSFormer)::

    <root>/train_npz/case0005_slice012.npz    keys image (H, W), label (H, W)
    <root>/test_vol_h5/case0001.npy.h5        datasets image (D, H, W), label (D, H, W)
    <root>/lists/lists_Synapse/train.txt      slice names, e.g. case0005_slice012   (or <root>/lists_Synapse/)
    <root>/lists/lists_Synapse/test_vol.txt   case names, e.g. case0001

The list files are optional (without them every file is used). An HDF5 attribute ``spacing`` (z, y, x) in
mm, when a volume has one (the phantom's do, the real files don't), becomes :attr:`Volume.spacing`.

ACDC cardiac MRI, 4 classes, in either community layout:

- npz, as prepared by MT-UNet (Dootmaan/MT-UNet) and reused by later Synapse/ACDC codebases::

      <root>/train/case_001_sliceED_0.npz    keys img (H, W), label (H, W)   -> case "case_001_ED"
      <root>/valid/case_019_sliceED_0.npz    slices as in train
      <root>/test/case_002_volume_ED.npz     keys img (D, H, W), label (D, H, W) -> case "case_002_ED"
      <root>/lists_ACDC/{train,valid,test}.txt   file names, one a line (or <root>/lists/lists_ACDC/)

- h5, as prepared by SSL4MIS and WSL4MIS (HiLab-git)::

      <root>/ACDC_training_slices/patient001_frame01_slice_0.h5   datasets image (H, W), label (H, W)
      <root>/ACDC_training_volumes/patient001_frame01.h5          datasets image (D, H, W), label (D, H, W)
      <root>/ACDC_testing_volumes/*.h5                            optional test volumes
      <root>/{train_slices,train,val,test}.list                   optional split lists (names without .h5)

  SSL4MIS's own folder names ``data/slices/`` and ``data/`` are accepted for the slices and volumes. With
  lists, training takes the slices of ``train_slices.list`` (else of the cases in ``train.list``), validation
  the volumes of ``val.list``, test those of ``test.list`` (else ``ACDC_testing_volumes/``). Without lists
  the split is fixed by patient number: 001-020 test (WSL4MIS's fold 1; ``ACDC_testing_volumes/`` instead
  when present), 021-030 validation, the others training.

A file is a slice when its name says so (``_slice`` followed by a number) and must then hold 2D arrays;
any other file is a volume and must hold 3D arrays. Slices are grouped into cases by the name before
``_slice``. Every problem found in the files (missing folder, list entry or key, unreadable file, wrong
dtype or dimensions, label values outside the classes) raises an error naming the file and what was
expected.

Shape legend: ``D, H, W`` slices, rows, columns.
"""

from __future__ import annotations

import logging
import re
import zipfile
import zlib
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from plumbing.errors import unknown_name
from tasks.medseg.reading.synapse import SYNAPSE_CLASSES, SYNAPSE_TEST_CASES, SYNAPSE_TRAIN_CASES  # noqa: F401  (re-exported)
from tasks.medseg.reading.volume import SegData, Volume  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)

DATASETS = ("synapse", "acdc")  # the slice/volume layouts read here
NIFTI_DATASETS = ("decathlon", "nnunet", "pairs")  # the NIfTI layouts of tasks.medseg.reading.nifti_layout
# the phantom written as a NIfTI folder; phantom3d: its 3D form, smaller cases that 3D models train on with a CPU
PHANTOM_NIFTI = {"phantom-nifti": "decathlon", "phantom-nnunet": "nnunet", "phantom3d": "decathlon"}
PHANTOM_3D = {"slices": 64, "size": (64, 72)}  # 64 slices of 2.5 mm, 64-72 rows and columns of 0.7-0.9 mm
ALL_DATASETS = (*DATASETS, *NIFTI_DATASETS, *PHANTOM_NIFTI)
ACDC_CLASSES = ["background", "RV", "Myo", "LV"]

# "case0005_slice012", "case_001_sliceED_0" (tag ED: case "case_001_ED"), "patient001_frame01_slice_1".
_SLICE_NAME = re.compile(r"^(?P<case>.+?)_slice(?P<tag>[A-Za-z]*)_?(?P<index>\d+)$")
# MT-UNet's ACDC volumes: "case_002_volume_ED" -> "case_002_ED", the name of its training slices' case.
_VOLUME_NAME = re.compile(r"^(?P<case>.+?)_volume_?(?P<tag>[A-Za-z0-9]*)$")
_PATIENT = re.compile(r"patient(\d+)")
# The fixed ACDC split used when a folder has no split lists: WSL4MIS's fold-1 test patients, then the
# validation patients that codebases derived from it hold out.
_ACDC_TEST_PATIENTS, _ACDC_VALID_PATIENTS = range(1, 21), range(21, 31)
_SYNAPSE_LISTS, _ACDC_LISTS = ("lists/lists_Synapse", "lists_Synapse"), ("lists_ACDC", "lists/lists_ACDC")
_ACDC_H5_LISTS = ("train_slices.list", "train.list", "val.list", "test.list")
_SLICE_DIRS, _VOLUME_DIRS = ("ACDC_training_slices", "data/slices"), ("ACDC_training_volumes", "data")
# What reading a damaged file raises, from numpy's zip reader, zlib and HDF5.
_UNREADABLE = (OSError, EOFError, ValueError, TypeError, KeyError, zipfile.BadZipFile, zlib.error)


def load_medseg(data: str | Path | None, dataset: str = "auto", seed: int = 0, **nifti: Any) -> SegData:
    """Load a medical segmentation dataset (see the module docstring for the layouts).

    Args:
        data: the dataset folder, or None for the embedded phantom (written on first use to
            :func:`tasks.medseg.reading.phantom.default_phantom_dir`).
        dataset: ``"synapse"``, ``"acdc"``, a NIfTI layout (``"decathlon"``, ``"nnunet"``, ``"pairs"``),
            ``"phantom-nifti"`` / ``"phantom-nnunet"`` (the phantom as a NIfTI folder, ``data`` None), or
            ``"auto"`` to tell from the folder's contents.
        seed: the phantom's seed (only used when ``data`` is None).
        nifti: keyword arguments of :func:`tasks.medseg.preprocessing.nifti_data.load_nifti_dataset` for a NIfTI folder
            (``spacing``, ``ct_window``, ``image_order``, ``modality``, ``class_names``, ``preprocessing``, ...).

    Returns:
        The splits as :class:`SegData`; a NIfTI folder's training cases are all in ``train`` (the task draws its
        folds from them) and its labelled test cases (``labelsTs/``) in ``test``.

    Raises:
        FileNotFoundError: the folder, a split, or a file named in a list is missing; no known layout.
        ValueError: a file is unreadable or holds wrong keys, dtypes, dimensions or label values.
    """
    if dataset != "auto" and dataset not in ALL_DATASETS:
        raise unknown_name("medseg dataset", dataset, ("auto", *ALL_DATASETS))
    if dataset in PHANTOM_NIFTI:
        if data is not None:
            raise ValueError(f"--dataset {dataset} writes the phantom as a NIfTI folder itself; leave out --data "
                             f"(or pass --data {data} alone to read a folder)")
        from tasks.medseg.reading.phantom_nifti import default_phantom_nifti_dir, write_phantom_nifti

        layout, sizes = PHANTOM_NIFTI[dataset], PHANTOM_3D if dataset == "phantom3d" else {}
        folder = default_phantom_nifti_dir(layout, seed, form="3d" if sizes else "")
        return load_nifti(write_phantom_nifti(folder, layout, seed, **sizes), layout, **nifti)
    if data is None:
        if dataset != "auto" and dataset != "synapse":
            raise ValueError(f"the embedded phantom is in the Synapse layout; pass a {dataset} folder as --data, or "
                             "--dataset phantom-nifti for the phantom as a NIfTI folder")
        # Imported here: the generator needs scipy.ndimage, seconds to import, which reading real data does not.
        from tasks.medseg.reading.phantom import default_phantom_dir, write_phantom

        seg = load_synapse(write_phantom(default_phantom_dir(seed), seed))
        seg.name = "phantom"
        return seg
    root = Path(data).expanduser()
    if not root.exists():
        raise FileNotFoundError(f"medseg data folder {root} does not exist")
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is a file; pass the dataset folder (the one holding train_npz/, ...)")
    if dataset == "auto":
        dataset = detect_layout(root)
    if dataset in NIFTI_DATASETS:
        return load_nifti(root, dataset, **nifti)
    return load_synapse(root) if dataset == "synapse" else load_acdc(root)


def load_nifti(root: str | Path, layout: str = "auto", **options: Any) -> SegData:
    """A NIfTI folder as :class:`SegData` (every training case in ``train``), its :class:`NiftiData` attached.

    With C > 1 channels each volume's image is ``(C, D, H, W)``.
    """
    from tasks.medseg.preprocessing.nifti_data import load_nifti_dataset  # MONAI: imported only for NIfTI folders

    nifti = load_nifti_dataset(root, layout=layout, **options)
    seg = nifti.to_segdata(channel="all" if nifti.num_channels > 1 else None)
    seg.nifti = nifti
    return seg


def detect_layout(root: Path) -> str:
    """``"synapse"``, ``"acdc"`` or a NIfTI layout (``"decathlon"``, ``"nnunet"``, ``"pairs"``) from ``root``."""
    from tasks.medseg.reading.nifti_layout import detect_nifti_layout  # nibabel only: no voxel data is read here

    nifti = detect_nifti_layout(root)
    if nifti is not None:
        return nifti
    if (root / "imagesTr").is_dir():
        raise FileNotFoundError(f"{root / 'dataset.json'} not found: {root} holds imagesTr/ like a Decathlon or "
                                "nnU-Net v2 folder, which describes its classes, channels and cases in dataset.json")
    if (root / "train_npz").is_dir() or (root / "test_vol_h5").is_dir():
        return "synapse"
    if _acdc_h5_dirs(root) != (None, None) or _acdc_npz_dirs(root):
        return "acdc"
    found = sorted(p.name + ("/" if p.is_dir() else "") for p in root.iterdir())[:20]
    raise FileNotFoundError(
        f"no known medseg layout in {root} (it holds: {', '.join(found) or 'nothing'}). Looked for Synapse "
        f"(train_npz/, test_vol_h5/), ACDC npz (train/, valid/, test/ with *.npz, lists_ACDC/), ACDC h5 "
        f"({', '.join(d + '/' for d in _SLICE_DIRS + _VOLUME_DIRS)}, *.list) and NIfTI (dataset.json of a "
        f"Decathlon task or an nnU-Net v2 dataset, or images/ and labels/ of .nii/.nii.gz files)"
    )


# ---- Synapse -----------------------------------------------------------------------------------------------


def load_synapse(root: str | Path) -> SegData:
    """Read the TransUNet layout of Synapse from ``root`` (see the module docstring)."""
    root = Path(root)
    train_dir, test_dir = root / "train_npz", root / "test_vol_h5"
    for folder, what in ((train_dir, "caseXXXX_sliceYYY.npz"), (test_dir, "caseXXXX.npy.h5")):
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} not found: a Synapse folder holds train_npz/ and test_vol_h5/ "
                                    f"({folder.name}/{what})")
    lists = _first_dir(root, _SYNAPSE_LISTS)
    train = _split_files(lists, "train.txt", train_dir, ".npz")
    test = _split_files(lists, "test_vol.txt", test_dir, ".npy.h5", pattern="*.h5")
    for files, folder, what in ((train, train_dir, ".npz slices"), (test, test_dir, ".npy.h5 volumes")):
        if not files:
            raise FileNotFoundError(f"no {what} in {folder}")
    keys = (("image",), ("label",))
    classes = SYNAPSE_CLASSES
    return SegData(
        "synapse", str(root), list(classes),
        train=_read_cases(train, keys, len(classes), "train"), test=_read_cases(test, keys, len(classes), "test"),
    )


# ---- ACDC --------------------------------------------------------------------------------------------------


def load_acdc(root: str | Path) -> SegData:
    """Read ACDC from ``root`` in the h5 (SSL4MIS) or npz (MT-UNet) layout (see the module docstring)."""
    root = Path(root)
    if _acdc_h5_dirs(root) != (None, None):
        train, valid, test = _acdc_h5_splits(root)
        keys = (("image",), ("label",))
    elif _acdc_npz_dirs(root):
        train, valid, test = _acdc_npz_splits(root)
        keys = (("img", "image"), ("label",))
    else:
        raise FileNotFoundError(
            f"no ACDC layout in {root}: expected train/, valid/, test/ with *.npz (MT-UNet) or "
            f"ACDC_training_slices/ and ACDC_training_volumes/ with *.h5 (SSL4MIS)"
        )
    classes = ACDC_CLASSES
    return SegData(
        "acdc", str(root), list(classes), train=_read_cases(train, keys, len(classes), "train"),
        test=_read_cases(test, keys, len(classes), "test"), valid=_read_cases(valid, keys, len(classes), "valid"),
    )


def _acdc_npz_dirs(root: Path) -> list[Path]:
    """The split folders (and list folder) of the MT-UNet layout that exist in ``root``."""
    found = [root / s for s in ("train", "valid", "val", "test") if any((root / s).glob("*.npz"))]
    lists = _first_dir(root, _ACDC_LISTS)
    return found + ([lists] if lists else [])


def _acdc_npz_splits(root: Path) -> tuple[list[Path], list[Path], list[Path]]:
    lists = _first_dir(root, _ACDC_LISTS)
    splits = []
    for names in (("train",), ("valid", "val"), ("test",)):
        folder = next((root / n for n in names if (root / n).is_dir()), root / names[0])
        list_name = next((f"{n}.txt" for n in names if lists and (lists / f"{n}.txt").is_file()), f"{names[0]}.txt")
        splits.append(_split_files(lists, list_name, folder, ".npz"))
    train, valid, test = splits
    for files, split in ((train, "train"), (test, "test")):
        if not files:
            raise FileNotFoundError(f"no ACDC {split} files in {root / split} (expected *.npz, MT-UNet layout)")
    return train, valid, test


def _acdc_h5_dirs(root: Path) -> tuple[Path | None, Path | None]:
    """(slice folder, volume folder) of the SSL4MIS layout; None for those missing."""
    slices = _first_dir(root, _SLICE_DIRS)
    volumes = next((root / d for d in _VOLUME_DIRS if any((root / d).glob("*.h5"))), None)
    return slices, volumes


def _acdc_h5_splits(root: Path) -> tuple[list[Path], list[Path], list[Path]]:
    slice_dir, volume_dir = _acdc_h5_dirs(root)
    test_dir = root / "ACDC_testing_volumes"
    slices = _by_case(sorted(slice_dir.glob("*.h5"))) if slice_dir else {}
    volumes = {p.name.removesuffix(".h5"): p for p in sorted(volume_dir.glob("*.h5"))} if volume_dir else {}
    lists = {name: root / name for name in _ACDC_H5_LISTS if (root / name).is_file()}

    def training_files(cases: Sequence[str], origin: str) -> list[Path]:
        # The slices of each case; a case without slices is read from its volume file.
        files = []
        for case in cases:
            if case in slices:
                files += slices[case]
            elif case in volumes:
                files.append(volumes[case])
            else:
                raise FileNotFoundError(f"{origin}: case {case!r} has neither slices in {slice_dir} nor a volume "
                                        f"in {volume_dir}")
        return files

    if lists:
        if "train_slices.list" in lists:
            train = _listed(lists["train_slices.list"], slice_dir or root / _SLICE_DIRS[0], ".h5")
        elif "train.list" in lists:
            train = training_files(_read_list(lists["train.list"]), str(lists["train.list"]))
        else:
            raise FileNotFoundError(f"{root} has split lists ({', '.join(lists)}) but neither train_slices.list "
                                    f"nor train.list")
        folders = [d for d in (volume_dir, test_dir) if d is not None and d.is_dir()]
        valid = _listed(lists["val.list"], folders or [root / _VOLUME_DIRS[0]], ".h5") if "val.list" in lists else []
        if "test.list" in lists:
            test = _listed(lists["test.list"], folders or [root / _VOLUME_DIRS[0]], ".h5")
        else:
            test = sorted(test_dir.glob("*.h5")) if test_dir.is_dir() else []
    else:  # the fixed split by patient number
        number = {case: _patient_number(case, root) for case in sorted({**slices, **volumes})}
        held_out = range(_ACDC_TEST_PATIENTS.start, _ACDC_VALID_PATIENTS.stop)
        train = training_files([c for c, n in number.items() if n not in held_out], str(root))
        valid = [volumes[c] for c in sorted(volumes) if number[c] in _ACDC_VALID_PATIENTS]
        if test_dir.is_dir():
            test = sorted(test_dir.glob("*.h5"))
        else:
            test = [volumes[c] for c in sorted(volumes) if number[c] in _ACDC_TEST_PATIENTS]
    if not train:
        raise FileNotFoundError(f"no ACDC training cases in {root}: expected train_slices.list or train.list, or "
                                f"(without lists) slices of patients other than 001-030 in {_SLICE_DIRS[0]}/")
    if not test:
        raise FileNotFoundError(f"no ACDC test cases in {root}: expected test.list, ACDC_testing_volumes/*.h5, "
                                f"or (without lists) the volumes of patients 001-020")
    return train, valid, test


def _patient_number(case: str, root: Path) -> int:
    match = _PATIENT.match(case)
    if match is None:
        raise ValueError(f"{root}: cannot split case {case!r} by patient number (expected patientNNN_...); add the "
                         f"split lists {', '.join(_ACDC_H5_LISTS)}")
    return int(match.group(1))


# ---- files and lists ---------------------------------------------------------------------------------------


def _first_dir(root: Path, candidates: Sequence[str]) -> Path | None:
    return next((root / c for c in candidates if (root / c).is_dir()), None)


def _read_list(path: Path) -> list[str]:
    """The non-blank lines of a split list, stripped; duplicates are an error (they would double a case)."""
    names = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{path}: {name!r} is listed twice")
        seen.add(name)
    return names


def _listed(list_file: Path, folders: Path | Sequence[Path], suffix: str) -> list[Path]:
    """The file of each name in ``list_file``, looked up in ``folders`` (the name may carry the suffix)."""
    folders = [folders] if isinstance(folders, Path) else list(folders)
    files = []
    for name in _read_list(list_file):
        stem = name.removesuffix(suffix)
        path = next((f / f"{stem}{suffix}" for f in folders if (f / f"{stem}{suffix}").is_file()), None)
        if path is None:
            where = " or ".join(str(f / f"{stem}{suffix}") for f in folders)
            raise FileNotFoundError(f"{list_file} lists {name!r} but there is no file {where}")
        files.append(path)
    return files


def _split_files(lists: Path | None, list_name: str, folder: Path, suffix: str, pattern: str = "") -> list[Path]:
    """The files of one split: from its list file when there is one, else every ``pattern`` file of ``folder``."""
    if lists is not None and (lists / list_name).is_file():
        return _listed(lists / list_name, folder, suffix)
    return sorted(folder.glob(pattern or f"*{suffix}")) if folder.is_dir() else []


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".npy.h5", ".h5", ".npz"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _slice_of(path: Path) -> tuple[str, int] | None:
    """(case, slice index) when the file name says it is a slice, else None."""
    match = _SLICE_NAME.match(_stem(path))
    if match is None:
        return None
    case = match["case"] + (f"_{match['tag']}" if match["tag"] else "")
    return case, int(match["index"])


def _volume_case(path: Path) -> str:
    match = _VOLUME_NAME.match(_stem(path))
    return match["case"] + (f"_{match['tag']}" if match["tag"] else "") if match else _stem(path)


def _by_case(files: Sequence[Path]) -> dict[str, list[Path]]:
    """Slice files grouped by case (only those whose names say they are slices)."""
    groups: dict[str, list[Path]] = defaultdict(list)
    for path in files:
        parsed = _slice_of(path)
        if parsed is not None:
            groups[parsed[0]].append(path)
    return dict(groups)


# ---- reading and checking arrays ---------------------------------------------------------------------------


def _read_cases(files: Sequence[Path], keys: tuple[tuple[str, ...], ...], num_classes: int, split: str) -> list[Volume]:
    """Read the files of one split into volumes: slice files stacked per case, volume files as they are."""
    slices: dict[str, dict[int, Path]] = defaultdict(dict)
    order: list[str] = []  # cases in the order of their first file
    volumes: dict[str, Path] = {}
    for path in files:
        parsed = _slice_of(path)
        case = parsed[0] if parsed else _volume_case(path)
        if case in volumes or (parsed is None and case in slices):
            other = volumes.get(case) or next(iter(slices[case].values()))
            raise ValueError(f"case {case!r} of the {split} split comes from both {other} and {path}")
        if case not in slices:
            order.append(case)
        if parsed is None:
            volumes[case] = path
            continue
        index = parsed[1]
        if index in slices[case]:
            raise ValueError(f"{path} and {slices[case][index]} are both slice {index} of case {case!r}")
        slices[case][index] = path
    cases = []
    for case in order:
        if case in volumes:
            image, label, spacing = _read_arrays(volumes[case], keys, num_classes, ndim=3)
            cases.append(Volume(case, image, label, spacing))
        else:
            cases.append(_stack_slices(case, slices[case], keys, num_classes))
    log.info("%s: %d cases from %d files", split, len(cases), len(files))
    return cases


def _stack_slices(case: str, files: dict[int, Path], keys: tuple[tuple[str, ...], ...], num_classes: int) -> Volume:
    images, labels, first = [], [], None
    for index in sorted(files):
        image, label, _ = _read_arrays(files[index], keys, num_classes, ndim=2)
        if first is None:
            first = files[index], image.shape
        elif image.shape != first[1]:
            raise ValueError(f"{files[index]} is {image.shape} but {first[0]} is {first[1]}: all slices of case "
                             f"{case!r} must have the same shape")
        images.append(image)
        labels.append(label)
    return Volume(case, np.stack(images), np.stack(labels), None)  # (D, H, W)


def _read_arrays(
    path: Path, keys: tuple[tuple[str, ...], ...], num_classes: int, ndim: int
) -> tuple[np.ndarray, np.ndarray, tuple[float, float, float] | None]:
    """Image (float32), label (uint8) and spacing of one npz or h5 file, checked."""
    raw, spacing = _read_h5(path, keys) if path.name.endswith(".h5") else (_read_npz(path, keys), None)
    (image_key, image), (label_key, label) = raw
    # Whether a file is a slice or a volume comes from its name (see _slice_of), so say so when they disagree.
    what = "2D slice (H, W)" if ndim == 2 else "3D volume (D, H, W); a slice's name ends in _slice<N>"
    for key, array in raw:
        if array.ndim != ndim:
            raise ValueError(f"{path}: {key!r} has shape {array.shape}; expected a {what}")
    if image.shape != label.shape:
        raise ValueError(f"{path}: {image_key!r} is {image.shape} but {label_key!r} is {label.shape}; they must match")
    return _as_image(image, path, image_key), _as_label(label, path, label_key, num_classes), spacing


def _pick(path: Path, available: Sequence[str], names: tuple[str, ...]) -> str:
    key = next((k for k in names if k in available), None)
    if key is None:
        wanted = " or ".join(repr(n) for n in names)
        raise ValueError(f"{path}: no key {wanted}; keys found: {sorted(available)}")
    return key


def _read_npz(path: Path, keys: tuple[tuple[str, ...], ...]) -> list[tuple[str, np.ndarray]]:
    try:
        archive = np.load(path, allow_pickle=False)
    except _UNREADABLE as exc:
        raise ValueError(f"{path}: cannot read it as an .npz archive ({exc})") from exc
    if not isinstance(archive, np.lib.npyio.NpzFile):  # np.load also reads a bare .npy array
        raise ValueError(f"{path}: holds a single array, not an .npz archive with keys {[k[0] for k in keys]}")
    with archive:
        picked = [_pick(path, archive.files, names) for names in keys]
        try:
            return [(key, np.asarray(archive[key])) for key in picked]
        except _UNREADABLE as exc:
            raise ValueError(f"{path}: cannot read its arrays {picked} ({exc})") from exc


def _read_h5(
    path: Path, keys: tuple[tuple[str, ...], ...]
) -> tuple[list[tuple[str, np.ndarray]], tuple[float, float, float] | None]:
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it as an HDF5 file ({exc})") from exc
    with f:
        arrays = []
        for names in keys:
            key = _pick(path, list(f.keys()), names)
            if not isinstance(f[key], h5py.Dataset):
                raise ValueError(f"{path}: {key!r} is an HDF5 group; expected a dataset (an array)")
            try:
                arrays.append((key, np.asarray(f[key][()])))
            except _UNREADABLE as exc:
                raise ValueError(f"{path}: cannot read dataset {key!r} ({exc})") from exc
        spacing = f.attrs.get("spacing")
    return arrays, None if spacing is None else _as_spacing(spacing, path)


def _as_spacing(raw: object, path: Path) -> tuple[float, float, float]:
    try:
        values = np.asarray(raw, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        values = np.empty(0)
    if values.shape != (3,) or not (np.isfinite(values).all() and (values > 0).all()):
        raise ValueError(f"{path}: attribute 'spacing' is {raw!r}; expected 3 positive numbers (z, y, x) in mm")
    return float(values[0]), float(values[1]), float(values[2])


def _as_image(array: np.ndarray, path: Path, key: str) -> np.ndarray:
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{path}: {key!r} has dtype {array.dtype}; expected a real-valued image (float or int)")
    image = array.astype(np.float32, copy=False)
    if not np.isfinite(image).all():
        raise ValueError(f"{path}: {key!r} contains NaN or infinite values")
    return image


def _as_label(array: np.ndarray, path: Path, key: str, num_classes: int) -> np.ndarray:
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{path}: {key!r} has dtype {array.dtype}; expected integer class indices")
    if array.dtype.kind == "f" and not np.array_equal(array, np.round(array)):  # NaN fails this too
        raise ValueError(f"{path}: {key!r} is {array.dtype} with non-integral values; expected class indices")
    low, high = (array.min(), array.max()) if array.size else (0, 0)
    if low < 0 or high >= num_classes:
        bad = np.unique(array[(array < 0) | (array >= num_classes)])[:10].tolist()
        hint = " (13-organ BTCV labels? remap them to TransUNet's 8 organs)" if num_classes == 9 and high > 8 else ""
        raise ValueError(f"{path}: {key!r} holds values {bad} outside the {num_classes} classes "
                         f"[0, {num_classes - 1}]{hint}")
    return array.astype(np.uint8)
