"""3D segmentation end to end on a tiny phantom NIfTI folder: patch training of a 3D variant (dynunet, preset tiny),
sliding-window evaluation and prediction on each input's own grid, a two-fold ``zoo cv`` predicted as an ensemble with
mirroring and saved probabilities, and a 2D and a 3D run compared on the same cases with paired tests.

Tiny folder: 4 training cases and 1 labelled test case of 20 slices of 40-48 pixels; patches of 16×32×32, flipped
along D and H (so that mirroring has axes to flip); one epoch.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

from tasks.cli.main import main
from tasks.medseg.cv import cross_validate
from tasks.medseg.inference.predict import predict
from tasks.medseg.preprocessing.nifti_geometry import probabilities_to_original
from tasks.medseg.reading.phantom_nifti import write_phantom_nifti
from tasks.medseg.task import MedsegConfig, MedsegTask
from tasks.runs.evaluate import evaluate_run
from tasks.runs.records import read_records
from tasks.runs.run import load_run
from tasks.runs.training import train

pytestmark = pytest.mark.slow  # 3D: trains a cross-validation on 3D phantoms (module fixture)

TRAIN = ("case0005", "case0006", "case0007", "case0008")
TINY3D = {"slices": 20, "size": (40, 48), "train_cases": TRAIN, "test_cases": ("case0001",)}
SMALL = {"epochs": 1, "batch_size": 2, "patches_per_case": 2, "folds": 2, "progress": False, "overlay_slices": 2,
         "device": "cpu", "variant": "dynunet", "preset": "tiny", "patch_size": "16,32,32", "flip_prob": 0.5}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("nifti3d")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_CACHE", str(root / "cache"))
        yield write_phantom_nifti(root / "dec", "decathlon", **TINY3D), root


@pytest.fixture(scope="module")
def cv(folder):
    """A two-fold cross-validation of the 3D CNN baseline: the folder of fold_0 and fold_1."""
    data, root = folder
    cross_validate(MedsegConfig(data=str(data), out=str(root / "cv"), **SMALL))
    return root / "cv"


def test_a_3d_run_records_its_patch_and_reports_the_sliding_window(cv):
    info = json.loads((cv / "fold_0" / "run.json").read_text())
    pre = info["preprocessing"]
    assert pre["spatial_dims"] == 3 and pre["patch_size"] == [16, 32, 32]
    assert len(pre["voxel_spacing"]) == 3 and "sliding window" in pre["resize"]
    report = (cv / "fold_0" / "report.md").read_text()
    assert "3D patches of 16×32×32 voxels" in report
    assert "sliding window of 16×32×32 voxels, overlap 0.5, gaussian weighting" in report
    final = json.loads((cv / "fold_0" / "metrics.json").read_text())["final"]["test"]
    assert 0.0 <= final["dice"] <= 1.0 and np.isfinite(final["dice"])
    records, _ = read_records(cv / "fold_0", "test")
    assert [r["case"] for r in records] == ["case0001"]


def test_evaluate_reproduces_the_training(cv, tmp_path):
    run = load_run(cv / "fold_0")
    metrics, _ = evaluate_run(run, out=tmp_path / "eval")
    trained = json.loads((cv / "fold_0" / "metrics.json").read_text())["final"]["test"]
    assert metrics["test"]["dice"] == trained["dice"] and metrics["test"]["hd95"] == trained["hd95"]


def test_a_run_folder_with_the_old_patch_text_loads_and_rescores_unchanged(cv, tmp_path):
    """Runs written before the config held a tuple record ``patch_size`` as the flag's text ("16,32,32") in
    config.json and run.json (this code writes a list): they load with the same tuple and score the same."""
    old = tmp_path / "old"
    shutil.copytree(cv / "fold_0", old)
    for name in ("config.json", "run.json"):
        record = json.loads((old / name).read_text())
        config = record if name == "config.json" else record["config"]
        assert config["patch_size"] == [16, 32, 32]
        config["patch_size"] = "16,32,32"
        (old / name).write_text(json.dumps(record))
    run = load_run(old)
    assert run.task.config.patch_size == run.task.patch_size == (16, 32, 32)
    assert type(run.task.config.patch_size) is tuple and type(run.task.patch_size) is tuple
    metrics, _ = evaluate_run(run, out=tmp_path / "eval")
    trained = json.loads((cv / "fold_0" / "metrics.json").read_text())["final"]["test"]
    assert metrics["test"]["dice"] == trained["dice"] and metrics["test"]["hd95"] == trained["hd95"]


def test_predictions_keep_each_inputs_shape_affine_and_orientation(cv, folder, tmp_path):
    data, _ = folder
    run = load_run(cv / "fold_0")
    inputs = sorted((data / "imagesTr").glob("*.nii.gz"))[:2] + sorted((data / "imagesTs").glob("*.nii.gz"))
    predict(run, inputs, tmp_path, progress=False, save_probabilities=True)
    for image in inputs:
        written, stored = nib.load(tmp_path / image.name), nib.load(image)
        assert written.shape == stored.shape
        np.testing.assert_allclose(written.affine, stored.affine, atol=1e-5)
        assert nib.aff2axcodes(written.affine) == nib.aff2axcodes(stored.affine)  # the phantom stores several
        saved = np.load(tmp_path / image.name.replace(".nii.gz", ".npz"))
        probabilities = saved["probabilities"]  # (K, X, Y, Z) on the input's grid, as the label map
        assert probabilities.dtype == np.float32 and probabilities.shape[1:] == stored.shape
        assert probabilities.shape[0] == run.task.num_classes == len(saved["class_names"])
        np.testing.assert_allclose(probabilities.sum(0), 1.0, rtol=1e-5)
        np.testing.assert_array_equal(probabilities.argmax(0), np.asarray(written.dataobj))  # voxel for voxel
        assert "input file's own array grid" in str(saved["grid"])


def test_a_fold_ensemble_averages_the_probabilities_of_two_different_folds(cv):
    """fold_0 and fold_1 learnt from different cases: the ensemble is the mean of their probabilities (not a vote of
    their labels, which would be 0, 1/2 or 1), differs from each, and its labels are the mean's arg-max."""
    folds = [load_run(cv / f"fold_{k}") for k in (0, 1)]
    task = folds[0].task
    task.setup()
    volume = task.volumes["test"][0]
    members = [task.evaluator.predict_probabilities(f.model, volume).double() for f in folds]  # (K, D, H, W) each
    ensemble = task.evaluator.predict_probabilities([f.model for f in folds], volume)
    assert ensemble.shape == (task.num_classes, *volume.shape)
    mean = (members[0] + members[1]) / 2
    torch.testing.assert_close(ensemble.double(), mean, rtol=0, atol=1e-6)
    for member in members:
        assert (ensemble.double() - member).abs().max() > 1e-3  # the two folds differ, and each from the mean
    votes = sum(torch.nn.functional.one_hot(m.argmax(0), task.num_classes).movedim(-1, 0).double()
                for m in members) / 2  # (K, D, H, W) in {0, 1/2, 1}
    assert (ensemble.double() - votes).abs().max() > 0.1
    labels = task.evaluator.predict_volume([f.model for f in folds], volume)
    np.testing.assert_array_equal(labels, mean.argmax(0).numpy())


