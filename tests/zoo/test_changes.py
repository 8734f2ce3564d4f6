"""The catalogue of changes that travel (:mod:`zoo.changes`): every entry applies to every model it claims (the tiny
model builds and runs with it, and reverting gives the classic config back exactly), says why for the others, keeps
a gated FFN's parameters equal within the rounding, and gathers the registered variants' and a plugin's changes."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from core.ffn import GLUFFN, glu_width
from core.parts import parameters_by_part
from tests.plugin_helpers import isolated_registry
from zoo.changes import (
    MODELS,
    STATIC,
    TravellingChange,
    catalogue,
    change_rows,
    get_change,
    model_config,
    register_change,
    registered_changes,
    unregister_change,
)
from zoo.registry import Change, get_variant, register

# Inputs of a few tokens or one small image per model, for one forward pass of its tiny preset.
IMAGES = {"batch": 2, "image_size": 32, "in_channels": 3}
SHAPES = {"translation": {"batch": 2, "src_len": 7, "tgt_len": 5}, "lm": {"batch": 2, "max_len": 9},
          "vit": IMAGES, "swin": IMAGES}
GLU = ("geglu", "swiglu", "reglu")
# Which models each entry reaches: what a study of it may compare (the rest say why not; see the next test).
EXPECTED = {
    "pre-ln": {"translation", "lm", "vit", "swin"},
    "rmsnorm": {"translation", "lm", "vit"},
    "gelu": {"translation", "lm", "vit", "swin"},
    **{name: {"translation", "lm", "vit"} for name in GLU},
    "learned-pos": {"translation", "lm", "vit"},
    **{name: {"translation", "lm"} for name in ("rope", "alibi", "t5-bias", "nope")},
    "linear": {"translation", "lm", "vit"},
    "moe": {"translation", "lm", "vit"},
    "no-embedding-scale": {"translation", "lm"},
    "untied-output": {"translation", "lm"},
    "unshared-embeddings": {"translation"},
}
CASES = [(name, model) for name in EXPECTED for model in MODELS]


def _build(model: str, config) -> torch.nn.Module:
    torch.manual_seed(0)
    return get_variant(*MODELS[model]).build(config)


def _config_class(model: str) -> type:
    return get_variant(*MODELS[model]).config_class


def test_the_catalogue_holds_the_issue_changes():
    assert set(EXPECTED) <= set(catalogue())


@pytest.mark.parametrize("name", EXPECTED)
def test_each_entry_reaches_the_models_it_should(name):
    entry = get_change(name)
    assert {m for m in MODELS if entry.applies_to(_config_class(m))} == EXPECTED[name]


@pytest.mark.parametrize(("name", "model"), CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_entry_applies_and_reverts_on_the_tiny_model(name, model):
    entry, base = get_change(name), model_config(model, "tiny")
    if not entry.applies_to(type(base)):
        reason = entry.why_not(type(base))
        assert len(reason) > 20, reason  # words, not a bare flag
        with pytest.raises(ValueError, match="does not apply to"):
            entry.sides(base)
        return
    classic, new = entry.sides(base)
    assert new != classic and entry.is_new(new) and not entry.is_new(classic)
    assert entry.revert(new) == classic  # exactly: every field, the FFN's width too
    assert entry.apply(classic) == new and entry.apply(new) == new and entry.revert(classic) == classic
    registration = get_variant(*MODELS[model])
    for config in (classic, new):
        out = _build(model, config).eval()(*registration.example_input(config, SHAPES[model]))
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", GLU)
@pytest.mark.parametrize("model", ["translation", "lm", "vit"])
@pytest.mark.parametrize("preset", ["tiny", None])
def test_gated_ffn_keeps_parameters_equal(name, model, preset):
    """Three bias-free matrices at round(2/3 · d_ff) against two with biases at d_ff: per FFN, the difference is the
    rounding (at most D: 3·D·|d_ff' − 2/3·d_ff| ≤ D) plus the dense FFN's biases (d_ff + D)."""
    registration = get_variant(*MODELS[model])
    classic, new = get_change(name).sides(registration.config(preset))
    assert new.d_ff == glu_width(classic.d_ff)
    with torch.device("meta"):
        dense, gated = registration.build(classic), registration.build(new)
    layers = sum(isinstance(m, GLUFFN) for m in gated.modules())
    assert layers > 0
    d, width = classic.d_model, classic.d_ff
    assert parameters_by_part(gated)["ffn"] == layers * 3 * d * new.d_ff  # counted, not taken on trust
    assert parameters_by_part(dense)["ffn"] == layers * (2 * d * width + width + d)
    gap = parameters_by_part(gated)["ffn"] - parameters_by_part(dense)["ffn"]
    assert abs(gap) <= layers * (2 * d + width)
    assert abs(gap) / parameters_by_part(dense)["ffn"] < 0.02
    other = {part: n for part, n in parameters_by_part(dense).items() if part != "ffn"}
    assert other == {part: n for part, n in parameters_by_part(gated).items() if part != "ffn"}


def test_vit_gated_width_goes_through_mlp_ratio():
    """ViT's width is int(d_model · mlp_ratio): the ratio is chosen so that the product gives the GLU width."""
    base = get_variant("vit", "cifar").config(None, d_model=192, mlp_ratio=4.0)  # 512/192 · 192 = 511.99…
    classic, new = get_change("geglu").sides(base)
    assert (new.d_ff, classic.d_ff) == (512, 768)
    assert get_change("geglu").revert(new) == classic


def test_gated_width_round_trips():
    """From the new side, revert then apply gives the same config at every width; from the classic side, apply then
    revert does where the docstring says (multiples of 3, powers of 2), and gives a width of the same GLU width
    elsewhere (7 and 8 both shrink to 5: no revert can tell them apart)."""
    entry, base = get_change("swiglu"), model_config("translation", "tiny")
    for width in range(1, 400):
        classic = dataclasses.replace(base, d_ff=width)
        new = entry.apply(classic)
        assert entry.apply(entry.revert(new)) == new
        back = entry.revert(new)
        assert glu_width(back.d_ff) == new.d_ff
        if width % 3 == 0 or (width >= 2 and width & (width - 1) == 0):
            assert back == classic, width


@pytest.mark.parametrize("name", ["rope", "alibi", "t5-bias", "nope", "gelu", "linear", "moe", "pre-ln", "rmsnorm"])
def test_registered_lm_variants_are_members(name):
    assert (name, "lm") in get_change(name).registered


def test_registrations_of_one_change_are_one_entry():
    assert {("rope", "translation"), ("rope", "lm")} <= set(get_change("rope").registered)
    assert ("vit", "cifar") in get_change("pre-ln").registered  # ViT's Pre-LN is the same change
    names = [entry.name for entry in registered_changes()]
    assert names.count("rope") == 2 and "rope" in catalogue() and "vit:norm" not in catalogue()
    keys = [entry.key for entry in catalogue().values()]
    assert len(keys) == len(set(keys))


def test_registered_changes_take_the_variants_own_choice():
    assert get_change("moe").choice == {"ffn": "moe", "ffn_options": get_variant("moe").base_overrides["ffn_options"]}
    assert get_change("linear").choice == {"kernel": "linear"}
    assert get_change("linear").change.revert == {"kernel": "sdpa", "kernel_options": {}}
    assert get_change("geglu").two_thirds_width  # a registered gated FFN travels at equal parameters too


def test_a_plugin_variant_joins_the_catalogue():
    change = Change("attention", "fused softmax attention", "the explicit reference math",
                    "a test of the catalogue", revert={"kernel": "sdpa"})
    with isolated_registry():
        register(dataclasses.replace(get_variant("classic", "translation"), name="throwaway-kernel",
                                     changes=(change,), base_overrides={"kernel": "reference"}, builds_on="classic"))
        entry = get_change("throwaway-kernel")
        assert entry.registered == (("throwaway-kernel", "translation"),) and entry.choice == {"kernel": "reference"}
        assert entry.applies_to(_config_class("lm"))  # applies beyond the task it was registered for
    assert "throwaway-kernel" not in catalogue()


def test_register_change_adds_an_entry_and_refuses_a_taken_name():
    entry = TravellingChange(Change("attention", "no dropout on the attention weights", "dropout 0.1 on them",
                                    "a test of the catalogue", revert={"attention_dropout": 0.0}, name="attn-drop"),
                             {"attention_dropout": 0.1})
    register_change(entry)
    try:
        assert get_change("attn-drop") is entry
        assert {m for m in MODELS if entry.applies_to(_config_class(m))} == set(MODELS)
        with pytest.raises(ValueError, match="already in the catalogue"):
            register_change(entry)
    finally:
        unregister_change("attn-drop")
    assert "attn-drop" not in catalogue()
    with pytest.raises(ValueError, match="already in the catalogue"):
        register_change(dataclasses.replace(STATIC[0]))
    rope = get_change("rope")
    with pytest.raises(ValueError, match="same choice .* as 'rope'"):
        register_change(dataclasses.replace(rope, change=dataclasses.replace(rope.change, name="my-rope")))


def test_unknown_change_gets_did_you_mean():
    with pytest.raises(ValueError, match="Did you mean 'rope'"):
        get_change("rop")
    with pytest.raises(TypeError, match="must be a str"):
        get_change(3)
    with pytest.raises(ValueError, match="Did you mean 'translation'"):
        model_config("translaton")


def test_bad_entries_are_refused():
    story = Change("norm", "Post-LN", "Pre-LN", "a test", revert={"norm_first": False})
    with pytest.raises(ValueError, match="does not restore"):
        TravellingChange(story, {"norm_first": True, "norm": "rmsnorm"})
    with pytest.raises(TypeError, match="non-empty dict"):
        TravellingChange(story, {})
    with pytest.raises(TypeError, match="zoo.registry.Change"):
        TravellingChange("pre-ln", {"norm_first": True})
    with pytest.raises(TypeError, match="two_thirds_width must be a bool"):
        TravellingChange(story, {"norm_first": True}, two_thirds_width=1)


def test_applying_where_it_does_not_apply_names_why():
    swin = model_config("swin", "tiny")
    with pytest.raises(ValueError, match="no field ffn"):
        get_change("moe").apply(swin)
    with pytest.raises(ValueError, match="relative bias table"):
        get_change("rope").sides(swin)
    with pytest.raises(TypeError, match="dataclass instance"):
        get_change("rope").apply({"position": "sinusoidal"})


def test_rows_say_yes_or_why_not_for_every_model():
    rows = {row["name"]: row for row in change_rows()}
    assert rows["unshared-embeddings"]["models"]["translation"] == "yes"
    assert "one vocabulary" in rows["unshared-embeddings"]["models"]["lm"]
    assert set(rows["rope"]["models"]) == set(MODELS)


def test_zoo_changes_lists_the_catalogue(capsys):
    from tasks.cli.main import main

    assert main(["changes", "--format", "json"]) == 0
    assert {row["name"] for row in json.loads(capsys.readouterr().out)} == set(catalogue())
    assert main(["changes"]) == 0
    out = capsys.readouterr().out
    assert "| rope | position | general | yes | yes | no | no |" in out and "- rope on vit: ViT adds" in out
