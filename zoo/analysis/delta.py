"""The "what changed" analysis: a variant measured against its classic counterpart, part by part.

For a variant and a task, build the variant and the classic model at the same width, depth and token
count (the classic counterpart, :mod:`zoo.analysis.counterpart`: the model the variant builds on, at the same preset,
with every declared change reverted; config fields where the variant differs from it undeclared are listed
as ``undeclared``), then compare per part (see :data:`core.parts.PARTS`):

* structure: module types removed and added (a diff of the two module trees, grouped by part);
* parameters: exact counts, Δ and Δ%;
* forward FLOPs at the task's input size, counted by ``torch.utils.flop_counter`` with the math
  attention backend, so attention matmuls are seen (convention: FLOPs = 2·MACs; elementwise ops,
  softmax and norms are not counted), and how attention FLOPs grow with sequence length;
* activation memory of one training step: bytes of the tensors autograd saves for backward;
* parameters one token uses (:func:`core.sidechannels.active_parameters`: a layer that offers
  ``active_parameters()``, e.g. a mixture of experts, counts only what one token runs);
* which change caused each difference (:mod:`zoo.analysis.attribution`): the changes applied to the classic
  model in turn, so that a part another change resizes (Swin's attention, widened by the hierarchy) is
  compared at the variant's sizes, and the size difference is booked to the change that sets it; what the
  undeclared differences alone do (the counterpart against the variant with every change reverted) is a
  first step of its own, :data:`UNDECLARED`, whose lines are all of kind ``undeclared``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from core.attention import AttentionKernel
from core.parts import PARTS, PROCEDURES, module_parts, parameters_by_part
from core.sidechannels import active_parameters
from zoo.analysis.attribution import METHOD, Snapshot, attribute, change_totals, cumulative_configs, lines_by_part
from zoo.analysis.counterpart import Counterpart, counterpart
from zoo.registry import Change, Variant, get_variant


@dataclass(frozen=True)
class TaskShape:
    """The input size at which a task's models are measured, and how to grow its token count.

    Each task runner declares its own (``Task.delta_shape``, e.g. :class:`tasks.cifar.task.CifarTask`), so the
    analysis names no task: it is handed the shape, and looks variants up by the shape's task ``name``.
    """

    name: str  # the task: which registration of a variant (and of its classic base) is measured
    preset: str | None  # the preset the task trains by default (None: the variant's default)
    shape: dict[str, int]
    grow: tuple[str, ...]  # shape entries multiplied by k to measure cost at k× the size
    description: str
    tokens_per_grow: int = 1  # tokens grow as k ** tokens_per_grow (2 for an image side)
    config_keys: tuple[str, ...] = ()  # shape entries that are config fields: the model is built for them

    def for_config(self, config: Any) -> dict[str, int]:
        """The shape, with the config fields (e.g. the channels of an RGB dataset) as the model was built."""
        return {**self.shape, **{key: getattr(config, key) for key in self.config_keys}}

    def scaled(self, shape: dict[str, int], k: int) -> dict[str, int]:
        return {key: v * k if key in self.grow else v for key, v in shape.items()}

    def config_overrides(self, shape: dict[str, int]) -> dict[str, int]:
        return {key: shape[key] for key in self.config_keys}


SCALES = (1, 2, 4)
FLOP_CONVENTION = (
    "forward FLOPs = 2·MACs of matmuls/convolutions/attention (torch.utils.flop_counter, math attention "
    "backend); elementwise ops, softmax and norms are not counted"
)
MEMORY_CONVENTION = "activation memory = bytes of the tensors saved for backward in one training step"


def _shape(task: TaskShape) -> TaskShape:
    if not isinstance(task, TaskShape):
        raise TypeError(f"the delta analysis takes a task's TaskShape (tasks.engine.registry.task_shape({task!r})), "
                        f"got {type(task).__name__} {task!r}")
    return task


def measured_at(variant: Variant, task: TaskShape, preset: str | None = None,
                overrides: dict[str, Any] | None = None) -> tuple[str | None, dict[str, Any]]:
    """The preset a task measures at (given, else the task's, else the variant's default) and its overrides."""
    preset = preset or (task.preset if task.preset in variant.presets else None)
    return preset, {**task.config_overrides(task.shape), **(overrides or {})}


def registration_on(variant: str | Variant, task: TaskShape) -> Variant:
    """The registration of ``variant`` that ``task`` measures: a name is looked up once, here; a
    :class:`~zoo.registry.Variant` a caller already holds (a run's ``Task.variant``, a catalogue row's) is taken as
    it is, so that the analysis does not look the name up again.

    Raises:
        ValueError: an unknown name ("did you mean"), or a variant that does not run on the task.
    """
    if not isinstance(variant, Variant):
        return get_variant(variant, _shape(task).name)
    if _shape(task).name not in variant.tasks:
        raise ValueError(f"this registration of {variant.name!r} runs on {', '.join(variant.tasks)}, not on the "
                         f"{task.name} task; pass the variant's name, or its registration for {task.name}")
    return variant


def build_pair(variant: str | Variant, task: TaskShape, preset: str | None = None,
               **overrides: Any) -> tuple[nn.Module, nn.Module, Any, Counterpart]:
    """The variant and its classic counterpart on a task, built.

    Args:
        variant, task, preset: the variant (a name or its registration for the task: :func:`registration_on`), the
            task's shape and the preset (default: :func:`measured_at`).
        overrides: config overrides of both models (e.g. the vocabulary a training run used).

    Returns:
        ``(variant model, classic model, variant config, counterpart)``; the classic model is the
        :class:`~zoo.analysis.counterpart.Counterpart`'s (its ``config``, built by its ``registration``).
    """
    variant = registration_on(variant, task)
    preset, overrides = measured_at(variant, task, preset, overrides)
    reference = counterpart(variant, task.name, preset, overrides)
    config = variant.config(reference.preset, **overrides)
    torch.manual_seed(0)
    return variant.build(config), reference.registration.build(reference.config), config, reference


def structure_by_part(model: nn.Module) -> dict[str, Counter]:
    """Module type names per part, counted (a module shared by several parents counts once)."""
    owner = module_parts(model)
    out: dict[str, Counter] = {p: Counter() for p in PARTS}
    for name, module in model.named_modules():
        if name:  # the root is the wiring of the whole model, not one of its parts
            out[owner[name]][type(module).__name__] += 1
    return out


def module_flops(model: nn.Module, inputs: tuple) -> tuple[dict[str, int], int]:
    """Forward FLOPs of every module (children included), keyed by ``named_modules`` name, and the total."""
    model.eval()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(*inputs)
    root = type(model).__name__ + "."
    per_module = {k.removeprefix(root): sum(v.values()) for k, v in counter.get_flop_counts().items()}
    return per_module, counter.get_total_flops()


def flops_by_part(model: nn.Module, inputs: tuple) -> dict[str, int]:
    """Forward FLOPs per part: each tagged module's FLOPs go to its part, the rest to ``stacking``."""
    return _split_flops(model, *module_flops(model, inputs))[0]


