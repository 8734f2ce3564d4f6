"""The image-classification task: embedded data, CIFAR reader, batched augmentation, training and report."""

from __future__ import annotations

import json
import pickle
import shlex
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import zoo
from core.multihead import MultiHeadAttention
from tasks.cifar.augment import crop_flip, draw_crop_flip, random_crop_flip
from tasks.cifar.datasets import (
    EMBEDDED,
    detect_dataset,
    load_cifar,
    load_embedded,
    load_images,
    read_idx,
    stratified_split,
)
from tasks.cifar.reference import REFERENCE_MODELS
from tasks.cifar.report import attention_heatmaps
from tasks.cifar.task import CifarConfig, CifarTask, warmup_cosine
from tasks.cli.main import main
from tasks.engine.distributed import DistInfo
from tasks.engine.trainer import Trainer
from tasks.runs.training import train
from zoo.registry import Paper, Variant

# --- a stand-in variant: the real "vit" and "swin" are written elsewhere ---------------------------------


@dataclass
class TinyViTConfig:
    image_size: int = 32
    in_channels: int = 3
    num_classes: int = 10
    patch: int = 8
    d_model: int = 32
    heads: int = 4


class TinyViT(nn.Module):
    """Patch embedding, a class token and one attention layer: enough to train and to record attention."""

    def __init__(self, c: TinyViTConfig) -> None:
        super().__init__()
        self.embed = nn.Conv2d(c.in_channels, c.d_model, c.patch, stride=c.patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, c.d_model))
        self.pos = nn.Parameter(0.02 * torch.randn(1, 1 + (c.image_size // c.patch) ** 2, c.d_model))
        self.attn = MultiHeadAttention(c.d_model, c.heads)
        self.norm = nn.LayerNorm(c.d_model)
        self.head = nn.Linear(c.d_model, c.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x).flatten(2).transpose(1, 2)  # (B, N, D)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1) + self.pos  # (B, 1 + N, D)
        x = x + self.attn(self.norm(x))
        return self.head(x[:, 0])  # (B, K)


@pytest.fixture
def stand_in(monkeypatch):
    variant = Variant(name="tiny-vit", paper=Paper("stand-in", 2020, "https://example.org"), tasks=("cifar",),
                      config_class=TinyViTConfig, presets={"small": {}}, build=TinyViT)
    monkeypatch.setitem(zoo.registry._REGISTRY, "tiny-vit", [variant])
    return variant


# --- fake CIFAR folders in the python-batch layout ----------------------------------------------------


def write_fake_cifar(root: Path, per_batch: int = 20, classes: int = 10, bytes_keys: bool = True) -> Path:
    """``root/cifar-10-batches-py`` with data_batch_1..5, test_batch and batches.meta of random images."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)

    def key(name: str) -> str | bytes:
        return name.encode() if bytes_keys else name

    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = [int(v) for v in np.arange(per_batch) % classes]
        entry = {key("data"): rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8), key("labels"): labels,
                 key("batch_label"): key(name), key("filenames"): [key(f"{i}.png") for i in range(per_batch)]}
        (folder / name).write_bytes(pickle.dumps(entry, protocol=2))
    meta = {key("label_names"): [f"class{k}" for k in range(classes)], key("num_vis"): 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return folder


# --- data ---------------------------------------------------------------------------------------------


def test_embedded_subset_is_stratified_and_padded():
    with np.load(EMBEDDED, allow_pickle=False) as npz:
        assert npz["x_train"].shape == (5000, 28, 28) and npz["x_train"].dtype == np.uint8
        assert npz["x_test"].shape == (1000, 28, 28) and npz["x_test"].dtype == np.uint8
        assert np.bincount(npz["y_train"]).tolist() == [500] * 10
        assert np.bincount(npz["y_test"]).tolist() == [100] * 10
    data = load_embedded()
    assert data.train_x.shape == (5000, 1, 32, 32) and data.test_x.shape == (1000, 1, 32, 32)
    assert data.class_names[0] == "T-shirt/top" and data.num_classes == 10
    border = np.concatenate([data.train_x[..., :2, :].ravel(), data.train_x[..., -2:].ravel()])
    assert not border.any()  # 2 px of zeros on each side
    assert data.train_x[..., 2:30, 2:30].any()


def test_default_is_embedded_and_bad_choices_are_clear(tmp_path):
    assert load_images().source.startswith("embedded")
    with pytest.raises(ValueError, match="needs --data"):
        load_images("cifar10")
    with pytest.raises(ValueError, match="Did you mean 'cifar10'"):
        load_images("cifar-10")
    with pytest.raises(ValueError, match="Did you mean 'cifar100'"):
        CifarConfig(dataset="cifar100x")


def test_idx_reader(tmp_path):
    path = tmp_path / "x-idx3-ubyte"
    values = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path.write_bytes(b"\x00\x00\x08\x03" + np.array([2, 3, 4], dtype=">u4").tobytes() + values.tobytes())
    np.testing.assert_array_equal(read_idx(path), values)
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(ValueError, match="truncated"):
        read_idx(path)
    with pytest.raises(FileNotFoundError, match="nope"):
        read_idx(tmp_path / "nope")


@pytest.mark.parametrize("bytes_keys", [True, False])
def test_fake_cifar10_folder_reads_and_is_detected(tmp_path, bytes_keys):
    folder = write_fake_cifar(tmp_path, bytes_keys=bytes_keys)
    assert detect_dataset(tmp_path) == "cifar10"
    data = load_images(data=tmp_path)
    assert data.name == "cifar10" and data.in_channels == 3
    assert data.train_x.shape == (100, 3, 32, 32) and data.test_x.shape == (20, 3, 32, 32)
    assert data.class_names == [f"class{k}" for k in range(10)]
    raw = pickle.loads((folder / "test_batch").read_bytes())
    first = raw[b"data" if bytes_keys else "data"][0]
    np.testing.assert_array_equal(data.test_x[0, 0].ravel(), first[:1024])  # the red plane comes first
    assert load_cifar(folder, "cifar10").train_x.shape == (100, 3, 32, 32)  # the inner folder works too


def test_missing_and_corrupt_cifar_files_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        load_images(data=tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):
        load_images("cifar10", tmp_path)
    folder = write_fake_cifar(tmp_path)
    (folder / "data_batch_3").write_bytes(b"\x80\x02}q\x00garbage")
    with pytest.raises(ValueError, match="data_batch_3"):
        load_images(data=tmp_path)
    (folder / "data_batch_3").write_bytes(pickle.dumps(Path("x"), protocol=2))  # a pickle of something else
    with pytest.raises(ValueError, match="data_batch_3.*never holds"):
        load_images(data=tmp_path)
    (folder / "data_batch_2").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_2"):
        load_images(data=tmp_path)


def test_download_errors_are_clear(tmp_path, monkeypatch):
    import torchvision.datasets

    class Offline:
        url = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"

        def __init__(self, *args, **kwargs) -> None:
            raise OSError("Name or service not known")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", Offline)
    with pytest.raises(ConnectionError, match="cifar-10-python.tar.gz"):
        load_images("cifar10", tmp_path / "new", download=True)
    with pytest.raises(ValueError, match="--dataset cifar10 or --dataset cifar100"):
        load_images("auto", tmp_path / "other", download=True)
    with pytest.raises(ValueError, match="needs --data"):
        load_images("auto", None, download=True)


def test_stratified_split_is_fixed_and_per_class():
    labels = np.repeat(np.arange(5), 20)
    kept, held = stratified_split(labels, 0.1, seed=0)
    assert np.bincount(labels[held]).tolist() == [2] * 5
    assert sorted(np.concatenate([kept, held]).tolist()) == list(range(100))
    np.testing.assert_array_equal(held, stratified_split(labels, 0.1, seed=0)[1])


# --- augmentation -------------------------------------------------------------------------------------


def test_crop_flip_matches_a_per_image_reference():
    gen = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (16, 3, 8, 8), dtype=torch.uint8, generator=gen)
    offsets, flips = draw_crop_flip(16, 2, generator=gen)
    assert offsets.min() >= 0 and offsets.max() <= 4 and flips.any() and not flips.all()
    out = crop_flip(images, 2, offsets, flips)
    assert out.shape == images.shape and out.dtype == torch.uint8
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2))
    for i in range(16):  # the slow obvious way, image by image
        top, left = offsets[i].tolist()
        expected = padded[i, :, top : top + 8, left : left + 8]
        torch.testing.assert_close(out[i], expected.flip(-1) if flips[i] else expected)


def test_crop_flip_edge_cases():
    images = torch.arange(2 * 1 * 4 * 4).reshape(2, 1, 4, 4)
    centre = torch.full((2, 2), 3)
    torch.testing.assert_close(crop_flip(images, 3, centre, torch.zeros(2, dtype=torch.bool)), images)
    torch.testing.assert_close(crop_flip(images, 0, torch.zeros(2, 2, dtype=torch.long), torch.tensor([True, False])),
                               torch.stack([images[0].flip(-1), images[1]]))
    corner = crop_flip(images, 1, torch.zeros(2, 2, dtype=torch.long), torch.zeros(2, dtype=torch.bool))
    assert (corner[:, :, 0] == 0).all() and (corner[:, :, :, 0] == 0).all()  # the padding came in
    assert random_crop_flip(images, 1, flip=False).shape == images.shape
    with pytest.raises(ValueError, match=r"\[0, 2\]"):
        crop_flip(images, 1, torch.full((2, 2), 3), torch.zeros(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="offsets must be"):
        crop_flip(images, 1, torch.zeros(3, 2, dtype=torch.long), torch.zeros(2, dtype=torch.bool))


def test_warmup_then_cosine():
    factor = warmup_cosine(4, 14)
    assert [factor(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert factor(9) == pytest.approx(0.5) and factor(14) == pytest.approx(0.0)


# --- task and models ----------------------------------------------------------------------------------


def make_task(tmp_path, **kw) -> CifarTask:
    config = CifarConfig(out=str(tmp_path / "run"), progress=False, **{"variant": "tiny-vit", **kw})
    task = CifarTask(config, torch.device("cpu"), DistInfo())
    task.setup()
    return task


def test_a_few_steps_reduce_the_loss(tmp_path, stand_in):
    task = make_task(tmp_path, lr=3e-3, warmup=1)
    model = task.build_model()
    assert task.model_config.in_channels == 1 and task.model_config.num_classes == 10
    assert len(task.labels["train"]) == 4500 and len(task.labels["valid"]) == 500
    optimizer = task.make_optimizer(model)
    rows = task.train_batches(0)[0]
    losses = []
    for _ in range(15):
        loss, items = task.loss(model, rows)
        optimizer.zero_grad()
        (loss / items).backward()
        optimizer.step()
        losses.append(loss.item() / items)
    assert losses[-1] < losses[0] - 0.2


def test_augmentation_depends_on_seed_epoch_and_image_only(tmp_path):
    task = make_task(tmp_path, crop_padding=4, flip=True)
    a_offsets, a_flips = task.augmentation(3)
    task.augmentation(4)
    b_offsets, b_flips = task.augmentation(3)
    torch.testing.assert_close(a_offsets, b_offsets)
    torch.testing.assert_close(a_flips, b_flips)
    assert not torch.equal(a_offsets, task.augmentation(4)[0])
    assert task.train_batches(2) == task.train_batches(2) and task.train_batches(2) != task.train_batches(3)


def test_model_set_cannot_contradict_the_data(tmp_path, stand_in):
    task = make_task(tmp_path, model={"in_channels": 3})
    with pytest.raises(ValueError, match="in_channels=3 conflicts"):
        task.build_model()
    with pytest.raises(ValueError, match="Did you mean 'resnet18'"):
        make_task(tmp_path, variant="resnet19").build_model()
    with pytest.raises(ValueError, match="does not run on the cifar task"):
        make_task(tmp_path, variant="classic").build_model()


@pytest.mark.parametrize("channels", [1, 3])
def test_resnet18_reference_for_small_images(channels):
    model = REFERENCE_MODELS["resnet18"](channels, 7)
    assert model(torch.randn(2, channels, 32, 32)).shape == (2, 7)
    assert isinstance(model.maxpool, nn.Identity) and model.conv1.stride == (1, 1)


def test_attention_maps_from_a_class_token(stand_in):
    model = TinyViT(TinyViTConfig(in_channels=1))
    heat = attention_heatmaps(model, torch.randn(3, 1, 32, 32))
    assert heat.shape == (3, 4, 4)
    torch.testing.assert_close(heat.sum(dim=(1, 2)), torch.ones(3))
    assert attention_heatmaps(REFERENCE_MODELS["resnet18"](1, 10), torch.randn(2, 1, 32, 32)) is None


def test_training_run_writes_the_report(tmp_path, stand_in):
    write_fake_cifar(tmp_path / "data", per_batch=40)
    config = CifarConfig(variant="tiny-vit", data=str(tmp_path / "data"), out=str(tmp_path / "run"), epochs=2,
                         batch_size=32, warmup=2, progress=False)
    summary = train(CifarTask, config)
    out = tmp_path / "run"
    final = summary["final"]["test"]
    assert 0.0 <= final["top1"] <= 1.0 and len(final["per_class"]) == 10
    assert np.array(final["confusion_matrix"]).sum() == 40
    report = (out / "report.md").read_text()
    assert "## Test results" in report and "confusion_matrix.png" in report and "attention.png" in report
    for name in ("confusion_matrix.png", "attention.png", "classes.json", "metrics.json", "curves.png"):
        assert (out / name).is_file(), name


def test_figures_false_draws_nothing_and_scores_the_same(tmp_path, stand_in):
    """--figures false (a study's runs) skips every plot, and the report links none; scores and records unchanged."""
    write_fake_cifar(tmp_path / "data", per_batch=40)
    finals = {}
    for figures in (True, False):
        config = CifarConfig(variant="tiny-vit", data=str(tmp_path / "data"), out=str(tmp_path / str(figures)),
                             epochs=1, batch_size=32, warmup=2, progress=False, figures=figures)
        finals[figures] = train(CifarTask, config)["final"]
    drawn = sorted(p.name for p in (tmp_path / "True").glob("*.png"))
    assert drawn == ["attention.png", "confusion_matrix.png", "curves.png"]
    assert not list((tmp_path / "False").glob("*.png"))
    assert "![" not in (tmp_path / "False" / "report.md").read_text()  # no link to a figure that is not there
    assert finals[False] == finals[True]
    records = [(tmp_path / str(f) / "predictions" / "test.jsonl").read_text() for f in (True, False)]
    assert records[0] == records[1]


def test_resume_after_ctrl_c_mid_epoch_is_exact(tmp_path, stand_in, monkeypatch):
    write_fake_cifar(tmp_path / "data", per_batch=20)  # 90 training images: 6 batches of 16 per epoch

    def config(name: str, **kw) -> CifarConfig:
        return CifarConfig(variant="tiny-vit", data=str(tmp_path / "data"), out=str(tmp_path / name), epochs=2,
                           batch_size=16, warmup=2, progress=False, **kw)

    full = Trainer(CifarTask, config("full"))
    full.fit()
    calls = {"n": 0}
    original = CifarTask.loss

    def interrupted(self, model, rows):
        calls["n"] += 1
        if calls["n"] == 9:  # the third batch of the second epoch
            raise KeyboardInterrupt
        return original(self, model, rows)

    monkeypatch.setattr(CifarTask, "loss", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(CifarTask, config("split"))
    monkeypatch.setattr(CifarTask, "loss", original)
    resumed = Trainer(CifarTask, config("split", resume=True))
    resumed.fit()
    for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)  # bit for bit on CPU
    assert [r["top1"] for r in full.history] == [r["top1"] for r in resumed.history]


def test_the_ctrl_c_hint_resumes_the_run_it_names(tmp_path, stand_in, monkeypatch, capsys):
    """The command printed after Ctrl-C continues the run: it names the run's config.json, so a run trained with
    non-default settings (here --epochs 2) is not rebuilt from defaults and refused as another run."""
    write_fake_cifar(tmp_path / "data", per_batch=20)
    out = tmp_path / "run"
    original, calls = CifarTask.loss, {"n": 0}

    def interrupted(self, model, rows):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return original(self, model, rows)

    monkeypatch.setattr(CifarTask, "loss", interrupted)
    args = ["train", "cifar", "--variant", "tiny-vit", "--data", str(tmp_path / "data"), "--out", str(out),
            "--epochs", "2", "--batch-size", "16", "--checkpoint-every", "1", "--progress", "false"]
    assert main(args) == 130
    hint = capsys.readouterr().err.split("resume with: ")[1].strip()
    monkeypatch.setattr(CifarTask, "loss", original)
    command = shlex.split(hint)
    assert command[0] == "zoo"
    assert main(command[1:] + ["--progress", "false"]) == 0, capsys.readouterr().err
    assert json.loads((out / "metrics.json").read_text())["history"][-1]["epoch"] == 2  # the whole planned run


def test_cli_errors_are_clear(tmp_path, capsys):
    assert main(["train", "cifar", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
    assert "missing" in capsys.readouterr().err
    assert main(["train", "cifar", "--variant", "resnet19", "--out", str(tmp_path / "y"), "--progress", "false"]) == 2
    assert "Did you mean 'resnet18'" in capsys.readouterr().err
    assert main(["train", "cifar", "--valid-fraction", "0.6", "--out", str(tmp_path / "z")]) == 2
    assert "valid_fraction" in capsys.readouterr().err


def test_compare_row_of_the_reference_cnn(tmp_path):
    from tasks.compare.sweep import Entry, _parts_and_flops
    from tasks.engine.trainer import Trainer

    trainer = Trainer(CifarTask, CifarConfig(variant="resnet18", epochs=1, out=str(tmp_path / "r"), progress=False))
    trainer.task.setup()
    trainer.model = trainer.task.build_model()
    parts, flops = _parts_and_flops(Entry("resnet18", "resnet18"), "cifar", trainer)
    assert parts.startswith("(reference model") and 1e9 < flops < 2e9  # ResNet-18 at 32×32: ~1.1 GFLOPs
