"""The medseg task on NIfTI folders: each layout trains and evaluates end to end, summary.json by hand, zoo evaluate
reproduces the training, zoo predict writes each input's own grid (flipped storage gives the flipped prediction).

Tiny phantom folders (4 training cases, 1 labelled test case, 6 slices of 32-36 pixels), one epoch at 32 px.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

from tasks.medseg.inference.predict import predict
from tasks.medseg.preprocessing.folds import read_splits
from tasks.medseg.reading.phantom_nifti import write_phantom_nifti
from tasks.medseg.task import MedsegConfig, MedsegTask
from tasks.runs.evaluate import evaluate_run
from tasks.runs.records import read_records
from tasks.runs.run import load_run
from tasks.runs.training import train

TRAIN = ("case0005", "case0006", "case0007", "case0008")
TINY = {"slices": 6, "size": (32, 36), "train_cases": TRAIN, "test_cases": ("case0001",)}
SMALL = {"image_size": 32, "epochs": 1, "batch_size": 4, "folds": 2, "progress": False, "overlay_slices": 0,
         "device": "cpu", "variant": "basicunet"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The phantom as a Decathlon folder, an nnU-Net folder with a second channel, and images/ + labels/ pairs."""
    root = tmp_path_factory.mktemp("nifti")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_CACHE", str(root / "cache"))  # the NIfTI cache of every load in this module (it yields)
        dec = write_phantom_nifti(root / "dec", "decathlon", **TINY)
        nnu = write_phantom_nifti(root / "nnu", "nnunet", **TINY)
        for image in sorted((nnu / "imagesTr").glob("*_0000.nii.gz")) + sorted((nnu / "imagesTs").glob("*.nii.gz")):
            stored = nib.load(image)  # channel 1: a second "sequence" of the same anatomy on the same grid
            second = nib.Nifti1Image(np.sqrt(np.abs(np.asarray(stored.dataobj, np.float32))), stored.affine)
            nib.save(second, image.with_name(image.name.replace("_0000", "_0001")))
        meta = json.loads((nnu / "dataset.json").read_text())
        (nnu / "dataset.json").write_text(json.dumps({**meta, "channel_names": {"0": "CT", "1": "T2"}}))
        pairs = root / "pairs"
        shutil.copytree(dec / "imagesTr", pairs / "images")
        shutil.copytree(dec / "labelsTr", pairs / "labels")
        yield {"decathlon": dec, "nnunet": nnu, "pairs": pairs, "root": root}


@pytest.fixture(scope="module")
def runs(folders):
    """One run per layout (the nnU-Net one a two-channel MISSFormer): layout -> (run folder, training summary)."""
    out = {}
    for layout in ("decathlon", "nnunet", "pairs"):
        extra = {"variant": "missformer", "preset": "tiny"} if layout == "nnunet" else {}
        config = MedsegConfig(data=str(folders[layout]), out=str(folders["root"] / f"run-{layout}"),
                              **{**SMALL, **extra})
        out[layout] = Path(config.out), train(MedsegTask, config)
    return out


def test_each_layout_trains_and_evaluates_end_to_end(runs, folders):
    for layout, (run_dir, summary) in runs.items():
        pre = json.loads((run_dir / "run.json").read_text())["preprocessing"]
        assert pre["nifti"]["layout"] == layout and pre["split"]["folds"] == 2 and pre["split"]["fold"] == 0
        report = (run_dir / "report.md").read_text()
        assert "## Data" in report and "orientations found" in report and "normalisation: channel 0" in report
        final = summary["final"]
        assert final["recipe"] == "default"  # the training recipe's name, beside the splits' scores
        for split in final.keys() - {"recipe"}:
            assert 0.0 <= final[split]["dice"] <= 1.0 and final[split]["nnunet_dice"] is not None
            assert (run_dir / "predictions" / split / "summary.json").is_file()
        folds = read_splits(run_dir / "splits_final.json", [f"case000{i}" for i in range(5, 9)])
        assert pre["split"]["valid"] == folds[0]["val"]
    # Decathlon: classes from dataset.json, a labelled test split (imagesTs + labelsTs) and the fold's validation
    pre = json.loads((runs["decathlon"][0] / "run.json").read_text())["preprocessing"]
    assert pre["class_names"][5] == "liver" and pre["in_channels"] == 1
    assert set(runs["decathlon"][1]["final"]) == {"test", "valid", "recipe"}
    # nnU-Net: two channel files per case -> a two-channel model
    run = load_run(runs["nnunet"][0])
    assert run.preprocessing["in_channels"] == 2 and run.variant_config.in_channels == 2
    assert [r["name"] for r in run.preprocessing["nifti"]["preprocessing"]["rules"]] == ["CT", "T2"]
    # images/ + labels/: unnamed classes, no test split -> the fold's validation cases are the evaluation split
    pre = json.loads((runs["pairs"][0] / "run.json").read_text())["preprocessing"]
    assert pre["class_names"][1] == "class 1" and set(runs["pairs"][1]["final"]) == {"test", "recipe"}
    assert "no labelled test split" in (runs["pairs"][0] / "report.md").read_text()
    classes = json.loads((runs["pairs"][0] / "classes.json").read_text())
    assert classes["test_cases"] == classes["valid_cases"] == pre["split"]["valid"]


