"""``plan_dynunet`` against nnU-Net v2's own planning function, ``get_pool_and_conv_props``, on the geometries of
real datasets, and the DynUNet a plan builds.

The expected values are that function's outputs: nnU-Net v2.8.1 (github.com/MIC-DKFZ/nnUNet at commit 0e495086eb10;
``nnunetv2/experiment_planning/experiment_planners/network_topology.py`` last changed in d54a9479), called as its
default 3d_fullres planner calls it (smallest feature map 4, no limit on the poolings per axis) on the inputs below,
run outside this repository. The inputs are (spacing, patch) pairs of the kind nnU-Net plans for each dataset: its
target spacing (rounded) and either the patch of its usual 3d_fullres plan or its first candidate patch, the box of
256³ voxels shaped by the spacing and clipped to the dataset's (approximate) median image shape, which nnU-Net pads.

Strides and kernels are written one stage per group of three digits (D, H, W): "111 122" is ((1, 1, 1), (1, 2, 2)).
"""

import pytest
import torch

import zoo
from zoo.monai3d import plan_dynunet
from zoo.monai3d.config import DynUNetConfig

# name, spacing (D, H, W) mm, patch, nnU-Net's strides, its kernels, its padded patch
PUBLISHED_PATCHES = [
    ("MSD Task01 brain tumour", (1.0, 1.0, 1.0), (128, 160, 112), "111 222 222 222 222 221",
     "333 333 333 333 333 333", (128, 160, 112)),
    ("MSD Task02 heart", (1.37, 1.25, 1.25), (80, 192, 160), "111 222 222 222 222 122",
     "333 333 333 333 333 333", (80, 192, 160)),
    ("MSD Task03 liver", (1.0, 0.7676, 0.7676), (128, 128, 128), "111 222 222 222 222 222",
     "333 333 333 333 333 333", (128, 128, 128)),
    ("MSD Task05 prostate", (3.6, 0.62, 0.62), (20, 320, 256), "111 122 122 222 222 122 122",
     "133 133 333 333 333 333 333", (20, 320, 256)),
    ("MSD Task06 lung", (1.24, 0.79, 0.79), (80, 192, 160), "111 222 222 222 222 122",
     "333 333 333 333 333 333", (80, 192, 160)),
    ("MSD Task07 pancreas", (2.5, 0.8, 0.8), (40, 224, 224), "111 122 222 222 222 122",
     "133 333 333 333 333 333", (40, 224, 224)),
    ("MSD Task08 hepatic vessel", (1.5, 0.8, 0.8), (64, 192, 192), "111 222 222 222 222 122",
     "333 333 333 333 333 333", (64, 192, 192)),
    ("MSD Task09 spleen", (1.6, 0.79, 0.79), (64, 192, 160), "111 122 222 222 222 222",
     "133 333 333 333 333 333", (64, 192, 160)),
    ("MSD Task10 colon", (3.0, 0.78, 0.78), (56, 192, 160), "111 122 222 222 222 122",
     "133 333 333 333 333 333", (56, 192, 160)),
    ("ACDC", (5.0, 1.5625, 1.5625), (20, 256, 224), "111 122 222 222 122 122",
     "133 333 333 333 333 333", (20, 256, 224)),
    ("KiTS19", (0.78125, 0.78125, 0.78125), (128, 128, 128), "111 222 222 222 222 222",
     "333 333 333 333 333 333", (128, 128, 128)),
    ("BTCV / Synapse", (3.0, 0.76, 0.76), (48, 192, 192), "111 122 222 222 222 122",
     "133 333 333 333 333 333", (48, 192, 192)),
    ("AMOS CT", (2.0, 0.71, 0.71), (64, 160, 192), "111 122 222 222 222 222",
     "133 333 333 333 333 333", (64, 160, 192)),
    ("anisotropic CT", (2.0, 1.0, 1.0), (64, 128, 128), "111 122 222 222 222 222",  # a ratio of exactly 2
     "133 333 333 333 333 333", (64, 128, 128)),
]
FIRST_CANDIDATES = [  # the median shape in the comment; odd sides halve upwards, and the patch is padded
    ("MSD Task01 brain tumour", (1.0, 1.0, 1.0), (138, 169, 138), "111 222 222 222 222 222",  # (138, 169, 138)
     "333 333 333 333 333 333", (160, 192, 160)),
    ("MSD Task02 heart", (1.37, 1.25, 1.25), (115, 264, 232), "111 222 222 222 222 222 122",  # (115, 320, 232)
     "333 333 333 333 333 333 333", (128, 320, 256)),
    ("MSD Task04 hippocampus", (1.0, 1.0, 1.0), (36, 50, 35), "111 222 222 222",  # (36, 50, 35)
     "333 333 333 333", (40, 56, 40)),
    ("MSD Task05 prostate", (3.6, 0.62, 0.62), (20, 320, 319), "111 122 122 222 222 122 122",  # (20, 320, 319)
     "133 133 333 333 333 333 333", (20, 320, 320)),
    ("MSD Task07 pancreas", (2.5, 0.8, 0.8), (96, 374, 374), "111 122 222 222 222 222 122",  # (96, 512, 512)
     "133 333 333 333 333 333 333", (96, 384, 384)),
    ("ACDC at its 10 mm slices", (10.0, 1.5625, 1.5625), (9, 237, 208), "111 122 122 222 122 122",  # (9, 237, 208)
     "133 133 333 333 333 333", (10, 256, 224)),
    ("ACDC", (5.0, 1.5625, 1.5625), (18, 237, 208), "111 122 222 222 122 122",  # (18, 237, 208)
     "133 333 333 333 333 333", (20, 256, 224)),
    ("M&Ms cine MRI", (10.0, 1.25, 1.25), (10, 256, 256), "111 122 122 122 222 122 122",  # (10, 256, 256)
     "133 133 133 333 333 333 333", (10, 256, 256)),
    ("LA (left atrium) MRI", (0.625, 0.625, 0.625), (88, 256, 256), "111 222 222 222 222 122 122",  # (88, 640, 640)
     "333 333 333 333 333 333 333", (96, 256, 256)),
    ("anisotropic CT", (2.0, 1.0, 1.0), (100, 300, 300), "111 122 222 222 222 222 122",  # (100, 300, 300)
     "133 333 333 333 333 333 333", (112, 320, 320)),
]
GEOMETRIES = PUBLISHED_PATCHES + FIRST_CANDIDATES


