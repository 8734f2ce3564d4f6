"""The NIfTI data layer of medseg: layouts, canonical geometry and back, intensity, cache, folds, summary.json.

Every folder is written in tmp_path with volumes of a few hundred voxels, and the cache goes to tmp_path too.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from tasks.medseg.evaluation.nnunet_eval import evaluate_folders, nnunet_summary, write_summary_json
from tasks.medseg.preprocessing.folds import make_folds, read_splits, write_splits
from tasks.medseg.preprocessing.nifti_data import Preprocessing, load_nifti_dataset
from tasks.medseg.preprocessing.nifti_geometry import Geometry, to_original, write_label_nifti
from tasks.medseg.reading.nifti_layout import detect_nifti_layout, read_nifti_layout
from tasks.medseg.reading.phantom_nifti import write_phantom_nifti

LPS_TO = {codes: nib.orientations.ornt_transform(nib.orientations.axcodes2ornt("LPS"),
                                                  nib.orientations.axcodes2ornt(codes))
          for codes in ("LPS", "RAS", "SAR", "LPI")}


def anatomy(shape=(6, 7, 5), seed=0) -> tuple[np.ndarray, np.ndarray]:
    """A (W, H, D) = (L, P, S) stored image in HU and a 3-class label of blobs, not symmetric along any axis."""
    rng = np.random.default_rng(seed)
    x, y, z = np.meshgrid(*(np.arange(n) for n in shape), indexing="ij")
    label = np.zeros(shape, dtype=np.uint8)
    label[(x - 1.5) ** 2 + (y - 2) ** 2 + (z - 1) ** 2 < 4] = 1
    label[(x >= shape[0] - 2) & (y >= 3) & (z >= 2)] = 2
    image = (-50.0 + 100.0 * label + rng.normal(0, 5, shape) + 3 * z).astype(np.float32)
    return image, label


def lps_affine(spacing=(0.8, 0.8, 2.5), shape=(6, 7, 5)) -> np.ndarray:
    affine = np.diag([-spacing[0], -spacing[1], spacing[2], 1.0])
    affine[:3, 3] = [10.0 + shape[0], 20.0, -30.0]
    return affine


def save(path: Path, array: np.ndarray, affine: np.ndarray, codes: str = "LPS") -> Path:
    """Save ``array`` (stored as LPS) re-stored in the orientation ``codes``: the same anatomy, another array."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image = nib.Nifti1Image(array, affine).as_reoriented(LPS_TO[codes])
    nib.save(image, path)
    return path


def decathlon(root: Path, cases=("a", "b", "c"), codes=("LPS", "SAR", "RAS"), spacing=(0.8, 0.8, 2.5),
              modality=None, channels=1, test=(), same_anatomy=False) -> Path:
    """Case i has anatomy(seed=i) (seed 0 for all with ``same_anatomy``), stored in the orientation codes[i]."""
    modality = modality or {"0": "CT"}
    training = []
    for i, (case, code) in enumerate(zip(cases, codes)):
        image, label = anatomy(seed=0 if same_anatomy else i)
        if channels > 1:  # 4D, channels on the last axis
            image = np.stack([image * (c + 1) for c in range(channels)], axis=-1)
        save(root / "imagesTr" / f"{case}.nii.gz", image, lps_affine(spacing), code)
        save(root / "labelsTr" / f"{case}.nii.gz", label, lps_affine(spacing), code)
        training.append({"image": f"./imagesTr/{case}.nii.gz", "label": f"./labelsTr/{case}.nii.gz"})
    for case in test:
        save(root / "imagesTs" / f"{case}.nii.gz", anatomy()[0], lps_affine(spacing))
    meta = {"name": "Tiny", "modality": modality, "labels": {"0": "background", "1": "liver", "2": "tumour"},
            "training": training, "test": [f"./imagesTs/{c}.nii.gz" for c in test]}
    (root / "dataset.json").write_text(json.dumps(meta))
    return root


