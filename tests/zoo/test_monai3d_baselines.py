"""The strongest 3D baselines (issue 39): ``segresnet``, ``mednext``, ``resenc`` and ``swinunetr-v2`` against the
libraries' own networks built directly (parameter counts, and a float64 forward with the weights copied), nnU-Net
ResEnc's plan against the numbers nnU-Net's ResEnc planner writes, the deep-supervision contract the medseg recipes
read, bad inputs, and a short training of each on the 3D phantom."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.functional import interpolate
from torch.testing import assert_close

import zoo

ANISOTROPIC = dict(patch_size=(16, 32, 48), spacing=(2.5, 0.8, 0.8))  # plans kernel 1 along D at stage 1
NEW = ("segresnet", "mednext", "resenc", "swinunetr-v2")


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _library(name: str, config) -> nn.Module:
    """The library's network with the config's arguments, built without our builders."""
    c = config
    if name == "segresnet":
        from monai.networks.nets import SegResNetDS

        return SegResNetDS(3, c.init_filters, c.in_channels, c.num_classes, norm=c.norm, blocks_down=c.blocks_down,
                           dsdepth=len(c.blocks_down) - 1 if c.deep_supervision else 1)
    if name == "mednext":  # MONAI's own factory of the paper's sizes (it fixes 32 filters)
        from monai.networks.nets.mednext import create_mednext

        return create_mednext(c.size, 3, c.in_channels, c.num_classes, c.kernel_size, c.deep_supervision)
    if name == "swinunetr-v2":
        from monai.networks.nets import SwinUNETR

        return SwinUNETR(in_channels=c.in_channels, out_channels=c.num_classes, depths=c.depths,
                         num_heads=c.num_heads, window_size=c.window_size, feature_size=c.feature_size,
                         spatial_dims=3, use_v2=True)
    return _residual_encoder_unet(c)


def _residual_encoder_unet(c) -> nn.Module:
    """nnU-Net ResEnc's network with the ``arch_kwargs`` its planner writes, for the config's plan."""
    from dynamic_network_architectures.architectures.unet import ResidualEncoderUNet

    plan = c.plan()
    n = len(plan.strides)
    return ResidualEncoderUNet(
        c.in_channels, n, [min(c.base_filters * 2**i, c.max_filters) for i in range(n)], nn.Conv3d,
        plan.kernel_sizes, plan.strides, (1, 3, 4, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6)[:n], c.num_classes,
        (1,) * (n - 1), conv_bias=True, norm_op=nn.InstanceNorm3d, norm_op_kwargs={"eps": 1e-5, "affine": True},
        nonlin=nn.LeakyReLU, nonlin_kwargs={"inplace": True}, deep_supervision=c.deep_supervision)


def _idle_heads(library: nn.Module) -> int:
    """Parameters of ResEnc's decoder heads that its forward never calls without deep supervision."""
    return sum(_count(head) for head in library.decoder.seg_layers[:-1])


CASES = [("segresnet", dict(patch_size=(16, 32, 48))), ("mednext", dict(patch_size=(16, 32, 32), init_filters=32)),
         ("resenc", ANISOTROPIC)]


@pytest.mark.parametrize("deep", [False, True])
@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_ours_is_the_librarys_network(name, overrides, deep):
    torch.manual_seed(0)
    ours = zoo.create(name, preset="tiny", num_classes=4, in_channels=2, deep_supervision=deep,
                      **overrides).double()
    theirs = _library(name, ours.config).double()
    idle = _idle_heads(theirs) if name == "resenc" and not deep else 0
    assert _count(ours) == _count(theirs) - idle and _count(ours) > 0
    missing, unexpected = theirs.load_state_dict(ours.network.state_dict(), strict=False)
    assert not unexpected and all(key.startswith("decoder.seg_layers.") for key in missing) and (not missing) == (
        not idle)  # every tensor of ours is the library's; theirs has only the idle heads besides
    x = torch.randn(2, 2, *ours.config.patch_size, dtype=torch.float64)
    with torch.no_grad():
        ours.eval(), theirs.eval()
        out = ours(x)
        assert out.shape == (2, 4, *ours.config.patch_size)
        expected = theirs(x)
        assert_close(out, expected[0] if isinstance(expected, (list, tuple)) else expected)
        if deep:  # training mode: every head, full resolution first, stacked as MONAI's DynUNet stacks them
            ours.train(), theirs.train()
            heads, stacked = theirs(x), ours(x)
            assert isinstance(heads, (list, tuple)) and stacked.shape == (2, len(heads), 4, *ours.config.patch_size)
            assert heads[-1].shape[2] < heads[0].shape[2]
            for i, head in enumerate(heads):
                assert_close(stacked[:, i], interpolate(head, ours.config.patch_size))


