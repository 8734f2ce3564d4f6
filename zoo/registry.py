"""The variant registry: every variant says what it is, where it comes from, and what it changed.

A variant is a *patch* on the classic Transformer. It registers its name, its paper, the tasks it runs
on, its config dataclass with named presets, a builder, and its declared changes: for each part of the
classic design it touched, the classic choice, its own choice, the flaw it addresses, and whether the
change is general or specific to a task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from torch import nn

from core.errors import unknown_name
from core.parts import check_part

SCOPES = ("general", "task-specific")


@dataclass(frozen=True)
class Paper:
    title: str
    year: int
    url: str


@dataclass(frozen=True, eq=False)
class Change:
    """One changed part: what the classic model did, what the variant does, and why."""

    part: str
    classic: str
    variant: str
    flaw: str
    scope: str = "general"
    revert: dict[str, Any] = field(default_factory=dict)  # config overrides that restore the classic choice

    def __post_init__(self) -> None:
        check_part(self.part)
        if self.scope not in SCOPES:
            raise unknown_name("scope", self.scope, SCOPES)


@dataclass(frozen=True)
class Variant:
    """A registered variant. ``build(config)`` returns the model; ``presets`` name config overrides."""

    name: str
    paper: Paper
    tasks: tuple[str, ...]
    config_class: type
    presets: dict[str, dict[str, Any]]
    build: Callable[[Any], nn.Module]
    changes: tuple[Change, ...] = ()
    default_preset: str = "small"
    summary: str = ""
    base_overrides: dict[str, Any] = field(default_factory=dict)
    # Dummy inputs of the task's real size, for measuring FLOPs and memory: (config, shape) -> args.
    example_input: Callable[[Any, dict[str, int]], tuple] | None = None

    def config(self, preset: str | None = None, **overrides: Any) -> Any:
        """The validated config of ``preset`` (default: ``default_preset``) with ``overrides`` applied."""
        preset = self.default_preset if preset is None else preset
        if preset not in self.presets:
            raise unknown_name(f"preset of variant {self.name!r}", preset, self.presets)
        known = {f.name for f in fields(self.config_class)}
        for key in overrides:
            if key not in known:
                raise unknown_name(f"config field of {self.name!r} ({self.config_class.__name__})", key, known)
        return self.config_class(**{**self.presets[preset], **self.base_overrides, **overrides})

    @property
    def parts_changed(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.part for c in self.changes))

    def classic_overrides(self, without: Change | None = None) -> dict[str, Any]:
        """Config overrides reverting every change (or only ``without``, when given) to the classic choice."""
        reverts: dict[str, Any] = {}
        for change in self.changes if without is None else (without,):
            reverts.update(change.revert)
        return reverts


# name -> its registrations; one name may be registered once per set of tasks (e.g. a linear-attention
# "lite" model is a Transformer for translation and a ViT for images).
_REGISTRY: dict[str, list[Variant]] = {}


def register(variant: Variant) -> Variant:
    for other in _REGISTRY.get(variant.name, []):
        if set(other.tasks) & set(variant.tasks):
            raise ValueError(f"variant {variant.name!r} is already registered for {sorted(other.tasks)}")
    _REGISTRY.setdefault(variant.name, []).append(variant)
    return variant


def get_variant(name: str, task: str | None = None) -> Variant:
    """The registered variant ``name`` (for ``task``, when given); unknown names get a "did you mean" error."""
    if not isinstance(name, str):
        raise TypeError(f"variant name must be a str, got {type(name).__name__}")
    if name not in _REGISTRY:
        raise unknown_name("variant", name, _REGISTRY)
    registrations = _REGISTRY[name]
    if task is None:
        return registrations[0]
    for variant in registrations:
        if task in variant.tasks:
            return variant
    runs_on = sorted({t for v in registrations for t in v.tasks})
    raise ValueError(
        f"variant {name!r} does not run on the {task} task (it runs on: {', '.join(runs_on)}); "
        f"variants for {task}: {', '.join(list_variants(task)) or 'none'}"
    )


def registrations(name: str) -> list[Variant]:
    """Every registration of variant ``name`` (one per set of tasks)."""
    get_variant(name)
    return list(_REGISTRY[name])


def tasks_of(name: str) -> list[str]:
    """Every task variant ``name`` runs on, over all its registrations."""
    get_variant(name)
    return [t for v in _REGISTRY[name] for t in v.tasks]


def list_variants(task: str | None = None) -> list[str]:
    """Names of the registered variants (those that run on ``task``, if given), in registration order."""
    return [n for n, regs in _REGISTRY.items() if task is None or any(task in v.tasks for v in regs)]


def create(name: str, preset: str | None = None, task: str | None = None, **overrides: Any) -> nn.Module:
    """Build variant ``name`` from ``preset`` with config ``overrides``: ``create("classic", preset="tiny")``."""
    variant = get_variant(name, task)
    return variant.build(variant.config(preset, **overrides))