def nnunet(root: Path, cases=("a", "b"), channels=("T1", "T2"), ending=".nii.gz") -> Path:
    for i, case in enumerate(cases):
        image, label = anatomy(seed=i)
        for c in range(len(channels)):
            save(root / "imagesTr" / f"{case}_{c:04d}{ending}", image + 200 * c, lps_affine())
        save(root / "labelsTr" / f"{case}{ending}", label, lps_affine())
    meta = {"channel_names": dict(enumerate(channels)), "labels": {"background": 0, "liver": 1, "tumour": 2},
            "numTraining": len(cases), "file_ending": ending}
    (root / "dataset.json").write_text(json.dumps(meta))
    return root


def pairs(root: Path, cases=("a", "b")) -> Path:
    for i, case in enumerate(cases):
        image, label = anatomy(seed=i)
        save(root / "images" / f"{case}.nii", image, lps_affine())
        save(root / "labels" / f"{case}.nii", label, lps_affine())
    return root


@pytest.fixture
def load(tmp_path):
    """load_nifti_dataset with the cache in tmp_path."""
    def _load(root, **kwargs):
        kwargs.setdefault("cache", tmp_path / "cache")
        return load_nifti_dataset(root, **kwargs)
    return _load


# ---- layouts -----------------------------------------------------------------------------------------------


def test_each_layout_is_detected_and_read(tmp_path, load):
    roots = {"decathlon": decathlon(tmp_path / "dec", test=("t",)), "nnunet": nnunet(tmp_path / "nnu"),
             "pairs": pairs(tmp_path / "pairs")}
    for layout, root in roots.items():
        assert detect_nifti_layout(root) == layout
    assert detect_nifti_layout(tmp_path / "pairs" / "images") is None

    dec = load(roots["decathlon"])
    assert (dec.layout, dec.class_names, dec.channel_names) == ("decathlon", ["background", "liver", "tumour"], ["CT"])
    assert [c.case for c in dec.train] == ["a", "b", "c"] and [c.case for c in dec.unlabelled] == ["t"]
    assert dec.train[0].image.shape[0] == 1 and dec.train[0].image.dtype == np.float32
    assert dec.preprocessing.rules[0].rule == "ct-window"
    # An unlabelled test image is read on demand with the dataset's settings (what prediction does), and the
    # settings and geometry survive JSON (a run saves them).
    test = dec.preprocess(dec.unlabelled[0])
    assert test.label is None and test.image.shape == dec.train[0].image.shape
    prep = Preprocessing.from_dict(json.loads(json.dumps(dec.preprocessing.to_dict())))
    assert prep == dec.preprocessing
    assert Geometry.from_dict(json.loads(json.dumps(test.geometry.to_dict()))) == test.geometry

    nnu = load(roots["nnunet"])  # two channel files per case -> (2, D, H, W), both z-scored
    assert nnu.channel_names == ["T1", "T2"] and nnu.train[0].image.shape[0] == 2
    assert [r.rule for r in nnu.preprocessing.rules] == ["zscore", "zscore"]
    assert nnu.class_names == ["background", "liver", "tumour"]

    pair_data = load(roots["pairs"])
    assert pair_data.channel_names == ["unknown"] and pair_data.preprocessing.rules[0].rule == "zscore"
    assert pair_data.class_names == ["background", "class 1", "class 2"]


def test_decathlon_4d_holds_channels_last(tmp_path, load):
    root = decathlon(tmp_path, modality={"0": "FLAIR", "1": "T1w"}, channels=2)
    data = load(root)
    assert data.train[0].image.shape[0] == 2 and data.channel_names == ["FLAIR", "T1w"]
    with pytest.raises(ValueError, match="2 channels: pass channel="):
        data.to_segdata()
    seg = data.to_segdata(channel=1, valid=["a"])  # C -> today's (D, H, W) volumes
    assert [v.case for v in seg.train] == ["b", "c"] and [v.case for v in seg.valid] == ["a"]
    assert seg.train[0].image.ndim == 3


