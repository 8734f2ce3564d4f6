"""Per-organ 3D Dice and HD95 under two declared conventions.

``"papers"`` reproduces the evaluation code of the Synapse papers (TransUNet, Swin-Unet, MISSFormer:
``test_single_volume`` -> ``calculate_metric_percase`` -> medpy's ``binary.dc`` and ``binary.hd95`` with no
voxel spacing). Its HD95 is in voxels, pools the surface distances of both directions before taking the
95th percentile, and scores the empty-mask cases with the papers' rules: a prediction of an organ that is
absent from the ground truth scores (Dice 1, HD95 0); an empty prediction scores (0, 0), even when the
organ is absent too.

``"mm"`` is the honest variant: distances in millimetres from the voxel spacing, the same pooled
percentile, an organ absent from both masks is left out of the averages (NaN), and a missed organ or a
false positive scores Dice 0 and the volume's diagonal as HD95 (the worst distance the volume allows).

MONAI's ``HausdorffDistanceMetric(percentile=95)`` takes the percentile of each direction and then the
maximum (``hd95(..., pooled=False)`` here) and gives NaN/inf on empty masks, so it does not reproduce the
papers' figures; its ``DiceMetric`` does.

Normalised surface Dice (NSD, :func:`normalised_surface_dice`) belongs to the ``"mm"`` convention only: a tolerance
in millimetres means nothing without the spacing, and the Synapse papers report none. Its empty-mask rules are the
ones DeepMind's ``surface-distance`` and MONAI's ``compute_surface_dice`` follow (:data:`NSD_RULES`).

Shape legend: ``D, H, W`` slices, rows, columns of a volume; ``K`` classes including background 0;
``S`` surface voxels.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import ndimage

from plumbing.errors import check_number, unknown_name

CONVENTIONS = {
    "papers": "Synapse papers' code (medpy dc/hd95): HD95 in voxels without spacing, surface distances of both "
              "directions pooled before the 95th percentile; organ absent but predicted -> (Dice 1, HD95 0), "
              "empty prediction -> (0, 0)",
    "mm": "spacing-aware: HD95 in mm, both directions pooled before the 95th percentile; organ absent from both "
          "masks -> left out of the averages; missed organ or false positive -> Dice 0, HD95 = volume diagonal",
}
STATUSES = ("present", "absent", "missed", "false positive")
NSD_RULES = ("normalised surface Dice (Nikolov et al. 2021; DeepMind's surface-distance): the share of both surfaces' "
             "area within the tolerance of the other surface, on the voxel spacing; organ absent from both masks -> "
             "left out of the averages; missed organ or false positive -> 0")


def _check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise unknown_name("HD95/Dice convention", convention, CONVENTIONS)


def check_nsd_tolerance(tolerance: float) -> float:
    """``tolerance`` as a float, or a one-line error: NSD counts surface within ``tolerance`` mm, so it must be > 0."""
    check_number("nsd_tolerance", tolerance, 0, low_open=True,
                 hint="the distance in mm within which two surfaces agree; e.g. --nsd-tolerance 1")
    return float(tolerance)


def _check_same_shape(pred: np.ndarray, gt: np.ndarray) -> None:
    if pred.shape != gt.shape:
        raise ValueError(f"pred and gt must have the same shape, got pred {pred.shape} and gt {gt.shape}")


def resolve_spacing(spacing: Sequence[float] | None, ndim: int) -> tuple[tuple[float, ...], bool]:
    """The voxel spacing as ``ndim`` positive floats, and whether it was assumed (1 per axis, ``spacing=None``).

    The flag lets a report say "HD95 in voxels, 1 mm assumed" instead of passing voxels off as millimetres.

    Shape:
        spacing (ndim,) in the axis order of the array, e.g. (z, y, x) for a (D, H, W) volume.
    """
    if spacing is None:
        return (1.0,) * ndim, True
    values = tuple(float(s) for s in np.atleast_1d(np.asarray(spacing, dtype=float)))
    if len(values) != ndim:
        raise ValueError(f"spacing must have one value per axis ({ndim}), got {spacing!r}")
    if not all(math.isfinite(s) and s > 0 for s in values):
        raise ValueError(f"spacing must be positive and finite, got {spacing!r}")
    return values, False


def dice(pred: np.ndarray, gt: np.ndarray) -> float:
    """Dice coefficient 2|A∩B| / (|A| + |B|) of two boolean masks; NaN when both are empty (undefined).

    The conventions' empty-mask rules live in :func:`organ_scores`, not here.

    Shape:
        pred, gt (*) same shape, any dimensionality; nonzero = inside.
    """
    pred, gt = np.asarray(pred, dtype=bool), np.asarray(gt, dtype=bool)
    _check_same_shape(pred, gt)
    total = int(np.count_nonzero(pred)) + int(np.count_nonzero(gt))
    if total == 0:
        return math.nan
    return 2.0 * int(np.count_nonzero(pred & gt)) / total


def _crop_to_union(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both masks cut to the bounding box of their union plus one voxel where the array allows.

    Exact, only faster: every surface voxel of either mask lies inside the box, so the distance transform
    finds the same nearest voxels; the one-voxel margin of background keeps the erosion at the box edge what
    it was, and where the box meets the array edge the erosion sees the same border as before.
    """
    box = ndimage.find_objects((a | b).astype(np.uint8))[0]
    box = tuple(slice(max(s.start - 1, 0), min(s.stop + 1, n)) for s, n in zip(box, a.shape))
    return a[box], b[box]


