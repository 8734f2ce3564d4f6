"""The geometry of NIfTI volumes: read them (MONAI + nibabel), bring them to one canonical grid, map back.

A case goes file -> RAS -> target spacing -> slice order:

1. read with MONAI's ``LoadImage`` (nibabel reader), channels first: ``(C, X, Y, Z)`` in the file's axis order;
2. ``Orientation("RAS")``: axes flipped and permuted (exactly, no interpolation) so that indices grow towards the
   patient's Right, Anterior, Superior;
3. ``Spacing(target)``: resampled to the target spacing (images linear or cubic, labels nearest neighbour);
4. transposed to ``(C, D, H, W)`` with D the **slice axis**, the RAS axis of the largest target spacing (ties: S,
   then A, then R, so isotropic scans are sliced axially), and H, W the other two in S, A, R order. An axial
   scan comes out as (S, A, R), the (z, y, x) order of the Synapse files, however it was stored.

The :class:`Geometry` of each case records the original grid (shape, affine, orientation), the RAS grid and
the canonical grid, so that :func:`to_original` can map a prediction back: transpose back, resample to the RAS
grid with nearest neighbour (skipped when the spacing did not change, so that the round trip is exact), undo the
reorientation (exact flips and transposes), and :func:`write_label_nifti` writes it with the input's affine.
:func:`probabilities_to_original` maps class probabilities back the same way, so their arg-max is that label map.

Shape legend: ``C`` channels, ``D, H, W`` slices, rows, columns; ``X, Y, Z`` the file's array axes.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
import torch
from monai.data import MetaTensor
from monai.transforms import LoadImage, Orientation, Spacing, SpatialResample

from tasks.medseg.reading.nifti_layout import AFFINE_ATOL, CaseFiles

RAS = ("R", "A", "S")
_RAS_LABELS = (("L", "R"), ("P", "A"), ("I", "S"))  # nibabel's: (negative, positive) end of each world axis
_SLICE_PREFERENCE = (2, 1, 0)  # ties for the slice axis go to S, then A, then R
IMAGE_ORDERS = {1: "bilinear", 3: 3}  # interpolation order -> MONAI Spacing mode ("bilinear" is trilinear in 3D)
# What reading a damaged file raises: nibabel, gzip/zlib, and MONAI's reader wrappers.
_UNREADABLE = (OSError, EOFError, ValueError, RuntimeError, zlib.error, nib.filebasedimages.ImageFileError)


@dataclass(frozen=True)
class Geometry:
    """Where a canonical ``(D, H, W)`` array sits in its original file, enough to map a prediction back."""

    source: tuple[str, ...]  # the image file(s) of the case
    shape: tuple[int, int, int]  # original spatial shape, in the file's array order
    affine: tuple[tuple[float, ...], ...]  # original 4x4 voxel -> RAS+ world (mm)
    orientation: str  # original axis codes, e.g. "LPS"
    ras_shape: tuple[int, int, int]  # after reorientation to RAS, before resampling
    ras_affine: tuple[tuple[float, ...], ...]
    canonical_ras_shape: tuple[int, int, int]  # the resampled RAS grid: the canonical array before its transpose
    canonical_affine: tuple[tuple[float, ...], ...]  # of the resampled RAS grid
    axes: tuple[int, int, int]  # the RAS axis (0 R, 1 A, 2 S) of D, H and W
    spacing: tuple[float, float, float]  # of D, H, W in mm

    @property
    def canonical_shape(self) -> tuple[int, int, int]:
        """(D, H, W) of the canonical array."""
        d, h, w = (self.canonical_ras_shape[a] for a in self.axes)
        return d, h, w

    @property
    def slice_axis(self) -> str:
        """The anatomical axis the slices cut across: "S" (axial), "A" (coronal) or "R" (sagittal)."""
        return RAS[self.axes[0]]

    def to_dict(self) -> dict:
        """A dict of plain values (``json.dumps`` writes its tuples as lists; :meth:`from_dict` reads them back)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> Geometry:
        def tup(value):  # nested lists back to nested tuples
            return tuple(tup(v) for v in value) if isinstance(value, list | tuple) else value

        return cls(**{k: tup(v) for k, v in raw.items()})


def slice_axes(spacing_ras: Sequence[float]) -> tuple[int, int, int]:
    """The RAS axes of (D, H, W): D the largest spacing (ties: S, A, R), then the other two in S, A, R order."""
    largest = max(spacing_ras)
    d = next(a for a in _SLICE_PREFERENCE if spacing_ras[a] == largest)
    h, w = (a for a in _SLICE_PREFERENCE if a != d)
    return d, h, w


