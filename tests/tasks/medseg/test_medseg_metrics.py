"""Medical segmentation metrics (the papers' and the mm convention) and the report's tables and figure."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch

from plumbing.tables import markdown_table
from tasks.medseg.evaluation.metrics import (
    CONVENTIONS,
    case_scores,
    case_status,
    diagonal,
    dice,
    hd95,
    organ_scores,
    summarise,
    surface_distances,
)
from tasks.medseg.evaluation.report import case_table, organ_table, pick_overlay_slices, plot_overlays

NAMES = ["background", "aorta", "gallbladder", "kidney"]


def ellipsoid(shape: tuple[int, ...], centre: tuple[float, ...], radii: tuple[float, ...]) -> np.ndarray:
    grids = np.ogrid[tuple(slice(0, n) for n in shape)]
    return sum(((g - c) / r) ** 2 for g, c, r in zip(grids, centre, radii)) <= 1


def medpy_pair_3d() -> tuple[np.ndarray, np.ndarray]:
    """Two overlapping ellipsoids, the prediction with a stray block touching the array's edge."""
    gt = ellipsoid((12, 20, 20), (5, 9, 10), (4, 6, 7))
    pred = ellipsoid((12, 20, 20), (6, 10, 9), (5, 5, 8))
    pred[0:2, 0:3, 17:20] = True
    return pred, gt


def medpy_pair_2d() -> tuple[np.ndarray, np.ndarray]:
    gt = ellipsoid((16, 16), (7, 8), (5, 6))
    pred = np.zeros((16, 16), bool)
    pred[3:12, 4:15] = True
    pred[15, 0] = True
    return pred, gt


def pixels(shape: tuple[int, ...], *points: tuple[int, ...]) -> np.ndarray:
    mask = np.zeros(shape, bool)
    for p in points:
        mask[p] = True
    return mask


# --- HD95 on hand-computed cases ------------------------------------------------------------------------


def test_single_voxels_2d_and_3d():
    a, b = pixels((6, 6), (0, 0)), pixels((6, 6), (3, 4))
    assert surface_distances(a, b).tolist() == [5.0]
    assert hd95(a, b) == hd95(a, b, pooled=False) == 5.0
    a, b = pixels((3, 4, 7), (0, 0, 0)), pixels((3, 4, 7), (2, 3, 6))
    assert hd95(a, b) == 7.0
    # spacing (z, y, x) scales each axis: sqrt((2*2)^2 + (3*1)^2 + (6*0.5)^2) = sqrt(34)
    assert hd95(a, b, spacing=(2.0, 1.0, 0.5)) == pytest.approx(math.sqrt(34))
    assert hd95(a, b, spacing=(2.0, 2.0, 2.0)) == pytest.approx(14.0)


def test_pooled_and_per_direction_percentiles_differ_as_hand_computed():
    # One-pixel-thick masks are all surface, so the distances can be listed by hand.
    gt = pixels((3, 12), (1, 0), (1, 1))
    pred = pixels((3, 12), (1, 0), (1, 1), (1, 10))
    pred_to_gt, gt_to_pred = [0.0, 0.0, 9.0], [0.0, 0.0]
    assert surface_distances(pred, gt).tolist() == pred_to_gt
    assert surface_distances(gt, pred).tolist() == gt_to_pred
    pooled = np.percentile(pred_to_gt + gt_to_pred, 95)  # sorted [0, 0, 0, 0, 9]: 0.8 * 9
    per_direction = max(np.percentile(pred_to_gt, 95), np.percentile(gt_to_pred, 95))  # 0.9 * 9
    assert (pooled, per_direction) == pytest.approx((7.2, 8.1))
    assert hd95(pred, gt) == pytest.approx(7.2)
    assert hd95(pred, gt, pooled=False) == pytest.approx(8.1)


