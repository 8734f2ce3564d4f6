"""Rows that mean what they say: every declared change is independent, and every difference has its cause.

Leave-one-out: reverting one change alone must alter parameters only in the parts it names (its own part,
the parts it ``resizes``, those it is ``also_in``), and each part it names must really move. Attribution:
the changes applied in turn must book every difference to a change that names the part, each change
visible in its own part at the sizes set before it. Parameters and module types only (no FLOP counting)
at the size ``zoo diff`` measures, so the whole file runs in seconds; tests/zoo/analysis/test_delta.py checks the
same on the full reports, FLOPs included.
"""

import dataclasses

import pytest

import zoo
from core.parts import PARTS, PROCEDURES, parameters_by_part
from tasks.engine.registry import task_shape
from zoo.analysis.attribution import Snapshot, attribute, cumulative_configs
from zoo.analysis.delta import measured_at, structure_by_part
from zoo.registry import Change, Variant

REGISTRATIONS = [(name, task) for name in zoo.list_variants() for task in zoo.tasks_of(name)
                 if zoo.get_variant(name, task).changes]


def _snapshot(model) -> Snapshot:
    return Snapshot(dict(parameters_by_part(model)), dict.fromkeys(PARTS, 0), structure_by_part(model))


def _steps(variant: Variant, task: str) -> list[dict]:
    configs = cumulative_configs(variant, *measured_at(variant, task_shape(task)))
    return attribute(variant.attribution_order(), [_snapshot(variant.build(c)) for c in configs])


def problems(variant: Variant, task: str) -> list[str]:
    """What the attribution finds wrong with a variant's declarations (empty when the story is complete)."""
    found = []
    for step in _steps(variant, task):
        seen = any(line["structure"] != "same" or line["params"]["delta"] for line in step["lines"]
                   if line["kind"] == "own")
        # a procedure (a loss, a generation rule: DeiT's distillation) may change no module at all
        if not seen and step["part"] not in PROCEDURES:
            found.append(f"{step['change']}: no measurable change in its own part {step['part']}")
        found += [f"{step['change']}: undeclared change in {line['part']}" for line in step["lines"]
                  if line["kind"] == "undeclared"]
    return found


@pytest.mark.parametrize("name, task", REGISTRATIONS)
def test_reverting_one_change_moves_only_the_parts_it_names(name, task):
    variant = zoo.get_variant(name, task)
    preset, overrides = measured_at(variant, task_shape(task))
    full = parameters_by_part(variant.build(variant.config(preset, **overrides)))
    for change in variant.independent_changes():
        reverted = parameters_by_part(variant.build(variant.config(preset, **{**overrides, **change.revert})))
        moved = {part for part in PARTS if reverted[part] != full[part]}
        assert moved <= set(change.parts), f"{change.name} also moves {sorted(moved - set(change.parts))}"
        claimed = set(change.resizes) | set(change.also_in)
        assert claimed <= moved, f"{change.name} claims to reach {sorted(claimed - moved)}, which do not move"


@pytest.mark.parametrize("name, task", REGISTRATIONS)
def test_every_difference_is_booked_to_a_change_that_names_its_part(name, task):
    assert problems(zoo.get_variant(name, task), task) == []


@pytest.mark.parametrize("name, task", REGISTRATIONS)
def test_ablation_rows_are_distinct_independent_changes(name, task):
    variant = zoo.get_variant(name, task)
    preset, overrides = measured_at(variant, task_shape(task))
    configs = [variant.config(preset, **overrides)]
    for change in variant.independent_changes():
        assert change.revert, f"{change.name} has no revert: it cannot be a row"
        configs.append(variant.config(preset, **{**overrides, **change.revert}))
    as_dicts = [dataclasses.asdict(c) for c in configs]
    assert all(a != b for i, a in enumerate(as_dicts) for b in as_dicts[i + 1:]), "two rows build the same model"
    assert len({c.name for c in variant.changes}) == len(variant.changes)