# ---- geometry ----------------------------------------------------------------------------------------------


def test_flipped_case_gives_the_same_canonical_data_and_maps_back(tmp_path, load):
    # One anatomy stored three ways: LPS, axes permuted and flipped (SAR), flipped in-plane (RAS); resampled.
    root = decathlon(tmp_path, codes=("LPS", "SAR", "RAS"), same_anatomy=True)
    a, b, c = load(root, spacing=(0.6, 0.7, 1.5)).train
    assert (a.geometry.orientation, b.geometry.orientation, c.geometry.orientation) == ("LPS", "SAR", "RAS")
    for other in (b, c):
        np.testing.assert_array_equal(a.label, other.label)
        np.testing.assert_allclose(a.image, other.image, atol=1e-6)
    prediction = np.roll(a.label, 1, axis=2)  # some prediction on the canonical grid
    back_a = to_original(prediction, a.geometry)  # (6, 7, 5), stored as LPS
    for other, codes in ((b, "SAR"), (c, "RAS")):
        back = to_original(prediction, other.geometry)
        assert back.shape == nib.load(root / "labelsTr" / f"{other.case}.nii.gz").shape
        np.testing.assert_array_equal(nib.orientations.apply_orientation(back_a, LPS_TO[codes]), back)


@pytest.mark.parametrize("spacing", [(0.8, 0.8, 2.5), (1.0, 1.0, 1.0)], ids=["anisotropic", "isotropic"])
def test_round_trip_keeps_shape_affine_and_labels(tmp_path, load, spacing):
    root = decathlon(tmp_path / "d", codes=("LPS", "SAR", "LPI"), spacing=spacing)
    data = load(root)  # the median spacing is every case's own: labels are not resampled
    for case in data.train:
        stored = nib.load(root / "labelsTr" / f"{case.case}.nii.gz")
        back = to_original(case.label, case.geometry)
        np.testing.assert_array_equal(back, np.asarray(stored.dataobj))
        out = write_label_nifti(tmp_path / "pred" / f"{case.case}.nii.gz", back, case.geometry)
        written = nib.load(out)
        assert written.shape == stored.shape
        np.testing.assert_allclose(written.affine, stored.affine, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(written.dataobj), np.asarray(stored.dataobj))
    if spacing[2] > spacing[0]:  # the slices cut across the thick axis, S, whatever the storage order
        assert {c.geometry.slice_axis for c in data.train} == {"S"}
        assert data.train[1].spacing == pytest.approx((2.5, 0.8, 0.8)) and data.train[1].image.shape[1] == 5
    lps = data.train[0]  # stored (6, 7, 5), canonical (5, 7, 6)
    with pytest.raises(ValueError, match="to_original"):
        write_label_nifti(tmp_path / "x.nii.gz", lps.label, lps.geometry)


def test_resampling_to_another_spacing(tmp_path, load):
    data = load(decathlon(tmp_path), spacing=(0.4, 0.4, 1.25))
    case = data.train[0]
    # (n - 1) * 2 + 1 voxels per axis: MONAI keeps the first and last voxel centres; (D, H, W) = (S, A, R)
    assert case.image.shape[1:] == case.label.shape == (9, 13, 11)
    assert set(np.unique(case.label)) <= {0, 1, 2}  # nearest neighbour
    back = to_original(case.label, case.geometry)
    assert back.shape == (6, 7, 5)
    assert np.mean(back == anatomy(seed=0)[1]) > 0.95


# ---- intensity, fingerprint, cache -------------------------------------------------------------------------


