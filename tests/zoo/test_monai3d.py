"""The 3D segmenters from MONAI (swinunetr3d, unetr, dynunet): nnU-Net's plan, ours against MONAI's network built
directly with the same arguments (weights copied, float64), the declared changes, and bad inputs. The conformance
suite runs on them with every registered variant (tests/tasks/plugins/test_check.py)."""

import pytest
import torch
from torch.testing import assert_close

import zoo
from zoo.monai3d import plan_dynunet
from zoo.registry import Change

PATCH = (32, 32, 64)  # not a cube: a transposed axis would show


def test_the_plan_keeps_kernels_of_1_along_a_coarse_axis_until_the_others_catch_up():
    plan = plan_dynunet((32, 128, 128), (3.0, 0.8, 0.8))
    assert plan.kernel_sizes[0] == (1, 3, 3)  # 3 mm slices against 0.8 mm pixels: no mixing across slices yet
    assert plan.strides[:3] == ((1, 1, 1), (1, 2, 2), (2, 2, 2))  # in-plane first; D joins at 1.6 -> 3.2 mm
    assert plan.kernel_sizes[1] == (3, 3, 3)
    assert plan.strides[-1] == (1, 2, 2)  # D stops at 4 voxels, H and W go on
    assert plan.filters == (16, 32, 64, 128, 256, 320)  # doubling up to the cap
    assert plan.divisor == (8, 32, 32) and plan.upsample_kernel_sizes == plan.strides[1:]


def test_the_plan_of_isotropic_voxels_is_symmetric():
    plan = plan_dynunet((64, 64, 64), (1.0, 1.0, 1.0))
    assert all(k == (3, 3, 3) for k in plan.kernel_sizes)
    assert plan.strides == ((1, 1, 1), *[(2, 2, 2)] * 4)  # 64 -> 4 voxels a side, the minimum


def test_the_plan_refuses_what_it_cannot_build():
    with pytest.raises(ValueError, match=r"does not divide by the plan's strides .* use 32,64,80"):
        plan_dynunet((32, 64, 70), (1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="too small to downsample once"):
        plan_dynunet((4, 4, 4), (1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="three positive"):
        plan_dynunet((32, 32), (1.0, 1.0))


def _monai(name: str, config):
    from monai.networks.nets import UNETR, DynUNet, SwinUNETR

    c = config
    if name == "swinunetr3d":
        return SwinUNETR(in_channels=c.in_channels, out_channels=c.num_classes, depths=c.depths, num_heads=c.num_heads,
                         window_size=c.window_size, feature_size=c.feature_size, spatial_dims=3)
    if name == "unetr":
        return UNETR(in_channels=c.in_channels, out_channels=c.num_classes, img_size=c.patch_size,
                     feature_size=c.feature_size, hidden_size=c.hidden_size, mlp_dim=c.mlp_dim, num_heads=c.num_heads)
    plan = c.plan()
    return DynUNet(3, c.in_channels, c.num_classes, plan.kernel_sizes, plan.strides, plan.upsample_kernel_sizes,
                   filters=plan.filters)


@pytest.mark.parametrize(("name", "patch"), [("swinunetr3d", (64, 64, 96)), ("unetr", PATCH), ("dynunet", PATCH)])
def test_ours_is_monais_network(name, patch):
    torch.manual_seed(0)
    ours = zoo.create(name, preset="tiny", patch_size=patch, num_classes=4, in_channels=2).double().eval()
    theirs = _monai(name, ours.config).double().eval()
    missing, unexpected = theirs.load_state_dict(ours.network.state_dict(), strict=False)
    assert not unexpected  # every tensor of ours is MONAI's
    assert all("norm_cross_attn" in key for key in missing)  # but UNETR's never-called norms, which we do not build
    x = torch.randn(1, 2, *patch, dtype=torch.float64)
    with torch.no_grad():
        out = ours(x)
        assert out.shape == (1, 4, *patch)
        assert_close(out, theirs(x))


@pytest.mark.parametrize(("name", "overrides", "match"), [
    ("unetr", {"patch_size": (32, 32, 40)}, "not divisible by 16"),
    ("swinunetr3d", {"patch_size": (32, 64, 64)}, "below 64"),
    ("swinunetr3d", {"feature_size": 16}, "multiple of 12"),
    ("dynunet", {"patch_size": (16, 32, 36)}, "does not divide by the plan's strides"),
    ("dynunet", {"spacing": (1.0, -1.0, 1.0)}, "spacing must be three positive"),
    ("unetr", {"patch_size": (32, 32)}, "patch_size must be"),
])
def test_bad_configs_get_a_clear_error(name, overrides, match):
    with pytest.raises(ValueError, match=match):
        zoo.get_variant(name, "medseg").config("tiny", **overrides)


def test_bad_inputs_get_a_clear_error():
    model = zoo.create("dynunet", preset="tiny")
    with pytest.raises(ValueError, match=r"takes volumes \(B, 1, D, H, W\)"):
        model(torch.randn(1, 1, 32, 32))
    with pytest.raises(ValueError, match="built for in_channels=1"):
        model(torch.randn(1, 2, 16, 32, 32))
    with pytest.raises(ValueError, match="unknown preset"):
        zoo.create("unetr", preset="huge")


def test_a_change_without_a_revert_says_why_and_has_no_revert_overrides():
    with pytest.raises(ValueError, match="keep one"):
        Change("attention", "a", "b", "c", revert={"x": 1}, no_revert="no switch")
    change = Change("attention", "a", "b", "c", no_revert="no switch")
    assert not change.revertible
    variant = zoo.get_variant("unetr", "medseg")
    assert variant.independent_changes() == () and variant.attribution_order() == ()  # no ablation, no attribution
    assert variant.spatial_dims == 3 and zoo.get_variant("missformer", "medseg").spatial_dims == 2