@pytest.mark.slow
def test_swinunetr_v2_is_monais_and_reverts_to_swinunetr3d():
    torch.manual_seed(0)
    patch = (64, 64, 96)
    ours = zoo.create("swinunetr-v2", preset="tiny", patch_size=patch, num_classes=4, in_channels=2).double().eval()
    theirs = _library("swinunetr-v2", ours.config).double().eval()
    assert _count(ours) == _count(theirs)
    theirs.load_state_dict(ours.network.state_dict())
    x = torch.randn(1, 2, *patch, dtype=torch.float64)
    with torch.no_grad():
        assert_close(ours(x), theirs(x))


def test_swinunetr_v2_is_swinunetr3d_with_one_revertible_change():
    v2, v1 = zoo.get_variant("swinunetr-v2", "medseg"), zoo.get_variant("swinunetr3d", "medseg")
    assert v2.builds_on == "swinunetr3d" and [c.name for c in v2.independent_changes()] == ["stagewise convolutions"]
    for preset in v1.presets:  # the revert lands on swinunetr3d's own config: zoo ablate's row is the v1 network
        assert v2.config(preset, use_v2=False) == v1.config(preset)
    on, off = (zoo.create("swinunetr-v2", preset="tiny", use_v2=v) for v in (True, False))
    assert _count(on) > _count(off) == _count(zoo.create("swinunetr3d", preset="tiny"))


@pytest.mark.parametrize("size", ["S", "B", "M", "L"])
def test_mednext_sizes_are_the_papers_as_monai_builds_them(size):
    """Our table of the sizes against MONAI's ``create_mednext`` (every tensor's shape) on the meta device, and the
    counts against the paper's 5.6M, 10.5M, 17.6M and 61.8M parameters (Roy et al. 2023, Table 1), within its
    rounding."""
    from monai.networks.nets.mednext import create_mednext

    with torch.device("meta"):
        ours = zoo.create("mednext", preset=size, num_classes=3)
        theirs = create_mednext(size, out_channels=3)
    assert {k: v.shape for k, v in ours.network.state_dict().items()} == {
        k: v.shape for k, v in theirs.state_dict().items()}
    paper = {"S": 5.6e6, "B": 10.5e6, "M": 17.6e6, "L": 61.8e6}[size]
    assert abs(_count(ours) - paper) < 0.1e6


def test_resenc_is_planned_as_nnunets_resenc_m_planner_plans():
    """For a 128³ patch of 1 mm voxels nnU-Net's ResEnc M planner writes six stages (five halvings to 4³), kernels
    3³, widths (32, 64, 128, 256, 320, 320), encoder blocks (1, 3, 4, 6, 6, 6), one decoder convolution per stage,
    biased convolutions, affine instance norms (eps 1e-5), leaky ReLUs; nnU-Net's count includes the decoder's
    idle heads, which ours does not build."""
    from dynamic_network_architectures.architectures.unet import ResidualEncoderUNet

    from zoo.monai3d.networks import resenc_arguments

    config = zoo.get_variant("resenc", "medseg").config("paper", num_classes=14)
    arguments = resenc_arguments(config)
    assert arguments["n_stages"] == 6 and arguments["features_per_stage"] == (32, 64, 128, 256, 320, 320)
    assert arguments["kernel_sizes"] == ((3, 3, 3),) * 6
    assert arguments["strides"] == ((1, 1, 1),) + ((2, 2, 2),) * 5
    assert arguments["n_blocks_per_stage"] == (1, 3, 4, 6, 6, 6) and arguments["n_conv_per_stage_decoder"] == (1,) * 5
    with torch.device("meta"):
        ours = zoo.create("resenc", preset="paper", num_classes=14)
        theirs = ResidualEncoderUNet(
            1, 6, (32, 64, 128, 256, 320, 320), nn.Conv3d, 3, (1, 2, 2, 2, 2, 2), (1, 3, 4, 6, 6, 6), 14, 1,
            conv_bias=True, norm_op=nn.InstanceNorm3d, norm_op_kwargs={"eps": 1e-5, "affine": True},
            nonlin=nn.LeakyReLU, nonlin_kwargs={"inplace": True})
    assert _count(ours) == _count(theirs) - _idle_heads(theirs)
    assert _count(zoo.create("resenc", preset="paper", num_classes=14, deep_supervision=True)) == _count(theirs)


# ------------------------------------------------------------------------------- deep supervision (the contract)

