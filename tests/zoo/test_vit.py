"""ViT: equal to timm's VisionTransformer with the weights copied across, validation, resizing, presets."""

import dataclasses

import pytest
import torch
from timm.layers import resample_abs_pos_embed
from timm.models.vision_transformer import VisionTransformer as TimmViT

import zoo
from core.attention import ReferenceAttention, ScaledDotProductAttention
from tests.numerics import REFERENCE_FP64, assert_close_fp64, float64
from zoo.vit import (
    PRESETS,
    VisionTransformer,
    ViTConfig,
    drop_path_rates,
    load_timm_weights,
    resample_positions,
    timm_kwargs,
)

SMALL = dict(image_size=32, patch_size=8, d_model=32, depth=2, heads=2)


def timm_pair(**overrides):
    """Our ViT and timm's built from the same config, ours holding timm's weights; both in eval mode."""
    config = ViTConfig(**{**SMALL, **overrides})
    peer = TimmViT(**timm_kwargs(config)).eval()
    return load_timm_weights(VisionTransformer(config), peer).eval(), peer


def images(batch=3, channels=3, size=32):
    return torch.randn(batch, channels, size, size)


# ------------------------------------------------------------------------------------- timm equivalence


def test_timm_kwargs_are_the_small_reference_config():
    kwargs = timm_kwargs(ViTConfig(**SMALL))
    expected = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, class_token=True,
                    global_pool="token", qkv_bias=True)
    assert {k: kwargs[k] for k in expected} == expected


@pytest.mark.parametrize("readout", ["cls", "mean"])
@float64()
def test_logits_equal_timm(readout):
    ours, peer = timm_pair(readout=readout)
    assert isinstance(peer.fc_norm, torch.nn.Identity)  # mean: the norm comes before pooling, as in ours
    assert (peer.cls_token is not None) == (readout == "cls")
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in peer.parameters())
    x = images()
    with torch.no_grad():
        assert_close_fp64(ours(x), peer(x))


@float64()
def test_features_and_intermediate_layers_equal_timm():
    ours, peer = timm_pair(depth=3)
    x = images()
    with torch.no_grad():
        assert_close_fp64(ours.forward_features(x), peer.forward_features(x))  # (B, 1 + N, D)
        layers = ours.forward_features(x, return_layers=[0, -1])
        theirs = peer.forward_intermediates(x, indices=[0, 2], output_fmt="NLC", intermediates_only=True)
    assert [tuple(t.shape) for t in layers] == [(3, 17, 32)] * 2
    for mine, ref in zip(layers, theirs):
        assert_close_fp64(mine[:, 1:], ref)  # timm drops the [CLS] token from intermediates


def test_load_timm_weights_rejects_other_architectures():
    config = ViTConfig(**SMALL)
    with pytest.raises(ValueError, match="missing in timm"):
        load_timm_weights(VisionTransformer(config), TimmViT(**{**timm_kwargs(config), "depth": 1}))
    with pytest.raises(ValueError, match="no place for: .*ls1"):
        load_timm_weights(VisionTransformer(config), TimmViT(**{**timm_kwargs(config), "init_values": 1e-5}))
    with pytest.raises(ValueError, match="fc_norm"):
        load_timm_weights(VisionTransformer(config), TimmViT(**{**timm_kwargs(config), "fc_norm": True}))
    with pytest.raises(ValueError, match="shapes: .*pos"):
        load_timm_weights(VisionTransformer(config), TimmViT(**{**timm_kwargs(config), "img_size": 64}))
    with pytest.raises(ValueError, match="tokens='vocabulary'"):
        timm_kwargs(ViTConfig(**SMALL, tokens="vocabulary"))


# ------------------------------------------------------------------------------- positions at new sizes


