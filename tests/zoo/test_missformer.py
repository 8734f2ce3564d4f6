"""MISSFormer: the official model's size and cost, resolution-agnostic forward, fast vs reference paths,
gradients, training, errors, and the official state-dict mapping."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import zoo
from core.multihead import MultiHeadAttention
from tests.numerics import REFERENCE_FP64, assert_close_fp64, float64
from zoo.analysis.delta import module_flops
from zoo.missformer import (
    BridgeLayout,
    ContextBridge,
    EfficientSelfAttention,
    MISSFormer,
    MISSFormerConfig,
    ReMixFFN,
    load_official_weights,
)
from zoo.missformer.official_weights import official_module_map

VARIANT = zoo.get_variant("missformer", "medseg")

# The official model (github.com/ZhifangDeng/MISSFormer, networks/MISSFormer.py, num_classes=9), measured once
# by hand with the official code: 42,462,537 parameters, of which its forward pass never uses 7,009,792 —
# decoder_3's concat_linear and layer_former_1/2 (6,895,104) and norm2/norm3 of every MixFFN_skip (114,688).
OFFICIAL_PARAMS, OFFICIAL_UNUSED = 42_462_537, 7_009_792
# Its forward cost at 1×3×224×224 under torch.utils.flop_counter (FLOPs = 2·MACs of matmuls, convolutions and the
# attention matmuls; elementwise ops, softmax and norms not counted): 19,541,745,664 FLOPs = 9.77 GMACs, the
# paper's figure. The official MixFFN_skip computes fc1(x) twice; our ReMix-FFN computes it once.
OFFICIAL_FLOPS = 19_541_745_664


def tiny(**overrides) -> MISSFormer:
    torch.manual_seed(0)
    return VARIANT.build(VARIANT.config("tiny", **overrides))


def test_registered_for_medseg_with_cpu_default():
    assert VARIANT.default_preset == "cpu" and set(VARIANT.presets) >= {"tiny", "cpu", "paper"}
    assert set(VARIANT.parts_changed) == {"attention", "ffn", "stacking", "embedding", "position", "norm"}
    cpu = VARIANT.config("cpu")
    assert (cpu.image_size, cpu.in_channels, cpu.num_classes) == (96, 1, 9)


def test_paper_preset_matches_the_official_parameter_count_and_flops():
    config = VARIANT.config("paper")
    assert (config.image_size, config.in_channels, config.num_classes, config.resolution_agnostic) == (224, 3, 9, False)
    with torch.device("meta"):  # shapes are all that counting needs
        model, images = VARIANT.build(config), torch.zeros(1, 3, 224, 224)
    params = sum(p.numel() for p in model.parameters())
    # we build only what the forward uses: the official count less its never-used parameters, exactly
    assert params == OFFICIAL_PARAMS - OFFICIAL_UNUSED == 35_452_745
    per_module, flops = module_flops(model, (images,))
    recomputed_fc1 = sum(per_module[f"{name}.fc1"] for name, m in model.named_modules() if isinstance(m, ReMixFFN))
    assert flops + recomputed_fc1 == pytest.approx(OFFICIAL_FLOPS, rel=0.02)  # the official 9.77 GMACs
    assert flops / 2e9 == pytest.approx(8.00, rel=0.01)  # ours: 8.00 GMACs, the same outputs


def test_bridge_layout_reproduces_the_official_token_splits_at_224():
    maps = [torch.zeros(1, 224 // 4 // 2**i, 224 // 4 // 2**i, w) for i, w in enumerate((64, 128, 320, 512))]
    layout = BridgeLayout.of(maps)
    assert layout.lengths == [3136, 1568, 980, 392]
    x = torch.randn(2, sum(layout.lengths), 64)
    assert_close(layout.fuse(layout.split(x)), x)
    bridge = ContextBridge(MISSFormerConfig(bridge_depth=1))
    assert bridge.layers[0].self_attn.keys_source(x, layout).shape == (2, 49 + 98 + 245 + 392, 64)


def test_fuse_follows_the_official_memory_layout():
    m = torch.arange(2 * 3 * 3 * 4.0).reshape(2, 3, 3, 4)  # (B, h, w, C) with C = 2·C₁
    layout = BridgeLayout(((3, 3),), (2,))
    # the official code: c.permute(0, 2, 3, 1).reshape(B, -1, C₁) of the channels-first map
    assert_close(layout.fuse([m]), m.permute(0, 3, 1, 2).permute(0, 2, 3, 1).reshape(2, -1, 2))


@pytest.mark.parametrize("preset, size", [("cpu", 96), ("cpu", 128), ("cpu", 256), ("tiny", 512), ("tiny", (64, 96))])
def test_resolution_agnostic_forward(preset, size):
    torch.manual_seed(0)
    model = VARIANT.build(VARIANT.config(preset)).eval()
    height, width = (size, size) if isinstance(size, int) else size
    with torch.no_grad():
        out = model(torch.randn(1, model.config.in_channels, height, width))
    assert out.shape == (1, model.config.num_classes, height, width) and torch.isfinite(out).all()


@float64()  # in float32 the two paths differ by up to 2.5e-5 on AVX-512 (1.2e-5 with AVX2) at outputs of 3.6
def test_fast_attention_path_matches_the_reference_path():
    fast, reference = tiny(kernel="sdpa").eval(), tiny(kernel="reference").eval()
    reference.load_state_dict(fast.state_dict())
    x = torch.randn(2, 1, 64, 64)
    with torch.no_grad():
        assert_close_fp64(fast(x), reference(x), REFERENCE_FP64)


def test_efficient_attention_reduces_keys_and_without_reduction_is_core_self_attention():
    torch.manual_seed(0)
    attention = EfficientSelfAttention(8, 2, ratio=4)
    x = torch.randn(2, 8, 8, 8)  # (B, h, w, C)
    assert attention.reduction(x).shape == (2, 4, 8)  # (8/4)·(8/4) keys
    assert attention(x).shape == x.shape
    plain = EfficientSelfAttention(8, 2, ratio=1)
    assert plain.reduction is None
    core = MultiHeadAttention(8, 2)
    core.load_state_dict(plain.attention.state_dict())
    assert_close(plain(x), core(x.flatten(1, 2)).unflatten(1, (8, 8)))


def test_remix_ffn_is_the_paper_formula():
    torch.manual_seed(0)
    ffn = ReMixFFN(4, 16)
    x = torch.randn(2, 5, 6, 4)
    hidden = ffn.fc1(x)
    conv = F.conv2d(hidden.permute(0, 3, 1, 2), ffn.dwconv.weight, ffn.dwconv.bias, padding=1, groups=16)
    expected = ffn.fc2(F.gelu(F.layer_norm(conv.permute(0, 2, 3, 1) + hidden, (16,), ffn.norm.weight, ffn.norm.bias)))
    assert_close(ffn(x), expected)


CLASSIC_CHOICES = [{}] + [dict(c.revert) for c in VARIANT.changes] + [VARIANT.classic_overrides()]


@pytest.mark.parametrize("overrides", CLASSIC_CHOICES, ids=lambda o: ",".join(o) or "missformer")
def test_every_parameter_receives_a_gradient(overrides):
    model = tiny(drop_path=0.1, **overrides).train()
    out = model(torch.randn(2, 1, 32, 32))
    assert out.shape == (2, 3, 32, 32)
    out.square().mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing


def test_a_few_optimiser_steps_reduce_the_loss():
    model = tiny().train()
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(4, 1, 32, 32, generator=gen)
    labels = (images[:, 0] > 0.5).long() + (images[:, 0] > 0.8).long()  # (B, H, W) in {0, 1, 2}
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(4):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_grayscale_is_repeated_for_a_three_channel_model():
    model = tiny(in_channels=3).eval()
    x = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        assert_close(model(x), model(x.repeat(1, 3, 1, 1)))


@pytest.mark.parametrize(
    "overrides, images, error, match",
    [
        ({}, torch.zeros(1, 2, 32, 32), ValueError, "2 channels but the model was built for in_channels=1"),
        ({"in_channels": 3}, torch.zeros(1, 2, 32, 32), ValueError, "only 1 -> 3 is converted"),
        ({}, torch.zeros(1, 1, 48, 48), ValueError, "48×48 is not divisible by 32"),
        ({"resolution_agnostic": False}, torch.zeros(1, 1, 64, 64), ValueError, "accepts only 32×32 images"),
        ({}, torch.zeros(1, 1, 32, 32, dtype=torch.long), TypeError, "float tensor"),
        ({}, torch.zeros(1, 32, 32), ValueError, r"shape \(B, 1, H, W\)"),
    ],
)
def test_bad_inputs_raise_clear_errors(overrides, images, error, match):
    with pytest.raises(error, match=match):
        tiny(**overrides)(images)


def test_paper_preset_rejects_other_sizes_and_takes_grayscale():
    with torch.device("meta"):  # the checks run before any computation
        model = VARIANT.build(VARIANT.config("paper"))
        with pytest.raises(ValueError, match="accepts only 224×224 images, got 256×256"):
            model(torch.zeros(1, 3, 256, 256))
        assert model(torch.zeros(2, 1, 224, 224)).shape == (2, 9, 224, 224)


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"image_size": 100}, "image_size 100×100 is not divisible by 32"),
        ({"heads": (1, 3, 2, 4)}, r"widths\[1\]=16 is not divisible by heads\[1\]=3"),
        ({"widths": (8, 12, 24, 32)}, "not a multiple of widths"),
        ({"widths": (8, 16, 24, 33), "bridge_depth": 0, "heads": (1, 1, 1, 1)}, "must be even"),
        ({"depths": (1, 1)}, "one entry per stage"),
        ({"sr_ratios": (8, 4, 4, 1)}, r"not divisible by its sr_ratios\[2\]=4"),
        ({"ffn": "remx"}, "Did you mean 'remix'"),
        ({"tokens": "overlapping"}, "Did you mean 'overlap'"),
        ({"bridge_heads": 3}, "bridge_heads=3 must divide"),
        ({"dropout": 1.5}, "dropout must be in"),
    ],
)
def test_bad_config_fields_raise_clear_errors(overrides, match):
    with pytest.raises(ValueError, match=match):
        VARIANT.config("tiny", **overrides)


def test_official_state_dict_names_load_into_ours():
    names = official_module_map(MISSFormerConfig())
    assert names["encoder.stages.0.layers.0.self_attn.reduction.conv"] == "backbone.block1.0.attn.sr"
    assert names["bridge.layers.3.self_attn.reductions.2"] == "bridge.bridge_layer4.attn.scale_reduce.sr2"
    assert names["bridge.layers.0.ffn.ffns.3.norm"] == "bridge.bridge_layer1.mixffn4.norm1"
    assert names["decoder.stages.2.concat"] == "decoder_0.concat_linear"
    assert names["head.classifier"] == "decoder_0.last_layer"
    # an official-layout state dict written from one model loads into another and gives the same outputs
    # (the same kernel on both sides: only the mapping differs, so the outputs are the same computation)
    source, target = tiny(in_channels=3).eval(), tiny(in_channels=3).eval()
    for p in target.parameters():
        torch.nn.init.zeros_(p)
    official = {"module.decoder_3.concat_linear.weight": torch.zeros(1)}  # never used by the official forward
    for key, value in source.state_dict().items():
        prefix = max((m for m in names if key.startswith(m + ".")), key=len)
        theirs = names[prefix] + key.removeprefix(prefix)
        if prefix.endswith("attention.qkv"):
            q, kv = value.split([value.shape[0] // 3, 2 * value.shape[0] // 3])
            official["module." + theirs], official["module." + theirs.replace(".attn.q.", ".attn.kv.")] = q, kv
        else:
            official["module." + theirs] = value
    assert load_official_weights(target, official) == ["decoder_3.concat_linear.weight"]
    x = torch.randn(1, 1, 32, 32)
    with torch.no_grad():
        assert_close(target(x), source(x))
    with pytest.raises(ValueError, match="lacks"):
        load_official_weights(target, {})
    with pytest.raises(ValueError, match="official code has MISSFormer's own choices only"):
        official_module_map(MISSFormerConfig(ffn="dense"))
