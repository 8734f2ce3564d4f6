"""The variant registry: every variant says what it is, where it comes from, and what it changed.

A variant is a *patch* on the classic Transformer. It registers its name, its paper, the tasks it runs
on, its config dataclass with named presets, a builder, and its declared changes: for each part of the
classic design it touched, the classic choice, its own choice, the flaw it addresses, and whether the
change is general or specific to a task.

The declared changes are *independent*: each can be reverted alone (one ``zoo ablate`` row each), and
reverting it alters parameters only in the parts it names (its own, and those it ``resizes`` or is
``also_in``). What follows from a change (a part it widens) is declared inside that change, never as a
change of its own, so no ablation row measures another change's consequence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from torch import nn

from core.parts import check_part
from plumbing.errors import check_bool, unknown_name

log = logging.getLogger(__name__)

SCOPES = ("general", "task-specific")


@dataclass(frozen=True)
class Paper:
    title: str
    year: int
    url: str


@dataclass(frozen=True, eq=False)
class Change:
    """One independent change of a variant: the part, the classic choice, the variant's choice, and why.

    Each change is one leave-one-out ablation row (``zoo ablate``: the variant with this change alone
    reverted) and one step of the delta analysis's attribution (``zoo diff``). A change may reach past
    its own part; it then says where and how, so that the story covers every part its revert alters:

    Args:
        part: the part it changes (:data:`core.parts.PARTS`).
        classic, variant, flaw: the classic choice, the variant's choice, the flaw of the classic one.
        scope: ``"general"`` or ``"task-specific"``.
        revert: config overrides that restore the classic choice of this change alone. No two changes of
            a variant may set the same field: a change whose revert is part of another's is not
            independent (declare what it describes in that change's ``resizes`` or ``also_in``).
        name: unique within the variant, default ``part``; the ablation row is labelled
            ``"without <name>"``. Needed when a variant changes one part twice (MISSFormer's
            ``hierarchy`` and ``bridge``, both ``stacking``).
        resizes: ``{part: how}``, other parts whose *size* follows from this change while what they are
            does not (Swin's hierarchy sets each stage's width, so attention, FFN, norms and the head grow
            with it). Reverting the change alone changes their parameter counts. The delta analysis
            applies a change before the changes of the parts it resizes, so those are measured at the
            variant's sizes, and books the size difference to this change, as lines of its own. A
            consequence of this kind is not a change of its own: it has no revert and no ablation row.
        also_in: ``{part: how}``, other parts holding modules this same change replaces (MISSFormer's
            context bridge, which the ``stacking`` part owns, has the efficient attention too).
        no_revert: why this change cannot be reverted (empty: it can). A network taken whole from another
            library (MONAI's ``UNETR``) may make a change its code has no switch for: it is declared, so the
            story is told, but it has no ``revert``, no ablation row and no attribution step, and ``zoo check``
            marks its revert row not applicable with this reason. Only such a change may leave ``revert`` empty.

    ``parts`` is the change's own part, then those of ``resizes`` and ``also_in``: every part whose
    parameters reverting this change alone may alter (``tests/zoo/analysis/test_delta_attribution.py`` checks it).
    """

    part: str
    classic: str
    variant: str
    flaw: str
    scope: str = "general"
    revert: dict[str, Any] = field(default_factory=dict)  # config overrides that restore the classic choice
    name: str = ""  # default: the part
    resizes: dict[str, str] = field(default_factory=dict)  # part -> how this change sets its size
    also_in: dict[str, str] = field(default_factory=dict)  # part -> which of its modules this change replaces
    no_revert: str = ""  # why the change cannot be reverted (a library network without the switch); "" it can

    def __post_init__(self) -> None:
        check_part(self.part)
        if not isinstance(self.no_revert, str):
            raise TypeError(f"Change no_revert must be a str (why it cannot be reverted), got {self.no_revert!r}")
        if self.no_revert and self.revert:
            raise ValueError(f"change {self.name or self.part!r} has revert overrides {self.revert} and says it cannot "
                             f"be reverted ({self.no_revert!r}); keep one")
        if self.scope not in SCOPES:
            raise unknown_name("scope", self.scope, SCOPES)
        if not isinstance(self.name, str):
            raise TypeError(f"Change name must be a str, got {type(self.name).__name__} {self.name!r}")
        object.__setattr__(self, "name", self.name or self.part)
        for what in ("resizes", "also_in"):
            reach = getattr(self, what)
            if not isinstance(reach, dict):
                raise TypeError(f"Change {what} must be a dict {{part: how}}, got {type(reach).__name__}")
            for part, how in reach.items():
                check_part(part)
                if part == self.part:
                    raise ValueError(f"change {self.name!r} lists its own part {part!r} in {what}; list only "
                                     "the other parts it reaches")
                if not isinstance(how, str) or not how:
                    raise ValueError(f"change {self.name!r}: {what}[{part!r}] must say how, got {how!r}")
        if set(self.resizes) & set(self.also_in):
            raise ValueError(f"change {self.name!r} lists {sorted(set(self.resizes) & set(self.also_in))} in both "
                             "resizes and also_in; a part is resized (same modules, other size) or also changed")

    @property
    def parts(self) -> tuple[str, ...]:
        """Its own part, then the parts it resizes, then those it also changes."""
        return (self.part, *self.resizes, *self.also_in)

    @property
    def revertible(self) -> bool:
        """Whether the change has a revert (see ``no_revert``)."""
        return not self.no_revert


@dataclass(frozen=True)
class Variant:
    """A registered variant. ``build(config)`` returns the model; ``presets`` name config overrides.

    ``changes`` are its independent changes (see :class:`Change`), in the order the story tells them;
    :meth:`attribution_order` is the order the delta analysis applies them in. ``builds_on`` names the
    registered variant it patches (for each of its tasks): the model whose presets are the reference sizes
    of its classic counterpart (:mod:`zoo.analysis.counterpart`). ``None``: the earliest registration of another name
    for the task whose config class is (a base of) this one's, else none (the variant is a root whose
    config class holds its own classic choices, as ViT's does).
    """

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
    # The registered variant whose presets are the reference sizes (zoo check/diff/compare); see above.
    builds_on: str | None = None
    # Dummy inputs of the task's real size, for measuring FLOPs and memory: (config, shape) -> args.
    example_input: Callable[[Any, dict[str, int]], tuple] | None = None
    # 2: the model takes images or slices; 3: volumes, so the medseg task trains it on 3D patches and predicts
    # whole cases through a sliding window (tasks.medseg.training.patches, tasks.medseg.inference.sliding).
    spatial_dims: int = 2
    # Renames a checkpoint of the reference implementation (timm, MONAI) to this model's names, for
    # `zoo train --init-from` and `create(pretrained=...)` (zoo.weights.transfer); None: only runs of this package.
    import_weights: Callable[[dict[str, Any], nn.Module], dict[str, Any]] | None = None

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

    def __post_init__(self) -> None:
        if self.spatial_dims not in (2, 3) or isinstance(self.spatial_dims, bool):
            raise ValueError(f"variant {self.name!r}: spatial_dims must be 2 (images, slices) or 3 (volumes), got "
                             f"{self.spatial_dims!r}")
        if self.builds_on is not None and (not isinstance(self.builds_on, str) or self.builds_on == self.name):
            raise ValueError(f"variant {self.name!r}: builds_on={self.builds_on!r} must name another registered "
                             "variant (the one it patches, e.g. 'classic'), or be None")
        names = [c.name for c in self.changes]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"variant {self.name!r} declares more than one change named {twice}; give each a "
                             "unique name= (the ablation rows are labelled by it)")
        fields_of: dict[str, str] = {}
        for change in self.changes:
            for key in change.revert:
                if key in fields_of:
                    raise ValueError(
                        f"variant {self.name!r}: changes {fields_of[key]!r} and {change.name!r} both revert the "
                        f"config field {key!r}, so neither can be reverted alone; merge them into one change "
                        "and declare the dependent part in its resizes= (a size) or also_in= (other modules)"
                    )
                fields_of[key] = change.name
        self.attribution_order()  # refuses a cycle of resizes

    @property
    def parts_changed(self) -> tuple[str, ...]:
        """The parts the changes are declared on (each change's own part), in declaration order."""
        return tuple(dict.fromkeys(c.part for c in self.changes))

    @property
    def parts_reached(self) -> tuple[str, ...]:
        """Every part a change reaches: ``parts_changed``, then the parts resized or also changed."""
        return tuple(dict.fromkeys(p for c in self.changes for p in c.parts))

    def independent_changes(self) -> tuple[Change, ...]:
        """The changes that one leave-one-out row each reverts: every revertible one of ``changes``.

        A part that changes only because another change did (the head that the hierarchy widens) is not a
        change of its own: its cause declares it in ``resizes`` or ``also_in``, and reverting the cause
        reverts it. Construction refuses two changes that revert the same config field. A change declared with
        ``no_revert`` has no row.
        """
        return tuple(c for c in self.changes if c.revertible)

    def change(self, name: str) -> Change:
        """The change called ``name``; unknown names get a "did you mean" error."""
        for change in self.changes:
            if change.name == name:
                return change
        raise unknown_name(f"change of variant {self.name!r}", name, [c.name for c in self.changes])

    def attribution_order(self) -> tuple[Change, ...]:
        """The changes in the order the delta analysis applies them to the classic model.

        A change that resizes a part comes before the changes declared on that part, so those are measured
        at the sizes it sets (Swin: the hierarchy, then window attention at each stage's width, then the
        relative position table at the window's size). Changes that resize come as early as that allows
        (they set the geometry the others work in: ViT's encoder-only read-out before its Pre-LN, which
        would otherwise also add a norm to the decoder about to go); otherwise declaration order.
        ValueError on a cycle. Changes declared with ``no_revert`` are not applied: there is nothing to apply.
        """
        pending, order = list(self.independent_changes()), []
        while pending:
            ready = [c for c in pending if not any(c.part in o.resizes for o in pending if o is not c)]
            if not ready:
                cycle = ", ".join(f"{c.name} resizes {sorted(c.resizes)}" for c in pending)
                raise ValueError(f"variant {self.name!r}: the changes resize each other's parts in a cycle "
                                 f"({cycle}); one of them must not list the other's part")
            first = next((c for c in ready if c.resizes), ready[0])
            order.append(first)
            pending.remove(first)
        return tuple(order)

    def classic_overrides(self, without: Change | None = None) -> dict[str, Any]:
        """Config overrides reverting every change (or only ``without``, when given) to the classic choice."""
        reverts: dict[str, Any] = {}
        for change in self.changes if without is None else (without,):
            reverts.update(change.revert)
        return reverts


def change_markdown(change: Change, heading: str = "#") -> str:
    """One change as a Markdown section, a level below ``heading``: its part (and name), scope, the classic
    choice, the variant's, why, and the parts it resizes or also changes. The text ``zoo diff`` shows."""
    title = change.part if change.name == change.part else f"{change.part}: {change.name}"
    lines = [f"{heading}# {title} ({change.scope})", "",
             f"The classic model uses {change.classic}; this variant uses {change.variant}. Why: {change.flaw}.", ""]
    resized = [f"{part} ({how})" for part, how in change.resizes.items()]
    if resized:
        lines += [f"It also sets the size of: {'; '.join(resized)}. These follow from it and are reverted with it, "
                  "so they are not changes of their own: they are measured as this change's lines, and the other "
                  "changes are measured at these sizes.", ""]
    also = [f"{part} ({how})" for part, how in change.also_in.items()]
    if also:
        lines += [f"The same change in another part: {'; '.join(also)}.", ""]
    if change.no_revert:
        lines += [f"Not reverted, so not measured below and not ablated: {change.no_revert}.", ""]
    return "\n".join(lines)


def changes_markdown(variant: Variant, heading: str = "#") -> str:
    """Every declared change of ``variant`` (:func:`change_markdown`), in the order the story tells them: the one
    place a variant's changes are written out, which docstrings point to instead of restating them."""
    return "\n".join(change_markdown(change, heading) for change in variant.changes)


# name -> its registrations; one name may be registered once per set of tasks (e.g. a linear-attention
# "lite" model is a Transformer for translation and a ViT for images).
_REGISTRY: dict[str, list[Variant]] = {}


def register(variant: Variant) -> Variant:
    """Add ``variant`` to the registry and return it: the public entry point of built-in and plugin variants alike.

    Once registered, a variant is found by name everywhere: :func:`get_variant`, :func:`create`, ``zoo list``,
    ``zoo diff``, ``zoo check``, ``zoo train TASK --variant NAME``, ``zoo compare``. Variants call it when their
    module is imported, as ``zoo/vit/__init__.py`` does; a plugin does the same from a package that
    ``--user-dir``, ``ZOO_USER_DIR`` or an entry point of ``transformer_zoo.variants`` imports
    (:mod:`tasks.plugins.loader`; ``zoo new-variant`` writes one)::

        VARIANT = register(Variant(
            name="swiglu", paper=Paper("GLU Variants Improve Transformer", 2020, "https://arxiv.org/abs/2002.05202"),
            tasks=("translation",), config_class=TransformerConfig, presets=PRESETS, build=Transformer,
            changes=(Change("ffn", "ReLU FFN", "SwiGLU", "why", revert={"ffn": "dense"}),),
            example_input=token_inputs,
        ))

    What a registration promises, and ``zoo check`` measures: ``build(config)`` returns a module whose parts are
    tagged (``zoo_part``, :mod:`core.parts`); ``changes`` declare every part where it differs from its classic
    counterpart (the model it ``builds_on`` at the same preset, with every ``revert`` applied: see
    :mod:`zoo.analysis.counterpart`), every config field where it differs is restored by a revert, and each revert
    brings the classic modules of its part back; ``example_input(config, shape)`` gives inputs of a task's size
    (the task runner's ``delta_shape``, a :class:`zoo.analysis.delta.TaskShape`).

    Args:
        variant: the variant; one name may be registered once per set of tasks (the same patch on the
            encoder–decoder for translation and on ViT for images).

    Returns:
        ``variant``, so that a module can keep it: ``VARIANT = register(Variant(...))``.

    Raises:
        ValueError: the name is already registered for one of ``variant.tasks``, or ``variant.builds_on`` is not
            registered for each of them.
    """
    for other in _REGISTRY.get(variant.name, []):
        if set(other.tasks) & set(variant.tasks):
            raise ValueError(f"variant {variant.name!r} is already registered for {sorted(other.tasks)}")
    for task in variant.tasks:
        declared_base(variant, task)
    _REGISTRY.setdefault(variant.name, []).append(variant)
    return variant


def declared_base(variant: Variant, task: str) -> Variant | None:
    """The registration for ``task`` of the variant that ``variant`` declares it ``builds_on`` (``None`` when it
    declares none; :func:`zoo.analysis.counterpart.base_of` then looks for one).

    Raises:
        ValueError: ``builds_on`` is not registered, or not for ``task``.
    """
    if variant.builds_on is None:
        return None
    try:
        return get_variant(variant.builds_on, task)
    except ValueError as error:
        raise ValueError(f"variant {variant.name!r} builds_on {variant.builds_on!r}, which is not registered for the "
                         f"{task} task ({error}); register that base first, or name one that runs on {task}") from None


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


def create(name: str, preset: str | None = None, task: str | None = None, pretrained: str | Path | None = None,
           partial: bool = False, **overrides: Any) -> nn.Module:
    """Build variant ``name`` from ``preset`` with config ``overrides``: ``create("classic", preset="tiny")``.

    ``pretrained``: a checkpoint to start from, as timm's ``create_model`` takes one — a ``.safetensors``/``.pth``
    file of the reference implementation (timm, MONAI), or a run or export of this package: then the task it
    records chooses the registration (``create("linear", pretrained=CIFAR_EXPORT)`` is the cifar ``linear``, not
    the translation one) unless ``task`` is given, and its saved config is the starting point unless ``preset``
    is given. The weights are mapped by :func:`zoo.weights.transfer.load_pretrained`: position tables resampled
    to a new image size, a head with other ``num_classes`` re-initialised; the per-tensor report is logged.
    ``partial``: accept a checkpoint that covers less than ``zoo.weights.transfer.MIN_SHARE`` of the model's
    parameters (an encoder only), which is otherwise refused.
    """
    if pretrained is None:
        variant = get_variant(name, task)
        return variant.build(variant.config(preset, **overrides))
    from plumbing.configs import config_from_dict
    from zoo.weights.sources import read_source
    from zoo.weights.transfer import load_pretrained

    check_bool("partial", partial)
    runs_on = tasks_of(name)  # an unknown name fails before a large file is read
    source = read_source(pretrained)
    if task is None and source.meta.get("task") in runs_on:
        task = source.meta["task"]
    variant = get_variant(name, task)
    saved = source.meta.get("variant_config") if source.variant == name and preset is None else None
    config = variant.config(preset, **overrides) if saved is None else \
        config_from_dict(variant.config_class, {**saved, **overrides})
    model = variant.build(config)
    transfer = load_pretrained(model, source, variant.import_weights, partial=partial, variant=name)
    log.info("%s", transfer.table())
    return model
