"""DeiT: equal to timm's distilled ViT, its objective protocol, the teacher in the cifar runner, DeiT's recipe."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import torch.nn.functional as F
from timm.models.deit import VisionTransformerDistilled

import zoo
from core.sidechannels import objective_heads, objective_targets
from tasks.cifar.augment import augment_seed, draw_mix, mix_images, mix_targets
from tasks.cifar.distill import objective_loss
from tasks.cifar.reference import REFERENCE_MODELS, resnet18_flops, training_flops
from tasks.cifar.report import attention_heatmaps
from tasks.cifar.task import CifarConfig, CifarTask
from tasks.cli.main import main
from tasks.engine.distributed import DistInfo
from tasks.engine.registry import task_shape
from tasks.runs.evaluate import evaluate_run
from tasks.runs.training import train
from tests.numerics import assert_close_fp64, float64
from tests.tasks.cifar.test_cifar_use import write_cifar10, write_fmnist
from zoo.analysis.delta import measure
from zoo.deit import DeiTConfig, DistilledVisionTransformer, late_fusion, load_timm_weights, timm_kwargs
from zoo.vit import VisionTransformer, ViTConfig

SMALL = dict(image_size=32, patch_size=8, d_model=32, depth=2, heads=2)


# --- the model ---------------------------------------------------------------------------------------------


@float64()
def test_heads_equal_timm_and_the_output_is_the_late_fusion_of_their_softmaxes():
    config = DeiTConfig(**SMALL)
    peer = VisionTransformerDistilled(**timm_kwargs(config))
    ours = load_timm_weights(DistilledVisionTransformer(config), peer).eval()
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in peer.parameters())
    x = torch.randn(3, 3, 32, 32)
    peer.set_distilled_training(True)
    peer.train()  # timm returns both heads only in distilled training (no dropout here: same numbers)
    with torch.no_grad():
        fused, (cls, dist) = ours(x), peer(x)
    heads = ours.head_outputs()
    assert_close_fp64(heads["class"], cls)
    assert_close_fp64(heads["distillation"], dist)
    assert_close_fp64(fused.softmax(-1), (cls.softmax(-1) + dist.softmax(-1)) / 2)  # the paper's late fusion
    assert not torch.allclose(fused.softmax(-1), ((cls + dist) / 2).softmax(-1))  # timm's averages logits


@float64()
def test_late_fusion_is_the_log_of_the_mean_softmax():
    a, b = torch.randn(4, 7) * 5, torch.randn(4, 7) * 5
    assert_close_fp64(late_fusion(a, b).exp(), (a.softmax(-1) + b.softmax(-1)) / 2)
    assert_close_fp64(late_fusion(a, b), late_fusion(a, b).log_softmax(-1))  # already normalised


def test_the_token_sits_after_cls_and_the_position_table_has_a_row_for_it():
    model = DistilledVisionTransformer(DeiTConfig(**SMALL, in_channels=1))
    assert model.extra_tokens == 2 and model.position.weight.shape[0] == 2 + 16
    x = torch.randn(2, 16, 32)
    tokens = model.readout.prepend(x)  # (2, 18, 32)
    assert torch.equal(tokens[:, 0], model.readout.readout.cls_token[0].expand(2, -1))
    assert torch.equal(tokens[:, 1], model.readout.dist_token[0].expand(2, -1)) and torch.equal(tokens[:, 2:], x)
    assert torch.equal(model.readout(tokens), tokens[:, 0]) and torch.equal(model.readout.distillation(tokens),
                                                                            tokens[:, 1])
    heat = attention_heatmaps(model.eval(), torch.randn(3, 1, 32, 32))  # [CLS] -> the 4×4 patches
    assert heat.shape == (3, 4, 4)
    torch.testing.assert_close(heat.sum(dim=(1, 2)), torch.ones(3))


@pytest.mark.parametrize("readout", ["mean", "decoder"])
def test_the_token_works_beside_every_read_out(readout):
    model = DistilledVisionTransformer(DeiTConfig(**SMALL, readout=readout))
    assert model.extra_tokens == 1  # neither read-out prepends a token: the distillation token comes first
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10) and set(model.head_outputs()) == {"class", "distillation"}


def test_without_the_token_deit_is_vit():
    vit = VisionTransformer(ViTConfig(**SMALL)).eval()
    deit = DistilledVisionTransformer(DeiTConfig(**SMALL, distillation_token=False)).eval()
    deit.load_state_dict(vit.state_dict())  # the same modules under the same names
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(deit(x), vit(x))


@pytest.mark.parametrize("token, distillation, terms", [
    (True, "hard", (("class", "label", 0.5), ("distillation", "teacher", 0.5))),
    (True, "none", (("class", "label", 0.5), ("distillation", "label", 0.5))),
    (False, "hard", (("class", "label", 0.5), ("class", "teacher", 0.5))),
    (False, "none", (("class", "label", 1.0),)),
])
def test_the_objective_is_declared_per_choice(token, distillation, terms):
    model = DistilledVisionTransformer(DeiTConfig(**SMALL, distillation_token=token, distillation=distillation))
    assert objective_targets(model) == terms
    with pytest.raises(ValueError, match="have not run a forward"):
        objective_heads(model)
    model(torch.randn(2, 3, 32, 32))
    declared, outputs = objective_heads(model)
    assert declared == terms and all(outputs[h].shape == (2, 10) for h, _, _ in terms)
    assert objective_heads(VisionTransformer(ViTConfig(**SMALL))) is None  # a plain model declares nothing


def test_objective_loss_by_hand():
    torch.manual_seed(0)
    model = DistilledVisionTransformer(DeiTConfig(**SMALL))
    output = model(torch.randn(4, 3, 32, 32))
    heads = model.head_outputs()
    labels, teacher = torch.tensor([0, 1, 2, 3]), torch.tensor([3, 1, 2, 0])
    expected = 0.5 * F.cross_entropy(heads["class"], labels, reduction="sum", label_smoothing=0.1) \
        + 0.5 * F.cross_entropy(heads["distillation"], teacher, reduction="sum")  # no smoothing on the teacher
    torch.testing.assert_close(objective_loss(model, output, labels, teacher, 0.1), expected)
    with pytest.raises(ValueError, match="pass --teacher"):
        objective_loss(model, output, labels, None)
    vit = VisionTransformer(ViTConfig(**SMALL))
    plain = vit(torch.randn(4, 3, 32, 32))
    expected = F.cross_entropy(plain, labels, reduction="sum")
    torch.testing.assert_close(objective_loss(vit, plain, labels, None), expected)


@pytest.mark.parametrize("bad, error, match", [
    (dict(distillation="hrad"), ValueError, "Did you mean 'hard'"),
    (dict(distillation_token=1), TypeError, "distillation_token must be a bool"),
])
def test_config_errors(bad, error, match):
    with pytest.raises(error, match=match):
        DeiTConfig(**SMALL, **bad)


# --- registry and delta --------------------------------------------------------------------------------------


def test_registered_with_vits_changes_a_head_and_an_objective():
    variant = zoo.get_variant("deit", "cifar")
    assert variant.paper.url == "https://arxiv.org/abs/2012.12877"
    assert variant.parts_changed == (*zoo.get_variant("vit", "cifar").parts_changed, "head", "objective")
    assert variant.change("head").revert == {"distillation_token": False}
    assert variant.change("objective").revert == {"distillation": "none"}


def test_delta_books_the_token_and_head_and_says_the_objective_has_no_parameters():
    report = measure("deit", task_shape("cifar"), preset="tiny", memory=False)
    parts = {p["part"]: p for p in report["parts"]}
    d, k = 32, 10
    assert parts["head"]["added"] == {"DistillationReadout": 1, "Linear": 1}
    assert parts["head"]["params"]["delta"] == d + d * k + k  # the token, the second linear head
    objective = parts["objective"]
    assert objective["procedure_only"] and not objective["measured_change"] and objective["declared"]
    assert objective["params"]["variant"] == 0 == objective["flops"]["variant"]
    from zoo.analysis.report import render_markdown

    assert "no parameters or FLOPs of its own" in render_markdown(report)


# --- the cifar runner: teacher, recipe ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory):
    """A tiny ViT trained one epoch on *other* images (so its normalisation differs from the student's)."""
    root = tmp_path_factory.mktemp("deit")
    data = write_fmnist(root / "teacher-data", n_train=200, n_test=20, offset=400)
    config = CifarConfig(variant="vit", preset="tiny", data=str(data), out=str(root / "teacher"), epochs=1,
                         batch_size=50, warmup=2, attention_images=0, progress=False, device="cpu")
    train(CifarTask, config)
    return root, root / "teacher", write_fmnist(root / "student-data", n_train=200, n_test=20)


def _config(root, **kw):
    return CifarConfig(**{"variant": "deit", "preset": "tiny", "data": str(root / "student-data"), "epochs": 1,
                          "batch_size": 50, "warmup": 2, "attention_images": 0, "progress": False, "device": "cpu",
                          **kw})


def test_the_teacher_sees_the_images_through_its_own_normalisation(teacher_run):
    root, teacher_dir, _ = teacher_run
    task = CifarTask(_config(root, teacher=str(teacher_dir)), torch.device("cpu"), DistInfo())
    task.setup()
    run = zoo.load_run(teacher_dir)
    assert run.task.mean != task.mean  # trained on other images
    images = task.images["train"][:8]
    with torch.no_grad():
        own = run.model(run.task.inputs(images)).argmax(-1)
        student_view = run.model(task.inputs(images))
    assert torch.equal(task.teacher.predict(images), own)
    assert not torch.allclose(student_view, run.model(run.task.inputs(images)))  # the normalisation matters
    floats = task.normalize.transforms[0](images)  # mixed images arrive on the [0, 1] scale
    assert torch.equal(task.teacher.predict(floats), own)


def test_teacher_errors_are_one_line_and_name_the_fix(teacher_run, tmp_path, capsys):
    root, teacher_dir, _ = teacher_run
    with pytest.raises(FileNotFoundError, match="--teacher .*missing: no run folder"):
        _config(root, teacher=str(tmp_path / "missing")).check_paths()
    other = tmp_path / "translation"
    other.mkdir()
    (other / "run.json").write_text(json.dumps({"format": 1, "task": "translation", "variant": "classic",
                                                "config": {}, "preprocessing": {}}))
    with pytest.raises(ValueError, match="is a translation run; a teacher must be a finished cifar run"):
        _config(root, teacher=str(other)).check_paths()
    rgb = _config(root, data=str(write_cifar10(tmp_path / "rgb")), teacher=str(teacher_dir), valid_fraction=0)
    with pytest.raises(ValueError, match="3-channel images; train the teacher on the same data"):
        CifarTask(rgb, torch.device("cpu"), DistInfo()).setup()
    task = CifarTask(_config(root), torch.device("cpu"), DistInfo())
    task.setup()
    with pytest.raises(ValueError, match="learns from a teacher's predictions: pass --teacher"):
        task.build_model()
    assert main(["train", "cifar", "--variant", "deit", "--preset", "tiny", "--data", str(root / "student-data"),
                 "--teacher", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo train: error: --teacher") and "\n" not in err


def test_train_deit_with_a_teacher_then_use_it_without(teacher_run, tmp_path):
    root, teacher_dir, _ = teacher_run
    teacher_copy = tmp_path / "teacher"
    shutil.copytree(teacher_dir, teacher_copy)
    out = tmp_path / "deit"
    summary = train(CifarTask, _config(root, teacher=str(teacher_copy), out=str(out), augment="trivialaugment",
                                       mixup=0.8, cutmix=1.0, repeated_augment=2))
    info = json.loads((out / "run.json").read_text())
    assert info["config"]["teacher"] == str(teacher_copy) and info["config"]["augment"] == "trivialaugment"
    recorded = info["preprocessing"]["teacher"]
    assert recorded["variant"] == "vit" and recorded["mean"] == zoo.load_run(teacher_copy).task.mean
    assert "Distilled from the teacher" in (out / "report.md").read_text()
    shutil.rmtree(teacher_copy)  # the finished run needs no teacher
    run = zoo.load_run(out)
    metrics, _ = evaluate_run(run, out=tmp_path / "eval")
    assert metrics == summary["final"]


def test_recipe_is_off_by_default_and_validated():
    for variant in ("vit", "deit"):
        config = CifarConfig(variant=variant)
        assert (config.augment, config.mixup, config.cutmix, config.repeated_augment) == ("none", 0.0, 0.0, 1)
    with pytest.raises(ValueError, match="Did you mean 'randaugment'"):
        CifarConfig(augment="randaugmnt")
    with pytest.raises(ValueError, match="repeated_augment"):
        CifarConfig(repeated_augment=0)
    with pytest.raises(ValueError, match="mixup"):
        CifarConfig(mixup=-0.5)


def test_each_images_augmentation_depends_on_seed_epoch_and_image_only(teacher_run):
    root, _, _ = teacher_run
    task = CifarTask(_config(root, augment="randaugment", mixup=0.8, cutmix=1.0, crop_padding=4, flip=True),
                     torch.device("cpu"), DistInfo())
    task.setup()
    rows = [(i, 3) for i in (5, 17, 42, 99)]
    images, targets = task.training_batch(rows)
    shard, shard_targets = task.training_batch(rows[2:][::-1])  # another batch, order, rank: the same images
    assert torch.equal(shard, images[2:].flip(0)) and torch.equal(shard_targets, targets[2:].flip(0))
    assert not torch.equal(task.training_batch([(i, 4) for i in (5, 17, 42, 99)])[0], images)  # another epoch
    torch.testing.assert_close(targets.sum(-1), torch.ones(4))  # soft targets of mixed images
    assert augment_seed(0, 3, 5) != augment_seed(0, 3, 5, repeat=1) != augment_seed(1, 3, 5)


def test_repeated_augmentation_puts_differently_augmented_copies_in_one_batch(teacher_run):
    root, _, _ = teacher_run
    task = CifarTask(_config(root, repeated_augment=3, augment="trivialaugment", batch_size=30),
                     torch.device("cpu"), DistInfo())
    task.setup()
    batches = task.train_batches(0)
    rows = [row for batch in batches for row in batch]
    assert len(rows) == len(task.labels["train"]) and rows[:3] == [(rows[0][0], 0, r) for r in range(3)]
    copies, _ = task.training_batch(rows[:3])
    assert not torch.equal(copies[0], copies[1])
    assert task.train_batches(0) == batches != task.train_batches(1)


def test_cutmix_weight_is_the_share_the_box_leaves():
    mix = draw_mix([augment_seed(0, 0, i) for i in range(64)], 100, 0.0, 1.0, 32)
    area = mix["box"][:, 2] * mix["box"][:, 3]
    torch.testing.assert_close(mix["lam"], 1 - area.float() / 32**2, check_dtype=False)
    a, b = torch.zeros(64, 1, 32, 32), torch.ones(64, 1, 32, 32)
    torch.testing.assert_close(mix_images(a, b, mix).mean(dim=(1, 2, 3)), 1 - mix["lam"].float())
    targets = mix_targets(torch.zeros(64, dtype=torch.long), torch.ones(64, dtype=torch.long), mix["lam"], 3)
    torch.testing.assert_close(targets[:, 0], mix["lam"].float())
    mixup = draw_mix([augment_seed(0, 0, i) for i in range(64)], 100, 0.8, 0.0, 32)
    assert not mixup["cut"].any() and mixup["lam"].min() > 0 and mixup["lam"].max() < 1


# --- the width-matched CNN ---------------------------------------------------------------------------------


def test_resnet18_w16_costs_the_vit_cpu_preset_within_20_percent():
    vit = zoo.create("vit", preset="cpu", task="cifar", in_channels=1)
    ratio = resnet18_flops(16) / training_flops(vit, torch.zeros(1, 1, 32, 32))
    assert 0.8 < ratio < 1.2
    assert 10 < resnet18_flops(64) / resnet18_flops(16) < 20  # ResNet-18 itself: ~14x
    model = REFERENCE_MODELS["resnet18-w16"](1, 10)
    assert model.fc.in_features == 128 and model(torch.randn(2, 1, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("change", [c.name for c in zoo.get_variant("deit", "cifar").changes])
def test_every_ablation_row_builds_runs_and_declares_its_objective(change):
    variant = zoo.get_variant("deit", "cifar")
    model = variant.build(variant.config("tiny", in_channels=1, **variant.change(change).revert))
    output = model(torch.randn(2, 1, 32, 32))
    terms, outputs = objective_heads(model)
    assert output.shape == (2, 10) and all(outputs[head].shape == (2, 10) for head, _, _ in terms)
    assert any(target == "teacher" for _, target, _ in terms) == (change != "objective")