def test_surface_is_mask_minus_its_face_erosion_with_background_beyond_the_edge():
    inner = np.zeros((5, 5, 5), bool)
    inner[1:4, 1:4, 1:4] = True  # 27 voxels, the centre has all 6 face neighbours inside
    assert len(surface_distances(inner, inner)) == 26
    full = np.ones((3, 3, 3), bool)  # touches every edge: as in medpy, beyond the edge counts as outside
    assert len(surface_distances(full, full)) == 26
    # A 3x3 square in 2D: connectivity 1 keeps only the centre inside, so 8 surface pixels.
    square = pixels((5, 5), *[(i, j) for i in range(1, 4) for j in range(1, 4)])
    assert np.all(surface_distances(square, square) == 0) and len(surface_distances(square, square)) == 8


@pytest.mark.parametrize("pair, expected", [
    # values from medpy 0.5.2 metric.binary.dc / hd95 (hd95 with voxelspacing for the third number)
    (medpy_pair_3d, (0.7239101717305152, 2.438818654518994, 3.8040477823963093, (2.5, 0.8, 0.8))),
    (medpy_pair_2d, (0.8691099476439791, 1.8828427124746174, 1.5, (1.5, 0.7))),
])
def test_matches_medpy_recorded_values(pair, expected):
    pred, gt = pair()
    dc, hd, hd_spaced, spacing = expected
    assert dice(pred, gt) == pytest.approx(dc, rel=1e-12)
    assert hd95(pred, gt) == pytest.approx(hd, rel=1e-12)
    assert hd95(pred, gt, spacing=spacing) == pytest.approx(hd_spaced, rel=1e-12)


def test_monai_hausdorff_95_is_our_per_direction_variant_not_the_papers():
    from monai.metrics import HausdorffDistanceMetric

    pred, gt = medpy_pair_3d()
    metric = HausdorffDistanceMetric(percentile=95)
    as_tensor = lambda mask: torch.from_numpy(mask)[None, None].float()  # noqa: E731  (B, C, D, H, W)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # MONAI's own deprecated argument, not ours
        monai_value = float(metric(as_tensor(pred), as_tensor(gt)))
    # MONAI returns float32, hence the tolerance.
    assert monai_value == pytest.approx(hd95(pred, gt, pooled=False), rel=1e-5)
    assert abs(monai_value - hd95(pred, gt)) > 1.0  # 3.89 vs the papers' 2.44: a convention, not noise


# --- Dice -------------------------------------------------------------------------------------------------


def test_dice_on_known_overlaps():
    a = pixels((4, 4), (0, 0), (0, 1), (1, 0), (1, 1))
    b = pixels((4, 4), (0, 1), (1, 1), (0, 2), (1, 2))
    assert dice(a, b) == 0.5
    assert dice(a, a) == 1.0
    assert dice(a, pixels((4, 4), (3, 3))) == 0.0
    assert math.isnan(dice(np.zeros(5, bool), np.zeros(5, bool)))


def test_dice_equals_monai_dice_metric_on_random_label_volumes():
    from monai.metrics import DiceMetric
    from torch.nn.functional import one_hot

    rng = np.random.default_rng(0)
    gt = rng.integers(0, 4, (2, 6, 10, 10))
    pred = np.where(rng.random(gt.shape) < 0.7, gt, rng.integers(0, 4, gt.shape))
    to_onehot = lambda v: one_hot(torch.from_numpy(v), 4).permute(0, 4, 1, 2, 3)  # noqa: E731  (B, K, D, H, W)
    theirs = DiceMetric(include_background=False, reduction="none")(to_onehot(pred), to_onehot(gt))  # (B, K-1)
    for b in range(2):
        ours = case_scores(pred[b], gt[b], 4)
        assert [ours[k][0] for k in (1, 2, 3)] == pytest.approx(theirs[b].tolist(), rel=1e-6)


# --- empty-mask rules of the two conventions --------------------------------------------------------------


def test_papers_empty_mask_rules():
    empty, blob = np.zeros((4, 5, 6), bool), pixels((4, 5, 6), (1, 1, 1))
    assert organ_scores(blob, empty, "papers") == (1.0, 0.0)  # predicted, absent from the ground truth
    assert organ_scores(empty, blob, "papers") == (0.0, 0.0)  # missed
    assert organ_scores(empty, empty, "papers") == (0.0, 0.0)  # absent and not predicted: still (0, 0)


