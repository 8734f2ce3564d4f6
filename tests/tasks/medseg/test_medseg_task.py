"""The medical-segmentation runner: a tiny Synapse-layout folder trains, evaluates and reports end to end."""

import json

import numpy as np
import pytest
import torch

from tasks.cli.main import main
from tasks.engine.distributed import DistInfo
from tasks.medseg.reading.phantom import write_phantom
from tasks.medseg.task import MedsegConfig, MedsegTask, warmup_poly, zoom_slices


@pytest.fixture(scope="module")
def tiny_synapse(tmp_path_factory):
    """Three training and two test cases of 5 slices of 48–64 pixels, in the Synapse layout."""
    root = tmp_path_factory.mktemp("synapse") / "tiny"
    return write_phantom(root, seed=3, slices=5, size=(48, 64), train_cases=("case0005", "case0006", "case0007"),
                         test_cases=("case0001", "case0002"))


def make_task(root, **overrides) -> MedsegTask:
    settings = {"data": str(root), "image_size": 32, "valid_cases": 1, "progress": False, **overrides}
    task = MedsegTask(MedsegConfig(**settings), torch.device("cpu"), DistInfo())
    task.setup()
    return task


def test_setup_splits_cases_and_zooms_slices(tiny_synapse):
    task = make_task(tiny_synapse)
    assert task.cases.data.name == "synapse" and task.cases.data.num_classes == 9
    assert len(task.volumes["train"]) == 2 and len(task.volumes["valid"]) == 1 and len(task.volumes["test"]) == 2
    n = sum(v.image.shape[0] for v in task.volumes["train"])
    assert task.training.images.shape == (n, 1, 32, 32) and task.training.labels.shape == (n, 1, 32, 32)
    assert task.training.labels.dtype == torch.long and int(task.training.labels.max()) < 9


def test_augmentation_is_a_function_of_seed_epoch_and_slice(tiny_synapse):
    task = make_task(tiny_synapse, rotate_degrees=30.0, zoom=0.2, intensity=0.2)
    rows = [(0, 1), (3, 1), (5, 1)]
    first, again = task.training.augmented(rows), task.training.augmented(rows)
    torch.testing.assert_close(first, again)
    other = task.training.augmented([(0, 2), (3, 2), (5, 2)])
    assert not torch.equal(first[0], other[0])
    labels = first[1]
    assert labels.dtype == torch.long and set(labels.unique().tolist()) <= set(range(9))  # nearest: no new classes


def test_prediction_is_zoomed_back_to_each_slice_size(tiny_synapse):
    task = make_task(tiny_synapse, variant="basicunet")
    model = task.build_model().eval()
    volume = task.cases.data.test[0]
    pred = task.evaluator.predict_volume(model, volume)
    assert pred.shape == volume.label.shape and pred.dtype == np.uint8


def test_a_few_steps_reduce_the_loss(tiny_synapse):
    task = make_task(tiny_synapse, variant="missformer", preset="tiny", rotate_degrees=0.0, zoom=0.0,
                     intensity=0.0)
    torch.manual_seed(0)
    model = task.build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rows = [(i, 0) for i in range(8)]
    losses = []
    for _ in range(8):
        loss, n = task.loss(model, rows)
        optimizer.zero_grad()
        (loss / n).backward()
        optimizer.step()
        losses.append(float(loss.detach()) / n)
    assert losses[-1] < 0.9 * losses[0], losses


def test_zoo_train_writes_the_report(tiny_synapse, tmp_path):
    out = tmp_path / "run"
    code = main(["train", "medseg", "--data", str(tiny_synapse), "--variant", "missformer", "--preset", "tiny",
                 "--image-size", "32", "--epochs", "1", "--batch-size", "4", "--valid-cases", "1",
                 "--progress", "false", "--out", str(out), "--overlay-slices", "2"])
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    test = metrics["final"]["test"]
    assert 0.0 <= test["dice"] <= 1.0 and test["hd95"] >= 0.0
    assert set(test["conventions"]) == {"papers", "mm"}
    report = (out / "report.md").read_text()
    for text in ("### Per organ", "### Per case", "Headline convention: **papers**", "aorta", "overlays.png",
                 "What changed"):
        assert text in report, text
    assert (out / "overlays.png").stat().st_size > 0
    assert json.loads((out / "classes.json").read_text())["test_cases"] == ["case0001", "case0002"]


def test_figures_false_draws_no_overlay_and_scores_the_same(tiny_synapse, tmp_path):
    finals = {}
    for figures in ("true", "false"):
        out = tmp_path / figures
        assert main(["train", "medseg", "--data", str(tiny_synapse), "--variant", "missformer", "--preset", "tiny",
                     "--image-size", "32", "--epochs", "1", "--batch-size", "4", "--valid-cases", "1",
                     "--progress", "false", "--out", str(out), "--figures", figures]) == 0
        finals[figures] = json.loads((out / "metrics.json").read_text())["final"]
    assert sorted(p.name for p in (tmp_path / "true").glob("*.png")) == ["curves.png", "overlays.png"]
    assert not list((tmp_path / "false").glob("*.png"))
    assert "![" not in (tmp_path / "false" / "report.md").read_text()  # no figure linked
    assert finals["false"] == finals["true"]


def test_reference_baselines_build_for_the_task(tiny_synapse):
    for name, size in (("basicunet", 32), ("swinunetr", 64)):
        model = make_task(tiny_synapse, variant=name, image_size=size).build_model()
        assert model(torch.zeros(2, 1, size, size)).shape == (2, 9, size, size)
    with pytest.raises(ValueError, match="swinunetr needs an image_size divisible by 32 and >= 64"):
        make_task(tiny_synapse, variant="swinunetr").build_model()


def test_poly_schedule_and_zoom_helpers():
    factor = warmup_poly(2, 12, 0.9)
    assert [factor(0), factor(1)] == [0.5, 1.0] and factor(12) == 0.0
    assert factor(7) == pytest.approx(0.5**0.9)
    labels = np.array([[[0, 1], [2, 3]]], dtype=np.uint8)
    assert set(np.unique(zoom_slices(labels, 6, 0)).tolist()) == {0, 1, 2, 3}


@pytest.mark.parametrize("overrides, message", [
    ({"image_size": 100}, "divisible by 32"),
    ({"hd95": "paper"}, "Did you mean 'papers'"),
    ({"dataset": "synaps"}, "Did you mean 'synapse'"),
    ({"zoom": 1.5}, "zoom must be < 1"),
    ({"flip_prob": 2.0}, "flip_prob"),
    ({"dice_weight": 0.0, "ce_weight": 0.0}, "both 0"),
])
def test_bad_config_is_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        MedsegConfig(**overrides)


def test_bad_variant_and_overrides_are_refused(tiny_synapse):
    with pytest.raises(ValueError, match="Did you mean 'missformer'"):
        make_task(tiny_synapse, variant="misformer").build_model()
    with pytest.raises(ValueError, match="conflicts with the task"):
        make_task(tiny_synapse, model={"num_classes": 4}).build_model()
    with pytest.raises(ValueError, match="valid_cases=3 leaves no training case"):
        make_task(tiny_synapse, valid_cases=3)


def test_missing_data_folder_is_named(tmp_path, capsys):
    assert main(["train", "medseg", "--data", str(tmp_path / "nowhere"), "--epochs", "1", "--progress", "false",
                 "--out", str(tmp_path / "run")]) == 2
    assert "nowhere" in capsys.readouterr().err
