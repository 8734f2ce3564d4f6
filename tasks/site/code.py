"""The code of a declared change: the variant's classes for the part it changed beside the classic ones it replaces.

Both models are built (on the meta device: types only, no weights) — the variant at a preset, and the variant with
that one change reverted (:attr:`zoo.registry.Change.revert`) — and the classes of the modules tagged with the
change's parts are compared. The classes only one side has are the change's code; their source is read with
``inspect``. A change that keeps the classes and alters a setting (GELU for ReLU inside the same FFN, Pre-LN in
the same layer) shows the classes that read the setting on both sides, with the setting itself.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
from torch import nn

from core.parts import module_parts
from zoo.registry import Change, Variant

OWN = ("core.", "zoo.", "tasks.")  # packages whose classes are shown as source; others are named only
_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential, nn.Identity, nn.Dropout)


@dataclass
class Side:
    """One side of a change: its classes (qualified names), and the source of those written in this package."""

    classes: list[str] = field(default_factory=list)
    sources: list[tuple[str, str]] = field(default_factory=list)  # (qualified name, source)


@dataclass
class ChangeCode:
    variant: Side
    classic: Side
    setting: str  # the config values that differ, as Python (empty when the classes differ)
    note: str = ""  # why no classic side is shown (a change without a revert)


def build(variant: Variant, config) -> nn.Module:
    """``variant`` built from ``config`` on the meta device: its module types, no weights."""
    with torch.device("meta"):
        return variant.build(config)


def change_code(variant: Variant, change: Change, preset: str, model: nn.Module | None = None) -> ChangeCode:
    """The code of ``change`` of ``variant`` at ``preset`` (see the module docstring); ``model``: the variant
    already built at ``preset`` (by :func:`build`), shared by the changes of one page."""
    config = variant.config(preset)
    model = model if model is not None else build(variant, config)
    ours = _classes(model, change.parts)
    if not change.revertible:
        return ChangeCode(_side(ours), Side(), "", f"no classic side: {change.no_revert}")
    theirs = _classes(build(variant, variant.config(preset, **change.revert)), change.parts)
    only_ours, only_theirs = [c for c in ours if c not in theirs], [c for c in theirs if c not in ours]
    if any(_own(c) for c in only_ours + only_theirs):
        # a side with no class of its own shows the classes of the change's own part it keeps
        kept = _classes(model, (change.part,))
        shared = [c for c in ours if c in theirs and c in kept and _own(c)]
        shared = shared if len(shared) <= 3 else []  # a whole topology kept (stacking) is not "the code replaced"
        return ChangeCode(_side(only_ours if any(map(_own, only_ours)) else only_ours + shared),
                          _side(only_theirs if any(map(_own, only_theirs)) else only_theirs + shared), "")
    # the same classes of ours: a setting changed (or a library class, GELU for ReLU); show who reads the setting
    readers = [c for c in ours if c in theirs and _own(c)] or _readers(model, tuple(change.revert))
    setting = "\n".join([f"# {variant.name}", *(f"{k} = {getattr(config, k)!r}" for k in change.revert),
                         "# the classic choice", *(f"{k} = {v!r}" for k, v in change.revert.items())])
    return ChangeCode(_side(only_ours + readers), _side(only_theirs + readers), setting + "\n")


def part_code(model: nn.Module, part: str) -> Side:
    """The classes of ``model`` tagged with ``part`` (the classic model's page: its code, part by part)."""
    return _side(_classes(model, (part,)))


def _readers(model: nn.Module, names: tuple[str, ...]) -> list[type]:
    """The classes of ours in the whole model whose source reads one of the config fields ``names``."""
    found: dict[type, None] = {}
    for module in model.modules():
        cls = type(module)
        if _own(cls) and cls not in found and any(name in _source(cls) for name in names):
            found.setdefault(cls)
    return list(found)


def _classes(model: nn.Module, parts: tuple[str, ...]) -> list[type]:
    """The classes of the modules tagged with ``parts``, in the order the model builds them."""
    owner = module_parts(model)
    found: dict[type, None] = {}
    for name, module in model.named_modules():
        if owner.get(name) in parts and not isinstance(module, _CONTAINERS) and name:
            found.setdefault(type(module))
    return list(found)


def _own(cls: type) -> bool:
    return cls.__module__.startswith(OWN)


def _source(cls: type) -> str:
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):  # a class made at run time has no source file
        return ""


def _side(classes: list[type]) -> Side:
    side = Side([f"{c.__module__}.{c.__qualname__}" for c in classes])
    side.sources = [(name, _source(c)) for name, c in zip(side.classes, classes) if _own(c) and _source(c)]
    return side
