"""The 3D segmenters from MONAI (swinunetr3d, unetr, dynunet): ours against MONAI's network built
directly with the same arguments (weights copied, float64), the declared changes, and bad inputs. The conformance
suite runs on them with every registered variant (tests/tasks/plugins/test_check.py); nnU-Net's plan of
the DynUNet is tested in test_dynunet_plan.py."""

import pytest
import torch
from torch.testing import assert_close

import zoo
from zoo.registry import Change

PATCH = (32, 32, 64)  # not a cube: a transposed axis would show


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


@pytest.mark.slow
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
