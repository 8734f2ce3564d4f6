"""Noam schedule, label-smoothed loss, initialisation, parameter accounting."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from core.accounting import article_estimate, attention_parameters, classic_parameters, ffn_parameters
from core.init import init_weights
from core.loss import LabelSmoothedCrossEntropy
from core.model import PRESETS, Transformer, TransformerConfig, build_transformer
from core.parts import parameters_by_part
from core.schedule import NoamLR, noam_rate


def test_noam_matches_formula_and_peaks_at_warmup():
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([param], lr=123.0)
    sched = NoamLR(opt, d_model=512, warmup=4000, factor=2.0)
    rates = []
    for _ in range(8000):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    for step in (1, 100, 4000, 7999):
        expected = 2.0 * 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert rates[step - 1] == pytest.approx(expected)
    assert max(range(len(rates)), key=rates.__getitem__) == 3999  # step 4000
    assert noam_rate(4000, 512, 4000) == pytest.approx((512 * 4000) ** -0.5)


def test_noam_validates():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="warmup"):
        NoamLR(opt, d_model=512, warmup=0)


def test_label_smoothing_ignores_padding_and_matches_definition():
    logits = torch.randn(2, 3, 5)
    target = torch.tensor([[1, 2, 0], [3, 0, 0]])
    loss = LabelSmoothedCrossEntropy(smoothing=0.1, pad_id=0)(logits, target)
    logp = logits.log_softmax(-1)
    keep = target != 0
    nll = -logp.gather(-1, target[..., None]).squeeze(-1)
    smooth = -logp.mean(-1)
    expected = ((0.9 * nll + 0.1 * smooth)[keep]).mean()
    assert_close(loss, expected)
    assert_close(LabelSmoothedCrossEntropy(0.0)(logits, target), F.cross_entropy(logits[keep], target[keep]))


def test_label_smoothing_validates_shapes():
    with pytest.raises(ValueError, match="disagree"):
        LabelSmoothedCrossEntropy()(torch.randn(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))


@pytest.mark.parametrize("scheme", ["xavier", "normal"])
def test_init_schemes(scheme):
    model = build_transformer("tiny", init=scheme)
    assert torch.all(model.src_embed.weight[0] == 0)  # padding row
    layer = model.encoder.layers[0]
    assert torch.all(layer.ffn.fc1.bias == 0)
    assert torch.all(layer.norm1.weight == 1)
    if scheme == "normal":
        init_weights(model, "normal", std=0.02)
        assert layer.ffn.fc1.weight.std().item() == pytest.approx(0.02, rel=0.2)


UNTIED = {"norm_first": True, "position": "learned", "share_embeddings": False, "tgt_vocab": 99, "tie_output": False}


@pytest.mark.parametrize(
    "preset, overrides", [("tiny", {}), ("tiny", UNTIED), ("small", {}), ("small", UNTIED), ("base", {})]
)
def test_parameter_accounting_is_exact(preset, overrides):
    config = TransformerConfig(**{**PRESETS[preset], **overrides})
    model = Transformer(config)
    measured = parameters_by_part(model)
    assert measured == classic_parameters(config)
    assert sum(measured.values()) == sum(p.numel() for p in model.parameters())


def test_layer_formulas():
    assert attention_parameters(512) == 4 * 512 * 512 + 4 * 512 == 1_050_624
    assert ffn_parameters(512, 2048) == 2 * 512 * 2048 + 2048 + 512 == 2_099_712


def test_article_estimate_vs_exact_base():
    est = article_estimate(TransformerConfig())
    assert est["article_total"] == 37_804_032  # the article's "37.8M"
    assert est["exact_encoder_layer"] == 3_152_384
    assert est["exact_decoder_layer"] == 4_204_032
    # 6 cross-attentions, plus the norms the estimate leaves out: 2 per encoder layer, 3 per decoder layer.
    assert est["exact_layers"] - est["article_total"] == est["missed_cross_attention"] + (6 * 2 + 6 * 3) * 2 * 512
    assert est["exact_total"] == sum(p.numel() for p in build_transformer("base").parameters())