def test_mm_empty_mask_rules():
    empty, blob = np.zeros((4, 5, 6), bool), pixels((4, 5, 6), (1, 1, 1))
    worst = math.sqrt((3 * 2.0) ** 2 + 4**2 + 5**2)  # centre-to-centre diagonal with spacing (2, 1, 1)
    assert diagonal((4, 5, 6), (2.0, 1.0, 1.0)) == pytest.approx(worst)
    assert organ_scores(blob, empty, "mm", (2.0, 1.0, 1.0)) == pytest.approx((0.0, worst))
    assert organ_scores(empty, blob, "mm", (2.0, 1.0, 1.0)) == pytest.approx((0.0, worst))
    assert all(math.isnan(v) for v in organ_scores(empty, empty, "mm"))
    assert organ_scores(empty, blob, "mm") == pytest.approx((0.0, math.sqrt(9 + 16 + 25)))  # None: 1 per axis


def test_papers_ignore_spacing_mm_uses_it():
    pred, gt = medpy_pair_3d()
    assert organ_scores(pred, gt, "papers", (2.5, 0.8, 0.8)) == organ_scores(pred, gt, "papers")
    assert organ_scores(pred, gt, "mm", (2.5, 0.8, 0.8))[1] == pytest.approx(3.8040477823963093)


def test_case_scores_and_status_over_a_label_volume():
    gt = np.zeros((3, 8, 8), np.int64)
    pred = np.zeros_like(gt)
    gt[1, 1:3, 1:3] = 1
    pred[1, 1:3, 1:4] = 1  # aorta present in both
    gt[1, 5:7, 5:7] = 2  # gallbladder missed
    pred[0, 6, 0] = 3  # kidney: a false positive
    scores = case_scores(pred, gt, 4)
    assert scores[1] == pytest.approx((2 * 4 / (4 + 6), hd95(pred == 1, gt == 1)))
    assert scores[2] == (0.0, 0.0) and scores[3] == (1.0, 0.0)
    assert case_status(pred, gt, 4) == {1: "present", 2: "missed", 3: "false positive"}
    assert case_status(pred, np.where(gt == 2, 0, gt), 4)[2] == "absent"


# --- averaging ----------------------------------------------------------------------------------------------


def test_summarise_averages_over_cases_per_organ_then_over_organs():
    per_case = {"case0001": {1: (0.8, 2.0), 2: (math.nan, math.nan)},  # organ 2 absent from case 1
                "case0002": {1: (0.6, 4.0), 2: (1.0, 1.0)}}
    summary = summarise(per_case, NAMES[:3], "mm", spacing_assumed=True)
    assert [o["dice"] for o in summary["organs"]] == pytest.approx([0.7, 1.0])
    assert [o["scored"] for o in summary["organs"]] == [2, 1]
    # organs first: (0.7 + 1.0) / 2 = 0.85; per case first would give (0.8 + 0.8) / 2 = 0.8
    assert summary["mean_dice"] == pytest.approx(0.85) and summary["mean_hd95"] == pytest.approx(2.0)
    assert [c["dice"] for c in summary["cases"]] == pytest.approx([0.8, 0.8])
    assert summary["hd95_unit"] == "voxels (1 mm assumed)" and summary["spacing_assumed"]
    json.dumps(summary, allow_nan=False)


def test_summarise_counts_statuses_and_turns_never_scored_organs_into_none():
    per_case = {"a": {1: (0.5, 3.0), 2: (math.nan, math.nan)}, "b": {1: (0.0, 9.0), 2: (math.nan, math.nan)}}
    status = {"a": {1: "present", 2: "absent"}, "b": {1: "missed", 2: "absent"}}
    summary = summarise(per_case, NAMES[:3], "mm", status=status)
    aorta, gallbladder = summary["organs"]
    assert (aorta["present"], aorta["missed"], gallbladder["absent"]) == (1, 1, 2)
    assert gallbladder["dice"] is None and summary["mean_dice"] == pytest.approx(0.25)
    assert summary["hd95_unit"] == "mm"
    json.dumps(summary, allow_nan=False)


