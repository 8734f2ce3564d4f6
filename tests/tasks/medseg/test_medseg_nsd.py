"""Normalised surface Dice (``tasks.medseg.evaluation.metrics.normalised_surface_dice``) against DeepMind's
``surface-distance`` (pinned numbers) and MONAI's ``compute_surface_dice``, its empty-mask rules, its bad input, and
its way into the case records, the summaries, the report tables, ``zoo compare``'s paired metrics and
``zoo evaluate --pred``'s metrics.json."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tasks.medseg.config import MedsegConfig
from tasks.medseg.evaluation.evaluator import Evaluator, summaries
from tasks.medseg.evaluation.metrics import (
    case_scores_per_convention,
    normalised_surface_dice,
    summarise,
)
from tasks.medseg.evaluation.paired import paired_metrics
from tasks.medseg.evaluation.report import case_table, organ_table


def ellipsoid(shape: tuple[int, ...], centre: tuple[float, ...], radii: tuple[float, ...]) -> np.ndarray:
    grid = np.indices(shape, dtype=float)
    return sum(((g - c) / r) ** 2 for g, c, r in zip(grid, centre, radii)) <= 1.0


def box(shape: tuple[int, ...], low: tuple[int, ...], high: tuple[int, ...]) -> np.ndarray:
    mask = np.zeros(shape, bool)
    mask[tuple(slice(a, b) for a, b in zip(low, high))] = True
    return mask


# (gt, pred, spacing in the arrays' axis order): anisotropic, 3D and 2D, one pair touching the array's edges
CASES = {
    "ellipsoids": (ellipsoid((14, 20, 22), (6.5, 9.5, 10.5), (4.0, 6.5, 7.0)),
                   ellipsoid((14, 20, 22), (7.0, 11.0, 9.5), (3.5, 7.0, 6.0)), (3.0, 0.8, 0.7)),
    "disc and box": (ellipsoid((24, 30), (11.5, 14.5), (8.0, 9.0)), box((24, 30), (5, 6), (19, 22)), (0.6, 1.7)),
    "boxes on the edge": (box((8, 12, 10), (0, 2, 3), (5, 12, 10)), box((8, 12, 10), (0, 3, 2), (6, 11, 10)),
                          (2.5, 1.0, 1.25)),
}
# DeepMind's surface-distance (github.com/google-deepmind/surface-distance, commit 1f805cea446805e5), run during
# development only, never installed here:
#   surface_distance.compute_surface_dice_at_tolerance(
#       surface_distance.compute_surface_distances(gt, pred, spacing), tolerance)
# on the CASES above (scipy 1.17 needed its ndimage.filters.correlate / ndimage.morphology.distance_transform_edt
# read as ndimage.correlate / ndimage.distance_transform_edt, the same functions).
DEEPMIND = {
    ("ellipsoids", 1.0): 0.7383907502811944,
    ("ellipsoids", 2.0): 0.9522368809314357,
    ("ellipsoids", 2.5): 0.9712769761955904,
    ("disc and box", 1.0): 0.8191427289631918,
    ("disc and box", 2.0): 0.9491332801996584,
    ("boxes on the edge", 1.0): 0.7422131839556784,
    ("boxes on the edge", 2.0): 0.8989021674665068,
}


@pytest.mark.parametrize(("name", "tolerance"), list(DEEPMIND))
def test_nsd_is_deepminds_on_anisotropic_cases(name, tolerance):
    gt, pred, spacing = CASES[name]
    # 3D areas come from MONAI's float32 table (DeepMind's is float64): 1e-9 apart here; 2D lengths are float64
    assert normalised_surface_dice(pred, gt, tolerance, spacing) == pytest.approx(DEEPMIND[name, tolerance], abs=1e-8)
    assert normalised_surface_dice(gt, pred, tolerance, spacing) == pytest.approx(DEEPMIND[name, tolerance], abs=1e-8)


def test_nsd_measures_on_the_spacing_in_axis_order():
    gt, pred, spacing = CASES["ellipsoids"]
    reversed_axes = normalised_surface_dice(pred, gt, 1.0, spacing[::-1])
    in_voxels = normalised_surface_dice(pred, gt, 1.0)
    for other in (reversed_axes, in_voxels):
        assert abs(other - DEEPMIND["ellipsoids", 1.0]) > 0.02


def _monai_nsd(pred: np.ndarray, gt: np.ndarray, tolerance: float, spacing: tuple[float, ...]) -> float:
    from monai.metrics import compute_surface_dice

    def one_hot(mask: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.stack([~mask, mask])[None]).double()  # (1, 2, *)

    return compute_surface_dice(one_hot(pred), one_hot(gt), [tolerance], spacing=list(spacing),
                                use_subvoxels=True).item()


@pytest.mark.parametrize("tolerance", [0.5, 1.0, 2.0])
def test_nsd_is_monais_surface_dice_with_subvoxels(tolerance):
    for name, (gt, pred, spacing) in CASES.items():
        # MONAI returns float32: agree to its precision
        assert normalised_surface_dice(pred, gt, tolerance, spacing) == pytest.approx(
            _monai_nsd(pred, gt, tolerance, spacing), abs=2e-6), name


def test_monai_rounds_a_distance_at_the_tolerance_into_it_deepmind_and_we_do_not():
    gt, pred, spacing = CASES["ellipsoids"]
    # surfels (0, 3, 1) voxels apart are sqrt(2.4² + 0.7²) = 2.5 mm, 2.5000000000000004 in float64: DeepMind leaves
    # them out at 2.5 mm; MONAI rounds the distances to float32, where they are 2.5, and counts them in
    assert 3 * 0.8 != 2.4 and math.hypot(3 * 0.8, 0.7) > 2.5
    assert normalised_surface_dice(pred, gt, 2.5, spacing) == pytest.approx(DEEPMIND["ellipsoids", 2.5], abs=1e-8)
    deepmind_just_above = 0.9721072491739507  # surface-distance at 2.5 + 1e-9 mm, as above
    assert _monai_nsd(pred, gt, 2.5, spacing) == pytest.approx(deepmind_just_above, abs=2e-6)


def test_case_scores_give_each_organs_nsd_under_mm_only():
    gt_a, pred_a, _ = CASES["ellipsoids"]
    spacing = (3.0, 0.8, 0.7)
    gt = gt_a.astype(np.uint8)  # organ 1; organ 2 planted apart, organ 3 in the prediction only, organ 4 nowhere
    gt[1:4, 1:5, 1:4] = 2
    pred = pred_a.astype(np.uint8)
    pred[1:4, 2:5, 1:4] = 2
    pred[12:14, 17:20, 19:22] = 3
    scores = case_scores_per_convention(pred, gt, 5, spacing, nsd_tolerance=1.5)
    assert all(len(v) == 2 for v in scores["papers"].values())
    for organ in (1, 2):
        assert scores["mm"][organ][2] == pytest.approx(
            normalised_surface_dice(pred == organ, gt == organ, 1.5, spacing), abs=1e-12)
        assert scores["mm"][organ][2] == pytest.approx(
            _monai_nsd(pred == organ, gt == organ, 1.5, spacing), abs=2e-6)
    assert scores["mm"][3][2] == 0.0  # false positive
    assert math.isnan(scores["mm"][4][2])  # absent from both
    without = case_scores_per_convention(pred, gt, 5, spacing)
    np.testing.assert_equal({k: v[:2] for k, v in scores["mm"].items()}, without["mm"])  # NaN equal to NaN


def test_nsd_empty_mask_rules():
    empty, organ = np.zeros((6, 7, 8), bool), box((6, 7, 8), (1, 1, 1), (4, 5, 6))
    assert math.isnan(normalised_surface_dice(empty, empty, 1.0, (2.0, 1.0, 1.0)))  # nothing to score
    assert normalised_surface_dice(empty, organ, 1.0, (2.0, 1.0, 1.0)) == 0.0  # missed
    assert normalised_surface_dice(organ, empty, 1.0, (2.0, 1.0, 1.0)) == 0.0  # false positive
    assert normalised_surface_dice(organ, organ, 1e-9, (2.0, 1.0, 1.0)) == 1.0
    # left out of the means, as the "mm" HD95 of an organ absent from both masks is
    summary = summarise({"a": {1: (0.5, 2.0, 0.25)}, "b": {1: (math.nan, math.nan, math.nan)}},
                        ["background", "liver"], "mm", nsd_tolerance=1.0)
    assert summary["mean_nsd"] == 0.25 and summary["organs"][0]["nsd"] == 0.25
    assert [c["nsd"] for c in summary["cases"]] == [0.25, None]
    assert "absent from both masks -> left out" in summary["nsd_rules"]
    assert "missed organ or false positive -> 0" in summary["nsd_rules"]


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, math.nan, math.inf])
def test_non_positive_tolerance_is_a_one_line_error(bad):
    organ = box((4, 5, 6), (1, 1, 1), (3, 4, 5))
    for call in (lambda: normalised_surface_dice(organ, organ, bad, (1.0, 1.0, 1.0)),
                 lambda: case_scores_per_convention(organ.astype(np.uint8), organ.astype(np.uint8), 2, None, bad),
                 lambda: MedsegConfig(nsd_tolerance=bad)):
        with pytest.raises(ValueError, match="nsd_tolerance must be") as error:
            call()
        assert "\n" not in str(error.value) and str(bad) in str(error.value)
    with pytest.raises(ValueError, match="--nsd-tolerance"):
        MedsegConfig(nsd_tolerance=-2.0)
    with pytest.raises(TypeError, match="nsd_tolerance must be a number"):
        MedsegConfig(nsd_tolerance="1mm")


def test_summarise_refuses_nsd_under_the_papers_convention():
    with pytest.raises(ValueError, match="'mm' convention only"):
        summarise({"a": {1: (0.5, 2.0, 0.25)}}, ["background", "liver"], "papers", nsd_tolerance=1.0)


def _evaluator(tolerance: float) -> Evaluator:
    cases = SimpleNamespace(num_classes=3, class_names=["background", "liver", "kidney"])
    return Evaluator(MedsegConfig(nsd_tolerance=tolerance, hd95="papers"), cases, 2, torch.device("cpu"), None)


def _volume(case: str, shift: int) -> tuple[SimpleNamespace, np.ndarray]:
    label = np.zeros((6, 16, 16), np.uint8)
    label[1:5, 3:9, 3:9], label[2:4, 10:14, 9:14] = 1, 2
    pred = np.roll(label, shift, axis=2)
    return SimpleNamespace(case=case, label=label, spacing=(2.5, 0.8, 0.8)), pred


def test_records_summaries_report_and_paired_metric_carry_nsd():
    evaluator = _evaluator(1.0)
    records = [evaluator.case_record(*_volume(case, shift)) for case, shift in (("c1", 1), ("c2", 3))]
    assert records[0]["nsd_tolerance"] == 1.0 and "nsd" not in records[0]["papers"]["liver"]
    volume, pred = _volume("c2", 3)
    assert records[1]["mm"]["kidney"]["nsd"] == pytest.approx(
        normalised_surface_dice(pred == 2, volume.label == 2, 1.0, volume.spacing), abs=1e-12)
    out = summaries(json.loads(json.dumps(records)), ["background", "liver", "kidney"])  # as read back from jsonl
    mm = out["mm"]
    expected = np.mean([np.mean([r["mm"][o]["nsd"] for r in records]) for o in ("liver", "kidney")])
    assert mm["mean_nsd"] == pytest.approx(expected, abs=1e-12) and mm["nsd_tolerance_mm"] == 1.0
    assert "mean_nsd" not in out["papers"]
    assert evaluator.headline_metrics(out)["nsd"] == mm["mean_nsd"]
    assert organ_table(mm, ["background", "liver", "kidney"])[-1]["NSD @ 1 mm (%)"] == f"{100 * expected:.2f}"
    assert "NSD @ 1 mm (%)" in case_table(mm)[0]
    assert "NSD @ 1 mm (%)" not in organ_table(out["papers"], ["background", "liver"])[0]
    info = {"config": {"hd95": "papers", "nsd_tolerance": 1.0},
            "preprocessing": {"class_names": ["background", "liver", "kidney"]}}
    metrics = {m.key: m for m in paired_metrics(info)}
    nsd = metrics["nsd"]
    assert (nsd.role, nsd.higher_is_better, nsd.unit) == ("secondary", True, "within 1 mm")
    assert nsd.score(nsd.stats(records, info).sum(0))[0] == pytest.approx(mm["mean_nsd"], abs=1e-12)
    assert metrics["kidney/nsd"].role == "per-class"
    with pytest.raises(ValueError, match="one --nsd-tolerance"):
        nsd.stats(records, {**info, "config": {"hd95": "papers", "nsd_tolerance": 2.0}})


def test_records_from_before_nsd_still_summarise_and_compare():
    records = [_evaluator(1.0).case_record(*_volume("c1", 1))]
    for record in records:
        del record["nsd_tolerance"]
        for scores in record["mm"].values():
            del scores["nsd"]
    out = summaries(records, ["background", "liver", "kidney"])
    assert "mean_nsd" not in out["mm"] and "NSD" not in " ".join(organ_table(out["mm"], ["b", "liver", "kidney"])[0])
    info = {"config": {"hd95": "papers"}, "preprocessing": {"class_names": ["background", "liver", "kidney"]}}
    assert "nsd" not in {m.key for m in paired_metrics(info)}
    mixed = [_evaluator(1.0).case_record(*_volume("c1", 1)), _evaluator(2.0).case_record(*_volume("c2", 1))]
    with pytest.raises(ValueError, match="different tolerances"):
        summaries(mixed, ["background", "liver", "kidney"])


def test_folder_scoring_writes_nsd_on_each_files_spacing(tmp_path):
    import nibabel as nib

    from tasks.medseg.evaluation.folder_eval import score_folders

    gt, pred, spacing = CASES["ellipsoids"]
    for folder, mask in (("labels", gt), ("pred", pred)):
        (tmp_path / folder).mkdir()
        nib.save(nib.Nifti1Image(mask.astype(np.uint8), np.diag([*spacing, 1.0])), tmp_path / folder / "c1.nii.gz")
    metrics, out, lines = score_folders(tmp_path / "pred", tmp_path / "labels", nsd_tolerance=2.0)
    assert metrics["nsd"] == pytest.approx(DEEPMIND["ellipsoids", 2.0], abs=1e-6)  # the header's spacing, in mm
    assert json.loads((out / "metrics.json").read_text())["nsd_tolerance_mm"] == 2.0
    assert "NSD @ 2 mm" in lines[-1]
