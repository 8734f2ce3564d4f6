"""The classic counterpart (:mod:`zoo.analysis.counterpart`): the base a variant builds on, at the same preset, is the
classic side of ``zoo check``, ``zoo diff``, ``zoo compare`` and ``zoo ablate``; every config field where a
variant differs from it with no change declared (a size, a choice, a value inside an option dict) is named, and
``zoo compare`` / ``zoo ablate`` refuse such a variant before training unless told otherwise."""

from __future__ import annotations

import dataclasses

import pytest

import tasks.compare.sweep
import zoo
from tasks.cli.main import main
from tasks.compare.run_results import RunResult
from tasks.compare.sweep import ablate, compare
from tasks.engine.registry import task_shape
from tasks.plugins.loader import load_user_dir
from tests.plugin_helpers import UNDECLARED, isolated_registry, variant_source, write_plugin
from zoo.analysis.counterpart import ABSENT, Difference, base_of, counterpart, undeclared_differences
from zoo.analysis.delta import measure
from zoo.analysis.report import render_markdown
from zoo.moe import MOE_OPTIONS
from zoo.registry import Change, register

CLASSIC_TINY = 44_800  # parameters of the registered classic tiny
HEADS = "`heads` 4 → 1: no declared change reverts it; declare it or use the classic value"


@pytest.fixture
def plugins(tmp_path):
    """The plugins of :data:`tests.plugin_helpers.UNDECLARED` loaded (each with its own FFN type)."""
    with isolated_registry():
        for name, spec in UNDECLARED.items():
            source = variant_source(name, **{k: v.replace('"mine"', f'"{name}"') for k, v in spec.items()})
            load_user_dir(write_plugin(tmp_path / name, {f"{name}_plugin.py": source}))
        yield tmp_path


def test_the_bases_of_the_builtins():
    expected = {("classic", "translation"): None, ("pre-ln", "translation"): "classic",
                ("rope", "translation"): "classic", ("linear", "translation"): "classic",
                ("moe", "translation"): "classic", ("vit", "cifar"): None, ("deit", "cifar"): "vit",
                ("linear", "cifar"): "vit", ("moe", "cifar"): "vit", ("swin", "cifar"): None,
                ("missformer", "medseg"): None}
    for (name, task), base in expected.items():
        variant = zoo.get_variant(name, task)
        assert getattr(base_of(variant, task), "name", None) == base, (name, task)
        # the declared builds_on is what the rule finds by itself: an earlier registration of a base config class
        undeclared = dataclasses.replace(variant, builds_on=None)
        assert getattr(base_of(undeclared, task), "name", None) == base, (name, task)


@pytest.mark.parametrize("name, task", [(n, t) for n in zoo.list_variants() for t in dict.fromkeys(zoo.tasks_of(n))
                                        if base_of(zoo.get_variant(n, t), t) is not None])
def test_builtins_with_a_base_differ_only_where_they_declare_it(name, task):
    variant = zoo.get_variant(name, task)
    for preset in variant.presets:
        reference = counterpart(variant, task, preset)
        assert reference.differences == (), (preset, [d.message for d in reference.differences])
        assert reference.sized == (preset in reference.base.presets)


def test_a_base_without_the_preset_gives_no_reference_size():
    linear = zoo.get_variant("linear", "translation")
    reference = counterpart(linear, "translation", "lite")
    assert not reference.sized and reference.config.d_model == 128  # the base's model at the variant's sizes
    assert reference.note == "no reference size: classic has no preset 'lite'; compared at linear's own sizes, " \
                             "choices only"
    # without reference sizes the choices are still compared, with those of the base's default preset
    gelu = dataclasses.replace(linear, name="lite-gelu", presets={"lite": {**linear.presets["lite"],
                                                                          "activation": "gelu"}})
    (difference,) = undeclared_differences(gelu, "translation", "lite")
    assert difference.message == ("`activation` 'relu' → 'gelu': no declared change reverts it; declare it or use "
                                  "the classic value")


def test_a_value_inside_an_option_dict_is_compared():
    # a patch on moe that changes attention, but whose FFN has 4 experts where moe has 8
    moe = zoo.get_variant("moe", "translation")
    fewer = dataclasses.replace(
        moe, name="moe-4", builds_on="moe",
        changes=(Change("attention", "sdpa", "reference", "a flaw", revert={"kernel": "sdpa"}),),
        base_overrides={**moe.base_overrides, "kernel": "reference", "ffn_options": {**MOE_OPTIONS, "n_experts": 4}})
    (difference,) = undeclared_differences(fewer, "translation", "tiny")
    assert difference == Difference("ffn_options.n_experts", 8, 4, "the moe value")
    assert difference.to_dict() == {"field": "ffn_options.n_experts", "classic": 8, "variant": 4,
                                    "message": "`ffn_options.n_experts` 8 → 4: no declared change reverts it; "
                                               "declare it or use the moe value"}
    assert Difference("kernel_options.chunk_size", ABSENT, 16, "x").to_dict()["classic"] is None