def _stages(text: str) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(digit) for digit in stage) for stage in text.split())


@pytest.mark.parametrize(("spacing", "patch", "strides", "kernels", "padded"), [g[1:] for g in GEOMETRIES],
                         ids=[f"{g[0]} {'x'.join(map(str, g[2]))}" for g in GEOMETRIES])
def test_the_plan_is_nnunets(spacing, patch, strides, kernels, padded):
    plan = plan_dynunet(patch, spacing)
    assert plan.strides == _stages(strides)
    assert plan.kernel_sizes == _stages(kernels)
    assert plan.patch == padded
    assert plan_dynunet(padded, spacing) == plan  # the padded patch plans the same network, which accepts it


def test_the_geometries_cover_every_decision_of_the_rule():
    """Each decision of the rule changes the plan of at least one geometry above, so that none goes untested."""
    names = {g[0] for g in GEOMETRIES}
    assert len({g[0] for g in PUBLISHED_PATCHES}) >= 12
    assert "anisotropic CT" in names  # a spacing ratio of exactly 2 is coarse: D waits one stage
    assert "ACDC" in names  # the single-axis rule: H alone (8 voxels) is not halved to 4
    assert "M&Ms cine MRI" in names  # the finest spacing among the axes that can still be halved; kernels stay 3
    assert any(g[2] != g[5] for g in GEOMETRIES)  # padding, and odd sides halving upwards (heart 115 -> 128)


def test_the_widths_double_up_to_the_cap_and_max_stages_cuts_the_plan():
    prostate = plan_dynunet((20, 320, 256), (3.6, 0.62, 0.62))
    assert prostate.filters == (16, 32, 64, 128, 256, 320, 320)
    assert plan_dynunet((20, 320, 256), (3.6, 0.62, 0.62), base=32).filters == (32, 64, 128, 256, 320, 320, 320)
    cut = plan_dynunet((20, 320, 256), (3.6, 0.62, 0.62), max_stages=4)
    assert cut.strides == prostate.strides[:4]
    assert cut.kernel_sizes == (*prostate.kernel_sizes[:3], (3, 3, 3))  # a bottleneck is 3 x 3 x 3
    assert cut.divisor == (2, 8, 8) and cut.patch == (20, 320, 256)
    assert cut.upsample_kernel_sizes == cut.strides[1:]


def test_the_plan_refuses_what_it_cannot_build():
    with pytest.raises(ValueError, match="too small to downsample once"):
        plan_dynunet((4, 4, 4), (1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="too small to downsample once .* 12 along one"):
        plan_dynunet((4, 4, 10), (1.0, 1.0, 1.0))  # one axis of 10 voxels: nnU-Net does not halve it alone
    with pytest.raises(ValueError, match="three positive"):
        plan_dynunet((32, 32), (1.0, 1.0))
    with pytest.raises(ValueError, match="max_stages must be at least 2 .* got 1"):
        plan_dynunet((32, 32, 32), (1.0, 1.0, 1.0), max_stages=1)


def test_the_config_asks_for_the_padded_patch():
    with pytest.raises(ValueError, match=r"patch \(36, 50, 35\) does not divide .* use 40,56,40"):
        DynUNetConfig(patch_size=(36, 50, 35))
    assert DynUNetConfig(patch_size=(40, 56, 40)).plan().strides == _stages("111 222 222 222")


def test_an_anisotropic_plan_builds_a_network_that_keeps_the_patch():
    """ACDC's spacing at a CPU's size (nnU-Net's plan of it): kernels (1, 3, 3) first, H halved alone at the end;
    the output has the input's shape."""
    torch.manual_seed(0)
    model = zoo.create("dynunet", preset="tiny", spacing=(5.0, 1.5625, 1.5625), patch_size=(8, 96, 48),
                       max_stages=None).eval()
    plan = model.config.plan()
    assert plan.strides == _stages("111 122 222 122 121")
    assert plan.kernel_sizes == _stages("133 333 333 333 333")
    with torch.no_grad():
        out = model(torch.randn(1, 1, 8, 96, 48))
    assert out.shape == (1, 3, 8, 96, 48)