def _surface(mask: np.ndarray) -> np.ndarray:
    """The voxels of ``mask`` with a face-neighbour outside it: mask XOR its erosion (connectivity 1).

    As in medpy, the erosion treats everything beyond the array edge as background (scipy's default
    ``border_value=0``), so a mask touching the edge has its edge voxels on the surface.
    """
    structure = ndimage.generate_binary_structure(mask.ndim, 1)
    return mask ^ ndimage.binary_erosion(mask, structure=structure)


def _directed_distances(a: np.ndarray, b: np.ndarray, spacing: Sequence[float] | None
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Distances from a's surface voxels to b's surface, and from b's to a's.

    Shape:
        a, b (*) non-empty boolean masks -> (S_a,), (S_b,) float64.
    """
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    _check_same_shape(a, b)
    sampling, _ = resolve_spacing(spacing, a.ndim)
    for name, mask in (("a", a), ("b", b)):
        if not mask.any():
            raise ValueError(f"surface distances need two non-empty masks; mask {name} is empty "
                             "(organ_scores applies each convention's empty-mask rule)")
    a, b = _crop_to_union(a, b)
    surface_a, surface_b = _surface(a), _surface(b)
    # The distance transform measures the distance to the nearest zero, so the target surface is the zero set.
    a_to_b = ndimage.distance_transform_edt(~surface_b, sampling=sampling)[surface_a]
    b_to_a = ndimage.distance_transform_edt(~surface_a, sampling=sampling)[surface_b]
    return a_to_b, b_to_a


def surface_distances(a: np.ndarray, b: np.ndarray, spacing: Sequence[float] | None = None) -> np.ndarray:
    """The distance from each surface voxel of ``a`` to the nearest surface voxel of ``b`` (medpy's definition).

    Args:
        a, b: non-empty masks of the same shape; nonzero = inside.
        spacing: voxel size per axis (e.g. mm as (z, y, x)); ``None`` measures in voxels.

    Shape:
        a, b (*) -> (S_a,) float64, in the order of a's surface voxels in C order.
    """
    return _directed_distances(a, b, spacing)[0]


def hd95(pred: np.ndarray, gt: np.ndarray, spacing: Sequence[float] | None = None, pooled: bool = True) -> float:
    """95th percentile Hausdorff distance between two non-empty masks.

    Args:
        pred, gt: non-empty masks of the same shape.
        spacing: voxel size per axis; ``None`` measures in voxels (the papers' choice).
        pooled: ``True`` (medpy, the papers): the distances of both directions are concatenated before the
            95th percentile. ``False`` (MONAI's ``HausdorffDistanceMetric(percentile=95)``): the 95th
            percentile of each direction, then the larger of the two. Both use numpy's linear interpolation.

    Shape:
        pred, gt (*) same shape, any dimensionality.
    """
    pred_to_gt, gt_to_pred = _directed_distances(pred, gt, spacing)
    if pooled:
        return float(np.percentile(np.concatenate([pred_to_gt, gt_to_pred]), 95))
    return float(max(np.percentile(pred_to_gt, 95), np.percentile(gt_to_pred, 95)))


def diagonal(shape: Sequence[int], spacing: Sequence[float] | None = None) -> float:
    """The largest distance between two voxel centres of a volume: the "mm" convention's penalty."""
    sampling, _ = resolve_spacing(spacing, len(shape))
    return float(math.sqrt(sum(((n - 1) * s) ** 2 for n, s in zip(shape, sampling))))


def normalised_surface_dice(pred: np.ndarray, gt: np.ndarray, tolerance: float,
                            spacing: Sequence[float] | None = None) -> float:
    """Normalised surface Dice of two masks at ``tolerance`` mm: the area of both surfaces lying within
    ``tolerance`` of the other surface, over the area of both (Nikolov et al. 2021, "Clinically applicable
    segmentation of head and neck anatomy for radiotherapy"; the MSD and FLARE challenges' NSD).

    The surface is DeepMind's ``surface-distance`` one: a surface element per 2×2×2 block of voxels (2×2 in 2D)
    that is neither all inside nor all outside, weighted by its area in mm² (length in mm in 2D) for the spacing.
    MONAI's ``compute_surface_dice`` counts edge voxels by default, which on an anisotropic grid weighs a voxel on a
    slice face as much as one on a side face several times its area (0.615 where DeepMind's NSD is 0.738 on the
    3 × 0.8 × 0.7 mm ellipsoids of ``tests/tasks/medseg/test_medseg_nsd.py``, at 1 mm). With
    ``use_subvoxels=True`` it weighs by area, but rounds the distances to float32 before comparing them with the
    tolerance, so a distance just above it counts as within (on that grid at 2.5 mm: surfels sqrt(2.4² + 0.7²) mm
    apart, 2.5000000000000004 in float64). Here the areas come from MONAI's copy of DeepMind's table (float32 in
    3D) and the distances are float64 (:func:`_distances_at`), evaluated at the surface elements of each organ's box.

    Empty masks (:data:`NSD_RULES`): both empty -> NaN (nothing to score; left out of the averages); one empty ->
    0 (no surface lies near a surface that is not there), as in DeepMind's package and MONAI.

    Args:
        pred, gt: masks of the same shape, 2D or 3D; nonzero = inside.
        tolerance: the distance in mm within which two surfaces agree, > 0.
        spacing: voxel size per axis in mm, in the arrays' axis order; ``None``: 1 per axis (voxels).

    Shape:
        pred, gt (D, H, W) or (H, W); spacing (z, y, x) or (y, x).
    """
    tolerance = check_nsd_tolerance(tolerance)
    pred, gt = np.asarray(pred, dtype=bool), np.asarray(gt, dtype=bool)
    _check_same_shape(pred, gt)
    if pred.ndim not in (2, 3):
        raise ValueError(f"normalised surface Dice takes 2D or 3D masks, got {pred.ndim}D of shape {pred.shape}")
    sampling, _ = resolve_spacing(spacing, pred.ndim)
    in_pred, in_gt = bool(pred.any()), bool(gt.any())
    if not (in_pred and in_gt):
        return 0.0 if in_pred or in_gt else math.nan
    return _surface_dice(*_crop_to_union(pred, gt), sampling, tolerance)


def _surface_dice(pred: np.ndarray, gt: np.ndarray, sampling: tuple[float, ...], tolerance: float) -> float:
    """:func:`normalised_surface_dice` of two non-empty masks (cropped or not: the result is the same)."""
    (border_pred, area_pred), (border_gt, area_gt) = _surfels(pred, sampling), _surfels(gt, sampling)
    near_pred = _distances_at(border_pred, border_gt, sampling) <= tolerance  # (S_pred,)
    near_gt = _distances_at(border_gt, border_pred, sampling) <= tolerance  # (S_gt,)
    return float((area_pred[near_pred].sum() + area_gt[near_gt].sum()) / (area_pred.sum() + area_gt.sum()))


def _surfels(mask: np.ndarray, sampling: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """DeepMind's surface elements of ``mask``: on the grid of voxel corners, the 2×2(×2) blocks neither all inside
    nor all outside, and each one's area (mm², 3D) or length (mm, 2D) from its neighbour code.

    The mask is padded with one voxel of background on every side (beyond the array is outside, as for HD95), so
    the blocks straddling the edge are counted too.

    Shape:
        mask (*) bool -> border (* + 1 per axis) bool, areas (S,) float64 in the border's C order.
    """
    from monai.metrics.utils import get_code_to_measure_table

    table, kernel = get_code_to_measure_table(sampling)  # (2^(2^ndim),), (1, 1, 2, ...) neighbour-code weights
    weights, padded = kernel[0, 0].numpy(), np.pad(mask, 1).astype(np.int32)
    codes = np.zeros([n - 1 for n in padded.shape], np.int32)  # (* + 1): one code per corner
    for offset in np.ndindex(weights.shape):  # the same correlation as MONAI's convolution with its kernel
        codes += int(weights[offset]) * padded[tuple(slice(o, o + n) for o, n in zip(offset, codes.shape))]
    border = (codes != 0) & (codes != int(weights.sum()))
    return border, table.double().numpy()[codes[border]]


def organ_scores(pred: np.ndarray, gt: np.ndarray, convention: str = "papers",
                 spacing: Sequence[float] | None = None) -> tuple[float, float]:
    """(Dice, HD95) of one organ's masks with the convention's empty-mask rules.

    The "papers" convention measures in voxels whatever ``spacing`` says (it is accepted so that a caller
    can pass the same arguments for both conventions). Under "mm", ``spacing=None`` means 1 mm per voxel:
    see :func:`resolve_spacing` for the flag a report should show.

    Shape:
        pred, gt (*) boolean masks of the same shape.
    """
    _check_convention(convention)
    pred, gt = np.asarray(pred, dtype=bool), np.asarray(gt, dtype=bool)
    _check_same_shape(pred, gt)
    resolve_spacing(spacing, pred.ndim)  # validated under both conventions, before any early return
    in_pred, in_gt = bool(pred.any()), bool(gt.any())
    if convention == "papers":
        if in_pred and in_gt:
            return dice(pred, gt), hd95(pred, gt)
        # calculate_metric_percase: a prediction without ground truth is rewarded, an empty one scores 0.
        return (1.0, 0.0) if in_pred else (0.0, 0.0)
    if in_pred and in_gt:
        return dice(pred, gt), hd95(pred, gt, spacing)
    if not in_pred and not in_gt:
        return math.nan, math.nan
    return 0.0, diagonal(pred.shape, spacing)


def _check_label_volume(name: str, volume: np.ndarray, num_classes: int) -> None:
    if volume.dtype == bool or not np.issubdtype(volume.dtype, np.integer):
        raise ValueError(f"{name} must be an integer label volume, got dtype {volume.dtype}")
    if volume.size:
        low, high = int(volume.min()), int(volume.max())
        if low < 0 or high >= num_classes:
            bad = low if low < 0 else high
            raise ValueError(f"{name} holds label {bad}, outside 0..{num_classes - 1} (num_classes={num_classes})")


def _check_labels(pred: np.ndarray, gt: np.ndarray, num_classes: int) -> None:
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
        raise ValueError(f"num_classes must be an int >= 2 (background + organs), got {num_classes!r}")
    _check_same_shape(pred, gt)
    _check_label_volume("pred", pred, num_classes)
    _check_label_volume("gt", gt, num_classes)


def case_scores(pred: np.ndarray, gt: np.ndarray, num_classes: int, convention: str = "papers",
                spacing: Sequence[float] | None = None) -> dict[int, tuple[float, float]]:
    """(Dice, HD95) of every organ 1..K-1 of one case, as the papers' ``test_single_volume`` lists them.

    Shape:
        pred, gt (D, H, W) integer labels in 0..K-1 (any dimensionality works); spacing (z, y, x).
    """
    _check_convention(convention)
    pred, gt = np.asarray(pred), np.asarray(gt)
    _check_labels(pred, gt, num_classes)
    resolve_spacing(spacing, pred.ndim)
    return {k: organ_scores(pred == k, gt == k, convention, spacing) for k in range(1, num_classes)}


def case_scores_per_convention(pred: np.ndarray, gt: np.ndarray, num_classes: int,
                               spacing: Sequence[float] | None = None, nsd_tolerance: float | None = None
                               ) -> dict[str, dict[int, tuple[float, ...]]]:
    """:func:`case_scores` of every convention at once, the same numbers with each piece of work done once.

    :func:`case_scores` called per convention compares the label volumes, takes the Dice, crops and finds the
    surfaces of each organ once per convention, and runs two full distance transforms each time. Here each
    organ's masks, Dice and surfaces come once, from its bounding box only (one ``find_objects`` pass per
    volume instead of a full-volume comparison per organ); the distances in voxels (the papers') are computed
    once, and the millimetre ones once more only where the spacing is known and not 1 per axis (otherwise
    they are the same numbers); and each distance transform is evaluated at the surface voxels only.
    ``tests/tasks/medseg/test_medseg_eval_once.py`` checks the results equal :func:`case_scores`' exactly.

    With ``nsd_tolerance`` (mm), the ``"mm"`` scores gain a third value, the organ's
    :func:`normalised_surface_dice` on the same box, with :data:`NSD_RULES` for empty masks.

    Returns:
        ``{convention: {organ k: (Dice, HD95)}}`` for every convention in :data:`CONVENTIONS`; under ``"mm"``
        ``(Dice, HD95, NSD)`` when ``nsd_tolerance`` is given.

    Shape:
        pred, gt (D, H, W) integer labels in 0..K-1 (any dimensionality works); spacing (z, y, x).
    """
    pred, gt = np.asarray(pred), np.asarray(gt)
    _check_labels(pred, gt, num_classes)
    sampling, _ = resolve_spacing(spacing, pred.ndim)
    if nsd_tolerance is not None:
        nsd_tolerance = check_nsd_tolerance(nsd_tolerance)
    voxels = (1.0,) * pred.ndim
    boxes = [ndimage.find_objects(volume, max_label=num_classes - 1) for volume in (pred, gt)]  # organ k at k - 1
    scores: dict[str, dict[int, tuple[float, ...]]] = {name: {} for name in CONVENTIONS}
    for k in range(1, num_classes):
        in_box = [volume_boxes[k - 1] for volume_boxes in boxes]  # None: organ k absent from that volume
        if in_box[0] is None or in_box[1] is None:
            papers = (1.0, 0.0) if in_box[0] is not None else (0.0, 0.0)
            mm = (math.nan, math.nan) if in_box == [None, None] else (0.0, diagonal(pred.shape, spacing))
            if nsd_tolerance is not None:  # NSD_RULES: NaN with both masks empty, 0 with one
                mm += (mm[0],)
            scores["papers"][k], scores["mm"][k] = papers, mm
            continue
        # the union of both boxes plus one voxel, as _crop_to_union cuts: the same arrays, hence the same numbers
        box = tuple(slice(max(min(a.start, b.start) - 1, 0), min(max(a.stop, b.stop) + 1, n))
                    for a, b, n in zip(*in_box, pred.shape))
        a, b = pred[box] == k, gt[box] == k
        overlap = 2.0 * int(np.count_nonzero(a & b)) / (int(np.count_nonzero(a)) + int(np.count_nonzero(b)))
        surface_a, surface_b = _surface(a), _surface(b)
        hd = [_pooled_hd95(surface_a, surface_b, voxels)]
        hd.append(hd[0] if sampling == voxels else _pooled_hd95(surface_a, surface_b, sampling))
        nsd = () if nsd_tolerance is None else (_surface_dice(a, b, sampling, nsd_tolerance),)
        scores["papers"][k], scores["mm"][k] = (overlap, hd[0]), (overlap, hd[1], *nsd)
    return scores


def _pooled_hd95(surface_a: np.ndarray, surface_b: np.ndarray, sampling: tuple[float, ...]) -> float:
    """The pooled 95th percentile of both directions' surface distances, as :func:`hd95` computes it."""
    distances = (_distances_at(surface_a, surface_b, sampling), _distances_at(surface_b, surface_a, sampling))
    return float(np.percentile(np.concatenate(distances), 95))


def _distances_at(source: np.ndarray, target: np.ndarray, sampling: tuple[float, ...]) -> np.ndarray:
    """``distance_transform_edt(~target, sampling)[source]``, with the distances computed at ``source``'s voxels
    only: scipy's nearest-voxel (feature) transform over the whole box, then its own formula,
    sqrt(Σ_axis (Δ_axis · sampling_axis)²) in float64, axis by axis in order, so the values are the same bits.

    Shape:
        source, target (*) boolean masks of the same shape -> (S_source,) float64, in C order.
    """
    nearest = ndimage.distance_transform_edt(~target, sampling=sampling, return_distances=False,
                                             return_indices=True)  # (ndim, *) int32
    where = np.nonzero(source)  # ndim index arrays, C order like boolean indexing
    delta = np.stack([nearest[axis][where] - where[axis] for axis in range(source.ndim)]).astype(np.float64)
    delta *= np.asarray(sampling, dtype=np.float64)[:, None]  # (ndim, S)
    np.multiply(delta, delta, delta)
    return np.sqrt(np.add.reduce(delta, axis=0))


def case_status(pred: np.ndarray, gt: np.ndarray, num_classes: int) -> dict[int, str]:
    """Which empty-mask case each organ 1..K-1 falls in: one of :data:`STATUSES`.

    "present" (in the ground truth and the prediction), "absent" (in neither), "missed" (ground truth only),
    "false positive" (prediction only). :func:`summarise` counts them so a report can say how many scores
    came from a rule rather than from a measurement.

    Shape:
        pred, gt (D, H, W) integer labels in 0..K-1.
    """
    pred, gt = np.asarray(pred), np.asarray(gt)
    _check_labels(pred, gt, num_classes)
    in_pred = np.bincount(pred.ravel(), minlength=num_classes) > 0  # (K,)
    in_gt = np.bincount(gt.ravel(), minlength=num_classes) > 0  # (K,)
    return {k: organ_status(bool(in_pred[k]), bool(in_gt[k])) for k in range(1, num_classes)}


def organ_status(in_pred: bool, in_gt: bool) -> str:
    """The :data:`STATUSES` entry of an organ found (or not) in the prediction and in the ground truth."""
    return {(True, True): "present", (False, False): "absent", (False, True): "missed",
            (True, False): "false positive"}[in_pred, in_gt]


def _json_float(value: float) -> float | None:
    """NaN (nothing to average) becomes ``None``, which JSON can hold."""
    return None if value is None or math.isnan(value) else float(value)


def summarise(per_case: dict[str, dict[int, tuple[float, ...]]], class_names: list[str], convention: str,
              status: dict[str, dict[int, str]] | None = None, spacing_assumed: bool = False,
              nsd_tolerance: float | None = None) -> dict:
    """Mean Dice and HD95 (and NSD) per organ over the cases, then over the organs (the papers' order), and per case.

    Under "mm" the means skip NaN (organ absent from both masks); an organ absent from every case gets
    ``None`` and is left out of the mean over organs. The result is JSON-ready (NaN -> ``None``).

    Args:
        per_case: case name -> :func:`case_scores` output: (Dice, HD95) per organ, or (Dice, HD95, NSD) with
            ``nsd_tolerance``.
        class_names: names of all K classes, background first; organ k is ``class_names[k]``.
        convention: the convention the scores were computed with (recorded in the result).
        status: optional case name -> :func:`case_status` output, counted per organ.
        spacing_assumed: ``True`` when "mm" scores were computed without a known spacing (1 mm assumed).
        nsd_tolerance: the NSD's tolerance in mm, when the scores hold one ("mm" only, as
            :func:`case_scores_per_convention` gives it).

    Returns:
        ``{"convention", "description", "hd95_unit", "spacing_assumed", "mean_dice", "mean_hd95",
        "organs": [{"organ", "index", "dice", "hd95", "scored", and with ``status`` one count per status}],
        "cases": [{"case", "dice", "hd95"}]}``; "scored" counts the cases with a number for the organ. With
        ``nsd_tolerance`` also "nsd_tolerance_mm", "nsd_rules" (:data:`NSD_RULES`), "mean_nsd" and an "nsd" in
        every organ and case row.
    """
    _check_convention(convention)
    if not per_case:
        raise ValueError("per_case is empty: no case to summarise")
    width = 2
    if nsd_tolerance is not None:
        if convention != "mm":
            raise ValueError(f"NSD is scored under the 'mm' convention only (it needs the spacing), not under "
                             f"{convention!r}; pass nsd_tolerance=None for it")
        nsd_tolerance, width = check_nsd_tolerance(nsd_tolerance), 3
    organs = sorted({k for scores in per_case.values() for k in scores})
    for k in organs:
        if not 1 <= k < len(class_names):
            raise ValueError(f"organ index {k} has no name in class_names of length {len(class_names)} "
                             "(background first, organ k at position k)")
    cases = list(per_case)
    # (cases, organs, width); an organ missing from a case's dict counts as not scored.
    table = np.array([[per_case[c].get(k, (math.nan,) * width)[:width] for k in organs] for c in cases], dtype=float)
    with warnings.catch_warnings():  # an organ absent from every case is expected: it becomes None
        warnings.simplefilter("ignore", category=RuntimeWarning)
        organ_means = np.nanmean(table, axis=0)  # (organs, width): over the cases first, as the papers do
        overall = np.nanmean(organ_means, axis=0)  # (width,): then over the organs
        case_means = np.nanmean(table, axis=1)  # (cases, width)
    organ_rows = []
    for j, k in enumerate(organs):
        row = {"organ": class_names[k], "index": k, "dice": _json_float(organ_means[j, 0]),
               "hd95": _json_float(organ_means[j, 1]), "scored": int(np.sum(~np.isnan(table[:, j, 0])))}
        if width == 3:
            row["nsd"] = _json_float(organ_means[j, 2])
        if status is not None:
            seen = [status[c][k] for c in cases if c in status and k in status[c]]
            row.update({s: seen.count(s) for s in STATUSES})
        organ_rows.append(row)
    case_rows = [{"case": c, "dice": _json_float(case_means[i, 0]), "hd95": _json_float(case_means[i, 1])}
                 for i, c in enumerate(cases)]
    nsd: dict[str, Any] = {}
    if width == 3:
        nsd = {"nsd_tolerance_mm": nsd_tolerance, "nsd_rules": NSD_RULES, "mean_nsd": _json_float(overall[2])}
        for i, row in enumerate(case_rows):
            row["nsd"] = _json_float(case_means[i, 2])
    return {
        "convention": convention,
        "description": CONVENTIONS[convention],
        "hd95_unit": "voxels" if convention == "papers" else "voxels (1 mm assumed)" if spacing_assumed else "mm",
        "spacing_assumed": bool(spacing_assumed and convention == "mm"),
        "mean_dice": _json_float(overall[0]),
        "mean_hd95": _json_float(overall[1]),
        **nsd,
        "organs": organ_rows,
        "cases": case_rows,
    }