@pytest.mark.parametrize(("name", "heads"), [("dynunet", 3), ("resenc", 3), ("segresnet", 2), ("mednext", 5)])
def test_deep_supervision_heads_are_stacked_in_training_only(name, heads):
    """``deep_supervision=True`` builds the network with its heads on (the recipes' contract): (B, S, K, D, H, W)
    in training, as MONAI's DynUNet returns them; the full-resolution logits alone in evaluation."""
    variant = zoo.get_variant(name, "medseg")
    assert variant.config_class.supports_deep_supervision and not variant.config("tiny").deep_supervision
    model = zoo.create(name, preset="tiny", deep_supervision=True)
    x = torch.randn(2, 1, *model.config.patch_size)
    assert model.train()(x).shape == (2, heads, 3, *model.config.patch_size)
    with torch.no_grad():
        assert model.eval()(x).shape == (2, 3, *model.config.patch_size)


@pytest.mark.parametrize("name", ["swinunetr3d", "swinunetr-v2", "unetr"])
def test_a_network_without_deep_supervision_refuses_it(name):
    assert not zoo.get_variant(name, "medseg").config_class.supports_deep_supervision
    with pytest.raises(ValueError, match="has no deep supervision.*use deep_supervision=False"):
        zoo.get_variant(name, "medseg").config("tiny", deep_supervision=True)


# ------------------------------------------------------------------------------- bad inputs

@pytest.mark.parametrize(("name", "overrides", "match"), [
    ("mednext", {"size": "XL"}, r"unknown MedNeXt size 'XL'\. Did you mean 'L'\?"),
    ("mednext", {"patch_size": (16, 32, 40)}, "not divisible by 16.*use e.g. 16,32,32"),
    ("mednext", {"kernel_size": 4}, "must be odd"),
    ("segresnet", {"patch_size": (16, 32, 34), "blocks_down": (1, 2, 2)}, "not divisible by 4.*use e.g. 16,32,32"),
    ("segresnet", {"norm": "layer"}, "unknown norm of SegResNetDS 'layer'"),
    ("segresnet", {"blocks_down": (1,)}, "at least 2 stages"),
    ("resenc", {"patch_size": (16, 32, 36)}, "does not divide by the plan's strides"),
    ("resenc", {"patch_size": (8, 8, 8), "max_stages": 2, "deep_supervision": True}, "needs at least 3 stages"),
    ("swinunetr-v2", {"patch_size": (32, 64, 64)}, "below 64"),
    ("dynunet", {"deep_supervision": "yes"}, "deep_supervision must be a bool"),
])
def test_bad_configs_get_a_one_line_error(name, overrides, match):
    with pytest.raises((ValueError, TypeError), match=match) as error:
        zoo.get_variant(name, "medseg").config("tiny", **overrides)
    assert "\n" not in str(error.value)


def test_the_baselines_are_listed_for_medseg_in_3d():
    listed = set(zoo.list_variants("medseg"))
    assert set(NEW) <= listed
    assert all(zoo.get_variant(name, "medseg").spatial_dims == 3 for name in NEW)


# ------------------------------------------------------------------------------- training on the 3D phantom

@pytest.fixture(scope="module")
def phantom3d(tmp_path_factory):
    """``--dataset phantom3d``'s cases (64 slices of 2.5 mm, 64-72 voxels of 0.7-0.9 mm), 4 training and 1 test."""
    from tasks.medseg.reading.data import PHANTOM_3D
    from tasks.medseg.reading.phantom_nifti import write_phantom_nifti

    root = tmp_path_factory.mktemp("phantom3d")
    return write_phantom_nifti(root / "dec", "decathlon", **PHANTOM_3D,
                               train_cases=("case0005", "case0006", "case0007", "case0008"),
                               test_cases=("case0001",))


@pytest.mark.slow
@pytest.mark.parametrize(("name", "patch"), [("segresnet", "16,32,32"), ("mednext", "16,32,32"),
                                             ("resenc", "16,32,32"), ("swinunetr-v2", "64,64,64")])
def test_each_baseline_trains_on_the_3d_phantom(name, patch, phantom3d, tmp_path):
    from tasks.medseg.task import MedsegConfig, MedsegTask
    from tasks.runs.training import train

    config = MedsegConfig(data=str(phantom3d), out=str(tmp_path / name), variant=name, preset="tiny",
                          patch_size=patch, epochs=1, batch_size=2, patches_per_case=1, folds=2, progress=False,
                          overlay_slices=2, device="cpu")
    summary = train(MedsegTask, config)
    final = summary["final"]["test"]
    assert 0.0 <= final["dice"] <= 1.0