def _split_flops(model: nn.Module, per_module: dict[str, int], total: int) -> tuple[dict[str, int], int]:
    """(FLOPs per part, FLOPs inside the attention kernels alone) from per-module counts."""
    owner = module_parts(model)
    tagged = {name for name, m in model.named_modules() if name and getattr(m, "zoo_part", None)}
    parts = dict.fromkeys(PARTS, 0)
    for name in tagged:
        parents = name.split(".")
        if any(".".join(parents[:i]) in tagged for i in range(1, len(parents))):
            continue  # counted with its tagged ancestor
        parts[owner[name]] += per_module.get(name, 0)
    parts["stacking"] += total - sum(parts.values())
    kernel = sum(per_module.get(n, 0) for n, m in model.named_modules() if isinstance(m, AttentionKernel))
    return parts, kernel


def snapshot(model: nn.Module, variant: Variant, config: Any, task: TaskShape) -> Snapshot:
    """Parameters, FLOPs at the task's size and module types per part of one built model."""
    inputs = variant.example_input(config, task.for_config(config))
    flops = _split_flops(model, *module_flops(model, inputs))[0]
    return Snapshot(dict(parameters_by_part(model)), flops, structure_by_part(model))


UNDECLARED = "undeclared differences"  # the attribution step from the counterpart to the variant fully reverted


def attribute_steps(variant: Variant, task: TaskShape, preset: str | None, overrides: dict[str, Any],
                    ends: tuple[Snapshot, Snapshot], reference: Counterpart | None = None) -> list[dict[str, Any]]:
    """The steps of :func:`zoo.analysis.attribution.attribute` for a variant on a task; ``ends`` are the classic
    model's and the variant's snapshots (measured already), so only the intermediate models are built.

    With ``reference`` (the counterpart ``ends[0]`` measured) built by another registration or with undeclared
    differences, the variant with every change reverted is measured too, and where it differs from the
    counterpart, that difference is the first step, :data:`UNDECLARED`, its lines all of kind ``undeclared``.
    """
    configs = cumulative_configs(variant, *measured_at(variant, task, preset, overrides))
    steps, start = [], ends[0]
    if reference is not None and (reference.differences or reference.registration.build is not variant.build):
        reverted = snapshot(variant.build(configs[0]), variant, configs[0], task)
        if reverted != start:
            steps.append(_undeclared_step(start, reverted))
            start = reverted
    if not variant.independent_changes():  # the classic base itself, or only changes without a revert
        return steps
    middle = [snapshot(variant.build(c), variant, c, task) for c in configs[1:-1]]
    return steps + attribute(variant.attribution_order(), [start, *middle, ends[1]])


