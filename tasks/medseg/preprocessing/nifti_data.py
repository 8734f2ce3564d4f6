"""Load a NIfTI dataset (Decathlon, nnU-Net v2 raw, or images/ + labels/) into memory, canonical and normalised.

``load_nifti_dataset(root)`` lists the cases (:mod:`tasks.medseg.reading.nifti_layout`), checks every header, picks the
target spacing (by default the median spacing of the training cases, nnU-Net's rule), brings each case to the
canonical ``(C, D, H, W)`` grid (:mod:`tasks.medseg.preprocessing.nifti_geometry`), computes the dataset fingerprint and
normalises each channel by its modality (:mod:`tasks.medseg.preprocessing.nifti_intensity`).

The canonical, resampled but not yet normalised arrays of each case are cached under
``$ZOO_CACHE/medseg-nifti-cache/`` (default ``~/.cache/transformer-zoo``), one ``.npz`` per case, written to a
temporary file and renamed into place. A case's key hashes the absolute path, size and modification time (ns)
of each of its files, the target spacing, the image interpolation order and the code version (the source of
this module and of the geometry module). Size + mtime rather than a hash of the bytes: hashing a real dataset
(tens of GB) would cost minutes per load and defeat the cache, and a file that is rewritten gets a new mtime;
the price is that a copied or touched file is recomputed once. Normalisation is not cached (it takes
milliseconds and depends on the whole dataset's fingerprint), so another ``ct_window`` reuses the cache.

How a caller gets today's ``(D, H, W)`` volumes: every image is ``(C, D, H, W)``; with one channel,
``case.volume()`` (or ``data.to_segdata()`` for the whole dataset) is the :class:`tasks.medseg.reading.data.Volume` of
``image[0]``; with several, pass ``channel=`` for one of them, or ``channel="all"`` for ``(C, D, H, W)`` volumes
that a model with C input channels takes (what the medseg task does).

A trained run saves its :class:`Preprocessing`; passing it back (``load_nifti_dataset(root, preprocessing=...)``,
:func:`preprocess_case`) repeats exactly the training's spacing, interpolation and intensity rules (the rules'
statistics included) on other data.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from plumbing.atomic import atomic_open
from tasks.medseg.preprocessing.nifti_geometry import (
    IMAGE_ORDERS,
    Geometry,
    ras_spacing,
    read_image,
    read_label,
    slice_axes,
    to_canonical,
)
from tasks.medseg.preprocessing.nifti_intensity import (
    IntensityRule,
    choose_rules,
    fingerprint,
    fingerprint_lines,
    foreground_sample,
    nonzero_share,
    normalise,
)
from tasks.medseg.reading.nifti_layout import CaseFiles, NiftiLayout, case_header, nifti_stem, read_nifti_layout
from tasks.medseg.reading.phantom import default_phantom_dir
from tasks.medseg.reading.volume import SegData, Volume

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
"""Bumped when the layout of a cached case changes."""
CT_WINDOW = (-125.0, 275.0)
"""The abdominal window of the Synapse papers (TransUNet's preprocessing), in HU."""
_MAX_LABEL = 255  # labels are stored as uint8


@dataclass(frozen=True)
class Preprocessing:
    """The settings that turn a file into model input; saved with a run so that prediction repeats them."""

    spacing: tuple[float, float, float]  # target spacing (R, A, S) in mm
    image_order: int  # 1 linear, 3 cubic; labels are always nearest neighbour
    rules: tuple[IntensityRule, ...]  # one per channel

    @property
    def slice_axis(self) -> str:
        return "RAS"[slice_axes(self.spacing)[0]]

    def to_dict(self) -> dict:
        return {"spacing": list(self.spacing), "image_order": self.image_order,
                "rules": [r.to_dict() for r in self.rules]}

    @classmethod
    def from_dict(cls, raw: dict) -> Preprocessing:
        return cls(tuple(raw["spacing"]), int(raw["image_order"]), tuple(IntensityRule(**r) for r in raw["rules"]))


@dataclass(eq=False)  # arrays have no single truth value: compare cases by identity
class NiftiCase:
    """One case on the canonical grid.

    Shape:
        image: (C, D, H, W) float32, normalised; label: (D, H, W) uint8, or None for an unlabelled image.
    """

    case: str
    image: np.ndarray = field(repr=False)
    label: np.ndarray | None = field(repr=False)
    geometry: Geometry
    files: CaseFiles | None = None  # the files it was read from (the label file is the reference of summary.json)

    @property
    def spacing(self) -> tuple[float, float, float]:
        """(D, H, W) spacing in mm."""
        return self.geometry.spacing

    def volume(self, channel: int | str | None = None) -> Volume:
        """The :class:`Volume` of one channel (``channel`` may be omitted when there is only one), or of all of
        them as a ``(C, D, H, W)`` image with ``channel="all"``."""
        if self.label is None:
            raise ValueError(f"case {self.case} has no label, so it cannot be a Volume; predict it instead")
        if channel == "all":
            return Volume(self.case, self.image, self.label, self.spacing)
        if channel is None:
            if self.image.shape[0] != 1:
                raise ValueError(f"case {self.case} has {self.image.shape[0]} channels: pass channel= (0 .. "
                                 f"{self.image.shape[0] - 1}) or use case.image (C, D, H, W)")
            channel = 0
        return Volume(self.case, self.image[channel], self.label, self.spacing)


@dataclass
class NiftiData:
    """A NIfTI dataset in memory, its fingerprint, and what is needed to preprocess and map back more cases."""

    name: str
    source: str  # the folder read
    layout: str  # "decathlon", "nnunet" or "pairs"
    class_names: list[str]  # index = label value, 0 background
    channel_names: list[str]
    train: list[NiftiCase]
    test: list[NiftiCase]  # labelled test cases (labelsTs/), often none
    unlabelled: list[CaseFiles]  # test images without labels (imagesTs/): read with preprocess()
    preprocessing: Preprocessing
    fingerprint: dict

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def num_channels(self) -> int:
        return len(self.channel_names)

    @property
    def geometry(self) -> dict[str, Geometry]:
        """case -> geometry, for every loaded case."""
        return {c.case: c.geometry for c in self.train + self.test}

    def report_lines(self) -> list[str]:
        """Markdown lines describing the dataset and its preprocessing (for report.md)."""
        head = f"- {self.layout} dataset {self.name} ({self.source}): {len(self.train)} training, {len(self.test)} " \
               f"labelled test, {len(self.unlabelled)} unlabelled cases; classes {', '.join(self.class_names[1:])}"
        return [head, *fingerprint_lines(self.fingerprint, self.preprocessing.rules)]

    def to_segdata(self, channel: int | str | None = None, valid: Sequence[str] = ()) -> SegData:
        """The dataset as today's :class:`SegData` of ``(D, H, W)`` volumes; ``valid`` names training cases to hold
        out as the validation split (e.g. a fold's ``"val"`` list from :mod:`tasks.medseg.preprocessing.folds`)."""
        known = {c.case for c in self.train}
        unknown = sorted(set(valid) - known)
        if unknown:
            raise ValueError(f"valid names cases that are not training cases of {self.source}: {unknown[:5]}")
        held = set(valid)
        return SegData(
            self.name, self.source, list(self.class_names),
            train=[c.volume(channel) for c in self.train if c.case not in held],
            test=[c.volume(channel) for c in self.test],
            valid=[c.volume(channel) for c in self.train if c.case in held],
        )

    def preprocess(self, files: CaseFiles | Sequence[str | Path]) -> NiftiCase:
        """Read one more case (e.g. an unlabelled test image) with this dataset's settings (no cache)."""
        return preprocess_case(files, self.preprocessing, num_classes=self.num_classes)


def load_nifti_dataset(
    root: str | Path, *, layout: str = "auto", spacing: Sequence[float] | None = None,
    ct_window: tuple[float, float] | None = CT_WINDOW, image_order: int = 1, modality: str | None = None,
    class_names: Sequence[str] | None = None, cache: bool | str | Path = True,
    preprocessing: Preprocessing | None = None,
) -> NiftiData:
    """Load a NIfTI dataset folder (see the module docstring and :mod:`tasks.medseg.reading.nifti_layout`).

    Args:
        root: the dataset folder.
        layout: ``"decathlon"``, ``"nnunet"``, ``"pairs"`` or ``"auto"``.
        spacing: target spacing (R, A, S) in mm, as NIfTI headers list it (e.g. ``(0.8, 0.8, 2.5)``); None: the
            median spacing of the training cases.
        ct_window: (low, high) HU window for CT channels, scaled to [0, 1]; None: nnU-Net's CT normalisation.
        image_order: image interpolation, 1 (linear) or 3 (cubic); labels are nearest neighbour.
        modality: the modality of a pair of folders, whose files do not say (default: unknown, z-scored).
        class_names: the class names of a pair of folders (default ``class 1``, ... up to the largest label).
        cache: True for ``$ZOO_CACHE/medseg-nifti-cache``, a folder, or False for no cache.
        preprocessing: a trained run's settings: its spacing, image order and intensity rules replace
            ``spacing``, ``image_order`` and ``ct_window`` (the rules are not refitted to this data).

    Raises:
        FileNotFoundError: no layout, or a file is missing. ValueError: bad dataset.json, header, or voxel data.
    """
    if image_order not in IMAGE_ORDERS:
        raise ValueError(f"image_order must be one of {sorted(IMAGE_ORDERS)} (linear, cubic), got {image_order!r}")
    started = time.perf_counter()
    found = read_nifti_layout(root, layout, modality=modality, class_names=class_names)
    headers = {c.case: case_header(c, None if found.layout == "pairs" else found.num_channels) for c in found.cases}
    channel_names = _channel_names(found, headers)
    train_files = [c for c in found.cases if c.split == "train"]
    if preprocessing is not None:
        if len(preprocessing.rules) != len(channel_names):
            raise ValueError(f"{found.root} holds {len(channel_names)} channel(s) ({', '.join(channel_names)}) but the "
                             f"run was trained on {len(preprocessing.rules)} "
                             f"({', '.join(r.name for r in preprocessing.rules)})")
        image_order = preprocessing.image_order
        target, rule = _check_spacing(preprocessing.spacing), "the trained run's"
    elif spacing is None:
        target = _median([ras_spacing(headers[c.case].affine) for c in train_files])
        rule = "median of the training cases"
    else:
        target, rule = _check_spacing(spacing), "given"
    num_classes = len(found.class_names) if found.class_names else None
    folder = _cache_dir(cache)
    records, hits = {}, 0
    for files in (c for c in found.cases if c.label is not None):
        record, hit = _case_record(files, target, image_order, num_classes, folder)
        records[files.case], hits = record, hits + hit
    names = list(found.class_names or _default_class_names(records))
    fp = fingerprint([records[c.case] for c in train_files], channel_names, names, target, rule)
    prep = preprocessing or Preprocessing(target, image_order, tuple(choose_rules(channel_names, ct_window, fp)))
    by_name = {c.case: c for c in found.cases}
    cases = {case: NiftiCase(case, normalise(r["image"], prep.rules), r["label"], r["geometry"], by_name[case])
             for case, r in records.items()}
    data = NiftiData(
        found.name, str(found.root), found.layout, names, channel_names,
        train=[cases[c.case] for c in train_files], test=[cases[c.case] for c in found.cases
                                                         if c.split == "test" and c.label is not None],
        unlabelled=[c for c in found.cases if c.label is None], preprocessing=prep, fingerprint=fp,
    )
    if found.layout == "pairs" and modality is None:
        log.warning("%s: images/ + labels/ do not say the modality: z-scored per case as MRI; pass --modality CT "
                    "for the CT window", found.root)
    log.info("loaded %s in %.1f s (%d of %d cases from the cache%s)", found.root, time.perf_counter() - started,
             hits, len(records), f" {folder}" if folder else " (off)")
    for line in data.report_lines():
        log.info("%s", line)
    return data


def preprocess_case(files: CaseFiles | Sequence[str | Path], prep: Preprocessing, num_classes: int = _MAX_LABEL + 1
                    ) -> NiftiCase:
    """One case (its image files; a label too when ``files`` is a :class:`CaseFiles` with one) with ``prep``."""
    if not isinstance(files, CaseFiles):
        paths = tuple(Path(p) for p in files)
        files = CaseFiles(nifti_stem(paths[0]) or paths[0].name, paths, None, "test")
    case_header(files, len(prep.rules))  # the header checks, before any voxel is read
    record = _compute_record(files, prep.spacing, prep.image_order, num_classes)
    return NiftiCase(files.case, normalise(record["image"], prep.rules), record["label"], record["geometry"], files)


# ---- one case, cached --------------------------------------------------------------------------------------


def _case_record(
    files: CaseFiles, target: tuple[float, float, float], image_order: int, num_classes: int | None,
    folder: Path | None,
) -> tuple[dict, bool]:
    """(record, whether it came from the cache) of one labelled case."""
    path = None
    if folder is not None:
        path = folder / f"{_safe(files.case)}-{_cache_key(files, target, image_order)}.npz"
        record = _read_cached(path)
        if record is not None:
            _check_label_range(files.label, len(record["class_counts"]) - 1, num_classes)
            return record, True
    record = _compute_record(files, target, image_order, num_classes)
    if path is not None:
        _write_cached(path, record)
    return record, False


def _compute_record(files: CaseFiles, target: Sequence[float], image_order: int, num_classes: int | None) -> dict:
    """Read one case, check its voxel data, and bring it to the canonical grid (not normalised)."""
    image = read_image(files)  # (C, X, Y, Z)
    raw = image.numpy()
    if not np.isfinite(raw).all():
        raise ValueError(f"{files.images[0]}: the image holds NaN or infinite values")
    label = raw_label = None
    if files.label is not None:
        label = read_label(files.label)  # (1, X, Y, Z)
        raw_label = label.numpy()[0]
        if not np.array_equal(raw_label, np.rint(raw_label)):
            raise ValueError(f"{files.label}: label values must be integers (class indices), found fractions or NaN")
        high = int(raw_label.max()) if raw_label.size else 0
        _check_label_range(files.label, high, num_classes, low=int(raw_label.min()) if raw_label.size else 0)
    canonical, canonical_label, geometry = to_canonical(image, label, target, image_order=image_order,
                                                        source=files.images)
    affine = np.asarray(geometry.affine)
    seed = int(hashlib.sha256(files.case.encode()).hexdigest()[:8], 16)
    return {
        "case": files.case, "image": canonical, "label": canonical_label, "geometry": geometry,
        "shape": list(geometry.ras_shape), "spacing": list(ras_spacing(affine)), "orientation": geometry.orientation,
        "nonzero_share": nonzero_share(raw),
        "foreground": foreground_sample(raw, raw_label, seed) if raw_label is not None else np.zeros((raw.shape[0], 0)),
        "class_counts": np.bincount(raw_label.astype(np.int64).ravel()) if raw_label is not None else np.zeros(1),
    }


def _check_label_range(path: Path, high: int, num_classes: int | None, low: int = 0) -> None:
    limit = num_classes if num_classes is not None else _MAX_LABEL + 1
    if low < 0 or high >= limit:
        where = "declared" if num_classes is not None else "that uint8 labels allow"
        raise ValueError(f"{path}: label values {low} .. {high} fall outside the {limit} {where} classes "
                         f"(0 .. {limit - 1})")


def _cache_key(files: CaseFiles, target: Sequence[float], image_order: int) -> str:
    stats = []
    for p in (*files.images, files.label):
        st = p.stat()
        stats.append([str(p.resolve()), st.st_size, st.st_mtime_ns])
    key = {"format": CACHE_FORMAT, "code": _code_version(), "files": stats, "spacing": [repr(float(s)) for s in target],
           "image_order": image_order}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def _code_version() -> str:
    """A hash of the code that makes a cached case: an edit there invalidates the cache."""
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in ("nifti_data.py", "nifti_geometry.py"):
        digest.update((here / name).read_bytes())
    return digest.hexdigest()[:16]


def _read_cached(path: Path) -> dict | None:
    """The record cached at ``path``, or None when there is none or it cannot be read (it is then rewritten)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"]))
            record = {key: f[key] for key in ("image", "label", "foreground", "class_counts")}
    except (OSError, ValueError, KeyError, EOFError) as exc:
        log.warning("ignoring the unreadable cache file %s (%s)", path, exc)
        return None
    record.update(meta)
    record["geometry"] = Geometry.from_dict(meta["geometry"])
    return record


def _write_cached(path: Path, record: dict) -> None:
    meta = {k: record[k] for k in ("case", "shape", "spacing", "orientation", "nonzero_share")}
    meta["geometry"] = record["geometry"].to_dict()
    with atomic_open(path, binary=True) as f:  # a concurrent reader sees the whole file or none
        np.savez(f, meta=np.array(json.dumps(meta)), image=record["image"], label=record["label"],
                 foreground=record["foreground"], class_counts=record["class_counts"])


def cache_root() -> Path:
    """``$ZOO_CACHE`` (default ``~/.cache/transformer-zoo``): the folder the phantom is cached in."""
    return default_phantom_dir().parent


def _cache_dir(cache: bool | str | Path) -> Path | None:
    if cache is False:
        return None
    if cache is True:
        return cache_root() / "medseg-nifti-cache"
    if isinstance(cache, str | Path):
        return Path(cache).expanduser()
    raise TypeError(f"cache must be True, False or a folder, got {type(cache).__name__} {cache!r}")


# ---- small helpers -----------------------------------------------------------------------------------------


def _channel_names(found: NiftiLayout, headers: dict) -> list[str]:
    if found.layout != "pairs":
        return list(found.channel_names)
    counts = {h.channels for h in headers.values()}
    if len(counts) > 1:
        first = {h.channels: c for c, h in headers.items()}
        raise ValueError(f"{found.root}: images hold different numbers of channels "
                         f"({', '.join(f'{n} in case {c}' for n, c in sorted(first.items()))})")
    return [found.channel_names[0]] * counts.pop()


def _default_class_names(records: dict) -> list[str]:
    classes = max(len(r["class_counts"]) for r in records.values())
    return ["background", *(f"class {k}" for k in range(1, max(classes, 2)))]


def _median(spacings: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    a, b, c = (float(v) for v in np.median(np.asarray(spacings, dtype=np.float64), axis=0))
    return a, b, c


def _check_spacing(spacing: Sequence[float]) -> tuple[float, float, float]:
    try:
        values = [float(s) for s in spacing]
    except (TypeError, ValueError):
        values = []
    if len(values) != 3 or not all(np.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"spacing must be 3 positive numbers (R, A, S) in mm, e.g. (0.8, 0.8, 2.5), got {spacing!r}")
    return values[0], values[1], values[2]


def _safe(case: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in case)[:80]
