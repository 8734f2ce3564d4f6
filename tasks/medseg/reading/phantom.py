"""The embedded default of the medseg task: a generated multi-organ abdominal phantom in the Synapse layout.

Thirty small 3D "patients" carry the Synapse case ids (the 12 test cases of the papers and the 18 training
cases) and its 9 classes (0 background, 1 aorta, 2 gallbladder, 3 left kidney, 4 right kidney, 5 liver,
6 pancreas, 7 spleen, 8 stomach). Each patient has about 24 axial slices of 96-128 rows and columns (drawn
per patient, square or not). Intensities are made in CT-like Hounsfield units and then go through the
Synapse preprocessing of TransUNet: clip to [-125, 275] and scale to [0, 1] per volume.

What makes it a segmentation task rather than a thresholding one:

- organs are smooth 3D blobs (ellipsoids deformed by low-frequency noise, rotated, drifting over the
  slices) whose position, size and shape vary per patient around a rough anatomical template: a large liver
  on the image left, the spleen opposite, kidneys left and right behind, the aorta a small round tube
  through every slice in front of the spine, the gallbladder small under the liver, an elongated pancreas
  across the middle, the stomach in front on the right of the image; organs appear and disappear over the
  slices;
- the two kidneys share one intensity, so only position tells left from right; the other organs have
  overlapping intensity ranges (liver, spleen, pancreas, body wall muscle and unlabelled bowel loops all
  lie within a few tens of HU), and the stomach may hold a gas pocket as dark as the air outside the body;
- a body outline with subcutaneous fat and muscle wall, a spine, partial-volume blur, texture, a smooth
  bias field and Gaussian noise.

Measured with seed 0 on slices resized to 96 x 96 and one CPU thread: MONAI ``BasicUNet`` (features
16, 16, 32, 64, 128, 16) reaches a mean 3D Dice of 0.85 over the 12 test cases after 240 s of training
(21 epochs), while the best intensity-only classifier (majority class per intensity bin) gets 0.27.
Left-right flips used as augmentation move each kidney to the other side without changing its label, so
they make classes 3 and 4 ambiguous, on this phantom as on real Synapse.

``write_phantom`` writes the folder exactly as the real data is laid out (see :mod:`tasks.medseg.reading.data`):
``train_npz/caseXXXX_sliceYYY.npz`` (``image`` float32 (H, W) in [0, 1], ``label`` uint8 (H, W)),
``test_vol_h5/caseXXXX.npy.h5`` (``image`` float32 (D, H, W), ``label`` uint8 (D, H, W), and an HDF5
attribute ``spacing`` (z, y, x) in mm that the real files lack), and
``lists/lists_Synapse/{train.txt,test_vol.txt}``, plus ``phantom.json`` (version, generator hash, seed,
sizes), which the loader ignores and which tells a complete, current phantom folder from anything else.

Shape legend: ``D, H, W`` slices, rows, columns.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
from scipy import ndimage

from plumbing.atomic import write_folder_atomic
from tasks.engine.config import cache_root
from tasks.medseg.reading.synapse import SYNAPSE_TEST_CASES, SYNAPSE_TRAIN_CASES

log = logging.getLogger(__name__)

PHANTOM_VERSION = 1
"""Bumped whenever the generator changes what it draws, so that old cached folders are not reused."""

HU_WINDOW = (-125.0, 275.0)
"""The abdominal CT window of the Synapse preprocessing (TransUNet): clip, then scale to [0, 1] per volume."""

MANIFEST = "phantom.json"


@dataclass(frozen=True)
class Structure:
    """One structure of the template anatomy, before the per-patient jitter.

    Positions are in body coordinates: ``t`` in [0, 1] from the lowest to the highest slice, ``v`` from the
    front (-1) to the back (+1) of the body, ``u`` from the image left (-1) to the image right (+1). Radii are
    ``rt`` in the same slice units and ``rv``, ``ru`` in units of the body's half-width, so that a structure
    keeps its proportions whatever the body's aspect ratio.
    """

    name: str
    label: int  # 0 for unlabelled structures (spine, muscles, bowel)
    tissue: str  # structures of one tissue share one intensity per patient (both kidneys: "kidney")
    t: float
    v: float
    u: float
    rt: float
    rv: float
    ru: float
    angle: float = 0.0  # in-plane rotation in degrees
    warp: float = 0.25  # amplitude of the low-frequency deformation of the ellipsoid


TISSUE_HU = {
    "subcutaneous fat": -100.0, "muscle": 45.0, "visceral fat": -80.0, "bone": 500.0,
    "liver": 70.0, "spleen": 60.0, "kidney": 165.0, "aorta": 190.0, "gallbladder": 0.0,
    "pancreas": 50.0, "stomach": 30.0,
}
"""Mean intensity of each tissue (HU); each patient gets its own draw around it (see ``_patient``)."""

# Drawn in this order: later structures win where they overlap. A "tube" (rt = 100) runs through every slice.
ANATOMY = (
    Structure("spine", 0, "bone", t=0.5, v=0.68, u=0.0, rt=100.0, rv=0.13, ru=0.13, warp=0.05),
    Structure("left paraspinal muscle", 0, "muscle", t=0.5, v=0.80, u=0.22, rt=100.0, rv=0.10, ru=0.13, warp=0.15),
    Structure("right paraspinal muscle", 0, "muscle", t=0.5, v=0.80, u=-0.22, rt=100.0, rv=0.10, ru=0.13, warp=0.15),
    Structure("stomach", 8, "stomach", t=0.74, v=-0.35, u=0.30, rt=0.30, rv=0.20, ru=0.30, angle=-20.0, warp=0.30),
    Structure("spleen", 7, "spleen", t=0.68, v=0.30, u=0.62, rt=0.24, rv=0.30, ru=0.19, angle=30.0),
    Structure("liver", 5, "liver", t=0.72, v=-0.05, u=-0.42, rt=0.50, rv=0.60, ru=0.45, warp=0.20),
    Structure("liver left lobe", 5, "liver", t=0.80, v=-0.45, u=-0.05, rt=0.25, rv=0.20, ru=0.32, angle=-25.0),
    Structure("gallbladder", 2, "gallbladder", t=0.42, v=-0.25, u=-0.22, rt=0.18, rv=0.19, ru=0.14, angle=20.0),
    Structure("pancreas", 6, "pancreas", t=0.50, v=0.06, u=0.08, rt=0.20, rv=0.14, ru=0.40, angle=12.0, warp=0.30),
    Structure("left kidney", 3, "kidney", t=0.36, v=0.45, u=0.45, rt=0.24, rv=0.24, ru=0.17, angle=-20.0),
    Structure("right kidney", 4, "kidney", t=0.31, v=0.45, u=-0.45, rt=0.24, rv=0.24, ru=0.17, angle=20.0),
    Structure("aorta", 1, "aorta", t=0.5, v=0.32, u=0.05, rt=100.0, rv=0.105, ru=0.105, warp=0.05),
)


@dataclass(frozen=True)
class _Body:
    """Where the body sits in the image, in pixels: centre and half-axes."""

    cy: float
    cx: float
    by: float
    bx: float


def default_phantom_dir(seed: int = 0) -> Path:
    """The cache folder of the default phantom: ``$ZOO_CACHE`` (default ``~/.cache/transformer-zoo``)."""
    return cache_root() / f"medseg-phantom-v{PHANTOM_VERSION}-seed{seed}"


def phantom_case(
    seed: int, case_id: str | int, *, slices: int = 24, size: tuple[int, int] = (96, 128)
) -> tuple[np.ndarray, np.ndarray, tuple[float, float, float]]:
    """Generate one patient in memory; the same ``(seed, case_id)`` always gives the same arrays.

    Args:
        seed: the phantom's seed.
        case_id: a Synapse case name such as ``"case0001"``, or its number.
        slices: the typical number of slices; each patient gets ``slices - 2`` to ``slices + 2``.
        size: the range (inclusive) from which rows and columns are drawn, independently.

    Returns:
        ``(image, label, spacing)``: image float32 (D, H, W) in [0, 1]; label uint8 (D, H, W) in [0, 9);
        spacing (z, y, x) in mm.
    """
    number = _case_number(case_id)
    if slices < 3:
        raise ValueError(f"slices must be >= 3 so that every patient has at least one slice, got {slices}")
    low, high = size
    if not 32 <= low <= high:
        raise ValueError(f"size must be (low, high) with 32 <= low <= high, got {size}")
    # One generator per case: a case does not depend on which other cases are generated, or in what order.
    rng = np.random.default_rng([seed, number])
    shape = (int(slices + rng.integers(-2, 3)), int(rng.integers(low, high + 1)), int(rng.integers(low, high + 1)))
    hu, label = _patient(rng, shape)
    hu = np.clip(hu, *HU_WINDOW)
    image = ((hu - hu.min()) / max(float(hu.max() - hu.min()), 1e-6)).astype(np.float32)
    pixel = float(rng.uniform(330.0, 400.0)) / max(shape[1:])  # a 33-40 cm field of view
    spacing = (round(float(rng.uniform(3.0, 5.0)), 2), round(pixel, 3), round(pixel, 3))
    return image, label, spacing


def write_phantom(
    root: str | os.PathLike,
    seed: int = 0,
    *,
    slices: int = 24,
    size: tuple[int, int] = (96, 128),
    train_cases: tuple[str, ...] = SYNAPSE_TRAIN_CASES,
    test_cases: tuple[str, ...] = SYNAPSE_TEST_CASES,
) -> Path:
    """Write the phantom at ``root`` in the Synapse layout, or reuse it when a complete one is already there.

    The folder is built next to ``root`` and renamed into place, so that a crash or a concurrent writer
    never leaves a half-written dataset at ``root``. A phantom folder written with other settings (or an
    older generator) is replaced; any other existing folder is left alone and raises FileExistsError.

    Args:
        root: the folder to write, e.g. :func:`default_phantom_dir`.
        seed: the phantom's seed.
        slices, size: see :func:`phantom_case` (smaller values make tiny folders for tests).
        train_cases, test_cases: the case names of each split (default: the Synapse splits).

    Returns:
        ``root`` as a Path.
    """
    root = Path(root).expanduser()
    overlap = sorted(set(train_cases) & set(test_cases))
    if overlap:
        raise ValueError(f"cases {overlap} are in both train_cases and test_cases")
    manifest = {
        "version": PHANTOM_VERSION, "generator": _generator_fingerprint(), "seed": seed, "slices": slices,
        "size": list(size), "train_cases": list(train_cases), "test_cases": list(test_cases),
    }
    if _is_complete(root, manifest):
        return root
    if root.is_file() or (root.is_dir() and any(root.iterdir()) and not (root / MANIFEST).is_file()):
        raise FileExistsError(f"{root} exists and is not a phantom folder (no {MANIFEST}); pass another folder")
    def fill(tmp: Path) -> None:
        _write_layout(tmp, seed, slices, size, train_cases, test_cases)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")

    write_folder_atomic(root, fill, lambda folder: _is_complete(folder, manifest))
    log.info("wrote the medseg phantom (seed %d) to %s", seed, root)
    return root


def _generator_fingerprint() -> str:
    """A hash of this module's source: a cached phantom made by other code than this is rebuilt, not reused.

    The version in the folder name says which phantom a user asked for; the fingerprint catches every edit
    in between (a tweaked organ size would otherwise go unnoticed in a cache shared by several checkouts).
    """
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _case_number(case_id: str | int) -> int:
    if isinstance(case_id, int) and not isinstance(case_id, bool) and case_id >= 0:
        return case_id
    if isinstance(case_id, str) and case_id.startswith("case") and case_id[4:].isdigit():
        return int(case_id[4:])
    raise ValueError(f"case_id must be a name like 'case0001' or a non-negative int, got {case_id!r}")


def _is_complete(root: Path, manifest: dict) -> bool:
    """True when ``root`` holds a phantom written with ``manifest``'s settings and every listed file exists."""
    try:
        if json.loads((root / MANIFEST).read_text()) != manifest:
            return False
        lists = root / "lists" / "lists_Synapse"
        train = (lists / "train.txt").read_text().split()
        test = (lists / "test_vol.txt").read_text().split()
    except (OSError, ValueError):
        return False
    return all((root / "train_npz" / f"{n}.npz").is_file() for n in train) and all(
        (root / "test_vol_h5" / f"{n}.npy.h5").is_file() for n in test
    )


