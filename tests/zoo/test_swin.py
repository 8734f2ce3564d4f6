"""Swin: equal to timm's SwinTransformer with copied weights; windows, shift mask, kernels, validation."""

import pytest
import torch
from torch.testing import assert_close

import zoo
from core.attention import ReferenceAttention, ScaledDotProductAttention
from core.multihead import MultiHeadAttention, record_attention
from tests.numerics import REFERENCE_FP64, assert_close_fp64, float64
from zoo.swin import (
    PRESETS,
    PatchMerging,
    RelativePositionBias,
    SwinConfig,
    SwinTransformer,
    WindowAttention,
    load_timm_weights,
    timm_kwargs,
)
from zoo.swin.windows import cyclic_shift, shifted_window_mask, window_partition, window_reverse

timm_swin = pytest.importorskip("timm.models.swin_transformer")

SMALL = dict(image_size=32, patch_size=2, in_channels=3, num_classes=10, embed_dim=16, depths=(2, 2),
             heads=(2, 4), window_size=4, drop_path=0.0)
# stage 2 (8×8) is exactly one window: no shift; stage 3 (4×4) is smaller: the window shrinks to 4
SHRINK = dict(SMALL, depths=(2, 2, 2), heads=(2, 2, 4), window_size=8)


def timm_model(config: SwinConfig) -> torch.nn.Module:
    """timm's SwinTransformer of the same sizes, with every weight randomised (so that no term is negligible)."""
    model = timm_swin.SwinTransformer(**timm_kwargs(config))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (1.0 if "relative_position" in name else 0.1))
    return model.eval()


def our_model(config: SwinConfig, source: torch.nn.Module) -> SwinTransformer:
    ours = SwinTransformer(config).eval()
    load_timm_weights(ours, source)
    return ours


@pytest.mark.parametrize("sizes", [SMALL, SHRINK], ids=["shifted-windows", "window-shrink"])
@float64()
def test_matches_timm_with_copied_weights(sizes):
    config = SwinConfig(**sizes)
    theirs = timm_model(config)
    ours = our_model(config, theirs)
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert_close_fp64(ours(images), theirs(images))
        assert_close_fp64(ours.forward_features(images), theirs.forward_features(images).flatten(1, 2))


def test_stage_geometry_follows_timm_window_rule():
    stages = SwinConfig(**SHRINK).stages()
    assert [(s.resolution, s.dim, s.window, s.shift) for s in stages] == [(16, 16, 8, 4), (8, 32, 8, 0),
                                                                         (4, 64, 4, 0)]
    theirs = timm_model(SwinConfig(**SHRINK))
    for stage, timm_stage in zip(stages, theirs.layers):
        block = timm_stage.blocks[1]
        assert (block.window_size, block.shift_size) == ((stage.window,) * 2, (stage.shift,) * 2)


def test_window_partition_round_trip_and_layout():
    x = torch.randn(2, 3, 8 * 12, 5)  # (B, H, Hr·Wr, D) on an 8×12 map
    windows = window_partition(x, (8, 12), 4)
    assert windows.shape == (2, 3, 6, 16, 5)
    grid = x.unflatten(-2, (8, 12))  # (B, H, Hr, Wr, D)
    assert_close(windows[:, :, 4], grid[:, :, 4:8, 4:8].flatten(-3, -2))  # window (row 1, col 1)
    assert torch.equal(window_reverse(windows, (8, 12), 4), x)
    assert torch.equal(cyclic_shift(cyclic_shift(x, (8, 12), -2), (8, 12), 2), x)
    assert_close(cyclic_shift(x, (8, 12), -2).unflatten(-2, (8, 12))[:, :, 0, 0], grid[:, :, 2, 2])


def expected_shift_mask(side: int, window: int, shift: int) -> torch.Tensor:
    """The shift mask built from the paper's region labels (timm's slices), window by window."""
    labels = torch.zeros(side, side, dtype=torch.long)
    bands = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    for i, rows in enumerate(bands):
        for j, cols in enumerate(bands):
            labels[rows, cols] = 3 * i + j
    masks = []
    for top in range(0, side, window):
        for left in range(0, side, window):
            region = labels[top : top + window, left : left + window].flatten()
            masks.append(region[:, None] == region[None, :])
    return torch.stack(masks)  # (nW, W·W, W·W)