def test_intensity_rules_by_modality(tmp_path, load):
    ct = load(decathlon(tmp_path / "ct"))
    values = np.concatenate([c.image.ravel() for c in ct.train])
    assert values.min() >= 0.0 and values.max() <= 1.0
    nnu = load(decathlon(tmp_path / "ct2"), ct_window=None)  # nnU-Net's CT rule from the fingerprint
    rule = nnu.preprocessing.rules[0]
    assert rule.rule == "ct-percentiles" and rule.low == nnu.fingerprint["intensity"][0]["percentile_00_5"]
    mri = load(nnunet(tmp_path / "mr"))
    for case in mri.train:
        np.testing.assert_allclose(case.image.mean(axis=(1, 2, 3)), 0.0, atol=1e-4)
        np.testing.assert_allclose(case.image.std(axis=(1, 2, 3)), 1.0, atol=1e-3)
    assert "z-score per case over all voxels" in mri.preprocessing.rules[0].describe()


def test_zscore_over_the_nonzero_region_of_cropped_scans(tmp_path, load):
    root = tmp_path / "brain"
    for case in ("a", "b"):
        image, label = anatomy(shape=(12, 12, 10))
        image[:, :, :] = 0.0
        image[2:6, 3:7, 2:5] = np.random.default_rng(0).normal(300, 20, (4, 4, 3))  # a "brain" in a zero background
        save(root / "images" / f"{case}.nii.gz", image, lps_affine(shape=(12, 12, 10)))
        save(root / "labels" / f"{case}.nii.gz", label, lps_affine(shape=(12, 12, 10)))
    data = load(root, modality="MRI")
    assert data.fingerprint["median_nonzero_share"] < 0.75 and data.preprocessing.rules[0].voxels == "nonzero"
    image = data.train[0].image[0]
    inside = image != 0
    assert inside.sum() == 4 * 4 * 3
    assert abs(image[inside].mean()) < 1e-4 and abs(image[inside].std() - 1) < 1e-3


def test_fingerprint_and_report_lines(tmp_path, load):
    data = load(decathlon(tmp_path, codes=("LPS", "SAR", "LPS")))
    fp = data.fingerprint
    assert fp["cases"] == 3 and fp["orientations"] == {"LPS": 2, "SAR": 1}
    assert fp["spacings"]["b"] == pytest.approx([0.8, 0.8, 2.5]) and fp["shapes"]["b"] == [6, 7, 5]
    assert fp["target_spacing"] == pytest.approx([0.8, 0.8, 2.5])
    assert sum(fp["class_voxel_shares"].values()) == pytest.approx(1.0)
    stats = fp["intensity"][0]
    labels = np.concatenate([anatomy(seed=i)[1].ravel() for i in range(3)])
    images = np.concatenate([anatomy(seed=i)[0].ravel() for i in range(3)])
    assert stats["mean"] == pytest.approx(images[labels > 0].mean(), rel=1e-5)
    assert stats["percentile_99_5"] == pytest.approx(np.percentile(images[labels > 0], 99.5), rel=1e-5)
    text = "\n".join(data.report_lines())
    for words in ("orientations found: LPS x2, SAR x1", "CT window [-125, 275]", "liver", "median of the training"):
        assert words in text


def test_second_load_comes_from_the_cache(tmp_path, load, caplog):
    root = decathlon(tmp_path / "d")
    first = load(root)
    with caplog.at_level(logging.INFO, logger="tasks.medseg.preprocessing.nifti_data"):
        second = load(root)
    assert "3 of 3 cases from the cache" in caplog.text
    np.testing.assert_array_equal(first.train[1].image, second.train[1].image)
    assert second.train[1].geometry == first.train[1].geometry
    label = root / "labelsTr" / "b.nii.gz"
    os.utime(label, ns=(label.stat().st_atime_ns, label.stat().st_mtime_ns + 10**9))  # "edited": recomputed
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tasks.medseg.preprocessing.nifti_data"):
        load(root)
    assert "2 of 3 cases from the cache" in caplog.text