# --- errors -----------------------------------------------------------------------------------------------


def test_errors_name_the_bad_value():
    blob = pixels((4, 4), (1, 1))
    labels = np.zeros((2, 4, 4), np.int64)
    with pytest.raises(ValueError, match="Did you mean 'papers'"):
        organ_scores(blob, blob, "paper")
    with pytest.raises(ValueError, match=r"\(4, 4\).*\(4, 5\)"):
        hd95(blob, np.ones((4, 5), bool))
    with pytest.raises(ValueError, match="mask b is empty"):
        hd95(blob, np.zeros((4, 4), bool))
    with pytest.raises(ValueError, match="dtype float64"):
        case_scores(labels.astype(float), labels, 3)
    with pytest.raises(ValueError, match="label 7"):
        case_scores(labels + 7, labels, 3)
    with pytest.raises(ValueError, match="num_classes"):
        case_scores(labels, labels, 1)
    with pytest.raises(ValueError, match=r"one value per axis \(3\).*\(1\.0, 1\.0\)"):
        case_scores(labels, labels, 3, "mm", spacing=(1.0, 1.0))
    with pytest.raises(ValueError, match="positive.*-1"):
        organ_scores(blob, blob, "mm", spacing=(1.0, -1.0))
    with pytest.raises(ValueError, match="organ index 3"):
        summarise({"a": {3: (1.0, 0.0)}}, NAMES[:3], "papers")
    assert set(CONVENTIONS) == {"papers", "mm"}


# --- report -----------------------------------------------------------------------------------------------


def test_tables_format_dice_percent_and_hd95_with_two_decimals():
    per_case = {"case0001": {1: (0.8, 2.0), 2: (0.5, 10.0), 3: (1.0, 0.0)},
                "case0002": {1: (0.6, 4.0), 2: (0.25, 2.5), 3: (0.0, 0.0)}}
    summary = summarise(per_case, NAMES, "papers")
    rows = organ_table(summary, NAMES)
    assert [r["organ"] for r in rows] == ["aorta", "gallbladder", "kidney", "mean"]
    assert rows[0] == {"organ": "aorta", "Dice (%)": "70.00", "HD95 (voxels)": "3.00"}
    assert rows[-1] == {"organ": "mean", "Dice (%)": "52.50", "HD95 (voxels)": "3.08"}  # (0.7 + 0.375 + 0.5) / 3
    cases = case_table(summary)
    assert cases[0]["case"] == "case0001" and cases[-1]["case"] == "mean over cases"
    assert cases[0]["HD95 (voxels)"] == "4.00"
    assert "| aorta | 70.00 | 3.00 |" in markdown_table(rows)


def test_pick_overlay_slices_prefers_slices_with_more_organs():
    volume = np.zeros((5, 6, 6), np.int64)
    volume[1, 0, :3] = [1, 2, 3]  # three organs
    volume[3, 0, :2] = [1, 2]  # two organs, few voxels
    volume[4, :, :] = 1
    volume[4, 0, 0] = 2  # two organs, many voxels: beats slice 3
    assert pick_overlay_slices(volume, 2) == [1, 4]
    assert pick_overlay_slices(volume, 9) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="k must be"):
        pick_overlay_slices(volume, 0)


def test_plot_overlays_writes_a_png(tmp_path):
    rng = np.random.default_rng(1)
    gt = np.zeros((16, 16), np.int64)
    gt[2:8, 2:8], gt[9:14, 9:14] = 1, 3
    samples = [("case0001 slice 3", rng.random((16, 16)), gt, np.roll(gt, 1, axis=1)),
               ("case0002 slice 7", rng.random((16, 16)), gt, np.zeros_like(gt))]
    path = tmp_path / "overlays.png"
    plot_overlays(samples, NAMES, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="case0001.*outside 0..3"):
        plot_overlays([("case0001", rng.random((16, 16)), gt + 4, gt)], NAMES, path)