def ras_spacing(affine: np.ndarray) -> tuple[float, float, float]:
    """The voxel size (mm) along R, A and S of a grid with this affine, once reoriented to RAS."""
    sizes = nib.affines.voxel_sizes(affine)
    ornt = nib.orientations.io_orientation(affine)  # row i: the world axis and direction of array axis i
    out = [0.0, 0.0, 0.0]
    for axis, (world, _) in enumerate(ornt):
        out[int(world)] = float(sizes[axis])
    return out[0], out[1], out[2]


# ---- reading -----------------------------------------------------------------------------------------------


def read_image(files: CaseFiles) -> MetaTensor:
    """The image of a case as a float32 ``(C, X, Y, Z)`` MetaTensor: channel files stacked, or a 4D file's last axis."""
    parts = [_load(path) for path in files.images]
    if len(parts) == 1:
        return parts[0]
    return MetaTensor(torch.cat([p.as_tensor() for p in parts]), affine=parts[0].affine)  # (C, X, Y, Z)


def read_label(path: Path) -> MetaTensor:
    """A label file as a ``(1, X, Y, Z)`` MetaTensor (values still as stored, as float32)."""
    return _load(path)


def _load(path: Path) -> MetaTensor:
    loader = LoadImage(reader="NibabelReader", image_only=True, ensure_channel_first=True, dtype=np.float32)
    try:
        return loader(str(path))  # (C, X, Y, Z)
    except _UNREADABLE as exc:
        raise ValueError(f"{path}: cannot read its voxel data ({type(exc).__name__}: {_first_line(exc)})") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


# ---- to the canonical grid and back ------------------------------------------------------------------------


def to_canonical(
    image: MetaTensor, label: MetaTensor | None, spacing: Sequence[float], *, image_order: int = 1,
    source: Sequence[str | Path] = (),
) -> tuple[np.ndarray, np.ndarray | None, Geometry]:
    """Reorient to RAS, resample to ``spacing`` and transpose to slice order (see the module docstring).

    Args:
        image: ``(C, X, Y, Z)`` as read by :func:`read_image`.
        label: ``(1, X, Y, Z)`` on the same grid, or None.
        spacing: the target spacing (R, A, S) in mm.
        image_order: 1 (linear) or 3 (cubic spline) for the image; labels are always nearest neighbour.

    Returns:
        ``(image, label, geometry)``: image float32 (C, D, H, W); label uint8 (D, H, W) or None.
    """
    if image_order not in IMAGE_ORDERS:
        raise ValueError(f"image_order must be one of {sorted(IMAGE_ORDERS)} (linear, cubic), got {image_order!r}")
    orient = Orientation(axcodes="RAS", labels=_RAS_LABELS)
    pixdim = [float(s) for s in spacing]
    ras_image = orient(image)
    canonical = Spacing(pixdim=pixdim, mode=IMAGE_ORDERS[image_order], padding_mode="border")(ras_image)
    axes = slice_axes(pixdim)
    order = (0, 1 + axes[0], 1 + axes[1], 1 + axes[2])
    original = image.affine.numpy()
    geometry = Geometry(
        source=tuple(str(s) for s in source), shape=_ints(image.shape[1:]), affine=_rows(original),
        orientation="".join(nib.aff2axcodes(original)), ras_shape=_ints(ras_image.shape[1:]),
        ras_affine=_rows(ras_image.affine.numpy()), canonical_ras_shape=_ints(canonical.shape[1:]),
        canonical_affine=_rows(canonical.affine.numpy()), axes=axes,
        spacing=(pixdim[axes[0]], pixdim[axes[1]], pixdim[axes[2]]),
    )
    image_out = np.ascontiguousarray(canonical.numpy().transpose(order), dtype=np.float32)  # (C, D, H, W)
    if label is None:
        return image_out, None, geometry
    ras_label = Spacing(pixdim=pixdim, mode="nearest", padding_mode="border")(orient(label))
    same_affine = np.allclose(ras_label.affine, canonical.affine, atol=AFFINE_ATOL)
    if ras_label.shape[1:] != canonical.shape[1:] or not same_affine:
        raise ValueError(f"{geometry.source[0] if geometry.source else 'label'}: the label resampled to another "
                         f"grid than its image ({tuple(ras_label.shape[1:])} vs {tuple(canonical.shape[1:])})")
    label_out = np.rint(ras_label.numpy()[0].transpose(axes)).astype(np.uint8)  # (D, H, W)
    return image_out, np.ascontiguousarray(label_out), geometry