def test_phantom_nifti_folders(tmp_path, load):
    tiny = {"slices": 6, "size": (32, 36), "train_cases": ("case0005", "case0006", "case0007"),
            "test_cases": ("case0001",)}
    dec = write_phantom_nifti(tmp_path / "dec", "decathlon", **tiny)
    stamp = (dec / "phantom.json").stat().st_mtime_ns
    assert write_phantom_nifti(tmp_path / "dec", "decathlon", **tiny) == dec  # reused, not rewritten
    assert (dec / "phantom.json").stat().st_mtime_ns == stamp
    nnu = write_phantom_nifti(tmp_path / "nnu", "nnunet", **tiny)
    a, b = load(dec), load(nnu)
    assert detect_nifti_layout(dec) == "decathlon" and detect_nifti_layout(nnu) == "nnunet"
    assert [c.case for c in a.test] == ["case0001"] and len(a.class_names) == 9
    assert set(a.fingerprint["orientations"]) == {"LPS", "RAS", "LPI"}
    isotropic = a.train[2]  # every third case: its slices resampled from the in-plane spacing to 2.5 mm
    assert max(nib.load(dec / "imagesTr" / "case0007.nii.gz").header.get_zooms()) < 1.0
    assert isotropic.spacing[0] == pytest.approx(2.5)
    for x, y in zip(a.train + a.test, b.train + b.test):
        np.testing.assert_array_equal(x.label, y.label)


# ---- folds -------------------------------------------------------------------------------------------------


def test_folds_are_disjoint_cover_every_case_and_round_trip(tmp_path):
    cases = [f"case{i:02d}" for i in range(11)]
    folds = make_folds(reversed(cases), k=5, seed=12345)
    assert len(folds) == 5 and folds == make_folds(cases, 5, 12345) != make_folds(cases, 5, 1)
    vals = [name for f in folds for name in f["val"]]
    assert sorted(vals) == cases  # each case validated exactly once
    for fold in folds:
        assert not set(fold["train"]) & set(fold["val"]) and sorted(fold["train"] + fold["val"]) == cases
    path = write_splits(tmp_path / "splits_final.json", folds)
    assert read_splits(path, cases) == folds
    assert json.loads(path.read_text())[0].keys() == {"train", "val"}


def test_bad_split_files(tmp_path):
    path = tmp_path / "splits_final.json"
    cases = ["a", "b", "c"]
    for content, message in (
        ([{"train": ["a", "b"], "val": ["c", "zz"]}], "unknown case"),
        ([{"train": ["a", "b"], "val": ["b", "c"]}], "in both"),
        ([{"train": ["a"], "val": ["c"]}], "leaves out"),
        ([{"train": ["a"]}], "exactly the keys"),
        ({"train": []}, "list of folds"),
    ):
        path.write_text(json.dumps(content))
        with pytest.raises(ValueError, match=message) as err:
            read_splits(path, cases)
        assert str(path) in str(err.value)
    with pytest.raises(ValueError, match="need at least 4 cases"):
        make_folds(cases, k=4)


# ---- summary.json ------------------------------------------------------------------------------------------


