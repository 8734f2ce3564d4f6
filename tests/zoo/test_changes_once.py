"""A variant's changes are written once, in its ``Change`` records, and rendered from there.

The config and model docstrings say what the modules are (shapes, arguments, papers, implementation notes)
and point at the records; a table or bullet list of the changes beside them would be a second copy that
drifts. :func:`zoo.registry.changes_markdown` renders the records (the text ``zoo diff`` shows).
"""

from __future__ import annotations

import inspect
import re
import sys

import pytest

import zoo  # noqa: F401  (registers every built-in variant)
from zoo.registry import Change, Variant, changes_markdown, list_variants, registrations

LIST_LINE = re.compile(r"^\s*(?:[*+-]\s|\|)")  # a bullet or a Markdown table row


def _names(change: Change) -> set[str]:
    """The words a restatement of ``change`` would use: its part, its name, the config fields it reverts."""
    return {change.part, change.name, *change.revert}


def restated_changes(text: str, changes: tuple[Change, ...]) -> list[str]:
    """The names of the ``changes`` that the bullets and table rows of ``text`` mention, one per change.

    One change mentioned in a list is a note; two or more is a list of the changes, written a second time.
    """
    rows = [line for line in text.splitlines() if LIST_LINE.match(line)]
    return [c.name for c in changes
            if any(re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", row, re.IGNORECASE)
                   for word in _names(c) for row in rows)]


def homes(variant: Variant) -> list[str]:
    """The zoo modules that define ``variant``: its config class's, its builder's, and those holding its
    registration or its change records."""
    held = {id(variant), id(variant.changes), *(id(c) for c in variant.changes)}
    found = {variant.config_class.__module__, variant.build.__module__}
    found |= {name for name, module in list(sys.modules.items())
              if name.startswith("zoo.") and any(id(value) in held for value in vars(module).values())}
    return sorted(m for m in found if m.startswith("zoo.") and not m.startswith("zoo.analysis"))


def docstrings(module_name: str, variant: Variant) -> dict[str, str]:
    """The module's docstring, and those of the variant's config class and builder when they live in it."""
    module = sys.modules[module_name]
    found = {module_name: module.__doc__ or ""}
    for obj in (variant.config_class, variant.build):
        if obj.__module__ == module_name:
            found[f"{module_name}.{obj.__name__}"] = inspect.getdoc(obj) or ""
    return found


VARIANTS = [v for name in list_variants() for v in registrations(name)]
CASES = [(v, m) for v in VARIANTS if v.changes for m in homes(v)]


def test_every_built_in_variant_with_changes_is_checked():
    assert {"vit", "swin", "deit", "missformer", "linear", "moe"} <= {v.name for v, _ in CASES}
    assert {("vit", "zoo.vit.config"), ("vit", "zoo.vit.model"), ("swin", "zoo.swin.model"),
            ("deit", "zoo.deit"), ("moe", "zoo.moe"), ("linear", "zoo.linear.variant")} <= {
        (v.name, m) for v, m in CASES}


@pytest.mark.parametrize(("variant", "module"), CASES, ids=[f"{v.name}-{v.tasks[0]}-{m}" for v, m in CASES])
def test_docstrings_do_not_restate_the_changes(variant, module):
    for where, text in docstrings(module, variant).items():
        restated = restated_changes(text, variant.changes)
        assert len(restated) < 2, (
            f"the docstring of {where} lists {variant.name}'s changes {restated} again; they are declared once, "
            "in its Change records: point at them (and `zoo diff`) instead")


def test_the_check_finds_a_table_and_a_list_of_changes():
    changes = zoo.get_variant("vit").changes
    table = ("| field | ViT | classic |\n|---|---|---|\n"
             "| ``tokens`` | patch | vocabulary |\n| ``norm_first`` | True | False |")
    bullets = "What it changed:\n\n* **position**: learned;\n* **ffn**: GELU instead of ReLU."
    assert restated_changes(table, changes) == ["embedding", "norm"]  # by the config fields they revert
    assert restated_changes(bullets, changes) == ["position", "ffn"]
    prose = ("What this variant changes is declared once, in ``CHANGES``; ``zoo diff vit`` renders it.\n"
             "Shape legend: B batch, N patches, T = N + 1 tokens, D width (the position table has T rows).")
    assert restated_changes(prose, changes) == []


@pytest.mark.parametrize("variant", VARIANTS, ids=[f"{v.name}-{v.tasks[0]}" for v in VARIANTS])
def test_the_rendering_holds_every_change(variant):
    text = changes_markdown(variant)
    for change in variant.changes:
        for said in (change.part, change.name, change.classic, change.variant, change.flaw, change.scope,
                     *change.resizes, *change.resizes.values(), *change.also_in, *change.also_in.values()):
            assert said in text, f"{variant.name}: change {change.name!r} renders without {said!r}"
    if not variant.changes:
        assert text == ""