def test_roots_and_fields_of_the_variant_alone_keep_their_defaults():
    # a root (vit) holds its classic choices in its config class: a choice its presets change is undeclared
    vit = zoo.get_variant("vit")
    hidden = dataclasses.replace(vit, presets={"tiny": {**vit.presets["tiny"], "kernel": "reference"}})
    assert [d.message for d in undeclared_differences(hidden, "cifar", "tiny")] == [
        "`kernel` 'sdpa' → 'reference': no declared change reverts it; declare it or use ViTConfig's default"]
    # a field only DeiT's config has, set by the presets and reverted by no change (the objective is dropped)
    deit = zoo.get_variant("deit")
    presets = {"tiny": {**deit.presets["tiny"], "distillation": "none"}}
    quiet = dataclasses.replace(deit, name="deit-quiet", presets=presets, changes=deit.changes[:-1])
    assert [d.values for d in undeclared_differences(quiet, "cifar", "tiny")] == ["`distillation` 'hard' → 'none'"]


def test_builds_on_must_name_a_registered_variant_of_each_task():
    classic = zoo.get_variant("classic")
    with pytest.raises(ValueError, match="builds_on='classic' must name another registered variant"):
        dataclasses.replace(classic, builds_on="classic")
    with isolated_registry():
        with pytest.raises(ValueError, match=r"variant 'on-vit' builds_on 'vit', which is not registered for the "
                                             r"translation task \(variant 'vit' does not run on the translation"):
            register(dataclasses.replace(classic, name="on-vit", builds_on="vit"))
        with pytest.raises(ValueError, match="builds_on 'clasic', which is not registered .*Did you mean 'classic'"):
            register(dataclasses.replace(classic, name="typo", builds_on="clasic"))
    unregistered = dataclasses.replace(classic, name="typo", builds_on="clasic")
    with pytest.raises(ValueError, match="variant 'typo' builds_on 'clasic', which is not registered for the "
                                         "translation task"):
        base_of(unregistered, "translation")


# ------------------------------------------------------------------------------- the plugins that hide a change

def test_zoo_diff_measures_against_the_registered_classic(plugins):
    report = measure("wide", task_shape("translation"), preset="tiny", memory=False)
    assert report["totals"]["params"] == {"classic": CLASSIC_TINY, "variant": 57_632}
    assert sum(p.numel() for p in zoo.create("classic", preset="tiny").parameters()) == CLASSIC_TINY
    assert report["counterpart"] == {"base": "classic", "preset": "tiny", "reference_sizes": True, "note": ""}
    assert [(d["field"], d["classic"], d["variant"]) for d in report["undeclared"]] == [
        ("heads", 4, 1), ("decoder_layers", 2, 3)]
    for part in report["parts"]:  # the undeclared differences are a step of their own, and the lines still add up
        assert sum(line["params"]["delta"] for line in part["attribution"]) == part["params"]["delta"]
    assert report["attribution"]["order"] == ["undeclared differences", "ffn"]
    text = render_markdown(report)
    assert "## Undeclared differences" in text and f"- {HEADS}" in text
    assert "| ↳ by undeclared differences (undeclared!) |" in text
    chunky = measure("chunky", task_shape("translation"), preset="tiny", memory=False)
    assert [d["field"] for d in chunky["undeclared"]] == ["kernel_options.chunk_size"]
    (step, _) = chunky["attribution"]["changes"]  # another chunk size: the causal attention's FLOPs alone move
    assert step["change"] == "undeclared differences" and step["params"]["total"] == 0 and step["flops"]["total"]


def test_zoo_compare_and_ablate_refuse_before_training(plugins, tmp_path, monkeypatch, capsys):
    def trained(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(tasks.compare.sweep, "train_entries", trained)
    refusal = (r"variant 'wide' differs from its classic counterpart \(classic at preset tiny\) where no declared "
               r"change reverts it: `heads` 4 → 1, `decoder_layers` 2 → 3; .* pass --allow-undeclared")
    with pytest.raises(ValueError, match=refusal):
        compare("translation", ["classic", "wide"], tmp_path / "c", preset="tiny")
    with pytest.raises(ValueError, match=refusal):
        ablate("wide", "translation", tmp_path / "a", preset="tiny")
    assert not (tmp_path / "c").exists() and not (tmp_path / "a").exists()
    argv = ["compare", "translation", "--variants", "classic,chunky", "--out", str(tmp_path / "c"), "--quiet"]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("zoo compare: error: variant 'chunky' differs from its classic counterpart (linear at "
                           "preset mini) where no declared change reverts it: `kernel_options.chunk_size` (absent) "
                           "→ 16")
    with pytest.raises(AssertionError, match="training started"):  # allowed: it goes on to train
        compare("translation", ["classic", "wide"], tmp_path / "c", preset="tiny", allow_undeclared=True)
    with pytest.raises(AssertionError, match="training started"):
        main([*argv, "--allow-undeclared"])


def test_finished_runs_report_their_undeclared_differences(plugins):
    # --runs reads the variant, preset and overrides of each run from its run.json, and lists, never refuses
    info = {"task": "translation", "variant": "wide", "config": {"preset": "tiny", "model": {"d_ff": 128}}}
    run = RunResult(plugins, plugins, info, None)
    wide, classic = (zoo.get_variant(name, "translation") for name in ("wide", "classic"))
    assert [d.message for d in tasks.compare.sweep._run_undeclared("translation", run, wide)][:1] == [HEADS]
    assert tasks.compare.sweep._run_undeclared("translation", RunResult(plugins, plugins, {
        **info, "variant": "classic"}, None), classic) == []
