"""The lm registrations: every variant builds from its default preset, and its reverts give the classic model."""

import pytest

import zoo
from core.language_model import LanguageModel, LanguageModelConfig
from core.parts import parameters_by_part
from zoo.analysis.delta import TaskShape, measure

LM_VARIANTS = ("classic", "pre-ln", "learned-pos", "rope", "alibi", "t5-bias", "nope", "gelu", "linear", "moe",
               "rmsnorm", "geglu", "reglu")
SHAPE = TaskShape("lm", "tiny", {"batch": 2, "max_len": 16}, ("max_len",), "two windows of 16 tokens",
                  config_keys=("max_len",))


def test_the_lm_task_has_the_planned_variants():
    assert tuple(zoo.list_variants("lm")) == LM_VARIANTS


@pytest.mark.parametrize("name", LM_VARIANTS)
def test_builds_from_its_default_preset_and_reverts_to_the_classic_model(name):
    variant = zoo.get_variant(name, "lm")
    config = variant.config()
    assert variant.default_preset == "small" and isinstance(config, LanguageModelConfig)
    model = variant.build(config).eval()
    assert isinstance(model, LanguageModel)
    (x,) = variant.example_input(config, SHAPE.shape)
    assert model(x).shape == (2, 16, config.vocab_size)
    classic = zoo.get_variant("classic", "lm").config()
    assert variant.config(None, **variant.classic_overrides()) == classic
    if name != "classic":
        assert variant.builds_on == "classic" and config != classic


def test_the_translation_registrations_are_unchanged():
    assert zoo.get_variant("rope", "translation").config().position == "rope"
    assert zoo.get_variant("rope", "translation").build is not LanguageModel


@pytest.mark.parametrize("name", ["t5-bias", "gelu", "linear"])
def test_the_delta_analysis_measures_exactly_the_declared_part(name):
    report = measure(name, SHAPE, memory=False)
    measured = {p["part"] for p in report["parts"] if p["measured_change"]}
    assert measured == set(zoo.get_variant(name, "lm").parts_changed)
    lines = [line for p in report["parts"] for line in p["attribution"]]
    assert not [line for line in lines if line["kind"] == "undeclared"]


def test_the_t5_bias_of_the_lm_is_causal_and_shared_by_every_layer():
    model = zoo.create("t5-bias", preset="tiny", task="lm")
    assert model.position.bidirectional is False
    assert all(layer.self_attn.position is model.position for layer in model.decoder.layers)
    tables = [name for name, _ in model.named_parameters() if "relative_attention_bias" in name]
    assert tables == ["position.relative_attention_bias.weight"]  # one table, counted once
    assert parameters_by_part(model)["position"] == 32 * model.config.heads  # 32 buckets, one scalar per head
