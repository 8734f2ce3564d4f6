"""The classic counterpart of a variant: the model it builds on, at the same preset, with its changes reverted.

A comparison of a variant with "the classic model" is only as fair as the classic side. That side is not the
variant's own presets with its reverts applied (a preset that also sets ``heads=1`` or adds a layer would be
shared by both sides, and the declared change credited with what the extra layer bought) but the registered
*base* (:func:`base_of`: the classic Transformer, or the variant a plugin ``builds_on``) at the same preset:

    counterpart = base.config(preset, **fixed, **reverts)
    variant     = variant.config(preset, **fixed, **reverts)

``fixed`` are the caller's overrides for both (the task's input size, dropout off, ``--model-set``),
``reverts`` the variant's :meth:`~zoo.registry.Variant.classic_overrides` (restricted to the fields the base's
config has: DeiT reverts ViT's changes too, so the same reverts go on both sides). Every field where the two
still differ, compared exactly and inside option dicts (``ffn_options.n_experts``), is an *undeclared
difference* (:class:`Difference`): no declared change accounts for it. Fields that only the variant's config
class has must keep their class default unless a change reverts them.

Where the base has no preset of that name (linear's ``lite``) there is no reference size: the counterpart is
the base's model at the variant's own sizes, and only its choices (str, bool and option-dict fields) are
compared, with those of the base's default preset. A root (ViT, Swin, MISSFormer) has no base: its config
class holds its classic choices, so its choice fields must keep their class defaults unless a change reverts
them.

``zoo check`` (the ``changes`` row), ``zoo diff`` (the classic side), ``zoo compare`` and ``zoo ablate`` (they
refuse a variant with undeclared differences unless allowed) all use :func:`counterpart`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from zoo.registry import Variant, declared_base, list_variants, registrations

CHOICE_TYPES = (str, bool, dict)  # the fields a comparison without reference sizes looks at


class _Absent:
    """A key that one side's option dict does not have."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT = _Absent()


@dataclass(frozen=True)
class Difference:
    """One config value where a variant differs from its classic counterpart although no change reverts it.

    ``field`` is the path (``heads``, ``ffn_options.n_experts``); ``classic`` the counterpart's value (or the
    config class's default), ``variant`` the variant's; ``use`` names what to use instead ("the classic value",
    "DeiTConfig's default"). Either side may be :data:`ABSENT` (a key only one option dict has).
    """

    field: str
    classic: Any
    variant: Any
    use: str

    @property
    def values(self) -> str:
        """``"`heads` 4 → 1"``: the field, the classic value and the variant's."""
        return f"`{self.field}` {self.classic!r} → {self.variant!r}"

    @property
    def message(self) -> str:
        """``"`heads` 4 → 1: no declared change reverts it; declare it or use the classic value"``."""
        return f"{self.values}: no declared change reverts it; declare it or use {self.use}"

    def to_dict(self) -> dict[str, Any]:
        """The difference as JSON-ready values (an absent side is ``None``, anything else not JSON its repr)."""
        return {"field": self.field, "classic": _json_value(self.classic), "variant": _json_value(self.variant),
                "message": self.message}


@dataclass(frozen=True)
class Counterpart:
    """A variant's classic counterpart at one preset (see the module docstring).

    Attributes:
        variant, task, preset: what it is the counterpart of (``preset`` resolved: never ``None``).
        base: the registration it builds on, ``None`` for a root.
        sized: whether the base has ``preset``, so that the counterpart has the base's sizes.
        config: the counterpart's config (of the base's config class; the variant's own for a root).
        reverted: the variant's config with every change reverted.
        differences: the undeclared differences of ``reverted`` from ``config``, in field order.
    """

    variant: Variant
    task: str
    preset: str
    base: Variant | None
    sized: bool
    config: Any
    reverted: Any
    differences: tuple[Difference, ...]

    @property
    def registration(self) -> Variant:
        """The registration whose builder builds the counterpart: the base, or the root variant itself."""
        return self.base or self.variant

    @property
    def label(self) -> str:
        """``"classic at preset tiny"``: what the classic side is, in a report's words."""
        return f"{self.registration.name} at preset {self.preset}" + ("" if self.sized else " (the variant's sizes)")

    @property
    def note(self) -> str:
        """Why the counterpart has the variant's sizes, when it does; ``""`` otherwise."""
        if self.sized:
            return ""
        return (f"no reference size: {self.registration.name} has no preset {self.preset!r}; compared at "
                f"{self.variant.name}'s own sizes, choices only")


