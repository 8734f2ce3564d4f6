"""Which change caused which difference: the changes applied in turn, each measured at the sizes set before it.

The classic model and a variant differ in many parts at once, and one change can move the numbers of a
part it does not replace: Swin's hierarchy widens every stage, so its attention and FFN have ~6× the
classic model's parameters although window attention has exactly the projections of global attention.
To book each difference to its cause, the variant's changes are applied to the classic model one at a
time, in :meth:`~zoo.registry.Variant.attribution_order` (a change that resizes a part comes before the
changes of that part, so those are measured at the variant's sizes), and every intermediate model is
built and measured. Step k's difference in each part is booked to change k as one *line* of a kind:

* ``own``: in the change's own part;
* ``resized``: in a part the change lists in ``resizes`` (a size: widths, a token or table count);
* ``also_in``: in a part the change lists in ``also_in`` (modules of that part it replaces too);
* ``tokens``: FLOPs alone, in a part the change does not name (it changed how many tokens the part sees);
* ``undeclared``: parameters or module types in a part the change does not name: the story misses it
  (``tests/zoo/analysis/test_delta_attribution.py`` refuses it).

Every number is the measured difference of two built models, and a part's lines sum exactly to its
classic → variant difference. What two changes do only together is booked to the later one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from core.parts import PARTS
from zoo.registry import Change, Variant

KINDS = ("own", "resized", "also_in", "tokens", "undeclared")
METHOD = (
    "the changes applied to the classic model one at a time, a change that resizes other parts before the changes "
    "of those parts; each line is the measured difference of two built models, booked to the change applied "
    "between them; a part's lines sum to its classic → variant difference"
)


@dataclass(frozen=True)
class Snapshot:
    """One built model's numbers per part: parameters, forward FLOPs at the task's size, module types."""

    params: dict[str, int]
    flops: dict[str, int]
    structure: dict[str, Counter]


def cumulative_configs(variant: Variant, preset: str | None, overrides: dict[str, Any]) -> list[Any]:
    """The configs of the classic model, then with the first 1, 2, ... changes of the attribution order applied.

    The first is the classic counterpart (every change reverted), the last the variant itself.
    """
    order = variant.attribution_order()
    configs = []
    for applied in range(len(order) + 1):
        reverts: dict[str, Any] = {}
        for change in order[applied:]:
            reverts.update(change.revert)
        configs.append(variant.config(preset, **{**overrides, **reverts}))
    return configs


def _pct(new: float, old: float) -> float | None:
    return None if old == 0 else 100.0 * (new - old) / old


def _numbers(before: int, after: int) -> dict[str, Any]:
    return {"before": before, "after": after, "delta": after - before, "delta_pct": _pct(after, before)}


def _kind(change: Change, part: str, structural: bool) -> str:
    if part == change.part:
        return "own"
    if part in change.resizes:
        return "resized"
    if part in change.also_in:
        return "also_in"
    return "undeclared" if structural else "tokens"


def attribute(order: tuple[Change, ...], snapshots: list[Snapshot]) -> list[dict[str, Any]]:
    """One step per change of ``order``: the lines of every part whose numbers the change moved.

    ``snapshots`` are the models of :func:`cumulative_configs`, measured (one more than ``order``).
    """
    if len(snapshots) != len(order) + 1:
        raise ValueError(f"attribute needs one snapshot more than changes, got {len(snapshots)} for {len(order)}")
    steps = []
    for change, before, after in zip(order, snapshots, snapshots[1:]):
        lines = []
        for part in PARTS:
            removed = dict(before.structure[part] - after.structure[part])
            added = dict(after.structure[part] - before.structure[part])
            structural = bool(removed or added) or before.params[part] != after.params[part]
            if not structural and before.flops[part] == after.flops[part]:
                continue
            status = "replaced" if removed and added else "added" if added else "removed" if removed else "same"
            lines.append({
                "part": part,
                "kind": _kind(change, part, structural),
                "structure": status,
                "removed": removed,
                "added": added,
                "params": _numbers(before.params[part], after.params[part]),
                "flops": _numbers(before.flops[part], after.flops[part]),
            })
        steps.append({"change": change.name, "part": change.part, "lines": lines})
    return steps


def lines_by_part(steps: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each part's lines over all steps, in the order applied, each naming its change."""
    out: dict[str, list[dict[str, Any]]] = {p: [] for p in PARTS}
    for step in steps:
        for line in step["lines"]:
            out[line["part"]].append({"change": step["change"], **line})
    return out


def change_totals(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per change: Δ parameters and Δ FLOPs in its own part, in each other part it moved, and in all."""
    rows = []
    for step in steps:
        own = [line for line in step["lines"] if line["kind"] == "own"]
        others = [line for line in step["lines"] if line["kind"] != "own"]
        rows.append({
            "change": step["change"],
            "part": step["part"],
            "params": {"total": sum(line["params"]["delta"] for line in step["lines"]),
                       "own": sum(line["params"]["delta"] for line in own),
                       "other": {line["part"]: line["params"]["delta"] for line in others}},
            "flops": {"total": sum(line["flops"]["delta"] for line in step["lines"]),
                      "own": sum(line["flops"]["delta"] for line in own),
                      "other": {line["part"]: line["flops"]["delta"] for line in others}},
            "kinds": {line["part"]: line["kind"] for line in others},
        })
    return rows
