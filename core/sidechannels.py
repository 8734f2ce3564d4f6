"""Side channels: what a layer reports besides its output, and the helpers that collect it over a model.

A layer's forward stays tensor in, tensor out (side outputs never change a signature). A layer with
more to say keeps it on itself after each forward and offers it through one of three small declared
protocols, so that a training loop, a report or the delta analysis collects it over *any* model
without knowing which layer types exist (a mixture of experts implements all three):

* :class:`AuxiliaryLosses` — ``auxiliary_losses()``: the named, unweighted loss terms of the last
  forward (e.g. ``{"balance": ..., "z": ...}``), or ``None`` before the first one;
  :func:`auxiliary_loss` weighs them by name and sums them over the model;
* :class:`LayerStatistics` — ``statistics()``: named numbers (or lists of numbers) about the last
  forward, or ``None`` before it; :func:`layer_statistics` collects them per layer;
* :class:`SparseParameters` — ``active_parameters()``: how many of the layer's parameters one token
  uses; :func:`active_parameters` counts the parameters one token uses in the whole model;
* :class:`ObjectiveHeads` — a model whose training objective is more than "its output against the label"
  (DeiT's distillation head, trained towards a teacher): ``objective_terms()`` says what each term of the
  loss trains (a head, a target, a weight) and ``head_outputs()`` hands over each head's output of the last
  forward; :func:`objective_heads` collects both, and the task computes the terms.

The collectors take the model itself or any wrapper of it (``DistributedDataParallel``): they walk
``named_modules``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor, nn


@runtime_checkable
class AuxiliaryLosses(Protocol):
    def auxiliary_losses(self) -> dict[str, Tensor] | None:
        """Unweighted differentiable scalar terms of the last forward, by name; ``None`` before it."""


@runtime_checkable
class LayerStatistics(Protocol):
    def statistics(self) -> dict[str, float | list[float]] | None:
        """Detached numbers about the last forward, by name; ``None`` before it."""


@runtime_checkable
class SparseParameters(Protocol):
    def active_parameters(self) -> int:
        """How many of this module's parameters (children included) one token uses."""


TARGETS = ("label", "teacher")  # what a head of ObjectiveHeads is trained towards


@runtime_checkable
class ObjectiveHeads(Protocol):
    def objective_terms(self) -> tuple[tuple[str, str, float], ...]:
        """``(head, target, weight)`` of each term of the training loss, fixed at construction: the term is
        ``weight · loss(head output, target)`` with a target of :data:`TARGETS` (``"teacher"``: a teacher
        model's prediction on the same input)."""

    def head_outputs(self) -> dict[str, Tensor] | None:
        """Each head's output of the last forward, by the names ``objective_terms`` uses; ``None`` before it."""


def _offering(model: nn.Module, protocol: type) -> dict[str, nn.Module]:
    """The modules of ``model`` that implement ``protocol``, by name (outermost only: a module inside
    another that implements it already reports through it)."""
    found: dict[str, nn.Module] = {}
    for name, module in model.named_modules():
        inside = any(name.startswith(f"{outer}.") or outer == "" for outer in found)
        if not inside and isinstance(module, protocol):
            found[name] = module
    return found


def _reported(model: nn.Module, protocol: type, method: str) -> dict[str, dict]:
    reports = {name: getattr(m, method)() for name, m in _offering(model, protocol).items()}
    idle = [name or type(model).__name__ for name, report in reports.items() if report is None]
    if idle:
        raise ValueError(f"layers {idle} have not run a forward yet; call the model before collecting its {method}")
    return reports


def auxiliary_loss(model: nn.Module, weights: Mapping[str, float]) -> Tensor:
    """Σ over the layers offering :class:`AuxiliaryLosses`, Σ over their terms, of ``weights[term] · term``.

    Every term needs a weight (``weights`` may name terms no layer has: a model without such layers
    gives a zero scalar). Differentiable; call it after the forward whose losses it should add.
    """
    terms = []
    for name, losses in _reported(model, AuxiliaryLosses, "auxiliary_losses").items():
        for term, value in losses.items():
            if term not in weights:
                raise ValueError(
                    f"layer {name!r} reports the auxiliary loss term {term!r} but no weight was given for it "
                    f"(weights for: {sorted(weights) or 'none'}); pass weights={{{term!r}: ...}}"
                )
            terms.append(weights[term] * value)
    if not terms:
        device = next((p.device for p in model.parameters()), None)
        return torch.zeros((), device=device)
    return torch.stack(terms).sum()


def layer_statistics(model: nn.Module) -> dict[str, dict[str, float | list[float]]]:
    """The :class:`LayerStatistics` of every layer offering them, by module name (empty if none does)."""
    return _reported(model, LayerStatistics, "statistics")


def objective_heads(model: nn.Module) -> tuple[tuple[tuple[str, str, float], ...], dict[str, Tensor]] | None:
    """The :class:`ObjectiveHeads` of ``model`` after a forward: its terms and its heads' outputs, checked
    (known targets, a head output for every term); ``None`` when no module offers them (the objective is the
    model's output against the label)."""
    offering = _offering(model, ObjectiveHeads)
    if len(offering) > 1:
        raise ValueError(f"modules {sorted(offering)} each declare objective heads; a model has one objective")
    if not offering:
        return None
    terms = objective_targets(model)
    outputs = _reported(model, ObjectiveHeads, "head_outputs")[next(iter(offering))]
    missing = sorted({head for head, _, _ in terms} - set(outputs))
    if missing:
        raise ValueError(f"the objective trains heads {missing} but the last forward reported only {sorted(outputs)}")
    return terms, outputs


def objective_targets(model: nn.Module) -> tuple[tuple[str, str, float], ...]:
    """The ``(head, target, weight)`` terms ``model`` declares (no forward needed); ``()`` when it declares none.
    ``any(t == "teacher" for _, t, _ in objective_targets(model))`` tells whether training needs a teacher."""
    terms = tuple(term for module in _offering(model, ObjectiveHeads).values() for term in module.objective_terms())
    for head, target, weight in terms:
        if target not in TARGETS:
            raise ValueError(f"head {head!r} is trained towards {target!r}; targets are {', '.join(TARGETS)}")
        if not weight > 0:
            raise ValueError(f"head {head!r} has the weight {weight} in the objective; weights are > 0")
    return terms


def active_parameters(model: nn.Module) -> int:
    """Parameters one token uses: all of ``model.parameters()``, except that each module offering
    :class:`SparseParameters` counts ``active_parameters()`` instead of all of its own."""
    total = sum(p.numel() for p in model.parameters())
    for module in _offering(model, SparseParameters).values():
        total -= sum(p.numel() for p in module.parameters()) - module.active_parameters()
    return total