def test_summary_json_matches_a_hand_computation(runs, folders):
    run_dir, _ = runs["decathlon"]
    summary = json.loads((run_dir / "predictions" / "valid" / "summary.json").read_text())
    assert len(summary["metric_per_case"]) == 2 and set(summary["mean"]) == {str(k) for k in range(1, 9)}
    dice: dict[str, list[float]] = {str(k): [] for k in range(1, 9)}
    for case in summary["metric_per_case"]:
        reference, prediction = nib.load(case["reference_file"]), nib.load(case["prediction_file"])
        assert Path(case["reference_file"]).parent == folders["decathlon"] / "labelsTr"
        assert prediction.shape == reference.shape  # the original geometry
        np.testing.assert_allclose(prediction.affine, reference.affine, atol=1e-5)
        ref, pred = np.asarray(reference.dataobj), np.asarray(prediction.dataobj)
        for k in range(1, 9):
            tp, fp, fn = [int(np.sum(m)) for m in ((ref == k) & (pred == k), (ref != k) & (pred == k),
                                                    (ref == k) & (pred != k))]
            expected = math.nan if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)
            got = case["metrics"][str(k)]
            assert (got["TP"], got["FP"], got["FN"]) == (tp, fp, fn)
            assert got["Dice"] == pytest.approx(expected, nan_ok=True)
            dice[str(k)].append(expected)
    for k, values in dice.items():
        kept = [v for v in values if not math.isnan(v)]
        expected = sum(kept) / len(kept) if kept else math.nan
        assert summary["mean"][k]["Dice"] == pytest.approx(expected, nan_ok=True)


def test_evaluate_reproduces_the_training(runs, tmp_path):
    run_dir, summary = runs["decathlon"]
    metrics, folder = evaluate_run(load_run(run_dir), out=tmp_path / "eval")
    assert metrics == json.loads((run_dir / "metrics.json").read_text())["final"]  # bit for bit, after JSON
    for split in ("test", "valid"):
        assert read_records(folder, split) == read_records(run_dir, split)
        ours = json.loads((folder / "predictions" / split / "summary.json").read_text())
        trained = json.loads((run_dir / "predictions" / split / "summary.json").read_text())
        assert [c["metrics"] for c in ours["metric_per_case"]] == [c["metrics"] for c in trained["metric_per_case"]]


@pytest.mark.parametrize("layout", ["decathlon", "nnunet"])
def test_predict_writes_each_input_on_its_own_grid(runs, folders, tmp_path, layout):
    run = load_run(runs[layout][0])
    images, out = folders[layout] / "imagesTr", tmp_path / "pred"
    line = predict(run, [images], out, progress=False)
    assert line.startswith(f"wrote 4 label maps to {out}/")
    spacings = set()
    for label in sorted((folders[layout] / "labelsTr").glob("*.nii.gz")):  # anisotropic and isotropic cases
        reference, predicted = nib.load(label), nib.load(out / label.name)
        assert predicted.shape == reference.shape and predicted.get_data_dtype() == np.uint8
        np.testing.assert_allclose(predicted.affine, reference.affine, atol=1e-5)
        assert nib.aff2axcodes(predicted.affine) == nib.aff2axcodes(reference.affine)
        spacings.add(round(float(max(reference.header.get_zooms())), 2))
    assert 2.5 in spacings and min(spacings) < 1.0  # both kinds were predicted


