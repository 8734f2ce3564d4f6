"""Using a trained image run: zoo evaluate reproduces the training's numbers, zoo predict on image files, export."""

from __future__ import annotations

import csv
import dataclasses
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import zoo
from tasks.cifar.datasets import EMBEDDED
from tasks.cifar.predict import predict
from tasks.cifar.task import CifarConfig, CifarTask
from tasks.cli.main import main
from tasks.runs.evaluate import evaluate_run
from tasks.runs.export import export_run
from tasks.runs.records import read_records, split_hash
from tasks.runs.training import train
from tests.conftest import weight_dtypes

N_TRAIN, N_TEST = 300, 60


def write_idx(path: Path, array: np.ndarray) -> None:
    """An idx file of unsigned bytes (the MNIST format)."""
    header = bytes([0, 0, 8, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes()
    path.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def write_fmnist(folder: Path, n_train: int = N_TRAIN, n_test: int = N_TEST, offset: int = 0) -> Path:
    """A small Fashion-MNIST folder (28×28 idx files) cut from the embedded subset."""
    folder.mkdir(parents=True)
    with np.load(EMBEDDED) as npz:
        arrays = {"train-images-idx3-ubyte": npz["x_train"][offset : offset + n_train],
                  "train-labels-idx1-ubyte": npz["y_train"][offset : offset + n_train],
                  "t10k-images-idx3-ubyte": npz["x_test"][offset : offset + n_test],
                  "t10k-labels-idx1-ubyte": npz["y_test"][offset : offset + n_test]}
    for name, array in arrays.items():
        write_idx(folder / name, array)
    return folder


def write_cifar10(root: Path, per_batch: int = 4) -> Path:
    """A tiny CIFAR-10 folder (3 channels) in the python-batch layout."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                 "labels": rng.integers(0, 10, per_batch).tolist()}
        (folder / name).write_bytes(pickle.dumps(batch))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}))
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny ViT trained one epoch on 300 Fashion-MNIST images (a few seconds) and its training summary."""
    root = tmp_path_factory.mktemp("cifar_use")
    data = write_fmnist(root / "fmnist")
    torch.manual_seed(0)
    config = CifarConfig(variant="vit", preset="tiny", data=str(data), out=str(root / "run"), epochs=1,
                         batch_size=50, warmup=2, eval_batch_size=25, attention_images=2, progress=False,
                         device="cpu")
    summary = train(CifarTask, config)
    return root / "run", summary


@pytest.fixture(scope="module")
def test_images(trained):
    """The run's first test images as 28×28 uint8 arrays (the padding cropped off) and as the model sees them."""
    with np.load(EMBEDDED) as npz:
        native = npz["x_test"][:7]  # (7, 28, 28)
    padded = torch.from_numpy(np.pad(native, ((0, 0), (2, 2), (2, 2)))[:, None])  # (7, 1, 32, 32)
    return native, padded


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


# --- evaluate --------------------------------------------------------------------------------------------


def test_evaluate_reproduces_the_training_numbers_and_records(trained, tmp_path):
    path, summary = trained
    run = zoo.load_run(path)
    assert run.task.restored is not None and not hasattr(run.task, "data")  # no data read to restore
    assert run.preprocessing["native_size"] == [28, 28] and run.preprocessing["in_channels"] == 1
    metrics, out = evaluate_run(run, out=tmp_path / "eval")
    assert metrics == summary["final"]  # bit for bit on the CPU
    assert json.loads((out / "metrics.json").read_text())["final"] == summary["final"]
    records, data_hash = read_records(out, "test")
    trained_records, trained_hash = read_records(path, "test")
    assert records == trained_records and data_hash == trained_hash
    assert len(records) == N_TEST and [r["id"] for r in records] == list(range(N_TEST))
    first = records[0]
    assert set(first) == {"id", "label", "prediction", "p_label", "top5", "label_name", "prediction_name"}
    assert first["prediction"] == first["top5"][0][0] and len(first["top5"]) == 5
    assert sum(r["prediction"] == r["label"] for r in records) / N_TEST == summary["final"]["test"]["top1"]
    images, labels = run.task.arrays["test"]
    assert data_hash == split_hash([images, labels])

    valid, out = evaluate_run(run, split="valid", out=tmp_path / "valid")
    assert list(valid) == ["valid"] and len(read_records(out, "valid")[0]) == N_TRAIN // 10
    with pytest.raises(ValueError, match="Did you mean 'test'"):
        evaluate_run(run, split="tset")


def test_restored_setup_keeps_the_normalisation_and_refuses_other_data(trained, tmp_path):
    path, _ = trained
    run = zoo.load_run(path)
    mean, std = run.task.mean, run.task.std
    other = write_fmnist(tmp_path / "other", n_train=200, n_test=20, offset=500)
    evaluate_run(run, data=other, out=tmp_path / "eval")
    assert run.task.mean == mean and run.task.std == std  # not refitted on the new images
    assert "train" not in run.task.images  # evaluation does not prepare the training images
    with pytest.raises(ValueError, match=r"3 channel\(s\).*trained on fmnist with 1 channel"):
        evaluate_run(zoo.load_run(path), data=write_cifar10(tmp_path / "cifar"))


# --- predict ---------------------------------------------------------------------------------------------


def test_png_files_are_classified_as_the_tensors(trained, test_images, tmp_path):
    path, _ = trained
    run = zoo.load_run(path)
    native, padded = test_images
    folder = tmp_path / "pngs"
    folder.mkdir()
    for i, image in enumerate(native):
        Image.fromarray(image, mode="L").save(folder / f"img{i}.png")
    probs = run.task.logits(run.model, padded).softmax(-1)  # (7, K)
    names = run.task.class_names
    expected = [names[k] for k in probs.argmax(-1).tolist()]

    summary = predict(run, [str(folder)], str(tmp_path / "out.csv"), progress=False, batch_size=3)
    assert "classified 7 image(s)" in summary
    rows = read_csv(tmp_path / "out.csv")
    assert [r["path"] for r in rows] == [str(folder / f"img{i}.png") for i in range(7)]
    assert [r["class"] for r in rows] == expected
    for row, p in zip(rows, probs):
        top5 = [item.split(":") for item in row["top5"].split(";")]
        assert len(top5) == 5 and top5[0][0] == row["class"] and row["probability"] == top5[0][1]
        assert float(row["probability"]) == pytest.approx(float(p.max()), abs=1e-4)

    # the same images in other modes and sizes: RGB, RGBA, 16-bit grayscale (exact), and larger (converted)
    files = []
    for i, image in enumerate(native[:3]):
        for kind, picture in (("rgb", Image.fromarray(np.stack([image] * 3, -1), mode="RGB")),
                              ("rgba", Image.fromarray(np.stack([image] * 3 + [np.full_like(image, 255)], -1))),
                              ("16bit", Image.fromarray(image.astype(np.uint16) * 257)),
                              ("large", Image.fromarray(image, mode="L").resize((96, 80))),
                              ("palette", Image.fromarray(image, mode="L").convert("RGB").convert("P"))):
            files.append(str(tmp_path / f"{i}-{kind}.{'jpg' if kind == 'large' else 'png'}"))
            picture.save(files[-1])
    predict(run, files, str(tmp_path / "modes.csv"), progress=False)
    rows = read_csv(tmp_path / "modes.csv")
    assert [r["path"] for r in rows] == files
    exact = [r["class"] for r in rows if r["path"].endswith(("rgb.png", "rgba.png", "16bit.png"))]
    assert exact == [c for c in expected[:3] for _ in range(3)]
    assert all(r["class"] in names for r in rows)


def test_attention_maps_are_written_per_image(trained, test_images, tmp_path):
    path, _ = trained
    run = zoo.load_run(path)
    files = []
    for i, image in enumerate(test_images[0][:2]):
        files.append(str(tmp_path / f"shirt {i}.png"))
        Image.fromarray(image).save(files[-1])
    summary = predict(run, files, str(tmp_path / "p.csv"), progress=False, attention=str(tmp_path / "maps"))
    assert sorted(p.name for p in (tmp_path / "maps").iterdir()) == ["0000_shirt 0.png", "0001_shirt 1.png"]
    assert "attention maps in" in summary
    cnn = nn.Sequential(nn.Conv2d(1, 10, 32), nn.Flatten())  # (B, 10): no attention at all
    plain = dataclasses.replace(run, model=cnn, info={**run.info, "variant": "cnn"})
    with pytest.raises(ValueError, match="the cnn model records no attention.*drop --attention"):
        predict(plain, files, str(tmp_path / "q.csv"), progress=False, attention=str(tmp_path / "none"))
    swin = zoo.get_variant("swin", "cifar")
    model = swin.build(swin.config("tiny", in_channels=1)).eval()
    from tasks.cifar.report import attention_heatmaps

    assert attention_heatmaps(model, torch.randn(2, 1, 32, 32)).shape == (2, 8, 8)  # Swin's map, windows joined


def test_predict_computes_in_the_precision_the_run_trained_in(trained, test_images, tmp_path):
    files = []
    for i, image in enumerate(test_images[0][:3]):
        files.append(str(tmp_path / f"{i}.png"))
        Image.fromarray(image).save(files[-1])
    run = zoo.load_run(trained[0])
    run.info["precision"] = "bf16"  # what a --precision bf16 run records in run.json
    with weight_dtypes(run.model) as seen:
        predict(run, files, str(tmp_path / "bf16.csv"), progress=False)
    assert seen == {torch.bfloat16}
    with open(tmp_path / "bf16.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and all(0 < float(r["probability"]) <= 1 for r in rows)


def test_exported_run_predicts_identically(trained, test_images, tmp_path):
    path, _ = trained
    files = []
    for i, image in enumerate(test_images[0]):
        files.append(str(tmp_path / f"{i}.png"))
        Image.fromarray(image).save(files[-1])
    exported = export_run(path, tmp_path / "export")
    assert sorted(p.name for p in exported.iterdir()) == ["metrics.json", "model.safetensors", "run.json"]
    predict(zoo.load_run(path), files, str(tmp_path / "a.csv"), progress=False)
    predict(zoo.load_run(exported), files, str(tmp_path / "b.csv"), progress=False)
    assert (tmp_path / "a.csv").read_text() == (tmp_path / "b.csv").read_text()


def _pngs(test_images, folder: Path) -> list[str]:
    files = []
    for i, image in enumerate(test_images[0]):
        files.append(str(folder / f"{i}.png"))
        Image.fromarray(image).save(files[-1])
    return files


def test_hf_export_is_loadable_and_carries_a_model_card(trained, test_images, tmp_path):
    from tasks.compare.paired import metric_intervals

    path, summary = trained
    out = export_run(path, tmp_path / "hf", "hf", intervals=metric_intervals)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "metrics.json", "model.safetensors"]
    config = json.loads((out / "config.json").read_text())
    assert config["library_name"] == "transformer-zoo" and config["architectures"] == ["vit"]
    card = (out / "README.md").read_text()
    top1 = summary["final"]["test"]["top1"]
    row = next(line for line in card.splitlines() if line.startswith("| top-1 | test |"))
    value, interval = row.split("|")[3:5]
    low, high = (float(x) for x in interval.strip(" []").split(","))
    assert float(value) == pytest.approx(top1, abs=1e-3) and low < top1 < high and high - low < 0.3
    assert "| position | fixed sinusoids" in card and "zoo.create(\"vit\", pretrained=" in card
    original, exported = zoo.load_run(path), zoo.load_run(out)
    created = zoo.create("vit", pretrained=out).eval()
    images = test_images[1].float()
    with torch.no_grad():
        expected = original.model(original.task.inputs(images))
        torch.testing.assert_close(exported.model(exported.task.inputs(images)), expected, rtol=0, atol=0)
        torch.testing.assert_close(created(original.task.inputs(images)), expected, rtol=0, atol=0)


def test_onnx_export_predicts_like_pytorch_through_onnxruntime(trained, test_images, tmp_path, capsys):
    path, _ = trained
    files = _pngs(test_images, tmp_path)
    assert main(["export", str(path), "--format", "onnx", "--out", str(tmp_path / "onnx")]) == 0
    assert "model.onnx: max |onnxruntime - PyTorch|" in capsys.readouterr().out
    check = json.loads((tmp_path / "onnx" / "run.json").read_text())["onnx_check"]["model"]
    assert check["max_abs_diff"] <= check["limit"] == pytest.approx(1e-4, rel=0.5)
    assert main(["predict", str(path), *files, "--out", str(tmp_path / "torch.csv"), "--quiet"]) == 0
    assert main(["predict", str(tmp_path / "onnx"), *files, "--out", str(tmp_path / "ort.csv"), "--quiet",
                 "--runtime", "onnxruntime"]) == 0
    torch_rows, ort_rows = read_csv(tmp_path / "torch.csv"), read_csv(tmp_path / "ort.csv")
    assert [r["class"] for r in ort_rows] == [r["class"] for r in torch_rows]
    for a, b in zip(torch_rows, ort_rows):
        assert float(a["probability"]) == pytest.approx(float(b["probability"]), abs=2e-4)
    run = zoo.load_run(tmp_path / "onnx", runtime="onnxruntime")
    assert not list(run.model.parameters())  # no PyTorch weights: the graph computes
    with pytest.raises(ValueError, match="is an ONNX export: use it with --runtime onnxruntime"):
        zoo.load_run(tmp_path / "onnx")
    with pytest.raises(ValueError, match="holds no ONNX graphs; export it with"):
        zoo.load_run(path, runtime="onnxruntime")


def test_onnx_export_is_refused_beyond_its_tolerance_and_without_onnxruntime(trained, tmp_path, monkeypatch):
    import sys

    path, _ = trained
    with pytest.raises(ValueError, match=r"the model graph did not export faithfully \(torchscript: max "
                                         r"\|onnxruntime - PyTorch\| = .* > 1e-30"):
        export_run(path, tmp_path / "tight", "onnx", tolerance=1e-30)
    assert not (tmp_path / "tight" / "model.onnx").exists()
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if the extra were not installed
    with pytest.raises(ValueError, match=r"zoo export --format onnx needs onnxruntime: pip install -e '.\[onnx\]'"):
        export_run(path, tmp_path / "none", "onnx")


def test_bad_inputs_get_one_line_errors(trained, test_images, tmp_path):
    run = zoo.load_run(trained[0])
    good = tmp_path / "good.png"
    Image.fromarray(test_images[0][0]).save(good)
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "fake.png").write_text("not an image either")
    (tmp_path / "cut.png").write_bytes(good.read_bytes()[:60])  # a PNG cut short
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.md").write_text("no images here")
    cases = [([], ValueError, "no inputs"),
             ([str(tmp_path / "notes.txt")], ValueError, "notes.txt is not an image file"),
             ([str(good), str(tmp_path / "fake.png")], ValueError, "fake.png is not an image file"),
             ([str(tmp_path / "cut.png")], ValueError, "cut.png could not be read as an image"),
             ([str(tmp_path / "empty")], ValueError, "folder .*empty holds no image files"),
             ([str(tmp_path / "missing.png")], FileNotFoundError, "missing.png does not exist")]
    for inputs, error, message in cases:
        with pytest.raises(error, match=message):
            predict(run, inputs, str(tmp_path / "x.csv"), progress=False)
    assert not (tmp_path / "x.csv").exists()  # nothing half-written
    with pytest.raises(ValueError, match="--batch-size must be a positive integer"):
        predict(run, [str(good)], str(tmp_path / "x.csv"), batch_size=0)
    with pytest.raises(ValueError, match="is a folder; give the path of the CSV"):
        predict(run, [str(good)], str(tmp_path), progress=False)


def test_cli(trained, test_images, tmp_path, capsys, monkeypatch):
    path, summary = trained
    good = tmp_path / "good.png"
    Image.fromarray(test_images[0][0]).save(good)
    monkeypatch.chdir(tmp_path)
    assert main(["predict", str(path), str(good), "--quiet"]) == 0
    assert "classified 1 image(s)" in capsys.readouterr().err
    assert [r["path"] for r in read_csv(tmp_path / "predictions.csv")] == [str(good)]
    assert main(["predict", str(path), str(tmp_path / "nope.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zoo predict: error:") and "nope.png does not exist" in err and err.count("\n") == 1
    assert main(["predict", str(path), str(good), "--labels", str(tmp_path)]) == 2
    assert "--labels is an option of medseg runs" in capsys.readouterr().err
    assert main(["evaluate", str(path), "--out", str(tmp_path / "ev")]) == 0
    assert f"top1 {summary['final']['test']['top1']:.4g}" in capsys.readouterr().out
    assert main(["evaluate", str(path), "--split", "train"]) == 2
    assert "unknown split of the cifar task 'train'. Known: test, valid." in capsys.readouterr().err
    assert main(["export", str(path), "--out", str(tmp_path / "exp")]) == 0
    assert (tmp_path / "exp" / "model.safetensors").is_file()
