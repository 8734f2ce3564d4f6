"""The catalogue of changes that travel: changes to the core's parts that any model built on the core can take.

A registered variant declares its changes against its own base (:class:`zoo.registry.Change`). To ask whether a
change is *general* or *task-specific* (issue 38's third question), a study applies one change to the base of
every task: the translation encoder–decoder, the decoder-only language model, the vision models' encoders. A
:class:`TravellingChange` holds what that needs beside the declared story: the config fields that make the new
choice, how to apply and revert them on any config (a gated FFN shrinks the width of *that* config to 2/3, so
parameters stay equal), and, for a model it cannot apply to, why not, in words.

The catalogue (:func:`catalogue`) is built on call, so that it sees every registration made so far:

1. the entries of this module that no registered variant declares: SwiGLU (a core option whose variant name
   belongs to the worked plugin example), embeddings not scaled, output not tied, source and target embeddings
   not shared;
2. every revertible change of a registered variant whose config is a core model's (the classic translation model,
   the language model): its new choice is the registration's own value of each field its ``revert`` sets. A
   plugin's variant thus joins the catalogue by registering; the registrations of one change on several tasks
   (``rope`` on translation and on lm) are one entry, deduplicated by (part, new choice, classic choice). A gated
   FFN (GeGLU, ReGLU) travels at two-thirds width, so parameters stay equal, whatever width its variant keeps;
3. the entries plugins add with :func:`register_change`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from core.ffn import GLU_ACTIVATIONS, glu_width
from core.language_model import LanguageModelConfig
from core.model import TransformerConfig
from core.parts import PARTS
from plumbing.errors import check_bool, unknown_name
from zoo.norm_ffn import glu_change
from zoo.registry import Change, Variant, get_variant, list_variants, registrations
from zoo.swin.config import SwinConfig
from zoo.vit.config import ViTConfig

log = logging.getLogger(__name__)

# The bases a travelling change is applied to: label -> the registration (variant, task) of the model.
MODELS: dict[str, tuple[str, str]] = {
    "translation": ("classic", "translation"),
    "lm": ("classic", "lm"),
    "vit": ("vit", "cifar"),
    "swin": ("swin", "cifar"),
}
# Config classes of the models written in core/: a registered change on one of them is a core-level change.
CORE_CONFIGS: tuple[type, ...] = (TransformerConfig, LanguageModelConfig)

# Why a model cannot take a choice, in words, where its config's own refusal ("no field 'ffn'") says too little:
# (config class, field) -> reason.
_REASONS: dict[tuple[type, str], str] = {
    (ViTConfig, "position"): "ViT adds absolute positions over the patch grid and [CLS] (ViTConfig.position: learned "
                             "or sinusoidal); the core's relative schemes and 'none' are 1-D distances along a "
                             "sequence, which its encoder does not wire in for a 2-D grid",
    (SwinConfig, "position"): "Swin's positions are its relative bias table inside each window, or sinusoids "
                              "(SwinConfig.position: relative, sinusoidal); the core's 1-D schemes are not wired into "
                              "its window attention",
    (SwinConfig, "ffn"): "Swin's blocks build the two-matrix core PositionwiseFFN directly (no ffn field), so no "
                         "other FFN type can be swapped in",
    (SwinConfig, "activation"): "Swin's blocks build the two-matrix core PositionwiseFFN directly, which has no "
                                "third matrix for a gate",
    (SwinConfig, "kernel"): "Swin's window attention hands each window to a softmax kernel with the relative "
                            "position bias added to the scores; a kernel without scores cannot take that bias",
    (SwinConfig, "norm"): "Swin's blocks and patch merging build their LayerNorms themselves (timm's layout), "
                          "with no choice of norm",
}
_NO_VOCABULARY = ("an image classifier has no output vocabulary: its head maps to classes, and its tokens are "
                  "projected patches, not rows of an embedding table it could share")
_NO_SCALE = ("its tokens are linear projections of patches, not rows of an embedding table, and it has no "
             "√d_model scale to remove")
_ONE_VOCABULARY = "a decoder-only model has one vocabulary and one embedding table: there is no second one to share"


@dataclass(frozen=True)
class TravellingChange:
    """One change of a core part that a study can apply to any model built on the core, and revert.

    Args:
        change: the declared story (part, classic choice, new choice, flaw, scope); its ``revert`` holds the
            config fields that restore the classic choice, and its ``name`` is the catalogue name.
        choice: the config fields that make the new choice; each must be one ``change.revert`` restores.
        two_thirds_width: a gated FFN (three matrices): applying it also sets the FFN's hidden width to
            :func:`core.ffn.glu_width` of the config's (``round(2/3 · d_ff)``), reverting it to ``round(3/2 · d_ff)``,
            so a comparison is at equal parameters (up to the dense FFN's biases and the rounding). Two classic
            widths can share one GLU width (7 and 8 give 5), so a revert gives back *a* classic width with that
            GLU width: exactly the one applied from when it is a multiple of 3 or a power of 2 from 2 up (every preset).
            A study starts from the classic side (:meth:`sides`), so it never relies on the revert's width.
        not_for: ``{config class: why not}``, the models it cannot apply to, in words. A config class missing
            here is asked too: one that lacks a field of ``choice`` or refuses its value cannot take it.
        registered: the registrations ``(variant, task)`` that declare this change (empty: none does).
    """

    change: Change
    choice: dict[str, Any]
    two_thirds_width: bool = False
    not_for: dict[type, str] = field(default_factory=dict)
    registered: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.change, Change):
            raise TypeError(f"change must be a zoo.registry.Change, got {type(self.change).__name__}")
        if not isinstance(self.choice, dict) or not self.choice:
            raise TypeError(f"change {self.name!r}: choice must be a non-empty dict of config fields, got "
                            f"{self.choice!r}")
        unrestored = sorted(set(self.choice) - set(self.change.revert))
        if unrestored:
            raise ValueError(f"change {self.name!r} sets {unrestored} that its revert {self.change.revert} does not "
                             "restore; add their classic values to the Change's revert")
        check_bool("two_thirds_width", self.two_thirds_width)
        for config_class, reason in self.not_for.items():
            if not isinstance(config_class, type) or not isinstance(reason, str) or not reason:
                raise TypeError(f"change {self.name!r}: not_for maps a config class to why not (a non-empty str), "
                                f"got {config_class!r}: {reason!r}")

    @property
    def name(self) -> str:
        """The catalogue name (the change's ``name``)."""
        return self.change.name

    @property
    def key(self) -> str:
        """What makes two entries the same change: the part, the new choice and the classic one."""
        return json.dumps([self.change.part, self.choice, self.change.revert], sort_keys=True, default=repr)

    def why_not(self, model: Any) -> str:
        """Why ``model`` cannot take this change, in words; ``""`` when it can.

        ``model``: a config class (asked at its defaults) or a config (asked as it is).
        """
        config_class = model if isinstance(model, type) else type(model)
        if config_class in self.not_for:
            return self.not_for[config_class]
        known = {f.name for f in fields(config_class)}
        missing = [name for name in {**self.choice, **self.change.revert} if name not in known]
        refusal = f"{config_class.__name__} has no field {missing[0]!r}" if missing else ""
        if not missing:
            try:
                self.apply(self.revert(model() if isinstance(model, type) else model))
            except (TypeError, ValueError) as error:
                refusal = f"{config_class.__name__} refuses it: {error}"
        if refusal:  # the words of _REASONS where they name the choice's field, else the config's own
            return next((_REASONS[(config_class, n)] for n in self.choice if (config_class, n) in _REASONS), refusal)
        return ""

    def applies_to(self, model: Any) -> bool:
        """Whether ``model`` (a config class or a config) can take this change (see :meth:`why_not`)."""
        return not self.why_not(model)

    def is_new(self, config: Any) -> bool:
        """Whether ``config`` already holds the new choice."""
        return all(getattr(config, name, _MISSING) == value for name, value in self.choice.items())

    def overrides(self, config: Any) -> dict[str, Any]:
        """The config overrides that give ``config`` the new choice (with the GLU width taken from ``config``)."""
        self._check_fields(config)
        resize = self.two_thirds_width and not self.is_new(config)
        return {**self.choice, **(_ffn_width(config, glu_width(config.d_ff)) if resize else {})}

    def revert_overrides(self, config: Any) -> dict[str, Any]:
        """The config overrides that give ``config`` the classic choice (a gated FFN's width back to 3/2)."""
        self._check_fields(config)
        resize = self.two_thirds_width and self.is_new(config)
        return {**self.change.revert, **(_ffn_width(config, round(3 * config.d_ff / 2)) if resize else {})}

    def apply(self, config: Any) -> Any:
        """A copy of ``config`` with the new choice, validated by its class."""
        return dataclasses.replace(config, **self.overrides(config))

    def revert(self, config: Any) -> Any:
        """A copy of ``config`` with the classic choice, validated by its class."""
        return dataclasses.replace(config, **self.revert_overrides(config))

    def sides(self, config: Any) -> tuple[Any, Any]:
        """The two configs a study compares, from a task's base ``config``: (classic choice, new choice).

        ``ValueError`` naming why, when the model cannot take this change.
        """
        reason = self.why_not(config)
        if reason:
            raise ValueError(f"change {self.name!r} does not apply to {type(config).__name__}: {reason}")
        classic = self.revert(config)
        return classic, self.apply(classic)

    def _check_fields(self, config: Any) -> None:
        if not dataclasses.is_dataclass(config) or isinstance(config, type):
            raise TypeError(f"change {self.name!r} applies to a model config (a dataclass instance), got "
                            f"{type(config).__name__}")
        missing = sorted({*self.choice, *self.change.revert} - {f.name for f in fields(config)})
        if missing:
            raise ValueError(f"change {self.name!r} does not apply to {type(config).__name__}: "
                             f"{self.why_not(type(config))} (no field {', '.join(missing)})")


_MISSING = object()


def _ffn_width(config: Any, width: int) -> dict[str, Any]:
    """The overrides that give ``config`` an FFN of hidden width ``width``: ``d_ff`` where it is a field, else
    ``mlp_ratio = width / d_model`` (ViT, whose ``d_ff`` is ``int(d_model · mlp_ratio)``)."""
    if "d_ff" in {f.name for f in fields(config)}:
        return {"d_ff": width}
    ratio = width / config.d_model
    if int(config.d_model * ratio) < width:  # the quotient rounded down: the next float up gives ``width`` back
        ratio = math.nextafter(ratio, math.inf)
    return {"mlp_ratio": ratio}


def _static(name: str, part: str, classic: str, variant: str, flaw: str, revert: dict[str, Any],
            choice: dict[str, Any], **options: Any) -> TravellingChange:
    return TravellingChange(Change(part, classic, variant, flaw, revert=revert, name=name), choice, **options)


# The changes that no registered variant declares; those that one does come from the registry (see the module).
STATIC: tuple[TravellingChange, ...] = (
    # a core option like GeGLU and ReGLU, but its variant name belongs to the worked plugin example (zoo.norm_ffn)
    TravellingChange(dataclasses.replace(glu_change("swiglu"), name="swiglu"), {"activation": "swiglu"},
                     two_thirds_width=True),
    _static("no-embedding-scale", "embedding", "token embeddings multiplied by √d_model (§3.4)",
            "token embeddings as they are (GPT-2)",
            "the scale only balances embeddings against fixed sinusoids, and enlarges the embeddings' gradients",
            {"scale_embeddings": True}, {"scale_embeddings": False},
            not_for={ViTConfig: _NO_SCALE, SwinConfig: _NO_SCALE}),
    _static("untied-output", "head", "the pre-softmax projection is the target embedding's matrix (§3.4)",
            "a pre-softmax projection of its own",
            "one matrix must serve as both input and output representation of every token",
            {"tie_output": True}, {"tie_output": False},
            not_for={ViTConfig: _NO_VOCABULARY, SwinConfig: _NO_VOCABULARY}),
    _static("unshared-embeddings", "embedding", "one embedding table for the source and the target language",
            "a table per language", "a joint table forces one vocabulary on two languages",
            {"share_embeddings": True}, {"share_embeddings": False},
            not_for={LanguageModelConfig: _ONE_VOCABULARY, ViTConfig: _NO_VOCABULARY, SwinConfig: _NO_VOCABULARY}),
)

_PLUGINS: dict[str, TravellingChange] = {}


def register_change(entry: TravellingChange) -> TravellingChange:
    """Add ``entry`` to the catalogue (a plugin's change that no variant of its declares); returns it.

    ``ValueError`` if another entry already has its name (a plugin picks a name of its own) or makes its choice.
    """
    if not isinstance(entry, TravellingChange):
        raise TypeError(f"register_change takes a TravellingChange, got {type(entry).__name__}")
    entries = catalogue()
    if entry.name in entries:
        raise ValueError(f"a travelling change named {entry.name!r} is already in the catalogue; choose another "
                         "name (Change(name=...))")
    same = next((e.name for e in entries.values() if e.key == entry.key), None)
    if same is not None:
        raise ValueError(f"travelling change {entry.name!r} makes the same choice {entry.choice} as {same!r}, which "
                         f"is in the catalogue; use {same!r}")
    _PLUGINS[entry.name] = entry
    return entry


def unregister_change(name: str) -> None:
    """Remove the plugin entry ``name`` (tests; a plugin unloaded); unknown names get a "did you mean" error."""
    if name not in _PLUGINS:
        raise unknown_name("registered travelling change", name, _PLUGINS)
    del _PLUGINS[name]


def _registered(variants: Iterable[Variant]) -> list[tuple[TravellingChange, bool]]:
    """Every revertible change of ``variants`` as an entry, with whether it is core-level (see
    :func:`registered_changes`). Its new choice is the variant's own value, at its default preset, of each field its
    revert sets and it changes; a change that changes no field there is left out."""
    found = []
    for variant in variants:
        config = variant.config()
        for change in variant.independent_changes():
            if not set(change.revert) <= {f.name for f in fields(config)}:
                continue  # reverts a field its own config lacks: zoo check reports that, not the catalogue
            choice = {k: getattr(config, k) for k, v in change.revert.items() if getattr(config, k) != v}
            if not choice:
                continue
            name = variant.name if len(variant.changes) == 1 else f"{variant.name}:{change.name}"
            gated = choice.get("activation") in GLU_ACTIVATIONS  # travels at equal parameters, whatever its preset
            entry = TravellingChange(dataclasses.replace(change, name=name), choice, two_thirds_width=gated,
                                     registered=tuple((variant.name, t) for t in variant.tasks))
            found.append((entry, issubclass(variant.config_class, CORE_CONFIGS)))
    return found


def _every_registration() -> list[Variant]:
    return [v for name in list_variants() for v in registrations(name)]


def registered_changes(variants: Iterable[Variant] | None = None) -> list[TravellingChange]:
    """The core-level changes of registered ``variants`` (default: every registration), one entry per registration.

    A change is core-level when its variant's config is a core model's (:data:`CORE_CONFIGS`) and it can be
    reverted. (A vision model's registration of the same change, ViT's Pre-LN, is merged into it by
    :func:`catalogue`; its other changes, the patch tokens, are its own.)
    """
    return [entry for entry, core in _registered(_every_registration() if variants is None else variants) if core]


def catalogue() -> dict[str, TravellingChange]:
    """Every travelling change by name: :data:`STATIC`, the registered variants' core-level changes, the plugins'.

    Entries with the same (part, new choice, classic choice) are one: the first keeps its story, and the
    registrations of the others (a vision model's too) are added to its ``registered``. A registered change
    whose name is taken by an entry of another choice is named ``NAME-TASK``.
    """
    entries: dict[str, TravellingChange] = {}
    by_key: dict[str, str] = {}
    candidates = [(entry, True) for entry in STATIC] + _registered(_every_registration()) + \
        [(entry, True) for entry in _PLUGINS.values()]
    for entry, core in candidates:
        if entry.key in by_key:
            first = entries[by_key[entry.key]]
            entries[first.name] = dataclasses.replace(first, registered=(*first.registered, *entry.registered))
            continue
        if not core:
            continue
        if entry.name in entries:
            renamed = f"{entry.name}-{entry.registered[0][1]}" if entry.registered else entry.name
            if renamed in entries:
                log.warning("travelling change %r left out: its name is taken by another choice", entry.name)
                continue
            entry = dataclasses.replace(entry, change=dataclasses.replace(entry.change, name=renamed))
        entries[entry.name] = entry
        by_key[entry.key] = entry.name
    return entries


def get_change(name: str) -> TravellingChange:
    """The catalogue's entry ``name``; unknown names get a "did you mean" error."""
    if not isinstance(name, str):
        raise TypeError(f"a travelling change's name must be a str, got {type(name).__name__}")
    entries = catalogue()
    if name not in entries:
        raise unknown_name("travelling change", name, entries)
    return entries[name]


def model_config(model: str, preset: str = "tiny") -> Any:
    """The base config of ``model`` (a key of :data:`MODELS`) at ``preset``, as its registration builds it."""
    if model not in MODELS:
        raise unknown_name("model", model, MODELS)
    return get_variant(*MODELS[model]).config(preset)


def change_rows() -> list[dict[str, Any]]:
    """One row per entry, grouped by part (in :data:`core.parts.PARTS` order): name, part, classic and new choice,
    scope, and per model of :data:`MODELS` "yes" or why not (``zoo changes``)."""
    classes = {model: get_variant(*where).config_class for model, where in MODELS.items()}
    return [{"name": e.name, "part": e.change.part, "classic": e.change.classic, "new": e.change.variant,
             "scope": e.change.scope, "choice": e.choice, "registered": [list(r) for r in e.registered],
             "models": {model: e.why_not(cls) or "yes" for model, cls in classes.items()}}
            for e in sorted(catalogue().values(), key=lambda e: PARTS.index(e.change.part))]
