"""The GLU FFNs (Shazeer 2020): the paper's formula, x-transformers' FeedForward with the weights copied, the
parameter counts at 2/3 width, and the places that build two-matrix FFNs refusing a gated activation."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from core.ffn import FFN_ACTIVATIONS, GLUFFN, PositionwiseFFN, build_ffn, glu_width
from core.model import PRESETS as TRANSLATION_PRESETS
from core.model import build_transformer
from tests.numerics import assert_close_fp64, float64

GATES = {"geglu": F.gelu, "swiglu": F.silu, "reglu": F.relu}  # Shazeer 2020, eq. 6: GELU, Swish_1, ReLU


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@float64()
@pytest.mark.parametrize("activation", list(GATES))
def test_glu_ffn_is_the_papers_formula(activation):
    ffn = build_ffn("dense", 8, 12, activation)
    assert type(ffn) is GLUFFN and ffn.zoo_part == "ffn"
    W, V = ffn.fc1.weight[:12].T, ffn.fc1.weight[12:].T  # (D, F) each: the packed rows are W, then V
    W2 = ffn.fc2.weight.T  # (F, D)
    x = torch.randn(2, 5, 8)
    assert_close_fp64(ffn(x), (GATES[activation](x @ W) * (x @ V)) @ W2)


@float64()
@pytest.mark.parametrize("activation", list(GATES))
def test_glu_ffn_equals_x_transformers(activation):
    x_transformers = pytest.importorskip("x_transformers")  # the dev extra's test-only reference
    options = {"geglu": {}, "swiglu": {"swish": True}, "reglu": {"custom_activation": nn.ReLU()}}[activation]
    # GLU(dim, inner): proj = Linear(dim, 2·inner) with a bias, split as (up, gate); out = up · act(gate)
    ref = x_transformers.x_transformers.FeedForward(8, mult=1.5, glu=True, no_bias=True, **options)
    ours = GLUFFN(8, 12, activation)
    proj, out = ref.ff[0].proj, ref.ff[-1]
    assert out.bias is None and proj.weight.shape == ours.fc1.weight.shape
    with torch.no_grad():
        gate, value = ours.fc1.weight.chunk(2)
        proj.weight.copy_(torch.cat((value, gate)))  # theirs: up (our V) first, then the gate (our W)
        proj.bias.zero_()  # their GLU projection always has a bias; the paper's has none
        out.weight.copy_(ours.fc2.weight)
    x = torch.randn(2, 5, 8)
    assert_close_fp64(ours(x), ref(x))


def test_parameter_counts_at_two_thirds_width():
    dense, glu = build_ffn("dense", 512, 2048, "relu"), build_ffn("dense", 512, glu_width(2048), "swiglu")
    assert glu_width(2048) == 1365  # the paper's 2/3 · 2048
    assert _count(dense) == 2 * 512 * 2048 + 2048 + 512 == 2_099_712
    assert _count(glu) == 3 * 512 * 1365 == 2_096_640  # 3,072 fewer: the biases (2,560) and the rounding (512)
    assert _count(build_ffn("dense", 512, 2048, "geglu")) == 3 * 512 * 2048  # at the same d_ff: 1.5× the weights
    tiny = TRANSLATION_PRESETS["tiny"]  # also the lm and ViT tiny FFN: D 32, d_ff 64
    assert (tiny["d_model"], tiny["d_ff"], glu_width(64)) == (32, 64, 43)
    assert _count(build_ffn("dense", 32, 64, "relu")) == 4_192
    assert _count(build_ffn("dense", 32, glu_width(64), "reglu")) == 4_128  # 3 · 32 · 43


def test_glu_activations_are_config_values():
    assert FFN_ACTIVATIONS == ("relu", "gelu", "geglu", "swiglu", "reglu")
    model = build_transformer("tiny", activation="swiglu")
    ffns = [m for m in model.modules() if getattr(m, "zoo_part", None) == "ffn"]
    assert len(ffns) == 4 and all(type(m) is GLUFFN and isinstance(m.act, nn.SiLU) for m in ffns)
    src, tgt = torch.randint(3, 64, (2, 7)), torch.randint(3, 64, (2, 6))
    model(src, tgt).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_two_matrix_ffns_refuse_a_gated_activation():
    with pytest.raises(ValueError, match="activation='swiglu' is a gated FFN .*build_ffn"):
        PositionwiseFFN(8, 16, "swiglu")
    with pytest.raises(ValueError, match="unknown GLU activation 'relu'.*Known: geglu, reglu, swiglu"):
        GLUFFN(8, 16, "relu")
    with pytest.raises(ValueError, match="d_ff must be > 0"):
        glu_width(0)
    import zoo  # registers the "moe" FFN type, whose experts are PositionwiseFFNs

    moe = zoo.get_variant("moe", "translation")
    with pytest.raises(ValueError, match="activation='geglu' is a gated FFN .* experts of 'moe'"):
        moe.build(moe.config("tiny", activation="geglu"))