def base_of(variant: Variant, task: str) -> Variant | None:
    """The registration ``variant`` builds on for ``task``.

    The declared :attr:`~zoo.registry.Variant.builds_on`; otherwise the first registration of another name,
    registered earlier for ``task``, whose config class is ``variant``'s or a base class of it (pre-ln, rope,
    linear and moe on translation build on classic; deit, linear and moe on cifar on vit); otherwise ``None``.

    Args:
        variant: a registration (or an unregistered :class:`~zoo.registry.Variant`: every name is earlier).
        task: one of ``variant.tasks``.

    Returns:
        The base's registration for ``task``, or ``None`` for a root (ViT, Swin, MISSFormer, classic).

    Raises:
        ValueError: ``builds_on`` names a variant that is not registered, or not for ``task``.
    """
    if variant.builds_on is not None:
        return declared_base(variant, task)
    for name in list_variants(task):
        if name == variant.name:
            break  # only registrations made before it
        for other in registrations(name):
            if task in other.tasks and issubclass(variant.config_class, other.config_class):
                return other
    return None


def counterpart(variant: Variant, task: str, preset: str | None = None,
                overrides: dict[str, Any] | None = None) -> Counterpart:
    """The classic counterpart of ``variant`` on ``task`` at ``preset``, and its undeclared differences.

    Args:
        variant: the registration compared.
        task: the task it runs on (which registration of the base it builds on).
        preset: the variant's preset (default: its ``default_preset``); the base is taken at the same name.
        overrides: config overrides for both sides (the task's input size, quiet rates, ``--model-set``); those
            the base's config class lacks go to the variant alone, and its fields they set are not judged.

    Returns:
        The :class:`Counterpart`.
    """
    preset = variant.default_preset if preset is None else preset
    overrides = dict(overrides or {})
    reverts = variant.classic_overrides()
    reverted = variant.config(preset, **{**overrides, **reverts})
    base = base_of(variant, task)
    if base is None:
        differences = _judge(reverted, _defaults(variant.config_class), skip={*reverts, *overrides}, numbers=False,
                             use=f"{variant.config_class.__name__}'s default")
        return Counterpart(variant, task, preset, None, True, reverted, reverted, tuple(differences))
    shared = [f.name for f in dataclasses.fields(base.config_class)]  # in field order, as reports list them
    for_base = {k: v for k, v in {**overrides, **reverts}.items() if k in shared}
    sized = preset in base.presets
    if sized:
        config = base.config(preset, **for_base)
        reference = config
    else:  # the base's model at the variant's sizes; its choices are judged against the base's default preset
        config = base.config_class(**{f.name: getattr(reverted, f.name)
                                      for f in dataclasses.fields(base.config_class) if f.init})
        reference = base.config(base.default_preset, **for_base)
    values = {name: getattr(reference, name) for name in shared}
    differences = _judge(reverted, values, skip=set(), numbers=sized, use=f"the {base.name} value")
    own = {k: v for k, v in _defaults(variant.config_class).items() if k not in shared}
    differences += _judge(reverted, own, skip={*reverts, *overrides}, numbers=True,
                          use=f"{variant.config_class.__name__}'s default")
    return Counterpart(variant, task, preset, base, sized, config, reverted, tuple(differences))


def undeclared_differences(variant: Variant, task: str, preset: str | None = None,
                           overrides: dict[str, Any] | None = None) -> list[Difference]:
    """The :attr:`Counterpart.differences` of :func:`counterpart` (same arguments), as a list."""
    return list(counterpart(variant, task, preset, overrides).differences)


def _json_value(value: Any) -> Any:
    """``value`` as JSON holds it: an absent side is ``None``, anything JSON cannot hold its repr."""
    if value is ABSENT:
        return None
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _defaults(config_class: type) -> dict[str, Any]:
    """Each field's class default (fields without one are left out: nothing to hold them to)."""
    out = {}
    for f in dataclasses.fields(config_class):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _judge(config: Any, reference: dict[str, Any], skip: set[str], numbers: bool, use: str) -> list[Difference]:
    """The differences of ``config`` from ``reference`` (field -> value) outside ``skip``; with ``numbers``
    every field, else only those whose reference value is a choice (:data:`CHOICE_TYPES`)."""
    found = []
    for name, classic in reference.items():
        if name in skip or not (numbers or isinstance(classic, CHOICE_TYPES)):
            continue
        found += [Difference(path, old, new, use) for path, old, new in _leaves(name, classic, getattr(config, name))]
    return found


def _leaves(path: str, classic: Any, variant: Any) -> Iterator[tuple[str, Any, Any]]:
    """``(path, classic, variant)`` for every value that differs, recursing into dicts (``ffn_options.k``)."""
    if isinstance(classic, dict) and isinstance(variant, dict):
        for key in dict.fromkeys([*classic, *variant]):
            yield from _leaves(f"{path}.{key}", classic.get(key, ABSENT), variant.get(key, ABSENT))
    elif not _same(classic, variant):
        yield path, classic, variant


def _same(a: Any, b: Any) -> bool:
    """Equal values of one kind: ``1 == 1.0`` is the same number, but ``True`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a is b or (a is not ABSENT and b is not ABSENT and a == b)