def _write_layout(
    folder: Path, seed: int, slices: int, size: tuple[int, int], train_cases: tuple[str, ...],
    test_cases: tuple[str, ...],
) -> None:
    """Write every case of both splits and the two list files into ``folder``."""
    train_dir, test_dir, list_dir = folder / "train_npz", folder / "test_vol_h5", folder / "lists" / "lists_Synapse"
    for sub in (train_dir, test_dir, list_dir):
        sub.mkdir(parents=True)
    train_names = []
    for case in train_cases:
        image, label, _ = phantom_case(seed, case, slices=slices, size=size)
        for z in range(image.shape[0]):  # TransUNet's training data: one npz per axial slice
            name = f"{case}_slice{z:03d}"
            np.savez(train_dir / f"{name}.npz", image=image[z], label=label[z])
            train_names.append(name)
    for case in test_cases:
        image, label, spacing = phantom_case(seed, case, slices=slices, size=size)
        with h5py.File(test_dir / f"{case}.npy.h5", "w") as f:
            f.create_dataset("image", data=image)
            f.create_dataset("label", data=label)
            f.attrs["spacing"] = np.asarray(spacing, dtype=np.float64)
    (list_dir / "train.txt").write_text("".join(f"{n}\n" for n in train_names))
    (list_dir / "test_vol.txt").write_text("".join(f"{c}\n" for c in test_cases))