def test_summary_matches_a_hand_computation(tmp_path):
    ref1, pred1 = np.array([0, 1, 1, 2, 0, 0]), np.array([0, 1, 2, 2, 2, 0])
    ref2, pred2 = np.array([1, 1, 0, 0]), np.array([1, 0, 0, 0])
    summary = nnunet_summary([("r1", "p1", ref1, pred1), ("r2", "p2", ref2, pred2)], labels=[1, 2, (1, 2)])
    case1 = summary["metric_per_case"][0]
    assert case1["reference_file"] == "r1" and case1["prediction_file"] == "p1"
    # case 1, label 1: TP 1 (index 1), FP 0, FN 1 (index 2), TN 4 -> Dice 2/3, IoU 1/2
    assert case1["metrics"][1] == {"Dice": 2 / 3, "IoU": 0.5, "FP": 0, "TP": 1, "FN": 1, "TN": 4, "n_pred": 1,
                                   "n_ref": 2}
    # label 2: TP 1 (index 3), FP 2 (indices 2, 4), FN 0 -> Dice 2/4, IoU 1/3
    assert case1["metrics"][2]["Dice"] == 0.5 and case1["metrics"][2]["IoU"] == pytest.approx(1 / 3)
    # region (1, 2): ref {1, 2, 3}, pred {1, 2, 3, 4} -> TP 3, FP 1 -> Dice 6/7
    assert case1["metrics"][(1, 2)]["Dice"] == pytest.approx(6 / 7)
    case2 = summary["metric_per_case"][1]["metrics"]
    assert case2[1]["Dice"] == pytest.approx(2 / 3)  # TP 1, FN 1
    assert math.isnan(case2[2]["Dice"]) and math.isnan(case2[2]["IoU"])  # absent from both: NaN, as nnU-Net
    assert case2[2]["TN"] == 4
    assert summary["mean"][1]["Dice"] == pytest.approx(2 / 3)
    assert summary["mean"][2]["Dice"] == 0.5  # NaN of case 2 left out
    assert summary["mean"][2]["FP"] == 1.0  # (2 + 0) / 2
    assert summary["foreground_mean"]["Dice"] == pytest.approx((2 / 3 + 0.5 + (6 / 7 + 2 / 3) / 2) / 3)
    text = write_summary_json(summary, tmp_path / "summary.json").read_text()
    assert '"(1, 2)"' in text and "NaN" in text
    assert set(json.loads(text)["mean"]) == {"1", "2", "(1, 2)"}


def test_evaluate_folders_pairs_by_name_and_checks_grids(tmp_path):
    _, label = anatomy()
    prediction = label.copy()
    prediction[0, 0, 0] = 1
    for name in ("a", "b"):
        save(tmp_path / "ref" / f"{name}.nii.gz", label, lps_affine())
        save(tmp_path / "pred" / f"{name}.nii.gz", prediction, lps_affine())
    summary = evaluate_folders(tmp_path / "pred", tmp_path / "ref", {"background": 0, "liver": 1, "tumour": 2},
                               output_file=tmp_path / "pred" / "summary.json")
    assert [c["prediction_file"] for c in summary["metric_per_case"]] == [str(tmp_path / "pred" / f"{n}.nii.gz")
                                                                          for n in "ab"]
    assert summary["mean"][1]["FP"] == 1 and summary["mean"][2]["Dice"] == 1.0
    assert (tmp_path / "pred" / "summary.json").is_file()
    shifted = lps_affine()
    shifted[0, 3] += 1.0
    save(tmp_path / "pred" / "b.nii.gz", prediction, shifted)
    with pytest.raises(ValueError, match=r"pred/b\.nii\.gz: affine differs from its reference .*ref/b\.nii\.gz"):
        evaluate_folders(tmp_path / "pred", tmp_path / "ref", [1, 2])
    save(tmp_path / "pred" / "b.nii.gz", prediction[:-1], lps_affine())
    with pytest.raises(ValueError, match=r"b\.nii\.gz: shape"):
        evaluate_folders(tmp_path / "pred", tmp_path / "ref", [1, 2])
    (tmp_path / "pred" / "b.nii.gz").unlink()
    with pytest.raises(FileNotFoundError, match="have no prediction"):
        evaluate_folders(tmp_path / "pred", tmp_path / "ref", [1, 2])
    assert len(evaluate_folders(tmp_path / "pred", tmp_path / "ref", [1, 2], chill=True)["metric_per_case"]) == 1
    save(tmp_path / "pred" / "c.nii.gz", prediction, lps_affine())
    with pytest.raises(FileNotFoundError, match=r"c\.nii\.gz has no reference"):
        evaluate_folders(tmp_path / "pred", tmp_path / "ref", [1, 2], chill=True)


# ---- bad inputs --------------------------------------------------------------------------------------------


def _rewrite_json(root: Path, **changes) -> None:
    meta = json.loads((root / "dataset.json").read_text())
    for key, value in changes.items():
        if value is None:
            meta.pop(key)
        else:
            meta[key] = value
    (root / "dataset.json").write_text(json.dumps(meta))