def test_swin_window_attention_is_measured_at_the_stage_widths():
    variant = zoo.get_variant("swin", "cifar")
    preset, overrides = measured_at(variant, task_shape("cifar"))
    config = variant.config(preset, **overrides)
    steps = {step["change"]: {line["part"]: line for line in step["lines"]} for step in _steps(variant, "cifar")}
    assert [c.name for c in variant.attribution_order()][:3] == ["stacking", "attention", "position"]
    classic_width = config.embed_dim
    widths = [stage.dim for stage in config.stages() for _ in range(stage.depth)]
    projections = lambda d: 4 * d * d + 4 * d  # noqa: E731  Q, K, V, O with biases
    # the hierarchy widens the attention from D everywhere to each stage's width: its own line, under stacking
    widened = steps["stacking"]["attention"]
    assert widened["kind"] == "resized" and widened["structure"] == "same"
    assert widened["params"]["before"] == len(widths) * projections(classic_width)
    assert widened["params"]["after"] == sum(projections(d) for d in widths)
    # window attention at those widths: the same projections, nothing added to the attention part ...
    windows = steps["attention"]["attention"]
    assert windows["params"]["delta"] == 0 and windows["added"] == {"WindowAttention": len(widths)}
    assert set(steps["attention"]) == {"attention"}
    # ... and its relative position table, (2W−1)² biases per head, is the position change's only addition
    tables = sum(stage.depth * stage.heads * (2 * stage.window - 1) ** 2 for stage in config.stages())
    assert steps["position"]["position"]["params"] == {"before": 0, "after": tables, "delta": tables,
                                                       "delta_pct": None}
    assert "head" not in [c.name for c in variant.changes]
    assert steps["stacking"]["head"]["kind"] == "resized"


def test_a_change_that_does_nothing_at_the_variant_widths_is_caught():
    # Swin whose "attention" change reverts nothing: globally the attention part still grows (the
    # hierarchy widens it), but measured at the stage widths the change is seen to do nothing.
    variant = zoo.get_variant("swin", "cifar")
    noop = [dataclasses.replace(c, revert={"window_size": 4}) if c.name == "attention" else c for c in variant.changes]
    broken = dataclasses.replace(variant, changes=tuple(noop))
    assert problems(broken, "cifar") == ["attention: no measurable change in its own part attention"]
    # Swin that forgets the hierarchy widens the head: the head's difference has no declared cause.
    forgetful = [dataclasses.replace(c, resizes={k: v for k, v in c.resizes.items() if k != "head"})
                 if c.name == "stacking" else c for c in variant.changes]
    assert problems(dataclasses.replace(variant, changes=tuple(forgetful)), "cifar") == [
        "stacking: undeclared change in head"]


def _change(part="stacking", **kw):
    return Change(part, "a", "b", "c", **kw)


@pytest.mark.parametrize(
    "changes, error, match",
    [
        ((_change(revert={"hierarchy": False, "readout": "decoder"}), _change("head", revert={"hierarchy": False})),
         ValueError, "both revert the config field 'hierarchy'"),
        ((_change(revert={"a": 1}), _change(revert={"b": 1})), ValueError, "more than one change named"),
        ((_change(revert={"a": 1}, resizes={"attention": "x"}), _change("attention", revert={"b": 1},
                                                                        resizes={"stacking": "y"})),
         ValueError, "in a cycle"),
    ],
)
def test_registration_refuses_dependent_declarations(changes, error, match):
    base = zoo.get_variant("swin", "cifar")
    with pytest.raises(error, match=match):
        dataclasses.replace(base, changes=changes)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(resizes={"stacking": "x"}), ValueError, "its own part"),
        (dict(resizes={"atention": "x"}), ValueError, "Did you mean 'attention'"),
        (dict(resizes=("attention",)), TypeError, "must be a dict"),
        (dict(also_in={"head": ""}), ValueError, "must say how"),
        (dict(resizes={"head": "x"}, also_in={"head": "y"}), ValueError, "both resizes and also_in"),
        (dict(name=3), TypeError, "name must be a str"),
    ],
)
def test_bad_change_declarations(kwargs, error, match):
    with pytest.raises(error, match=match):
        _change(**kwargs)


def test_change_lookup_and_parts():
    variant = zoo.get_variant("missformer", "medseg")
    assert [c.name for c in variant.changes if c.part == "stacking"] == ["hierarchy", "bridge"]
    hierarchy = variant.change("hierarchy")
    assert hierarchy.parts[0] == "stacking" and set(hierarchy.parts[1:]) == set(hierarchy.resizes)
    assert variant.change("attention").also_in.keys() == {"stacking"}
    with pytest.raises(ValueError, match="Did you mean 'bridge'"):
        variant.change("bridg")
