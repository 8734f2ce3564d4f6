"""The norm switch: RMSNorm is torch.nn.RMSNorm, computes x / sqrt(mean(x²) + eps) · g, and a config's ``norm``
reaches every norm of the encoder–decoder, the language model and ViT (final norms included)."""

import pytest
import torch
from torch import nn

from core.language_model import LanguageModelConfig, build_language_model
from core.layers import build_norm, norm_factory
from core.model import TransformerConfig, build_transformer
from tests.numerics import assert_close_fp64, float64
from zoo.vit import VisionTransformer, ViTConfig
from zoo.vit.config import PRESETS as VIT_PRESETS


def test_rmsnorm_is_torch_rmsnorm_with_a_gain_only():
    norm = build_norm("rmsnorm", 24, eps=1e-6)
    assert type(norm) is nn.RMSNorm and norm.eps == 1e-6 and norm.zoo_part == "norm"
    assert [name for name, _ in norm.named_parameters()] == ["weight"]  # no bias
    assert sum(p.numel() for p in norm.parameters()) == 24
    assert sum(p.numel() for p in build_norm("layernorm", 24).parameters()) == 48


@float64()
def test_rmsnorm_formula():
    norm = build_norm("rmsnorm", 16, eps=1e-3)  # a large eps, so a formula that forgot it is off by far more
    with torch.no_grad():
        norm.weight.copy_(torch.randn(16))
    x = torch.randn(3, 5, 16) * 0.1
    expected = x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-3) * norm.weight
    assert_close_fp64(norm(x), expected)


def test_unknown_norm_and_bad_eps_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown norm 'rms_norm'. Did you mean 'rmsnorm'"):
        build_norm("rms_norm", 8)
    with pytest.raises(ValueError, match="unknown norm 'batchnorm'"):
        norm_factory("batchnorm")(8)
    with pytest.raises(ValueError, match="norm eps must be > 0"):
        build_norm("rmsnorm", 8, eps=0.0)
    for config in (TransformerConfig, LanguageModelConfig, ViTConfig):
        with pytest.raises(ValueError, match="unknown norm choice .*'rmsnrom'.*Did you mean 'rmsnorm'"):
            config(norm="rmsnrom")


def _norms(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if getattr(m, "zoo_part", None) == "norm"]


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("build, eps", [
    (lambda **kw: build_transformer("tiny", **kw), 1e-5),
    (lambda **kw: build_language_model("tiny", layer_norm_eps=1e-6, **kw), 1e-6),
    (lambda **kw: VisionTransformer(ViTConfig(**VIT_PRESETS["tiny"], **kw)), 1e-6),
], ids=["translation", "lm", "vit"])
def test_norm_field_reaches_every_norm(build, eps, norm_first):
    classic, rms = build(norm_first=norm_first), build(norm_first=norm_first, norm="rmsnorm")
    assert _norms(classic) and all(type(m) is nn.LayerNorm for m in _norms(classic))
    assert len(_norms(rms)) == len(_norms(classic))  # none left behind, final norms included
    assert all(type(m) is nn.RMSNorm and m.eps == eps for m in _norms(rms))
    assert not any(isinstance(m, nn.LayerNorm) for m in rms.modules())
    d_model = classic.config.d_model
    parameters = sum(p.numel() for p in classic.parameters()) - sum(p.numel() for p in rms.parameters())
    assert parameters == d_model * len(_norms(classic))  # one bias of D per norm dropped


def test_lm_without_biases_keeps_rmsnorm():
    model = build_language_model("tiny", norm="rmsnorm", bias=False, norm_first=True)
    assert all(m.bias is None for m in model.modules() if isinstance(m, nn.Linear))
    assert len(_norms(model)) == 2 * 2 + 1 and all(type(m) is nn.RMSNorm for m in _norms(model))


def test_vit_decoder_readout_refuses_what_it_cannot_build():
    with pytest.raises(ValueError, match="readout='decoder' .* norm='rmsnorm'"):
        ViTConfig(readout="decoder", norm="rmsnorm")
    with pytest.raises(ValueError, match="readout='decoder' .* activation='geglu'"):
        ViTConfig(readout="decoder", activation="geglu")

