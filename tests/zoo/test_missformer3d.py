"""MISSFormer's parts in 3D (missformer3d): the n-D map helpers against einops' named patterns, the 3D model's shapes,
gradients and errors (the conformance suite runs on it with every registered variant, tests/tasks/plugins)."""

import pytest
import torch
from einops import rearrange
from torch.testing import assert_close

import zoo
from zoo.missformer import BridgeLayout, MISSFormer
from zoo.missformer.attention import SpatialReduction
from zoo.missformer.config import MISSFormer3DConfig, MISSFormerConfig
from zoo.missformer.maps import as_map, pixel_shuffle, tokens

VARIANT = zoo.get_variant("missformer3d", "medseg")


def tiny3d(**overrides) -> MISSFormer:
    torch.manual_seed(0)
    return VARIANT.build(VARIANT.config("tiny", **overrides))


def test_pixel_shuffle_is_the_named_rearrangement_in_2d_and_3d():
    x2 = torch.randn(2, 3, 5, 2 * 2 * 7, dtype=torch.float64)
    assert torch.equal(pixel_shuffle(x2, 2), rearrange(x2, "b h w (p1 p2 c) -> b (h p1) (w p2) c", p1=2, p2=2))
    x3 = torch.randn(2, 3, 4, 5, 3 * 3 * 3 * 2, dtype=torch.float64)
    expected = rearrange(x3, "b d h w (p1 p2 p3 c) -> b (d p1) (h p2) (w p3) c", p1=3, p2=3, p3=3)
    assert torch.equal(pixel_shuffle(x3, 3), expected)


def test_maps_flatten_in_row_major_order_and_back():
    x = torch.randn(2, 3, 4, 5, 6)
    assert torch.equal(tokens(x), rearrange(x, "b d h w c -> b (d h w) c"))
    assert torch.equal(as_map(tokens(x), (3, 4, 5)), x)


def test_the_bridge_fuses_3d_maps_as_the_2d_layout_does():
    maps = [torch.randn(2, 4, 4, 4, 8), torch.randn(2, 2, 2, 2, 16)]
    layout = BridgeLayout.of(maps)
    assert layout.shapes == ((4, 4, 4), (2, 2, 2)) and layout.groups == (1, 2)
    fused = layout.fuse(maps)
    assert fused.shape == (2, 64 + 8 * 2, 8)
    assert torch.equal(fused[:, 64:], rearrange(maps[1], "b d h w (k c) -> b (d h w k) c", k=2))
    for back, original in zip(layout.split(fused), maps):
        assert torch.equal(back, original)


def test_3d_spatial_reduction_is_a_strided_conv3d_then_layernorm():
    torch.manual_seed(0)
    reduction = SpatialReduction(8, 2, dims=3).double()
    x = torch.randn(2, 4, 6, 8, 8, dtype=torch.float64)  # (B, d, h, w, C)
    conv = torch.nn.functional.conv3d(rearrange(x, "b d h w c -> b c d h w"), reduction.conv.weight,
                                      reduction.conv.bias, stride=2)
    expected = reduction.norm(rearrange(conv, "b c d h w -> b (d h w) c"))
    assert_close(reduction(x), expected)


def test_the_3d_model_maps_a_patch_to_logits_of_its_size_and_trains():
    model = tiny3d(patch_size=(32, 64, 32), num_classes=4)
    x = torch.randn(2, 1, 32, 64, 32)
    out = model(x)
    assert out.shape == (2, 4, 32, 64, 32)
    out.float().pow(2).mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing
    assert model.config.spatial_dims == 3 and isinstance(model.config, MISSFormer3DConfig)
    assert not issubclass(MISSFormer3DConfig, MISSFormerConfig)  # each model is its own root


def test_a_3d_model_works_at_any_multiple_of_32():
    model = tiny3d().eval()
    with torch.no_grad():
        assert model(torch.randn(1, 1, 64, 32, 96)).shape == (1, 3, 64, 32, 96)


@pytest.mark.parametrize(("overrides", "images", "match"), [
    ({}, torch.randn(1, 1, 32, 32), r"images must have shape \(B, 1, D, H, W\)"),
    ({}, torch.randn(1, 1, 32, 32, 40), "not divisible by 32"),
])
def test_bad_3d_inputs_raise_clear_errors(overrides, images, match):
    with pytest.raises(ValueError, match=match):
        tiny3d(**overrides)(images)


@pytest.mark.parametrize(("overrides", "match"), [
    ({"patch_size": (32, 32)}, "patch_size must be"), ({"patch_size": (32, 48, 32)}, "not divisible by 32"),
    ({"tokens": "vocabulary"}, "only the overlapping patch embedding"),
])
def test_bad_3d_configs_raise_clear_errors(overrides, match):
    with pytest.raises(ValueError, match=match):
        VARIANT.config("tiny", **overrides)


def test_image_size_sets_the_in_plane_sides_for_the_delta_analysis():
    assert VARIANT.config("tiny", image_size=96).patch_size == (32, 96, 96)