def test_a_cv_folder_predicts_and_evaluates_as_an_ensemble_with_mirroring(cv, folder, tmp_path, capsys):
    data, _ = folder
    inputs = sorted((data / "imagesTs").glob("*.nii.gz"))
    out = tmp_path / "pred"
    assert main(["predict", str(cv), *map(str, inputs), "--out", str(out), "--tta", "mirror", "--save-probabilities",
                 "--labels", str(data / "labelsTs"), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "mean Dice" in printed and "(mirroring: probabilities averaged over 4 flips along axes D, H; " in printed
    folds = [load_run(cv / f"fold_{k}") for k in (0, 1)]
    task = folds[0].task
    task.config = type(task.config)(**{**task.config.to_dict(), "tta": "mirror"})
    task.setup()
    volume = task.volumes["test"][0]
    # the mean over folds and flips
    expected = task.evaluator.predict_probabilities([f.model for f in folds], volume, mirror=True)
    on_input = probabilities_to_original(expected.numpy(), task.cases.data.nifti.geometry[volume.case])  # as the labels
    saved = np.load(out / inputs[0].name.replace(".nii.gz", ".npz"))["probabilities"]
    np.testing.assert_allclose(saved, on_input, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(saved.argmax(0), np.asarray(nib.load(out / inputs[0].name).dataobj))
    assert task.evaluator.mirror_axes() == (0, 1)  # the axes training flipped: the phantom's W runs from left to right
    assert main(["evaluate", str(cv), "--tta", "mirror", "--out", str(tmp_path / "eval")]) == 0
    report = (tmp_path / "eval" / "report.md").read_text()
    assert "ensemble of 2 models" in report and "4 flips along axes D, H; mirroring flips only axes training " \
        "flipped (training flipped axes D, H; never the left-right axis W)" in report
    summary = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert summary["ensemble"] == [str(cv / "fold_0"), str(cv / "fold_1")]


def test_a_2d_and_a_3d_run_compare_on_the_same_cases(cv, folder, tmp_path):
    from tasks.compare.sweep import compare_runs

    data, root = folder
    two_d = MedsegConfig(data=str(data), out=str(tmp_path / "unet2d"), **{**SMALL, "variant": "basicunet",
                                                                         "preset": None, "image_size": 32})
    train(MedsegTask, two_d)
    comparison = compare_runs("medseg", [tmp_path / "unet2d", cv / "fold_0"], tmp_path / "compare",
                              baseline="basicunet")
    text = (tmp_path / "compare" / "report.md").read_text()
    assert "dynunet" in text and "basicunet" in text
    rows = {row["variant"]: row for row in comparison["rows"]}
    assert set(rows) == {"basicunet", "dynunet"}
    assert rows["dynunet"]["delta"] is not None and len(rows["dynunet"]["delta_ci95"]) == 2  # paired, case by case


def test_a_patch_larger_than_every_case_is_refused(folder, tmp_path):
    data, _ = folder
    config = MedsegConfig(data=str(data), out=str(tmp_path / "run"), **{**SMALL, "patch_size": "64,32,32"})
    with pytest.raises(ValueError, match="larger than every training case along axis 0"):
        train(MedsegTask, config)


def test_a_missing_fold_is_refused_by_predict(cv, folder, tmp_path, capsys):
    import shutil

    data, _ = folder
    partial = tmp_path / "partial"
    shutil.copytree(cv, partial, ignore=shutil.ignore_patterns("fold_1"))
    image = str(next((data / "imagesTs").glob("*.nii.gz")))
    assert main(["predict", str(partial), image, "--out", str(tmp_path / "p")]) != 0
    error = capsys.readouterr().err.strip()
    assert "has 2 folds but no finished run in fold_1" in error and len(error.splitlines()) == 1  # one line


def test_predictions_of_3d_runs_need_their_patch(cv):
    info = json.loads((Path(cv) / "fold_0" / "run.json").read_text())
    assert info["variant"] == "dynunet" and info["variant_config"]["patch_size"] == [16, 32, 32]


def test_missformer3d_trains_with_the_default_patch(folder, tmp_path):
    data, _ = folder  # 20-22 slices of 40-48 pixels: the patch is padded up to what the model divides by (32)
    config = MedsegConfig(data=str(data), out=str(tmp_path / "mf3d"),
                          **{**SMALL, "variant": "missformer3d", "patch_size": None, "patches_per_case": 1})
    summary = train(MedsegTask, config)
    pre = json.loads((tmp_path / "mf3d" / "run.json").read_text())["preprocessing"]
    assert pre["patch_size"] == [32, 64, 64] and pre["spatial_dims"] == 3  # each side rounded up to 32
    assert summary["final"]["test"]["dice"] >= 0.0


def test_onnx_export_of_a_3d_run_segments_like_pytorch(cv, folder, tmp_path):
    """The 3D CNN's patch graph, run by onnxruntime inside MONAI's sliding window, gives PyTorch's label maps."""
    from tasks.runs.export import export_run

    data, _ = folder
    out = export_run(cv / "fold_0", tmp_path / "onnx", "onnx")
    check = json.loads((out / "run.json").read_text())["onnx_check"]["model"]
    assert check["max_abs_diff"] <= check["limit"] and check["examples"] == "patches [3, 1, 16, 32, 32]"
    assert check["traced"] == "patches [2, 1, 16, 32, 32]"  # the batch is checked at another size than traced
    inputs = sorted((data / "imagesTs").glob("*.nii.gz"))
    predict(load_run(cv / "fold_0"), inputs, tmp_path / "torch", progress=False)
    predict(load_run(out, runtime="onnxruntime"), inputs, tmp_path / "ort", progress=False)
    for image in inputs:
        a = np.asarray(nib.load(tmp_path / "torch" / image.name).dataobj)
        b = np.asarray(nib.load(tmp_path / "ort" / image.name).dataobj)
        assert (a == b).mean() > 0.999
