"""Using a finished medseg run: load_run without data, zoo evaluate, zoo predict on every volume layout, export."""

import json

import h5py
import numpy as np
import pytest
import torch

from tasks.cli.main import main
from tasks.medseg.inference.predict import predict
from tasks.medseg.reading.data import SYNAPSE_CLASSES
from tasks.medseg.reading.phantom import write_phantom
from tasks.medseg.task import MedsegConfig, MedsegTask
from tasks.runs.evaluate import evaluate_run
from tasks.runs.export import export_run
from tasks.runs.records import read_records
from tasks.runs.run import load_run
from tasks.runs.training import train
from tests.conftest import weight_dtypes

SMALL = {"image_size": 32, "epochs": 1, "batch_size": 4, "valid_cases": 1, "progress": False, "overlay_slices": 0,
         "device": "cpu"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Three training and two test cases of 5 slices of 48–64 pixels, in the Synapse layout."""
    root = tmp_path_factory.mktemp("synapse") / "tiny"
    return write_phantom(root, seed=3, slices=5, size=(48, 64), train_cases=("case0005", "case0006", "case0007"),
                         test_cases=("case0001", "case0002"))


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    """A one-epoch MISSFormer (tiny preset) run on ``data``: (run folder, the training's summary)."""
    out = tmp_path_factory.mktemp("runs") / "missformer"
    config = MedsegConfig(data=str(data), variant="missformer", preset="tiny", out=str(out), **SMALL)
    return out, train(MedsegTask, config)


@pytest.fixture(scope="module")
def acdc(tmp_path_factory):
    """An ACDC folder in the MT-UNet npz layout (4 classes), and an SSL4MIS-style h5 volume next to it."""
    root = tmp_path_factory.mktemp("acdc")
    rng = np.random.default_rng(0)
    for split, names in (("train", [f"case_{c:03d}_sliceED_{z}" for c in (1, 3, 4) for z in range(3)]),
                         ("test", ["case_002_volume_ED"])):
        (root / split).mkdir()
        for name in names:
            shape = (3, 40, 36) if "volume" in name else (40, 36)
            np.savez(root / split / f"{name}.npz", img=rng.random(shape, dtype=np.float32),
                     label=rng.integers(0, 4, shape).astype(np.uint8))
    (root / "h5").mkdir()
    with h5py.File(root / "h5" / "patient001_frame01.h5", "w") as f:
        f.create_dataset("image", data=rng.random((4, 44, 40), dtype=np.float32))
        f.create_dataset("label", data=rng.integers(0, 4, (4, 44, 40)).astype(np.uint8))
    return root


def loaded(run_dir):
    """The run, restored, with its own data read (to call predict_volume on the loader's volumes)."""
    run = load_run(run_dir)
    run.task.setup()
    return run


def test_load_run_restores_the_preprocessing_without_data(trained):
    out, _ = trained
    run = load_run(out)
    assert run.task.cases.data is None and run.task.class_names == SYNAPSE_CLASSES
    assert run.task.reference_args() == (1, 9, 32)
    pre = run.preprocessing
    assert pre["dataset"] == "synapse" and pre["num_classes"] == 9 and pre["image_size"] == 32
    assert pre["slice_axis"] == 0 and pre["intensity_range"] == [0.0, 1.0] and "[0, 1]" in pre["intensity"]
    classes = json.loads((out / "classes.json").read_text())  # classes.json: the same preprocessing, plus the cases
    assert {k: classes[k] for k in pre} == pre and classes["test_cases"] == ["case0001", "case0002"]


def test_evaluate_reproduces_the_training_numbers(trained, tmp_path):
    out, summary = trained
    run = load_run(out)
    metrics, folder = evaluate_run(run, out=tmp_path / "eval")
    assert metrics == json.loads((out / "metrics.json").read_text())["final"]  # bit for bit, after JSON
    assert not hasattr(run.task, "train_images")  # a restored setup zooms no training slices
    records, data_hash = read_records(folder, "test")
    trained_records, trained_hash = read_records(out, "test")
    assert records == trained_records and data_hash == trained_hash and data_hash.startswith("sha256:")
    record = records[0]
    assert set(record) == {"case", "papers", "mm", "voxels", "spacing", "nsd_tolerance"}
    assert record["case"] == "case0001" and record["nsd_tolerance"] == 1.0
    assert list(record["papers"]) == SYNAPSE_CLASSES[1:] and set(record["mm"]["liver"]) == {"dice", "hd95", "nsd"}
    assert set(record["voxels"]["liver"]) == {"pred", "ref"} and len(record["spacing"]) == 3
    valid, _ = evaluate_run(load_run(out), split="valid", out=tmp_path / "valid")
    assert set(valid) == {"valid", "recipe"} and valid["recipe"] == "default"  # the recipe the run trained with
    assert len(read_records(tmp_path / "valid", "valid")[0]) == 1


def test_evaluate_refuses_data_with_other_classes(trained, acdc, tmp_path):
    with pytest.raises(ValueError, match=r"acdc data with 4 classes .* trained on 9"):
        evaluate_run(load_run(trained[0]), data=acdc, out=tmp_path)


def test_predict_writes_one_label_volume_per_input(trained, data, tmp_path):
    run = loaded(trained[0])
    summary = predict(run, [data / "test_vol_h5"], tmp_path / "out", progress=False)
    assert summary.startswith(f"wrote 2 label volumes to {tmp_path / 'out'}/")
    for volume in run.task.cases.data.test:
        with h5py.File(tmp_path / "out" / f"{volume.case}.npy.h5") as f:
            label, spacing = f["label"][()], tuple(f.attrs["spacing"])
        assert label.shape == volume.shape and label.dtype == np.uint8 and label.max() < 9
        np.testing.assert_array_equal(label, run.task.evaluator.predict_volume(run.model, volume))
        assert spacing == volume.spacing


def test_predict_computes_in_the_precision_the_run_trained_in(trained, data, tmp_path):
    run = load_run(trained[0])
    run.info["precision"] = "bf16"  # what a --precision bf16 run records in run.json
    with weight_dtypes(run.model) as seen:
        summary = predict(run, [data / "test_vol_h5" / "case0001.npy.h5"], tmp_path / "out", progress=False)
    assert seen == {torch.bfloat16} and summary.startswith("wrote 1 label volume")


def test_predict_with_labels_scores_as_evaluate_does(trained, data, tmp_path):
    run = load_run(trained[0])
    inputs = [data / "test_vol_h5" / "case0001.npy.h5", data / "test_vol_h5" / "case0002.npy.h5"]
    summary = predict(run, inputs, tmp_path / "a", progress=False, labels=data / "test_vol_h5")
    assert "mean Dice" in summary and "over 2 cases" in summary
    records, data_hash = read_records(tmp_path / "a", "predict")
    expected, expected_hash = read_records(trained[0], "test")  # the training's final evaluation
    assert records == expected and data_hash == expected_hash
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())["final"]["predict"]
    assert metrics["dice"] == json.loads((trained[0] / "metrics.json").read_text())["final"]["test"]["dice"]
    predict(run, inputs[1:], tmp_path / "b", progress=False, labels=True)  # the inputs hold their labels
    assert read_records(tmp_path / "b", "predict")[0] == expected[1:]


def test_predict_reads_and_writes_the_acdc_layouts(trained, acdc, tmp_path):
    run = load_run(trained[0])
    inputs = [acdc / "test" / "case_002_volume_ED.npz", acdc / "h5" / "patient001_frame01.h5"]
    predict(run, inputs, tmp_path, progress=False, batch_size=2)
    with np.load(tmp_path / "case_002_volume_ED.npz") as f:
        assert f["label"].shape == (3, 40, 36) and f["label"].dtype == np.uint8 and f["label"].max() < 9
    with h5py.File(tmp_path / "patient001_frame01.h5") as f:
        assert f["label"].shape == (4, 44, 40) and f["label"].dtype == np.uint8
        assert "spacing" not in f.attrs


def test_exported_run_predicts_identically(trained, data, tmp_path):
    exported = export_run(trained[0], tmp_path / "export")
    assert not (exported / "checkpoints").exists()
    for name, run_dir in (("original", trained[0]), ("exported", exported)):
        predict(load_run(run_dir), [data / "test_vol_h5"], tmp_path / name, progress=False)
    for case in ("case0001", "case0002"):
        with h5py.File(tmp_path / "original" / f"{case}.npy.h5") as a, \
                h5py.File(tmp_path / "exported" / f"{case}.npy.h5") as b:
            np.testing.assert_array_equal(a["label"][()], b["label"][()])


def _bad_inputs(root, data):
    """name -> (inputs, labels); each a mistake a user can make."""
    (root / "empty").mkdir()
    with h5py.File(root / "4d.h5", "w") as f:
        f.create_dataset("image", data=np.zeros((1, 3, 32, 32), np.float32))
    (root / "text.h5").write_text("not hdf5")
    np.savez(root / "nokey.npz", data=np.zeros((3, 32, 32), np.float32))
    (root / "notes.txt").write_text("x")
    with h5py.File(root / "small.h5", "w") as f:
        f.create_dataset("label", data=np.zeros((2, 8, 8), np.uint8))
    volume = data / "test_vol_h5" / "case0001.npy.h5"
    return {
        "empty input": ([], None),
        "empty folder": ([root / "empty"], None),
        "missing file": ([root / "nothing.h5"], None),
        "2D slice": ([data / "train_npz" / "case0005_slice000.npz"], None),
        "4D volume": ([root / "4d.h5"], None),
        "unreadable h5": ([root / "text.h5"], None),
        "missing key": ([root / "nokey.npz"], None),
        "unknown format": ([root / "notes.txt"], None),
        "labels of another shape": ([volume], root / "small.h5"),
        "no label file": ([volume], root / "empty"),
        "same name twice": ([volume, root / "copy" / volume.name], None),
    }


BAD = {
    "empty input": (ValueError, "no input volumes"),
    "empty folder": (FileNotFoundError, "no volume files"),
    "missing file": (FileNotFoundError, "does not exist"),
    "2D slice": (ValueError, "a 2D slice; zoo predict takes whole volumes"),
    "4D volume": (ValueError, r"expected a 3D volume \(D, H, W\); drop its length-1 axis"),
    "unreadable h5": (ValueError, "cannot read it as an HDF5 file"),
    "missing key": (ValueError, "no key 'img' or 'image'"),
    "unknown format": (ValueError, "is not a volume file"),
    "labels of another shape": (ValueError, r"label volume \(2, 8, 8\) does not match the input"),
    "no label file": (FileNotFoundError, "has no label volume for"),
    "same name twice": (ValueError, "have the same name"),
}


def test_bad_inputs_get_one_line_errors(trained, data, tmp_path):
    run = load_run(trained[0])
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "case0001.npy.h5").write_bytes((data / "test_vol_h5" / "case0001.npy.h5").read_bytes())
    for name, (inputs, labels) in _bad_inputs(tmp_path, data).items():
        error, message = BAD[name]
        with pytest.raises(error, match=message) as info:
            predict(run, inputs, tmp_path / "out", progress=False, labels=labels)
        assert "\n" not in str(info.value), name
    with pytest.raises(ValueError, match="which its prediction would replace"):
        predict(run, [data / "test_vol_h5"], data / "test_vol_h5", progress=False)