@pytest.mark.parametrize("side, window, shift", [(8, 4, 2), (16, 4, 2), (12, 6, 3), (12, 4, 1)])
def test_shift_mask_blocks_exactly_the_cross_region_pairs(side, window, shift):
    mask = shifted_window_mask((side, side), window, shift)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, expected_shift_mask(side, window, shift))
    if shift == window // 2:  # timm's own mask: 0 = may attend, -100 = blocked
        block = timm_swin.SwinTransformerBlock(8, (side, side), 2, window_size=window, shift_size=shift)
        assert torch.equal(mask, block.attn_mask == 0)
    assert shifted_window_mask((side, side), window, 0) is None


def test_one_window_without_shift_is_global_attention_with_the_bias():
    torch.manual_seed(0)
    bias = RelativePositionBias(4, heads=2)
    with torch.no_grad():
        bias.table.normal_()
    windowed = MultiHeadAttention(16, 2, WindowAttention(4, 4, 0, bias, ReferenceAttention()))
    global_ = MultiHeadAttention(16, 2, ReferenceAttention(), position=bias)  # the same bias on the scores
    global_.qkv.load_state_dict(windowed.qkv.state_dict())
    global_.out.load_state_dict(windowed.out.state_dict())
    x = torch.randn(3, 16, 16)
    assert_close(windowed(x), global_(x))
    with record_attention(windowed) as a, record_attention(global_) as b:
        windowed(x)
        global_(x)
    assert_close(a[""], b[""])


def test_weights_cover_the_whole_map_and_reproduce_the_output():
    torch.manual_seed(0)
    kernel = WindowAttention(8, 4, 2, RelativePositionBias(4, 2), ReferenceAttention())
    q, k, v = (torch.randn(2, 2, 64, 8) for _ in range(3))
    out, weights = kernel(q, k, v, need_weights=True)
    assert weights.shape == (2, 2, 64, 64)
    assert_close(weights.sum(-1), torch.ones(2, 2, 64))
    assert_close(weights @ v, out)  # the scattered map is the attention actually applied
    assert (weights > 0).sum(-1).max() <= 16  # each token attends within one window of 16 at most
    assert kernel(q, k, v)[1] is None


@pytest.mark.parametrize("shift", [0, 2])
@float64()
def test_reference_and_sdpa_kernels_agree(shift):
    torch.manual_seed(0)
    bias = RelativePositionBias(4, 2)
    ref = WindowAttention(8, 4, shift, bias, ReferenceAttention())
    fast = WindowAttention(8, 4, shift, bias, ScaledDotProductAttention())
    q, k, v = (torch.randn(2, 2, 64, 8) for _ in range(3))
    assert_close_fp64(fast(q, k, v)[0], ref(q, k, v)[0], REFERENCE_FP64)
    torch.manual_seed(0)
    model = SwinTransformer(SwinConfig(**SMALL, kernel="reference")).eval()
    fused = SwinTransformer(SwinConfig(**SMALL)).eval()
    fused.load_state_dict(model.state_dict())
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert_close_fp64(fused(images), model(images), REFERENCE_FP64)


REVERTS = [{}] + [change.revert for change in zoo.get_variant("swin").changes]


@pytest.mark.parametrize("revert", REVERTS, ids=["swin"] + [c.part for c in zoo.get_variant("swin").changes])
def test_every_parameter_receives_a_gradient(revert):
    model = zoo.create("swin", preset="tiny", drop_path=0.1, dropout=0.1, **revert).train()
    images = torch.randn(4, 3, 32, 32)
    torch.nn.functional.cross_entropy(model(images), torch.tensor([0, 1, 2, 3])).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