def test_dataset_json_missing_or_incomplete(tmp_path, load):
    root = nnunet(tmp_path / "n")
    (root / "dataset.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"n/dataset\.json not found"):
        read_nifti_layout(root, "nnunet")
    nnunet(root)
    _rewrite_json(root, numTraining=None)
    with pytest.raises(ValueError, match=r"dataset\.json: missing required field\(s\) numTraining"):
        load(root)
    root = decathlon(tmp_path / "d")
    _rewrite_json(root, labels=None)
    with pytest.raises(ValueError, match=r"d/dataset\.json: missing required field\(s\) labels"):
        load(root)
    (root / "dataset.json").write_text(json.dumps({"name": "x"}))
    with pytest.raises(ValueError, match="neither a Decathlon task"):
        detect_nifti_layout(root)


def test_image_without_label(tmp_path, load):
    root = decathlon(tmp_path / "d")
    (root / "labelsTr" / "b.nii.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"imagesTr/b\.nii\.gz has no label"):
        load(root)
    root = nnunet(tmp_path / "n")
    (root / "labelsTr" / "a.nii.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"imagesTr/a_0000\.nii\.gz has no label"):
        load(root)
    root = pairs(tmp_path / "p")
    (root / "labels" / "b.nii").unlink()
    with pytest.raises(FileNotFoundError, match=r"images/b\.nii has no label"):
        load(root)


def test_label_on_another_grid(tmp_path, load):
    root = decathlon(tmp_path / "d")  # case a is stored as LPS
    _, label = anatomy()
    save(root / "labelsTr" / "a.nii.gz", label[:, :, :-1], lps_affine())
    with pytest.raises(ValueError, match=r"labelsTr/a\.nii\.gz: label shape \(6, 7, 4\) differs from its image"):
        load(root)
    shifted = lps_affine()
    shifted[2, 3] += 2.5
    save(root / "labelsTr" / "a.nii.gz", label, shifted)
    with pytest.raises(ValueError, match=r"labelsTr/a\.nii\.gz: label affine differs from its image a\.nii\.gz"):
        load(root)


def test_label_values_outside_the_classes(tmp_path, load):
    root = decathlon(tmp_path / "d")
    _, label = anatomy()
    label[0, 0, 0] = 3
    save(root / "labelsTr" / "c.nii.gz", label, lps_affine(), "RAS")
    with pytest.raises(ValueError, match=r"labelsTr/c\.nii\.gz: label values 0 \.\. 3 fall outside the 3 declared"):
        load(root)


def test_2d_nifti_is_refused(tmp_path, load):
    root = decathlon(tmp_path / "d")
    save2d = nib.Nifti1Image(np.zeros((6, 7), np.float32), np.eye(4))
    nib.save(save2d, root / "imagesTr" / "a.nii.gz")
    with pytest.raises(ValueError, match=r"imagesTr/a\.nii\.gz: a 2D NIfTI \(6, 7\); expected a 3D volume"):
        load(root)


def test_missing_channel_file(tmp_path, load):
    root = nnunet(tmp_path / "n", cases=("a", "b"), channels=("T1", "T2", "FLAIR"))
    (root / "imagesTr" / "b_0001.nii.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"imagesTr/b_0001\.nii\.gz is missing: case b has 2 of the 3"):
        load(root)


def test_unreadable_file(tmp_path, load):
    root = decathlon(tmp_path / "d")
    (root / "imagesTr" / "c.nii.gz").write_bytes(b"not a nifti file at all")
    with pytest.raises(ValueError, match=r"imagesTr/c\.nii\.gz: cannot read it as NIfTI"):
        load(root)
    data = (root / "imagesTr" / "a.nii.gz").read_bytes()
    decathlon(root)
    (root / "imagesTr" / "b.nii.gz").write_bytes(data[: len(data) // 2])  # truncated: the header reads, the data not
    with pytest.raises(ValueError, match=r"imagesTr/b\.nii\.gz: cannot read"):
        load(root)