def test_predict_with_labels_scores_as_the_evaluation_does(runs, folders, tmp_path):
    run_dir, _ = runs["decathlon"]
    line = predict(load_run(run_dir), [folders["decathlon"] / "imagesTs"], tmp_path, progress=False,
                   labels=folders["decathlon"] / "labelsTs")
    assert "nnU-Net Dice" in line and "over 1 case" in line
    assert read_records(tmp_path, "predict") == read_records(run_dir, "test")  # records and data hash
    ours = json.loads((tmp_path / "summary.json").read_text())
    trained = json.loads((run_dir / "predictions" / "test" / "summary.json").read_text())
    assert ours["mean"] == trained["mean"]


def test_a_flipped_case_gives_the_flipped_prediction(runs, folders, tmp_path):
    source = nib.load(folders["decathlon"] / "imagesTs" / "case0001.nii.gz")  # stored as LPS
    (tmp_path / "in").mkdir()
    shutil.copy(folders["decathlon"] / "imagesTs" / "case0001.nii.gz", tmp_path / "in" / "plain.nii.gz")
    transforms = {}
    for codes in ("RAS", "SAR", "LPI"):  # flipped in-plane, axes permuted, slices reversed
        transforms[codes] = nib.orientations.ornt_transform(nib.orientations.io_orientation(source.affine),
                                                            nib.orientations.axcodes2ornt(codes))
        nib.save(source.as_reoriented(transforms[codes]), tmp_path / "in" / f"{codes}.nii.gz")
    predict(load_run(runs["decathlon"][0]), [tmp_path / "in"], tmp_path / "out", progress=False)
    plain = nib.load(tmp_path / "out" / "plain.nii.gz")
    for codes, transform in transforms.items():
        flipped = nib.load(tmp_path / "out" / f"{codes}.nii.gz")
        expected = plain.as_reoriented(transform)
        assert flipped.shape == expected.shape and nib.aff2axcodes(flipped.affine) == tuple(codes)
        np.testing.assert_allclose(flipped.affine, expected.affine, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(flipped.dataobj), np.asarray(expected.dataobj))


def test_restored_run_needs_no_data_and_refuses_other_inputs(runs, folders, tmp_path):
    run = load_run(runs["nnunet"][0])
    assert not hasattr(run.task, "data") and run.task.reference_args() == (2, 9, 32)
    with torch.no_grad():
        logits = run.model(torch.zeros(1, 2, 32, 32))
    assert logits.shape == (1, 9, 32, 32)
    (tmp_path / "in").mkdir()
    shutil.copy(folders["nnunet"] / "imagesTs" / "case0001_0000.nii.gz", tmp_path / "in")
    with pytest.raises(FileNotFoundError, match=r"case0001_0001\.nii\.gz is missing: case case0001 has 1 of"):
        predict(run, [tmp_path / "in"], tmp_path / "out", progress=False)
    (tmp_path / "x.h5").write_bytes(b"")
    with pytest.raises(ValueError, match="trained on NIfTI data"):
        predict(run, [tmp_path / "x.h5"], tmp_path / "out", progress=False)
    with pytest.raises(ValueError, match="the predictions would replace the references"):
        predict(load_run(runs["decathlon"][0]), [folders["decathlon"] / "imagesTs"], folders["decathlon"] / "labelsTs",
                progress=False, labels=folders["decathlon"] / "labelsTs")


def test_saved_probabilities_agree_with_the_label_maps_voxel_for_voxel(runs, folders, tmp_path):
    """Slices zoomed 32 -> 32-36 px and back, anisotropic cases resampled to the run's spacing and back: the arg-max
    of each CASE.npz is the written label map everywhere (a linear zoom of the probabilities moved boundaries)."""
    run = load_run(runs["decathlon"][0])
    images = sorted((folders["decathlon"] / "imagesTr").glob("*.nii.gz"))
    predict(run, images, tmp_path, progress=False, save_probabilities=True)
    for image in images:
        label = np.asarray(nib.load(tmp_path / image.name).dataobj)  # (X, Y, Z) on the input's grid
        saved = np.load(tmp_path / image.name.replace(".nii.gz", ".npz"))
        probabilities = saved["probabilities"]  # (K, X, Y, Z)
        assert probabilities.dtype == np.float32 and probabilities.shape == (run.task.num_classes, *label.shape)
        np.testing.assert_array_equal(probabilities.argmax(0), label)
        np.testing.assert_allclose(probabilities.sum(0), 1.0, rtol=1e-5)
        np.testing.assert_allclose(saved["spacing"], nib.load(image).header.get_zooms()[:3], rtol=1e-5)