def test_classic_counterpart_has_no_swin_parts():
    variant = zoo.get_variant("swin")
    classic = variant.build(variant.config("tiny", **variant.classic_overrides()))
    kinds = {type(m) for m in classic.modules()}
    assert not kinds & {WindowAttention, RelativePositionBias, PatchMerging}
    assert len(classic.encoder.layers) == sum(PRESETS["tiny"]["depths"])


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_build_and_count_like_timm(preset):
    config = zoo.get_variant("swin").config(preset)
    with torch.device("meta"):
        ours = SwinTransformer(config)
        theirs = timm_swin.SwinTransformer(**timm_kwargs(config))
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    if config.image_size <= 32:
        logits = SwinTransformer(config).eval()(torch.randn(2, config.in_channels, 32, 32))
        assert logits.shape == (2, config.num_classes) and torch.isfinite(logits).all()


def test_no_weight_decay_names_the_relative_tables():
    model = SwinTransformer(SwinConfig(**SMALL))
    names = model.no_weight_decay()
    assert len(names) == sum(SMALL["depths"]) and names <= dict(model.named_parameters()).keys()


@pytest.mark.parametrize(
    "overrides, error, match",
    [
        (dict(image_size=31), ValueError, "patch_size=2 does not divide image_size=31"),
        (dict(window_size=5), ValueError, r"stage 1 works on a 16×16 token map.*window sizes that fit every stage"),
        (dict(image_size=48, depths=(2, 2, 2), heads=(2, 2, 2), window_size=8), ValueError, "stage 2 works on a 12×12"),
        (dict(image_size=36, depths=(2, 2, 2), heads=(2, 2, 2)), ValueError, "stage 2 ends on a 9×9 map"),
        (dict(heads=(2,)), ValueError, "one head count per stage"),
        (dict(heads=(3, 4)), ValueError, "width 16, not divisible by heads"),
        (dict(depths=2), TypeError, "depths must be a non-empty tuple"),
        (dict(window_size=0), ValueError, "window_size must be > 0"),
        (dict(position="relatve"), ValueError, "Did you mean 'relative'"),
        (dict(readout="cls"), ValueError, "unknown readout choice"),
        (dict(kernel="flash"), ValueError, "unknown kernel choice"),
        (dict(hierarchy="yes"), TypeError, "hierarchy must be a bool"),
        (dict(mlp_ratio=0), ValueError, "mlp_ratio must be > 0"),
    ],
)
def test_config_errors_name_the_field_and_the_fix(overrides, error, match):
    with pytest.raises(error, match=match):
        SwinConfig(**{**SMALL, **overrides})


def test_module_errors():
    model = SwinTransformer(SwinConfig(**SMALL))
    with pytest.raises(ValueError, match=r"built for 32×32 images"):
        model(torch.randn(1, 3, 64, 64))
    with pytest.raises(ValueError, match=r"shape \(B, 3, H, W\)"):
        model(torch.randn(1, 1, 32, 32))
    with pytest.raises(ValueError, match="window=3 does not divide"):
        WindowAttention(8, 3)
    with pytest.raises(ValueError, match="shift=4 must be smaller than window=4"):
        WindowAttention(8, 4, 4)
    with pytest.raises(ValueError, match="built for 4×4 windows but the kernel uses window=8"):
        WindowAttention(8, 8, 0, RelativePositionBias(4, 2))
    q = torch.randn(1, 2, 64, 4)
    with pytest.raises(ValueError, match="takes no mask"):
        WindowAttention(8, 4)(q, q, q, mask=torch.ones(64, 64, dtype=torch.bool))
    with pytest.raises(ValueError, match="built for a 8×8 map of 64 tokens, got 16 queries"):
        WindowAttention(8, 4)(q[:, :, :16], q[:, :, :16], q[:, :, :16])
    with pytest.raises(ValueError, match="covers 16 tokens, got 64 queries"):
        RelativePositionBias(4, 2).score_bias(64, 64, torch.device("cpu"))
    with pytest.raises(ValueError, match="its side is odd"):
        PatchMerging(5, 8)
    with pytest.raises(ValueError, match=r"expects \(B, 16, 8\) tokens"):
        PatchMerging(4, 8)(torch.randn(1, 15, 8))
