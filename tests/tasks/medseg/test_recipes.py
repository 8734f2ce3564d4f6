"""Training recipes (tasks.medseg.training.recipes): nnunet's optimiser, schedule, loss and deep-supervision weights
pinned against nnU-Net v2's definitions (nnUNetTrainer.configure_optimizers / _build_loss, PolyLRScheduler,
DC_and_CE_loss with MemoryEfficientSoftDiceLoss), the default recipe equal to the training of before recipes, the
variants' own recipes, and the bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from tasks.engine.distributed import DistInfo
from tasks.medseg.reading.phantom import write_phantom
from tasks.medseg.task import MedsegConfig, MedsegTask, warmup_poly
from tasks.medseg.training.recipes import (
    Recipe,
    deep_supervision_loss,
    deep_supervision_weights,
    epoch_poly,
    output_heads,
    resolve_recipe,
    supports_deep_supervision,
    uses_deep_supervision,
)
from zoo import registry


def task_for(**settings) -> MedsegTask:
    """A task without data: enough to resolve its recipe, optimiser and schedule."""
    return MedsegTask(MedsegConfig(progress=False, **settings), torch.device("cpu"), DistInfo())


def nnunet_dc_and_ce(logits: torch.Tensor, labels: torch.Tensor, batch_dice: bool) -> torch.Tensor:
    """nnU-Net's DC_and_CE_loss (weights 1 and 1, soft Dice of the softmax without the background, smooth 1e-5,
    Dice over the batch when batch_dice), written out from its definition: CE − mean Dice."""
    probs = torch.softmax(logits, 1)
    onehot = nn.functional.one_hot(labels[:, 0], logits.shape[1]).movedim(-1, 1).to(logits.dtype)
    axes = tuple(range(2, logits.dim()))
    if batch_dice:
        axes = (0, *axes)
    tp, pred, ref = (probs * onehot).sum(axes), probs.sum(axes), onehot.sum(axes)
    dice = (2 * tp + 1e-5) / (pred + ref + 1e-5).clamp_min(1e-8)
    dice = dice[1:] if batch_dice else dice[:, 1:]  # do_bg=False
    return nn.functional.cross_entropy(logits, labels[:, 0]) - dice.mean()


# --- the optimiser ------------------------------------------------------------------------------------------------
def test_nnunet_optimiser_is_sgd_nesterov_over_one_group_of_every_parameter():
    model = nn.Sequential(nn.Conv3d(1, 4, 3), nn.InstanceNorm3d(4, affine=True), nn.Conv3d(4, 3, 1))
    optimizer = task_for(variant="dynunet", recipe="nnunet").make_optimizer(model)
    assert type(optimizer) is torch.optim.SGD
    (group,) = optimizer.param_groups  # nnU-Net decays every parameter, biases and norms included
    assert [id(p) for p in group["params"]] == [id(p) for p in model.parameters()]
    assert (group["lr"], group["momentum"], group["nesterov"], group["weight_decay"], group["dampening"]) == \
        (1e-2, 0.99, True, 3e-5, 0)


def test_default_optimiser_is_the_one_before_recipes():
    model = nn.Conv2d(1, 2, 3)
    task = task_for(variant="basicunet", lr=3e-3, weight_decay=0.05)
    ours, before = task.make_optimizer(model), torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    assert type(ours) is torch.optim.AdamW
    assert [{k: v for k, v in g.items() if k != "params"} for g in ours.param_groups] == \
        [{k: v for k, v in g.items() if k != "params"} for g in before.param_groups]


# --- the schedule -------------------------------------------------------------------------------------------------
def test_nnunet_schedule_is_poly_per_epoch_without_warmup():
    # nnU-Net's PolyLRScheduler: lr = 1e-2 · (1 − epoch / epochs)^0.9, stepped once per epoch; by hand:
    # 0.75^0.9 = 0.77188950672, 0.5^0.9 = 2^-0.9 = 0.53588673127, 0.25^0.9 = 0.28717458875
    factor = epoch_poly(total_steps=20, epochs=4, power=0.9)  # 5 steps per epoch
    assert [factor(s) for s in (0, 4)] == [1.0, 1.0]  # no warm-up, constant within an epoch
    for step, expected in ((5, 0.7718895067235705), (9, 0.7718895067235705), (10, 0.5358867312681466),
                           (19, 0.2871745887492587)):
        assert factor(step) == pytest.approx(expected, rel=1e-12)
    # nnU-Net's own horizon (1000 epochs of 250 iterations): epoch 500 → 1e-2·0.5^0.9, epoch 999 → 1e-2·10^-2.7
    thousand = epoch_poly(250_000, 1000, 0.9)
    assert 1e-2 * thousand(500 * 250) == pytest.approx(5.358867312681466e-3, rel=1e-12)
    assert 1e-2 * thousand(999 * 250 + 249) == pytest.approx(1.9952623149688793e-05, rel=1e-12)


def test_the_task_schedules_each_recipe():
    model = nn.Linear(2, 2)
    for recipe, expected in (("nnunet", epoch_poly(12, 3, 0.9)), ("default", warmup_poly(50, 12, 0.9))):
        task = task_for(variant="basicunet", recipe=recipe, epochs=3)
        optimizer = task.make_optimizer(model)
        scheduler = task.make_scheduler(optimizer, 12)
        seen = []
        for _ in range(12):
            seen.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        torch.testing.assert_close(torch.tensor(seen, dtype=torch.float64),
                                   torch.tensor([task.recipe.lr * expected(s) for s in range(12)],
                                                dtype=torch.float64), rtol=1e-12, atol=0)


# --- deep supervision ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("outputs", "expected"), [
    # 1/2^i per output, the coarsest set to 0, normalised: [1, 1/2, 0] / 1.5
    (3, [2 / 3, 1 / 3, 0.0]),
    # [1, 1/2, 1/4, 0] / 1.75
    (4, [4 / 7, 2 / 7, 1 / 7, 0.0]),
    # [1, 1/2, 1/4, 1/8, 0] / 1.875
    (5, [8 / 15, 4 / 15, 2 / 15, 1 / 15, 0.0]),
])
def test_deep_supervision_weights_are_nnunets(outputs, expected):
    assert deep_supervision_weights(outputs) == pytest.approx(expected, rel=1e-15)


def test_deep_supervision_loss_of_monai_dynunet_weights_each_head():
    from monai.networks.nets import DynUNet

    torch.manual_seed(0)
    net = DynUNet(3, 1, 3, kernel_size=[3, 3, 3, 3], strides=[1, 2, 2, 2], upsample_kernel_size=[2, 2, 2],
                  filters=[2, 4, 4, 4], deep_supervision=True, deep_supr_num=2).double()
    images = torch.randn(2, 1, 16, 16, 16, dtype=torch.float64)
    labels = torch.randint(0, 3, (2, 1, 16, 16, 16))
    out = net(images)  # (B, 1 + 2, K, D, H, W): heads upsampled to full size
    heads = output_heads(out, labels)
    assert len(heads) == 3 and all(h.shape == (2, 3, 16, 16, 16) for h in heads)
    criterion = Recipe("t", "sgd", 1e-2, 0, 0.99, True, 0, 0.9, True, 1, 1, False, False, "prefer", 0.33).criterion()
    expected = 2 / 3 * criterion(heads[0], labels) + 1 / 3 * criterion(heads[1], labels)  # the coarsest: weight 0
    torch.testing.assert_close(deep_supervision_loss(criterion, heads, labels), expected, rtol=1e-12, atol=0)


def test_a_smaller_head_is_scored_against_labels_downsampled_as_nnunet_does():
    labels = torch.arange(4).repeat_interleave(2).reshape(1, 1, 1, 8).expand(1, 1, 8, 8).contiguous()
    seen = []

    def criterion(head, target):
        seen.append(target)
        return head.sum() * 0

    deep_supervision_loss(criterion, [torch.zeros(1, 4, 8, 8), torch.zeros(1, 4, 4, 4), torch.zeros(1, 4, 2, 2)],
                          labels)
    assert len(seen) == 2  # the coarsest head has weight 0 and is not computed
    assert seen[1].shape == (1, 1, 4, 4) and seen[1][0, 0, 0].tolist() == [0, 1, 2, 3]


def test_which_networks_support_deep_supervision():
    from monai.networks.nets import DynUNet

    assert supports_deep_supervision(registry.get_variant("dynunet", "medseg"))
    assert not supports_deep_supervision(registry.get_variant("swinunetr3d", "medseg"))
    assert not supports_deep_supervision(registry.get_variant("missformer", "medseg"))
    assert supports_deep_supervision(DynUNet(3, 1, 2, [3, 3, 3], [1, 2, 2], [2, 2], filters=[2, 2, 2]))
    assert not supports_deep_supervision(nn.Conv3d(1, 2, 3))


def test_nnunet_uses_deep_supervision_where_the_network_has_it():
    dyn = task_for(variant="dynunet", recipe="nnunet")
    assert dyn.deep_supervision and not dyn.recipe.batch_dice  # 3d_fullres without a lowres stage: per-patch Dice
    swin = task_for(variant="swinunetr3d", recipe="nnunet")
    assert not swin.deep_supervision  # nnunet only prefers it
    two_d = task_for(variant="missformer", recipe="nnunet")
    assert not two_d.deep_supervision and two_d.recipe.batch_dice  # nnU-Net's 2d: batch Dice
    assert not task_for(variant="dynunet").deep_supervision


# --- the loss -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_dice", [False, True])
def test_nnunet_loss_is_nnunets_dc_and_ce(batch_dice):
    torch.manual_seed(1)
    logits = torch.randn(3, 4, 6, 5, 7, dtype=torch.float64)
    labels = torch.randint(0, 4, (3, 1, 6, 5, 7))
    recipe = resolve_recipe(MedsegConfig(recipe="nnunet"), None, 2 if batch_dice else 3)
    assert recipe.batch_dice == batch_dice
    # MONAI's Dice term is 1 − Dice where nnU-Net's is −Dice: the same loss plus 1, the same gradient
    torch.testing.assert_close(recipe.criterion()(logits, labels), nnunet_dc_and_ce(logits, labels, batch_dice) + 1,
                               rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def tiny_synapse(tmp_path_factory):
    root = tmp_path_factory.mktemp("synapse") / "tiny"
    return write_phantom(root, seed=3, slices=5, size=(48, 64), train_cases=("case0005", "case0006", "case0007"),
                         test_cases=("case0001",))


def test_default_recipe_trains_on_the_loss_of_before(tiny_synapse):
    """--recipe default: the batch loss is MONAI's DiceCELoss with the config's weights, exactly as before."""
    from monai.losses import DiceCELoss

    task = task_for(data=str(tiny_synapse), variant="basicunet", image_size=32, valid_cases=1, dice_weight=0.7,
                    ce_weight=0.3)
    task.setup()
    torch.manual_seed(0)
    model = task.build_model()
    rows = [(0, 0), (3, 0), (5, 0)]
    loss, count = task.loss(model, rows)
    images, labels = task.training.augmented(rows)
    before = DiceCELoss(to_onehot_y=True, softmax=True, lambda_dice=0.7, lambda_ce=0.3)(model(images), labels)
    assert count == 3.0
    torch.testing.assert_close(loss, before * 3, rtol=0, atol=0)


# --- own recipes and bad input ------------------------------------------------------------------------------------
def test_own_is_the_variants_declared_recipe():
    assert task_for(variant="dynunet", recipe="own").recipe.name == "nnunet"
    assert task_for(variant="missformer", recipe="own").recipe.name == "default"
    assert task_for(variant="basicunet", recipe="own").recipe.name == "default"  # a reference model
    assert task_for(variant="dynunet").recipe.name == "default"  # the field's default is the default recipe


def test_an_unknown_recipe_is_refused_with_a_suggestion():
    with pytest.raises(ValueError, match=r"unknown recipe \(--recipe\) 'nnunt'\. Did you mean 'nnunet'\?"):
        MedsegConfig(recipe="nnunt")


def test_a_setting_the_nnunet_recipe_would_ignore_is_refused_before_any_data_is_read(tmp_path):
    task = task_for(variant="dynunet", recipe="own", lr=5e-3, data=str(tmp_path / "absent"))
    with pytest.raises(ValueError, match=r"recipe nnunet sets .*--lr 0\.005 would be ignored.*--recipe default"):
        task.setup()


def test_a_recipe_requiring_deep_supervision_refuses_a_network_without():
    strict = Recipe("strict", "sgd", 1e-2, 3e-5, 0.99, True, 0, 0.9, True, 1, 1, False, False, "require", 0.33)
    assert uses_deep_supervision(strict, registry.get_variant("dynunet", "medseg"))
    with pytest.raises(ValueError, match=r"requires deep supervision, but variant 'swinunetr3d' has none"):
        uses_deep_supervision(strict, registry.get_variant("swinunetr3d", "medseg"))


def test_a_deeply_supervised_model_under_a_recipe_without_it_is_refused(tiny_synapse):
    task = task_for(data=str(tiny_synapse), variant="basicunet", image_size=32, valid_cases=1)
    task.setup()

    def two_heads(images):
        return torch.zeros(len(images), 2, 9, 32, 32, requires_grad=True)

    with pytest.raises(ValueError, match="returns 2 deep-supervision heads in training but recipe default"):
        task.loss(two_heads, [(0, 0), (1, 0)])


# --- end to end ---------------------------------------------------------------------------------------------------
@pytest.mark.slow  # trains two 3D runs of one epoch
def test_a_shared_nnunet_recipe_in_zoo_compare_is_recorded_per_run(tmp_path, monkeypatch):
    from tasks.compare.sweep import compare
    from tasks.medseg.reading.phantom_nifti import write_phantom_nifti

    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    data = write_phantom_nifti(tmp_path / "dec", "decathlon", slices=20, size=(40, 48),
                               train_cases=("case0005", "case0006", "case0007", "case0008"), test_cases=("case0001",))
    comparison = compare("medseg", ["dynunet", "unetr"], tmp_path / "cmp", budget="epochs=1", baseline="dynunet",
                         allow_undeclared=True, data=str(data), recipe="nnunet", preset="tiny", patch_size="16,32,32",
                         batch_size=2, patches_per_case=1, folds=2, progress=False, overlay_slices=1, device="cpu")
    used = {}
    for row in comparison["rows"]:
        (run,) = (Path(r) if Path(r).is_absolute() else tmp_path / "cmp" / r for r in row["runs"])
        info, metrics = (json.loads((run / name).read_text()) for name in ("run.json", "metrics.json"))
        assert info["config"]["recipe"] == metrics["final"]["recipe"] == "nnunet"
        assert "Trained with the recipe **nnunet**" in (run / "report.md").read_text()
        used[row["variant"]] = info["preprocessing"]["recipe"]["deep_supervision_used"]
        assert MedsegTask.training_recipe(info) == "nnunet"
    assert used == {"dynunet": True, "unetr": False}


def test_a_runs_recipe_is_read_from_its_record():
    recorded = {"config": {"recipe": "own"}, "preprocessing": {"recipe": {"name": "nnunet"}}}
    assert MedsegTask.training_recipe(recorded) == "nnunet"  # own, resolved when the run trained
    assert MedsegTask.training_recipe({"config": {}, "preprocessing": {}}) == "default"  # a run from before recipes