# ---- the generator -----------------------------------------------------------------------------------------


def _patient(rng: np.random.Generator, shape: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """One patient's intensities in HU (float32) and labels (uint8), both (D, H, W)."""
    D, H, W = shape
    bx = W * rng.uniform(0.40, 0.46)
    body = _Body(
        cy=H / 2 + rng.normal(0, 0.02 * H), cx=W / 2 + rng.normal(0, 0.02 * W),
        by=min(bx * rng.uniform(0.72, 0.85), 0.44 * H), bx=bx,
    )
    hu_of = {tissue: hu + rng.normal(0, 8.0) for tissue, hu in TISSUE_HU.items()}
    hu = np.full(shape, -1000.0, dtype=np.float32)  # air
    label = np.zeros(shape, dtype=np.uint8)

    # Body outline: an ellipse per slice whose radius wobbles with the angle and drifts over the slices.
    rho = _body_radius(rng, shape, body)  # (D, H, W), < 1 inside the body
    fat, wall = rng.uniform(0.06, 0.11), rng.uniform(0.04, 0.06)
    hu[rho < 1] = hu_of["subcutaneous fat"]
    hu[rho < 1 - fat] = hu_of["muscle"]
    within_wall, inside = rho < 1 - fat, rho < 1 - fat - wall  # inside: the abdominal cavity
    hu[inside] = hu_of["visceral fat"]

    bowel = [_bowel_loop(rng) for _ in range(int(rng.integers(3, 7)))]
    for structure in ANATOMY[:3] + tuple(bowel) + ANATOMY[3:]:
        region, mask = _blob(rng, shape, body, _jitter(rng, structure))
        # Organs and bowel stay in the cavity; the spine and its muscles only within the body wall.
        mask &= (inside if structure.label or structure.tissue == "bowel" else within_wall)[region]
        # Each bowel loop has its own content, somewhere in the range of the soft organs.
        hu[region][mask] = rng.uniform(20.0, 90.0) if structure.tissue == "bowel" else hu_of[structure.tissue]
        label[region][mask] = structure.label
        if structure.name == "stomach" and rng.random() < 0.6:
            _stomach_gas(rng, hu, label, region, mask)

    # Image formation: partial-volume blur, tissue texture, a smooth bias field and scanner noise.
    hu = ndimage.gaussian_filter(hu, sigma=(0.0, 0.5, 0.5))
    hu += 6.0 * _smooth_noise(rng, shape, (max(D // 3, 2), max(H // 8, 2), max(W // 8, 2)))
    hu += _bias_field(rng, shape, amplitude=20.0)
    hu += rng.uniform(8.0, 14.0) * rng.standard_normal(shape, dtype=np.float32)
    return hu, label


def _jitter(rng: np.random.Generator, s: Structure) -> Structure:
    """The patient's own version of a template structure: moved, resized and turned a little."""
    tube = s.rt >= 100.0
    return Structure(
        s.name, s.label, s.tissue,
        t=s.t if tube else s.t + rng.normal(0, 0.05),
        v=s.v + rng.normal(0, 0.03 if tube else 0.05), u=s.u + rng.normal(0, 0.03 if tube else 0.05),
        rt=s.rt if tube else s.rt * rng.uniform(0.85, 1.15),
        rv=s.rv * rng.uniform(0.85, 1.15), ru=s.ru * rng.uniform(0.85, 1.15),
        angle=s.angle + rng.normal(0, 12.0), warp=s.warp,
    )


def _bowel_loop(rng: np.random.Generator) -> Structure:
    """An unlabelled blob in the front of the abdomen whose intensity overlaps the organs'."""
    return Structure(
        "bowel", 0, "bowel", t=rng.uniform(0, 1), v=rng.uniform(-0.6, 0.3), u=rng.uniform(-0.3, 0.6),
        rt=rng.uniform(0.1, 0.3), rv=rng.uniform(0.05, 0.10), ru=rng.uniform(0.05, 0.10),
        angle=rng.uniform(0, 180), warp=0.3,
    )


def _blob(
    rng: np.random.Generator, shape: tuple[int, int, int], body: _Body, s: Structure
) -> tuple[tuple[slice, slice, slice], np.ndarray]:
    """A deformed, rotated ellipsoid whose centre drifts over the slices.

    Only its bounding box is computed, which keeps generation fast.

    Returns:
        ``(region, mask)``: the bounding box as slices of the volume, and the boolean mask inside it.
    """
    D = shape[0]
    cz, rz = s.t * D - 0.5, max(s.rt * D, 0.5)
    cy, cx = body.cy + s.v * body.by, body.cx + s.u * body.bx
    ry, rx = s.rv * body.bx, s.ru * body.bx
    drift_y, drift_x = rng.normal(0, 0.1 * body.bx, size=2)  # pixels of shift from the lowest to the highest slice
    reach = math.sqrt(1 + 2 * s.warp) + 0.05  # the warp below is clipped to +-2
    half_z = rz * reach
    half_xy = max(ry, rx) * reach + max(abs(drift_y), abs(drift_x))
    region = tuple(
        slice(max(int(math.floor(c - h)), 0), min(int(math.ceil(c + h)) + 1, n))
        for c, h, n in ((cz, half_z, D), (cy, half_xy, shape[1]), (cx, half_xy, shape[2]))
    )
    if any(r.start >= r.stop for r in region):
        return region, np.zeros([max(r.stop - r.start, 0) for r in region], dtype=bool)
    z, y, x = (g.astype(np.float32) for g in np.ogrid[region[0], region[1], region[2]])
    shift = (z - cz) / D
    dy, dx = y - (cy + drift_y * shift), x - (cx + drift_x * shift)  # (nz, ny, nx)
    cos, sin = math.cos(math.radians(s.angle)), math.sin(math.radians(s.angle))
    along, across = dx * cos + dy * sin, dy * cos - dx * sin
    radius2 = ((z - cz) / rz) ** 2 + (across / ry) ** 2 + (along / rx) ** 2
    warp = np.clip(_smooth_noise(rng, radius2.shape, (2, 3, 3)), -2.0, 2.0)
    return region, radius2 < 1.0 + s.warp * warp


def _stomach_gas(
    rng: np.random.Generator, hu: np.ndarray, label: np.ndarray, region: tuple[slice, ...], mask: np.ndarray
) -> None:
    """Gas in the front of the stomach (the patient lies on the back): labelled stomach, dark as air."""
    rows = np.nonzero(mask.any(axis=(0, 2)))[0]
    if rows.size < 4:
        return
    level = rows[0] + int(rows.size * rng.uniform(0.1, 0.3))  # the air-fluid level, a horizontal line
    gas = mask & (np.arange(mask.shape[1])[None, :, None] < level)
    hu[region][gas] = -700.0
    label[region][gas] = 8


def _body_radius(rng: np.random.Generator, shape: tuple[int, int, int], body: _Body) -> np.ndarray:
    """Normalised distance from the body centre (< 1 inside), with a wobbly, slowly changing outline."""
    D, H, W = shape
    y = (np.arange(H, dtype=np.float32)[:, None] - body.cy) / body.by
    x = (np.arange(W, dtype=np.float32)[None, :] - body.cx) / body.bx
    rho, theta = np.hypot(y, x), np.arctan2(y, x)  # (H, W)
    t = ((np.arange(D, dtype=np.float32) + 0.5) / D)[:, None, None]
    outline = 1.0 + 0.04 * (t - 0.5)  # (D, 1, 1): a slight taper
    for k in (2, 3, 4):
        amplitude, phase, turn = rng.normal(0, 0.03), rng.uniform(0, 2 * np.pi), rng.normal(0, 1.0)
        outline = outline + amplitude * np.cos(k * theta + phase + turn * t)  # (D, H, W)
    return rho / outline


def _smooth_noise(rng: np.random.Generator, shape: tuple[int, int, int], cells: tuple[int, int, int]) -> np.ndarray:
    """Zero-mean, unit-variance noise that changes over about ``cells`` periods per axis.

    Random values on a coarse grid, interpolated with Gaussian kernels one axis at a time (small matrix
    products: much faster than spline upsampling with ``ndimage.zoom``).
    """
    grid = rng.standard_normal([c + 1 for c in cells]).astype(np.float32)
    weights = []
    for n, c in zip(shape, cells):
        position = (np.arange(n, dtype=np.float32) + 0.5) / n * c  # (n,) in grid units
        weight = np.exp(-0.5 * ((position[:, None] - np.arange(c + 1)[None, :]) / 0.6) ** 2)  # (n, c + 1)
        weights.append(weight / np.sqrt((weight**2).sum(axis=1, keepdims=True)))  # unit variance everywhere
    return np.einsum("ai,bj,ck,ijk->abc", *weights, grid, optimize=True)


def _bias_field(rng: np.random.Generator, shape: tuple[int, int, int], amplitude: float) -> np.ndarray:
    """A smooth additive field (a random quadratic in the image plane, linear over the slices)."""
    D, H, W = shape
    t = np.linspace(-1, 1, D, dtype=np.float32)[:, None, None]
    y = np.linspace(-1, 1, H, dtype=np.float32)[None, :, None]
    x = np.linspace(-1, 1, W, dtype=np.float32)[None, None, :]
    c = rng.normal(0, amplitude / 2, size=6).astype(np.float32)
    return c[0] * x + c[1] * y + c[2] * x * y + c[3] * (x**2 - 0.5) + c[4] * (y**2 - 0.5) + c[5] * t
