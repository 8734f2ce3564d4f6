"""The structure side of ``zoo check``: what a built model holds per part.

:func:`anatomy` counts a model's module types and parameters per part (as ``zoo diff`` groups them) and the
types that are each part's *own*; :func:`describe` says what differs at a part between two models. The config
side (which fields differ from the classic counterpart) is :mod:`zoo.analysis.counterpart`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from core.parts import PARTS, module_parts, parameters_by_part, part_of
from zoo.analysis.delta import structure_by_part
from zoo.registry import Variant


@dataclass(frozen=True)
class Anatomy:
    """A built model per part: module types (as ``zoo diff`` groups them: a module tagged ``stacking`` owns
    its subtree), the types of the modules that are the part's *own* (tagged with it or inheriting it, not
    modules of another part nested in a stacking subtree), and parameters."""

    types: dict[str, Counter]
    own: dict[str, Counter]
    params: dict[str, int]


def anatomy(model: nn.Module) -> Anatomy:
    """The :class:`Anatomy` of a built model (on any device, the meta device included)."""
    owner = module_parts(model)
    tags: dict[str, str] = {}
    own: dict[str, Counter] = {p: Counter() for p in PARTS}
    for name, module in model.named_modules():
        parent = name.rpartition(".")[0] if name else None
        tags[name] = part_of(module) or (tags.get(parent, "stacking") if parent is not None else "stacking")
        if name and tags[name] == owner[name]:
            own[owner[name]][type(module).__name__] += 1
    return Anatomy(structure_by_part(model), own, dict(parameters_by_part(model)))


def build(variant: Variant, config: Any, seed: int = 0, meta: bool = False) -> nn.Module:
    """``variant.build(config)`` from ``seed``, on the CPU or, with ``meta``, on the meta device."""
    torch.manual_seed(seed)
    if meta:
        with torch.device("meta"):  # shapes only, as zoo list and zoo params count
            return variant.build(config)
    return variant.build(config)


def anatomy_of(variant: Variant, config: Any) -> Anatomy:
    """Anatomy of a build on the meta device (on the CPU where the build needs real tensors)."""
    try:
        return anatomy(build(variant, config, meta=True))
    except Exception:  # a build that computes with real values; the accounting row reports it
        return anatomy(build(variant, config))


def differs(a: Anatomy, b: Anatomy, part: str) -> bool:
    """Whether ``part`` has other module types or another parameter count in ``a`` and ``b``."""
    return a.types[part] != b.types[part] or a.params[part] != b.params[part]


def types_text(c: Counter) -> str:
    """``"Linear×8, ReLU×4"``: module types and their counts, by name."""
    return ", ".join(f"{k}×{n}" for k, n in sorted(c.items())) or "nothing"


def describe(a: Anatomy, b: Anatomy, part: str, own: bool = False) -> str:
    """What differs at ``part`` from ``a`` to ``b``: module types (the part's own ones), else parameters."""
    x, y = (a.own[part], b.own[part]) if own else (a.types[part], b.types[part])
    if x != y:
        return f"{part}: {types_text(x - y)} → {types_text(y - x)}"
    return f"{part}: parameters {a.params[part]:,} → {b.params[part]:,}"
