"""NIfTI medseg through the command line: `zoo cv` (a finished fold is reused), `zoo evaluate medseg --pred
--labels`, and one-line errors for each bad NIfTI input and option."""

from __future__ import annotations

import functools
import json
import re
import shutil

import nibabel as nib
import numpy as np
import pytest

import tasks.medseg.reading.phantom_nifti as phantom_nifti
from tasks.cli.main import main
from tasks.medseg.reading.data import load_medseg
from tasks.medseg.reading.phantom_nifti import write_phantom_nifti
from tests.tasks.medseg.test_medseg_nifti import _rewrite_json, anatomy, decathlon, lps_affine, nnunet, save

pytestmark = pytest.mark.slow  # cross-validation and training through the command line on NIfTI folders

TRAIN = ("case0005", "case0006", "case0007", "case0008")
FLAGS = ["--variant", "basicunet", "--image-size", "32", "--epochs", "1", "--batch-size", "4", "--progress", "false",
         "--overlay-slices", "0", "--device", "cpu"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A folder with the NIfTI cache and a Decathlon phantom (4 training cases) turned into images/ + labels/."""
    root = tmp_path_factory.mktemp("cli")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_CACHE", str(root / "cache"))
        dec = write_phantom_nifti(root / "dec", "decathlon", slices=6, size=(32, 36), train_cases=TRAIN,
                                  test_cases=("case0001",))
        shutil.copytree(dec / "imagesTr", root / "pairs" / "images")
        shutil.copytree(dec / "labelsTr", root / "pairs" / "labels")
        yield root


@pytest.fixture(scope="module")
def cv(root):
    """``zoo cv`` of fold 0 alone, then of every fold: (output folder, stdout of the second)."""
    out = root / "cv"
    command = ["cv", "medseg", "--data", str(root / "pairs"), "--out", str(out), "--folds", "2", *FLAGS]
    assert main([*command, "--fold", "0"]) == 0
    stamp = (out / "fold_0" / "checkpoints" / "best.pt").stat().st_mtime_ns
    assert main(command) == 0
    assert (out / "fold_0" / "checkpoints" / "best.pt").stat().st_mtime_ns == stamp  # not retrained
    return out, command


def test_zoo_cv_on_the_local_launcher_trains_the_folds_the_serial_cv_does(root):
    """The folds as parallel worker processes (`--launcher local --jobs 2`) give the in-process cv's numbers, at the
    same thread count."""
    runs = {}
    for name, launch in (("serial", []), ("local", ["--launcher", "local", "--jobs", "2"])):
        out = root / f"cv-{name}"
        assert main(["cv", "medseg", "--data", str(root / "pairs"), "--out", str(out), "--folds", "2", *FLAGS,
                     "--num-threads", "1", *launch]) == 0
        runs[name] = json.loads((out / "cv.json").read_text())
    assert runs["local"]["trained"] == [0, 1]
    for key in ("dice", "hd95", "dice_mm", "hd95_mm", "nnunet_dice"):
        assert [f[key] for f in runs["local"]["per_fold"]] == [f[key] for f in runs["serial"]["per_fold"]], key
    sweep = json.loads((root / "cv-local" / "sweep.json").read_text())
    assert sweep["sweep"]["kind"] == "cv" and set(sweep["runs"]) == {"fold_0", "fold_1"}
    assert all("outputs in" in (root / "cv-local" / f"fold_{k}" / "train.log").read_text() for k in (0, 1))
    assert main(["sweep", str(root / "cv-local" / "sweep.json")]) == 0  # the recorded sweep, run again: all reused
    assert json.loads((root / "cv-local" / "cv.json").read_text())["skipped"] == [0, 1]


def test_zoo_cv_trains_each_fold_once_and_summarises(cv, capsys):
    out, command = cv
    summary = json.loads((out / "cv.json").read_text())
    assert summary["trained"] == [1] and summary["skipped"] == [0]
    folds = json.loads((out / "splits_final.json").read_text())
    assert sorted(c for f in folds for c in f["val"]) == list(TRAIN)  # every case validated exactly once
    per_fold = summary["per_fold"]
    assert [r["val"] for r in per_fold] == [f["val"] for f in folds] and {r["split"] for r in per_fold} == {"test"}
    dice = [json.loads((out / f"fold_{k}" / "metrics.json").read_text())["final"]["test"]["dice"] for k in (0, 1)]
    assert [r["dice"] for r in per_fold] == dice
    over = summary["over_folds"]["dice"]
    assert over["mean"] == pytest.approx(np.mean(dice)) and over["sd"] == pytest.approx(np.std(dice, ddof=1))
    liver = summary["over_folds"]["classes"]["papers"]["class 5"]["dice"]["values"]
    assert len(liver) == 2 and "Per class, papers convention" in (out / "report.md").read_text()
    pooled = json.loads((out / "crossval_summary.json").read_text())
    assert len(pooled["metric_per_case"]) == len(TRAIN)
    capsys.readouterr()
    assert main(command) == 0  # a third time: nothing to train
    printed = capsys.readouterr().out
    assert "trained folds none, reused [0, 1]" in printed and "over folds: Dice" in printed
    assert main([*command, "--lr", "0.01"]) == 2
    err = capsys.readouterr().err.strip()
    assert "fold_0 was trained with other settings (lr: 0.002 -> 0.01)" in err and "\n" not in err


def test_zoo_evaluate_scores_two_folders(cv, root, tmp_path, capsys):
    out, _ = cv
    pred = out / "fold_0" / "predictions" / "test"
    assert main(["evaluate", "medseg", "--pred", str(pred), "--labels", str(root / "pairs" / "labels"), "--chill",
                 "--out", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    assert "2 cases of" in printed and "| class 5 |" in printed  # no dataset.json: classes from the label values
    trained = json.loads((pred / "summary.json").read_text())
    again = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert [c["metrics"] for c in again["metric_per_case"]] == [c["metrics"] for c in trained["metric_per_case"]]
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert set(metrics["conventions"]) == {"papers", "mm"} and metrics["nnunet_dice"] == pytest.approx(
        trained["foreground_mean"]["Dice"])
    assert main(["evaluate", "medseg", "--pred", str(pred), "--labels", str(root / "pairs" / "labels"), "--chill",
                 "--dataset-json", str(root / "dec" / "dataset.json"), "--out", str(tmp_path / "b")]) == 0
    assert "| liver |" in capsys.readouterr().out
    moved = tmp_path / "moved"  # a prediction on another grid: refused, naming both files
    shutil.copytree(pred, moved, ignore=shutil.ignore_patterns("*.json"))
    first = sorted(moved.glob("*.nii.gz"))[0]
    image = nib.load(first)
    affine = image.affine.copy()
    affine[0, 3] += 2.0
    nib.save(nib.Nifti1Image(np.asarray(image.dataobj), affine), first)
    assert main(["evaluate", "medseg", "--pred", str(moved), "--labels", str(root / "pairs" / "labels"),
                 "--chill"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo evaluate: error: ") and "affine differs from its reference" in err and "\n" not in err
    assert main(["evaluate", "medseg", "--pred", str(moved)]) == 2
    assert "--pred DIR --labels DIR" in capsys.readouterr().err


def test_zoo_evaluate_writes_nothing_when_it_refuses(root, tmp_path, capsys):
    labels = root / "pairs" / "labels"
    pred = tmp_path / "pred"
    shutil.copytree(labels, pred)
    first = sorted(pred.glob("*.nii.gz"))[0]
    image = nib.load(first)
    values = np.asarray(image.dataobj).copy()
    top = int(max(np.asarray(nib.load(f).dataobj).max() for f in labels.glob("*.nii.gz")))
    values[0, 0, 0] = top + 1  # a class the references do not have
    nib.save(nib.Nifti1Image(values, image.affine), first)
    for out in ([], ["--out", str(tmp_path / "out")]):
        assert main(["evaluate", "medseg", "--pred", str(pred), "--labels", str(labels), *out]) == 2
        err = capsys.readouterr().err.strip()
        assert f"fall outside the {top + 1} classes" in err and "\n" not in err
        assert not (tmp_path / "out").exists()  # not even the folder
        assert sorted(p.name for p in pred.iterdir() if not p.name.endswith(".nii.gz")) == []  # no summary.json


def _bad_folders(tmp):
    """name -> (data folder, extra flags); each a mistake a user can make."""
    missing = decathlon(tmp / "no-json")
    (missing / "dataset.json").unlink()
    fields = decathlon(tmp / "fields")
    _rewrite_json(fields, labels=None)
    unlabelled = decathlon(tmp / "unlabelled")
    (unlabelled / "labelsTr" / "b.nii.gz").unlink()
    _, label = anatomy()
    shape = decathlon(tmp / "shape")
    save(shape / "labelsTr" / "a.nii.gz", label[:, :, :-1], lps_affine())
    grid = decathlon(tmp / "grid")
    shifted = lps_affine()
    shifted[2, 3] += 2.5
    save(grid / "labelsTr" / "a.nii.gz", label, shifted)
    values = decathlon(tmp / "values")
    label3 = label.copy()
    label3[0, 0, 0] = 3
    save(values / "labelsTr" / "c.nii.gz", label3, lps_affine(), "RAS")
    flat = decathlon(tmp / "flat")
    nib.save(nib.Nifti1Image(np.zeros((6, 7), np.float32), np.eye(4)), flat / "imagesTr" / "a.nii.gz")
    channel = nnunet(tmp / "channel", channels=("T1", "T2"))
    (channel / "imagesTr" / "b_0001.nii.gz").unlink()
    broken = decathlon(tmp / "broken")
    (broken / "imagesTr" / "c.nii.gz").write_bytes(b"not a nifti file")
    ok = decathlon(tmp / "ok")
    return {
        "dataset.json missing": (missing, [], r"no-json/dataset\.json not found"),
        "dataset.json without labels": (fields, [], r"missing required field\(s\) labels"),
        "image without label": (unlabelled, [], r"imagesTr/b\.nii\.gz has no label"),
        "label of another shape": (shape, [], r"label shape \(6, 7, 4\) differs from its image"),
        "label on another grid": (grid, [], "label affine differs from its image"),
        "label values outside the classes": (values, [], r"label values 0 \.\. 3 fall outside the 3 declared"),
        "2D NIfTI": (flat, [], r"a 2D NIfTI \(6, 7\); expected a 3D volume"),
        "channel file missing": (channel, [], r"b_0001\.nii\.gz is missing: case b has 1 of the 2"),
        "unreadable file": (broken, [], r"c\.nii\.gz: cannot read it as NIfTI"),
        "more folds than cases": (ok, [], "--folds 5 needs at least 5 training cases, the data has 3"),
        "fold all in zoo train": (ok, ["--fold", "all"], "run `zoo cv medseg`"),
        "fold out of range": (ok, ["--folds", "2", "--fold", "2"], r"fold must be 0 \.\. 1 with --folds 2"),
        "bad spacing": (ok, ["--spacing", "0.8,0.8"], "spacing must be three positive numbers"),
        "bad window": (ok, ["--ct-window=275,-125"], "ct_window must be LO,HI in HU with LO < HI"),
        "bad image order": (ok, ["--image-order", "2"], r"image_order must be 1 \(linear\) or 3"),
        "splits file missing": (ok, ["--splits", str(tmp / "nope.json")], r"--splits .*nope\.json does not exist"),
    }


def test_bad_inputs_get_one_line_errors(root, tmp_path, capsys):
    for name, (folder, flags, message) in _bad_folders(tmp_path).items():
        assert main(["train", "medseg", "--data", str(folder), "--out", str(tmp_path / "out"), *FLAGS, *flags]) == 2, \
            name
        err = capsys.readouterr().err.strip()
        assert err.startswith("zoo train: error: ") and "\n" not in err, (name, err)
        assert re.search(message, err), (name, err)
        assert not (tmp_path / "out").exists(), name  # refused before anything was written


def test_dataset_phantom_nifti_writes_and_reads_the_phantom_folder(root, tmp_path, monkeypatch):
    tiny = functools.partial(phantom_nifti.write_phantom_nifti, slices=6, size=(32, 36), train_cases=TRAIN[:2],
                             test_cases=("case0001",))  # the default phantom, smaller
    monkeypatch.setattr(phantom_nifti, "write_phantom_nifti", tiny)
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    for dataset, layout in (("phantom-nifti", "decathlon"), ("phantom-nnunet", "nnunet")):
        data = load_medseg(None, dataset)
        assert data.nifti.layout == layout and data.name == "PhantomAbdomen" and len(data.test) == 1
        assert data.source == str(phantom_nifti.default_phantom_nifti_dir(layout))
    with pytest.raises(ValueError, match="writes the phantom as a NIfTI folder itself; leave out --data"):
        load_medseg(root / "pairs", "phantom-nifti")