def _undeclared_step(before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """The :data:`UNDECLARED` step: what differs from the counterpart with no change applied, every line undeclared.

    Measured by :func:`~zoo.analysis.attribution.attribute` through a stand-in change that names no part of its
    own, whose lines are then all relabelled ``undeclared``.
    """
    (step,) = attribute((Change("stacking", "", "", "", name=UNDECLARED),), [before, after])
    return {"change": UNDECLARED, "part": "–", "lines": [{**line, "kind": "undeclared"} for line in step["lines"]]}


def activation_bytes(model: nn.Module, inputs: tuple) -> int:
    """Bytes saved for backward during one forward (parameters and repeated storages excluded)."""
    model.train()
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(*inputs)
    out.float().sum().backward()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    model.zero_grad(set_to_none=True)
    return sum(size for ptr, size in saved.items() if ptr not in params)


def flop_profile(model: nn.Module, variant: Variant, config: Any, task: TaskShape) -> dict[str, Any]:
    """FLOPs per part at the task's size, and how attention FLOPs (whole part, and kernel alone) grow at
    1×, 2×, 4× the task's size, with the fitted exponent of the token count N.

    A 3D model grown 4× in plane sees 16× the voxels of its patch (gigabytes of activations): beyond the task's
    size it is built and run on the meta device, where the FLOP counter counts from shapes alone.
    """
    spec = task
    base = spec.for_config(config)
    by_part, attention, kernel = None, [], []
    for k in SCALES:
        shape = spec.scaled(base, k)
        inputs = variant.example_input(config, shape) if k == 1 else None
        if spec.config_keys and k > 1:  # a model built for one image size: rebuild it for this one
            config = dataclasses.replace(config, **spec.config_overrides(shape))
            on_meta = variant.spatial_dims == 3
            with torch.device("meta") if on_meta else contextlib.nullcontext():
                model = variant.build(config)
            inputs = tuple(x.to("meta") if on_meta and isinstance(x, Tensor) else x
                           for x in variant.example_input(config, shape))
        elif inputs is None:
            inputs = variant.example_input(config, shape)
        parts, kernel_k = _split_flops(model, *module_flops(model, inputs))
        by_part = by_part or parts
        attention.append(parts["attention"])
        kernel.append(kernel_k)

    token_scales = [k**spec.tokens_per_grow for k in SCALES]

    def exponent(values: list[int]) -> float | None:
        return math.log(values[-1] / values[0]) / math.log(token_scales[-1]) if values[0] else None

    growth = {"scales": token_scales, "attention_flops": attention, "attention_exponent": exponent(attention),
              "kernel_flops": kernel, "kernel_exponent": exponent(kernel)}
    return {"by_part": by_part, "growth": growth}


def _pct(new: float, old: float) -> float | None:
    return None if old == 0 else 100.0 * (new - old) / old


def _at_variant_sizes(lines: list[dict[str, Any]], params: int, flops: int) -> dict[str, Any]:
    """A part's classic → variant numbers without the lines of the changes that resize it: the classic choice
    at the variant's sizes, against the variant."""
    own = [line for line in lines if line["kind"] != "resized"]
    out = {}
    for key, variant_value in (("params", params), ("flops", flops)):
        classic = variant_value - sum(line[key]["delta"] for line in own)
        out[key] = {"classic": classic, "variant": variant_value, "delta": variant_value - classic,
                    "delta_pct": _pct(variant_value, classic)}
    return out


def measure(
    variant: str | Variant,
    task: TaskShape,
    preset: str | None = None,
    memory: bool = True,
    overrides: dict[str, Any] | None = None,
    attribution: bool = True,
) -> dict[str, Any]:
    """The full delta report of ``variant`` on a task (its :class:`TaskShape`) as a JSON-ready dict: a name, looked
    up once, or the registration a caller holds (:func:`registration_on`).

    ``overrides`` change the variant's config (and the classic counterpart's alike), e.g. the vocabulary
    size a training run really used. ``attribution=False`` skips building the intermediate models of
    :mod:`zoo.analysis.attribution` (one per change but the last), for callers that need only the totals:
    every part's ``attribution`` is then empty and its ``at_variant_sizes`` is its classic → variant difference.
    The classic side is :func:`zoo.analysis.counterpart.counterpart`: ``counterpart`` says which registration and
    preset, ``undeclared`` lists the config fields where the variant differs from it with no change declared.
    """
    variant = registration_on(variant, task)
    model, classic, config, reference = build_pair(variant, task, preset, **(overrides or {}))
    base, classic_config = reference.registration, reference.config
    spec = task
    shape = spec.for_config(config)
    structure = (structure_by_part(classic), structure_by_part(model))
    params = (parameters_by_part(classic), parameters_by_part(model))
    profiles = (flop_profile(classic, base, classic_config, task), flop_profile(model, variant, config, task))
    flops = (profiles[0]["by_part"], profiles[1]["by_part"])
    ends = (Snapshot(params[0], flops[0], structure[0]), Snapshot(params[1], flops[1], structure[1]))
    steps = attribute_steps(variant, task, preset, overrides or {}, ends, reference) if attribution else []
    lines = lines_by_part(steps)
    declared = set(variant.parts_changed)
    parts = []
    for part in PARTS:
        removed = dict(structure[0][part] - structure[1][part])
        added = dict(structure[1][part] - structure[0][part])
        status = "replaced" if removed and added else "added" if added else "removed" if removed else "same"
        # A part is changed when its modules or parameters differ. FLOPs alone can also move because
        # another change altered the token count (ViT's [CLS] token adds one token to every attention):
        # such a part is shown, marked "flops_only", but not counted as changed.
        changed = status != "same" or params[0][part] != params[1][part]
        flops_only = not changed and flops[0][part] != flops[1][part]
        reached_by = [c.name for c in variant.changes if part in c.parts and part != c.part]
        if not (changed or flops_only) and part not in declared and not reached_by:
            continue
        parts.append({
            "part": part,
            "declared": part in declared,
            "reached_by": reached_by,
            "measured_change": changed,
            # a declared change of a procedure (the training objective, decoding) that builds no module: its
            # effect is measured by training (zoo ablate), not by this structural diff
            "procedure_only": part in declared and part in PROCEDURES and not (changed or flops_only),
            "flops_only": flops_only,
            "structure": status,
            "removed": removed,
            "added": added,
            "params": {"classic": params[0][part], "variant": params[1][part],
                       "delta": params[1][part] - params[0][part], "delta_pct": _pct(params[1][part], params[0][part])},
            "flops": {"classic": flops[0][part], "variant": flops[1][part],
                      "delta": flops[1][part] - flops[0][part], "delta_pct": _pct(flops[1][part], flops[0][part])},
            "attribution": lines[part],
            "at_variant_sizes": _at_variant_sizes(lines[part], params[1][part], flops[1][part]),
        })
    totals = {
        "params": {"classic": sum(params[0].values()), "variant": sum(params[1].values())},
        "active_params": {"classic": active_parameters(classic), "variant": active_parameters(model)},
        "flops": {"classic": sum(flops[0].values()), "variant": sum(flops[1].values())},
    }
    report: dict[str, Any] = {
        "schema": 2,
        "variant": variant.name,
        "task": task.name,
        "preset": reference.preset,
        "counterpart": {"base": reference.base.name if reference.base else None, "preset": reference.preset,
                        "reference_sizes": reference.sized, "note": reference.note},
        "undeclared": [difference.to_dict() for difference in reference.differences],
        "input": {**shape, "description": spec.description},
        "paper": {"title": variant.paper.title, "year": variant.paper.year, "url": variant.paper.url},
        "summary": variant.summary,
        "changes": [{"name": c.name, "part": c.part, "classic": c.classic, "variant": c.variant, "flaw": c.flaw,
                     "scope": c.scope, "resizes": dict(c.resizes), "also_in": dict(c.also_in),
                     "no_revert": c.no_revert}
                    for c in variant.changes],
        "parts": parts,
        "totals": totals,
        "attribution": {"method": METHOD, "order": [step["change"] for step in steps],
                        "changes": change_totals(steps)},
        "attention_growth": {"classic": profiles[0]["growth"], "variant": profiles[1]["growth"]},
        "conventions": {"flops": FLOP_CONVENTION, "memory": MEMORY_CONVENTION},
    }
    if memory:  # each model on inputs of its own config (an undeclared vocabulary may differ)
        report["activation_bytes"] = {
            "classic": activation_bytes(classic, base.example_input(classic_config, spec.for_config(classic_config))),
            "variant": activation_bytes(model, variant.example_input(config, shape))}
    return report