@pytest.mark.parametrize("grid, prefix", [((6, 6), 1), ((2, 2), 1), ((3, 5), 0)])
def test_resample_positions_equals_timm(grid, prefix):
    table = torch.randn(prefix + 16, 8)
    ours = resample_positions(table, (4, 4), grid, prefix)
    theirs = resample_abs_pos_embed(table[None], list(grid), [4, 4], num_prefix_tokens=prefix)[0]
    assert ours.shape == (prefix + grid[0] * grid[1], 8)
    torch.testing.assert_close(ours, theirs)


@float64()
def test_other_image_sizes_equal_timm_dynamic_size():
    config = ViTConfig(**SMALL)
    peer = TimmViT(**timm_kwargs(config), dynamic_img_size=True).eval()
    ours = load_timm_weights(VisionTransformer(config), peer).eval()
    for height, width in ((48, 48), (16, 40)):
        x = torch.randn(2, 3, height, width)
        with torch.no_grad():
            assert_close_fp64(ours(x), peer(x))


def test_resize_image_makes_the_resampled_table_stick():
    model = VisionTransformer(ViTConfig(**SMALL)).eval()
    x = images(size=48)
    with torch.no_grad():
        on_the_fly = model(x)
        model.resize_image(48)
        assert model.config.image_size == 48 and model.position.weight.shape == (1 + 36, 32)
        torch.testing.assert_close(model(x), on_the_fly)
    with pytest.raises(ValueError, match="patch_size=8 does not divide image_size=50"):
        model.resize_image(50)


def test_sinusoidal_positions_extend_to_any_size():
    model = VisionTransformer(ViTConfig(**SMALL, position="sinusoidal"))
    assert model(images(size=64)).shape == (3, 10)


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "overrides, error, match",
    [
        (dict(patch_size=5), ValueError, "patch_size=5 does not divide image_size=32"),
        (dict(heads=3), ValueError, "d_model=32 is not divisible by heads=3"),
        (dict(readout="clss"), ValueError, "Did you mean 'cls'"),
        (dict(tokens="pixels"), ValueError, "unknown tokens choice"),
        (dict(position="rope"), ValueError, "Known: learned, sinusoidal"),
        (dict(activation="swish"), ValueError, "unknown activation"),
        (dict(kernel="flash"), ValueError, "unknown attention kernel"),
        (dict(ffn="moee"), ValueError, "unknown ffn type"),
        (dict(kernel_options=None), TypeError, "kernel_options must be a dict"),
        (dict(dropout=1.5), ValueError, "dropout must be in"),
        (dict(drop_path=-0.1), ValueError, "drop_path must be in"),
        (dict(mlp_ratio=0.0), ValueError, "mlp_ratio must be > 0"),
        (dict(mlp_ratio=0.01), ValueError, "raise mlp_ratio"),
        (dict(norm_eps="1e-6"), TypeError, "norm_eps must be a positive float"),
        (dict(norm_first=1), TypeError, "norm_first must be a bool"),
        (dict(depth=0), ValueError, "depth must be > 0"),
        (dict(in_channels=2.0), TypeError, "in_channels must be an int"),
    ],
)
def test_config_errors_name_the_field_and_the_fix(overrides, error, match):
    with pytest.raises(error, match=match):
        ViTConfig(**{**SMALL, **overrides})