def test_the_command_line(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "medseg", "--data", str(data), "--variant", "basicunet", "--image-size", "32", "--epochs",
                 "1", "--batch-size", "4", "--valid-cases", "1", "--progress", "false", "--overlay-slices", "0",
                 "--out", str(out)]) == 0
    assert main(["evaluate", str(out), "--out", str(tmp_path / "eval")]) == 0
    trained = json.loads((out / "metrics.json").read_text())["final"]
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["final"] == trained
    assert main(["export", str(out), "--out", str(tmp_path / "export")]) == 0
    capsys.readouterr()
    for run_dir, pred in ((out, "a"), (tmp_path / "export", "b")):
        assert main(["predict", str(run_dir), str(data / "test_vol_h5"), "--out", str(tmp_path / pred), "--quiet",
                     "--labels", str(data / "test_vol_h5")]) == 0
        assert f"wrote 2 label volumes to {tmp_path / pred}/; mean Dice" in capsys.readouterr().out
    with h5py.File(tmp_path / "a" / "case0002.npy.h5") as a, h5py.File(tmp_path / "b" / "case0002.npy.h5") as b:
        np.testing.assert_array_equal(a["label"][()], b["label"][()])
    assert main(["predict", str(out), str(data / "train_npz" / "case0005_slice000.npz"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo predict: error: ") and "2D slice" in err and "\n" not in err
    assert main(["predict", str(out), "--attention", str(tmp_path)]) == 2
    assert "--attention is an option of cifar runs" in capsys.readouterr().err
    torch.testing.assert_close(load_run(out).model.state_dict(), load_run(tmp_path / "export").model.state_dict())


def test_onnx_export_segments_like_pytorch_through_onnxruntime(trained, data, tmp_path):
    """MISSFormer's slices graph (dynamic batch) predicts the same label volumes through onnxruntime."""
    out = export_run(trained[0], tmp_path / "onnx", "onnx")
    check = json.loads((out / "run.json").read_text())["onnx_check"]["model"]
    assert check["max_abs_diff"] <= check["limit"] and check["examples"].startswith("slices [7, 1, 32, 32]")
    assert check["exporter"] == "torchscript"  # channels_first/last move positive axes: see zoo/missformer/maps.py
    predict(load_run(trained[0]), [data / "test_vol_h5"], tmp_path / "torch", progress=False)
    predict(load_run(out, runtime="onnxruntime"), [data / "test_vol_h5"], tmp_path / "ort", progress=False)
    for case in ("case0001", "case0002"):
        with h5py.File(tmp_path / "torch" / f"{case}.npy.h5") as a, h5py.File(tmp_path / "ort" / f"{case}.npy.h5") as b:
            agree = (a["label"][()] == b["label"][()]).mean()
            assert agree > 0.999, (case, agree)  # float32 near-ties between two runtimes' kernels aside