def to_original(label: np.ndarray, geometry: Geometry) -> np.ndarray:
    """Map a canonical ``(D, H, W)`` label map back onto the original file's grid (nearest neighbour).

    Returns:
        uint8 array of exactly ``geometry.shape``, in the original file's axis order and orientation.
    """
    label = np.asarray(label)
    if label.shape != geometry.canonical_shape:
        raise ValueError(f"label must be the canonical (D, H, W) {geometry.canonical_shape} of "
                         f"{geometry.source[0] if geometry.source else 'its case'}, got {label.shape}")
    return np.ascontiguousarray(np.rint(_channels_to_original(label[None], geometry)[0])).astype(np.uint8)


def probabilities_to_original(probabilities: np.ndarray, geometry: Geometry) -> np.ndarray:
    """Map canonical class probabilities back onto the original file's grid, voxel for voxel as :func:`to_original`
    maps their arg-max (the same nearest-neighbour resampling and flips: every original voxel takes the whole
    probability vector of the canonical voxel its label comes from), so that their arg-max is the label map there.

    Shape:
        (K, D, H, W) canonical -> (K, X, Y, Z) float32, ``geometry.shape`` in the file's axis order.
    """
    probabilities = np.asarray(probabilities)
    if probabilities.ndim != 4 or probabilities.shape[1:] != geometry.canonical_shape:
        raise ValueError(f"probabilities must be (K, D, H, W) with (D, H, W) the canonical {geometry.canonical_shape} "
                         f"of {geometry.source[0] if geometry.source else 'its case'}, got {probabilities.shape}")
    return _channels_to_original(probabilities, geometry)


def _channels_to_original(array: np.ndarray, geometry: Geometry) -> np.ndarray:
    """Transpose back to RAS, resample to the RAS grid with nearest neighbour (skipped when the spacing did not
    change), undo the reorientation. Shape: (C, D, H, W) canonical -> (C, X, Y, Z) float32."""
    inverse = np.argsort((0, *(1 + a for a in geometry.axes)))  # (C, D, H, W) -> (C, R, A, S)
    ras = np.transpose(array.astype(np.float32), inverse)  # (C, R, A, S) on the canonical grid
    canonical_affine, ras_affine = np.asarray(geometry.canonical_affine), np.asarray(geometry.ras_affine)
    if ras.shape[1:] != tuple(geometry.ras_shape) or not np.allclose(canonical_affine, ras_affine, atol=AFFINE_ATOL):
        resample = SpatialResample(mode="nearest", padding_mode="border")
        moving = MetaTensor(torch.from_numpy(np.ascontiguousarray(ras)), affine=torch.from_numpy(canonical_affine))
        ras = resample(moving, dst_affine=torch.from_numpy(ras_affine), spatial_size=list(geometry.ras_shape)).numpy()
    ras_ornt = nib.orientations.axcodes2ornt(RAS)
    back = nib.orientations.ornt_transform(ras_ornt, nib.orientations.io_orientation(np.asarray(geometry.affine)))
    out = np.moveaxis(nib.orientations.apply_orientation(np.moveaxis(ras, 0, -1), back), -1, 0)  # (C, X, Y, Z)
    if out.shape[1:] != tuple(geometry.shape):
        raise RuntimeError(f"mapped back to {out.shape[1:]}, expected {geometry.shape}: inconsistent geometry record")
    return np.ascontiguousarray(out, dtype=np.float32)


def write_label_nifti(path: str | Path, label: np.ndarray, geometry: Geometry) -> Path:
    """Write a label map on the original grid (see :func:`to_original`) as NIfTI with the input's affine.

    Both the qform and the sform hold the affine (code 1, scanner), so tools reading either agree.
    """
    path = Path(path)
    label = np.asarray(label)
    if label.shape != tuple(geometry.shape):
        hint = "; map it back with to_original() first" if label.shape == geometry.canonical_shape else ""
        raise ValueError(f"label for {path.name} is {label.shape}, not the original grid {geometry.shape}{hint}")
    return save_label(path, label, np.asarray(geometry.affine))


def save_label(path: str | Path, label: np.ndarray, affine: np.ndarray) -> Path:
    """Write a uint8 label map with ``affine`` in both the qform and the sform (code 1, scanner)."""
    path = Path(path)
    affine = np.asarray(affine, dtype=np.float64)
    image = nib.Nifti1Image(np.asarray(label).astype(np.uint8), affine)
    image.set_qform(affine, code=1)
    image.set_sform(affine, code=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(image, path)
    return path


def _ints(shape: Sequence[int]) -> tuple[int, int, int]:
    a, b, c = (int(n) for n in shape)
    return a, b, c


def _rows(matrix: np.ndarray) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in np.asarray(matrix, dtype=np.float64))