def test_bad_images_get_clear_errors():
    model = VisionTransformer(ViTConfig(**SMALL))
    with pytest.raises(ValueError, match="not divisible by patch_size=8"):
        model(images(size=36))
    with pytest.raises(ValueError, match=r"shape \(B, 3, H, W\)"):
        model(images(channels=1))
    with pytest.raises(TypeError, match="float tensor"):
        model(torch.randint(0, 255, (2, 3, 32, 32), dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"ints in \[-2, 2\)"):
        model.forward_features(images(), return_layers=[2])


def test_any_number_of_channels():
    model = VisionTransformer(ViTConfig(**SMALL, in_channels=5))
    assert model(images(channels=5)).shape == (3, 10)


# ------------------------------------------------------------------------------------ training behaviour


@pytest.mark.parametrize("overrides", [{}, dict(readout="mean"), zoo.get_variant("vit").classic_overrides()],
                         ids=["vit", "mean", "classic"])
def test_every_parameter_receives_a_gradient(overrides):
    model = VisionTransformer(ViTConfig(**SMALL, drop_path=0.1, dropout=0.1, **overrides)).train()
    model(images(batch=4)).logsumexp(-1).sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_drop_path_rates_increase_linearly_as_in_timm():
    config = ViTConfig(**{**SMALL, "depth": 5, "drop_path": 0.2})
    model, peer = VisionTransformer(config), TimmViT(**timm_kwargs(config))
    rates = [getattr(layer.drop_path, "p", 0.0) for layer in model.encoder.layers]
    assert rates == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    assert rates == pytest.approx([getattr(b.drop_path1, "drop_prob", 0.0) for b in peer.blocks])
    assert drop_path_rates(0.3, 1) == [0.0]
    x = images()
    model.train()
    assert not torch.equal(model(x), model(x))  # layers are dropped at random while training
    model.eval()
    torch.testing.assert_close(model(x), model(x))


@float64()
def test_reference_kernel_equals_sdpa_kernel():
    fused = VisionTransformer(ViTConfig(**SMALL)).eval()
    reference = VisionTransformer(ViTConfig(**SMALL, kernel="reference")).eval()
    reference.load_state_dict(fused.state_dict())
    assert isinstance(fused.encoder.layers[0].self_attn.kernel, ScaledDotProductAttention)
    assert isinstance(reference.encoder.layers[0].self_attn.kernel, ReferenceAttention)
    x = images()
    with torch.no_grad():
        assert_close_fp64(reference(x), fused(x), REFERENCE_FP64)


# ------------------------------------------------------------------------------ registry and presets


def test_registered_with_its_paper_changes_and_presets():
    variant = zoo.get_variant("vit")
    assert variant.paper.url == "https://arxiv.org/abs/2010.11929" and variant.tasks == ("cifar",)
    assert variant.parts_changed == ("embedding", "position", "norm", "ffn", "stacking")
    assert variant.default_preset == "cpu" and set(variant.presets) == {"tiny", "cpu", "vit-tiny", "vit-small"}
    assert {c.part: c.scope for c in variant.changes}["embedding"] == "task-specific"
    classic = variant.config("tiny", **variant.classic_overrides())
    assert (classic.tokens, classic.position, classic.norm_first, classic.activation, classic.readout) == (
        "vocabulary", "sinusoidal", False, "relu", "decoder")


@pytest.mark.parametrize("change", [c.part for c in zoo.get_variant("vit").changes])
def test_each_change_reverted_alone_builds_and_runs(change):
    variant = zoo.get_variant("vit")
    (reverted,) = [c for c in variant.changes if c.part == change]
    model = variant.build(variant.config("tiny", in_channels=1, **variant.classic_overrides(reverted)))
    assert model(images(channels=1)).shape == (3, 10)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_presets_build(preset):
    config = zoo.get_variant("vit").config(preset)
    assert (config.d_model, config.heads) == {"tiny": (32, 2), "cpu": (128, 4), "vit-tiny": (192, 3),
                                              "vit-small": (384, 6)}[preset]
    if preset in ("tiny", "cpu"):
        model = VisionTransformer(config)
        assert model(images(batch=2)).shape == (2, config.num_classes)
    else:
        with torch.device("meta"):  # shapes only: the 12-layer presets are slow to initialise on one core
            VisionTransformer(config)


def test_vit_tiny_preset_has_timm_vit_tiny_parameter_count_at_patch_4():
    config = zoo.get_variant("vit").config("vit-tiny")
    with torch.device("meta"):
        ours, peer = VisionTransformer(config), TimmViT(**timm_kwargs(config))
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in peer.parameters())


def test_config_round_trips_through_replace():
    config = ViTConfig(**SMALL)
    assert dataclasses.replace(config, image_size=64).grid == 8 and config.d_ff == 128
    assert ViTConfig(**config.to_dict()) == config
