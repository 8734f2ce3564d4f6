"""The parts of 3D segmentation that need no trained model: patch sampling (tasks.medseg.training.patches), the sliding
window, mirroring and ensembling (tasks.medseg.inference.sliding), the 3D settings' checks, and the ensemble loader's
errors
(tasks.runs.ensemble)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from tasks.engine.distributed import DistInfo
from tasks.medseg.config import MedsegConfig
from tasks.medseg.inference.sliding import (
    default_mirror_axes,
    ensemble_probabilities,
    mirror_sets,
    mirrored_probabilities,
    parse_axes,
    window_logits,
)
from tasks.medseg.reading.volume import Volume
from tasks.medseg.task import MedsegTask
from tasks.medseg.training.patches import Augmentation, PatchSampler, augmentation_transform, check_patch, default_patch
from tasks.runs.ensemble import fold_count, load_members


def _case(shape=(40, 96, 96), blob=(slice(19, 21), slice(47, 49), slice(47, 49))):
    image = np.random.default_rng(0).random((1, *shape)).astype(np.float32)  # (C, D, H, W)
    label = np.zeros(shape, np.uint8)
    label[blob] = 3
    return image, label


def _share_with_foreground(sampler: PatchSampler, n: int) -> float:
    return float(np.mean([bool((sampler.sample(0, seed)[1] > 0).any()) for seed in range(n)]))


def test_patches_keep_the_foreground_share():
    image, label = _case()  # a 2×2×2 organ in 40×96×96: a background-centred 16×32×32 patch rarely holds it
    always = PatchSampler([image], [label], (16, 32, 32), foreground=1.0)
    assert _share_with_foreground(always, 50) == 1.0  # every foreground-centred patch holds the organ
    never = _share_with_foreground(PatchSampler([image], [label], (16, 32, 32), foreground=0.0), 300)
    share = _share_with_foreground(PatchSampler([image], [label], (16, 32, 32), foreground=0.33), 300)
    # background-centred patches hold the organ by chance only (~5 % here); a third more are centred on it
    assert never < 0.15
    expected = 0.33 + (1 - 0.33) * never
    assert abs(share - expected) < 0.1, (share, expected)


def test_a_patch_is_a_function_of_its_seed_and_keeps_image_and_label_aligned():
    image, label = _case()
    image[0][label > 0] = 5.0  # the organ is the only place this bright, so geometry must move both alike
    sampler = PatchSampler([image], [label], (16, 32, 32), foreground=1.0,
                           augmentation=Augmentation(rotate_degrees=0, zoom=0, intensity=0))
    a_image, a_label = sampler.sample(0, 7)
    b_image, b_label = sampler.sample(0, 7)
    assert a_image.shape == (1, 16, 32, 32) and a_label.shape == (1, 16, 32, 32)
    assert a_label.dtype == torch.int64 and type(a_image) is torch.Tensor  # plain tensors, no MONAI metadata
    torch.testing.assert_close(a_image, b_image, rtol=0, atol=0)
    assert torch.equal(a_label, b_label)
    assert torch.equal(a_label[0] > 0, a_image[0] == 5.0)
    others = [sampler.sample(0, seed)[0] for seed in range(8, 12)]
    assert any(not torch.equal(a_image, o) for o in others)


def test_a_case_smaller_than_the_patch_is_padded():
    image, label = _case(shape=(10, 20, 24), blob=(slice(4, 6), slice(8, 10), slice(8, 10)))
    x, y = PatchSampler([image], [label], (16, 32, 32), foreground=1.0).sample(0, 0)
    assert x.shape == (1, 16, 32, 32) and y.shape == (1, 16, 32, 32)
    assert int((y > 0).sum()) == 8  # the whole organ, once


def test_patch_planning_and_its_errors():
    assert default_patch([(33, 65, 73), (31, 80, 85), (32, 70, 72)]) == (32, 64, 64)
    assert default_patch([(9, 20, 20)] * 3) == (16, 32, 32)  # rounded up to a multiple of 16
    check_patch((32, 64, 64), [(33, 65, 73), (20, 60, 60)])
    check_patch((48, 80, 96), [(33, 65, 73), (31, 80, 85)])  # padded to the next multiple of 16: 48, 80, 96
    with pytest.raises(ValueError, match=r"--patch-size 64,64,64 is larger than every training case along axis 0"):
        check_patch((64, 64, 64), [(33, 65, 73), (31, 80, 85)])
    with pytest.raises(ValueError, match="patch must be three positive integers"):
        PatchSampler([np.zeros((1, 4, 4, 4), np.float32)], [np.zeros((4, 4, 4), np.uint8)], (4, 4))


class _Identity(nn.Module):
    def forward(self, x):
        return x


@pytest.mark.parametrize("mode", ["gaussian", "constant"])
def test_the_sliding_window_of_an_identity_model_returns_the_labels_exactly(mode):
    # odd sizes that no window tiles, a window larger than the volume along D, and overlaps 0 and 0.5
    labels = torch.from_numpy(np.random.default_rng(1).integers(0, 4, (7, 29, 37)))  # (D, H, W)
    one_hot = nn.functional.one_hot(labels, 4).permute(3, 0, 1, 2).float()  # (K, D, H, W) as the image
    for overlap in (0.0, 0.5):
        logits = window_logits(_Identity(), one_hot, (8, 16, 16), overlap, mode, sw_batch_size=3)
        assert logits.shape == (4, 7, 29, 37)
        assert torch.equal(logits.argmax(0), labels)


@torch.no_grad()
def test_mirroring_changes_nothing_for_a_mirror_equivariant_model_and_something_otherwise():
    torch.manual_seed(0)
    image = torch.randn(2, 6, 9, 11, dtype=torch.float64)  # (C, D, H, W)
    pointwise = nn.Conv3d(2, 3, 1).double()  # a 1×1×1 convolution commutes with every flip

    def probs(x):
        return pointwise(x[None])[0].softmax(0)

    plain = probs(image)
    torch.testing.assert_close(mirrored_probabilities(probs, image, (0, 1, 2)), plain)
    bias = torch.zeros(3, 1, 1, 11, dtype=torch.float64)
    bias[0, 0, 0] = torch.linspace(0, 3, 11)  # class 0 favoured towards one end of W: not equivariant

    def biased(x):
        return (pointwise(x[None])[0] + bias).softmax(0)

    assert (mirrored_probabilities(biased, image, (2,)) - biased(image)).abs().max() > 1e-3
    assert len(mirror_sets((0, 1, 2))) == 8 and mirror_sets(()) == [()]


def test_an_ensemble_of_identical_members_equals_one_member():
    torch.manual_seed(0)
    image = torch.randn(1, 5, 6, 7)
    model = nn.Conv3d(1, 4, 3, padding=1)

    def member(x):
        return model(x[None])[0].softmax(0)

    assert torch.equal(ensemble_probabilities([member, member], image), member(image))
    with pytest.raises(ValueError, match="at least one model"):
        ensemble_probabilities([], image)


@pytest.mark.parametrize(("dims", "axes"), [(3, (0, 1)), (3, (2,)), (2, (1,)), (2, (1, 2))])
def test_training_flips_exactly_its_flip_axes(dims, axes):
    """flip_axes name axes of the (D, H, W) grid (a slice's H and W are its axes 0 and 1): with probability 1 each is
    flipped, and no other."""
    shape = (1, 3, 4, 5) if dims == 3 else (1, 4, 5)  # (C, D, H, W) or (C, H, W)
    image = torch.arange(float(np.prod(shape))).reshape(shape)
    augment = augmentation_transform(Augmentation(0, 0, 0, flip_prob=1.0, flip_axes=axes), dims=dims)
    out = augment({"image": image, "label": image.clone()})
    expected = image.flip([1 + a - (3 - dims) for a in axes])  # past the channel axis
    assert torch.equal(torch.as_tensor(out["image"]), expected) and torch.equal(torch.as_tensor(out["label"]), expected)
    with pytest.raises(ValueError, match="a 2D slice has only H"):
        augmentation_transform(Augmentation(flip_prob=0.5, flip_axes=(0,)), dims=2)


@pytest.mark.parametrize(("variant", "trained"), [("dynunet", (0, 1)), ("basicunet", (1,))])
def test_tta_mirrors_the_axes_training_flipped_and_says_so(variant, trained, caplog):
    """nnU-Net's rule: mirror at test time along the axes training mirrored, never others (W, the phantom's
    left-right axis, in neither); without flips in training, --tta mirror has nothing to mirror and says so."""
    def task(**settings):
        config = MedsegConfig(variant=variant, tta="mirror", patch_size="16,32,32", **settings)
        made = MedsegTask(config, torch.device("cpu"), DistInfo())
        made.cases.patch_size = (16, 32, 32)
        return made

    flipping = task(flip_prob=0.5)
    assert flipping.trained_flip_axes() == flipping.evaluator.mirror_axes() == trained
    flipping.cases.volumes = {"train": [Volume("c", np.zeros((16, 32, 32), np.float32),
                                               np.zeros((16, 32, 32), np.uint8), None)]}
    flipping.prepare_training()
    if variant == "basicunet":  # the training augmentation flips exactly these (a slice's axis 0 is H)
        augment, offset = flipping.training.augment, 1
    else:
        augment, offset = flipping.training.sampler.augment, 0
    flips = [t for t in augment.transforms if type(t).__name__ == "RandFlipd"]
    assert [f.flipper.spatial_axis for f in flips] == [a - offset for a in trained]
    line = flipping.evaluator.inference_lines()[-1]
    assert f"{2 ** len(trained)} flips along" in line and f"training flipped ax{'is' if len(trained) == 1 else 'es'} " \
        f"{', '.join('DHW'[a] for a in trained)}" in line
    assert task(flip_prob=0.5, mirror_axes="1").evaluator.mirror_axes() == (1,)
    with caplog.at_level("WARNING"):
        assert task(flip_prob=0.5, mirror_axes="1,2").evaluator.mirror_axes() == (1,)  # W: never flipped in training
    assert "axis W not mirrored, training did not flip it" in caplog.text
    still = task(flip_prob=0.0)
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert still.trained_flip_axes() == still.evaluator.mirror_axes() == ()
    assert "nothing to mirror, the run trained without flips (--flip-prob 0" in caplog.text
    line = still.evaluator.inference_lines()[-1]
    assert "mirroring: none (--tta mirror asked for it, but there was no axis to mirror)" in line


def test_mirror_axes_leave_left_and_right_alone():
    assert default_mirror_axes(3, 2) == (0, 1)
    assert default_mirror_axes(3, 0) == (1, 2)
    assert default_mirror_axes(2, 2) == (1,)  # a slice model: not D either
    assert parse_axes("2,0") == (0, 2) and parse_axes(None) is None
    for bad in ("3", "x", ""):
        with pytest.raises(ValueError, match="mirror axes"):
            parse_axes(bad)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("overlap", 1.0, "overlap"), ("overlap", -0.1, "overlap"), ("sw_mode", "median", "sliding-window weighting"),
    ("tta", "flip", "test-time augmentation"), ("mirror_axes", "0,5", "mirror axes"),
    ("patch_size", "32,64", "patch_size must be three positive integers"), ("patch_size", "0,64,64", "patch_size"),
    ("sw_batch_size", 0, "sw_batch_size"), ("foreground", 1.5, "foreground"), ("patches_per_case", 0, "patches"),
])
def test_bad_3d_settings_get_a_clear_error(field, value, message):
    with pytest.raises(ValueError, match=message):
        MedsegConfig(**{field: value})


def test_a_cross_validation_folder_with_a_missing_fold_is_refused(tmp_path):
    (tmp_path / "cv.json").write_text(json.dumps({"folds": 3}))
    (tmp_path / "fold_0").mkdir()
    (tmp_path / "fold_0" / "run.json").write_text("{}")
    assert fold_count(tmp_path) == 3 and fold_count(tmp_path / "fold_0") is None
    with pytest.raises(FileNotFoundError, match="no finished run in fold_1, fold_2"):
        load_members(tmp_path)
    with pytest.raises(ValueError, match="not a cross-validation folder"):
        load_members(tmp_path / "fold_0")
