"""Same budget, one table: ``zoo compare`` and ``zoo ablate``.

``compare`` trains several variants on one task with the same data, epochs and seeds, and tabulates what
changed, parameters, FLOPs, the task metric (mean ± spread over seeds), Δ vs the task's baseline,
throughput and wall time, with a plot of metric vs cost. ``ablate`` does the same for one variant and,
for each of its declared changes, the variant with only that change reverted to the classic choice —
which change bought how much.
"""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import zoo
from core.errors import check_positive
from tasks.config import check_folder
from tasks.registry import task_class
from tasks.report import markdown_table
from zoo.delta import measure

log = logging.getLogger(__name__)


@dataclass
class Entry:
    """One row of a comparison: a variant, optionally with config overrides (an ablation)."""

    label: str
    variant: str
    model: dict[str, Any] = field(default_factory=dict)
    parts: str = ""


def _headline(task_class, summary: dict[str, Any], split: str, metric: str) -> float | None:
    value = summary["final"].get(split, {}).get(metric)
    return float(value) if value is not None else None


def _spread(values: list[float]) -> tuple[float | None, float | None]:
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def run_entries(task_name: str, entries: list[Entry], out: Path, seeds: int, **config: Any) -> list[dict]:
    """Train every entry ``seeds`` times with the same settings; return one result row per entry."""
    from tasks.trainer import Trainer

    check_positive("seeds", seeds)
    check_folder("--out", out, "a folder for the runs and the report")
    cls = task_class(task_name)
    split, metric = cls.headline
    rows = []
    for entry in entries:
        runs = []
        for seed in range(seeds):
            run_config = cls.config_class(**{**config, "variant": entry.variant, "seed": seed,
                                             "model": {**config.get("model", {}), **entry.model},
                                             "out": str(out / f"{entry.label}-seed{seed}")})
            run_config.check_paths()
            log.info("== %s, seed %d ==", entry.label, seed)
            trainer = Trainer(cls, run_config)
            runs.append((trainer, trainer.fit()))
        trainer, summary = runs[0]
        parts, flops = _parts_and_flops(entry, task_name, trainer)
        mean, spread = _spread([_headline(cls, s, split, metric) for _, s in runs])
        row = {
            "variant": entry.label,
            "parts changed": parts,
            "params": summary["parameters"],
            "GFLOPs": flops / 1e9,
            metric: mean,
            "±": spread,
            "items/s": statistics.fmean(s["items_per_s"] for _, s in runs),
            "wall s": statistics.fmean(s["train_seconds"] for _, s in runs),
        }
        for extra_split, extra_metric, title in cls.extra_columns:
            row[title] = _spread([_headline(cls, s, extra_split, extra_metric) for _, s in runs])[0]
        rows.append(row)
    return rows


def _parts_and_flops(entry: Entry, task_name: str, trainer) -> tuple[str, int]:
    """What the entry changed, and its forward FLOPs at the task's input size."""
    if entry.variant in getattr(trainer.task, "reference_models", ()):  # e.g. the CNN row of the cifar task
        from zoo.delta import TASK_SHAPES, module_flops

        spec = TASK_SHAPES[task_name]
        shape = {**spec.shape, **trainer.task.delta_overrides()}
        inputs = (torch.zeros(1, shape["in_channels"], shape["image_size"], shape["image_size"]),)
        return "(reference model, not a patch)", module_flops(trainer.model.cpu(), inputs)[1]
    delta = measure(entry.variant, task_name, trainer.config.preset, memory=False,
                    overrides=trainer.task.delta_overrides())
    parts = entry.parts or ", ".join(zoo.get_variant(entry.variant, task_name).parts_changed) or "(base)"
    return parts, delta["totals"]["flops"]["variant"]


def add_deltas(rows: list[dict], metric: str, baseline_label: str) -> None:
    """Add "Δ vs <baseline>" to every row (in the metric's units)."""
    base = next((r[metric] for r in rows if r["variant"] == baseline_label), None)
    for row in rows:
        row[f"Δ vs {baseline_label}"] = None if base is None or row[metric] is None else row[metric] - base


def plot_metric_vs_cost(rows: list[dict], metric: str, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for row in rows:
        if row[metric] is None:
            continue
        ax.errorbar(row["GFLOPs"], row[metric], yerr=row["±"] or 0, fmt="o", capsize=3)
        ax.annotate(row["variant"], (row["GFLOPs"], row[metric]), textcoords="offset points", xytext=(5, 5))
    ax.set(xlabel="forward GFLOPs at the task's input size", ylabel=metric, title=title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(rows: list[dict], out: Path, metric: str, title: str, preamble: str = "") -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    plot_metric_vs_cost(rows, metric, out / "metric_vs_cost.png", title)
    table = markdown_table(rows)
    (out / "report.md").write_text(f"# {title}\n\n{preamble}\n\n{table}\n\n![metric vs cost](metric_vs_cost.png)\n")
    return table


def compare(task_name: str, variants: list[str] | None, out: Path, seeds: int = 1, **config: Any) -> list[dict]:
    cls = task_class(task_name)
    names = variants or [*zoo.list_variants(task_name), *getattr(cls, "reference_models", ())]
    for name in names:
        if name not in getattr(cls, "reference_models", ()):
            zoo.get_variant(name, task_name)  # a clear error before any training starts
    rows = run_entries(task_name, [Entry(n, n) for n in names], out, seeds, **config)
    metric = cls.headline[1]
    add_deltas(rows, metric, cls.baseline)
    budget = ", ".join(f"{k}={v}" for k, v in config.items())
    write_outputs(rows, out, metric, f"zoo compare {task_name}",
                  f"Same budget for every variant ({budget}; {seeds} seed(s)). Metric: {cls.headline[0]} {metric}.")
    return rows


def ablate(variant_name: str, task_name: str, out: Path, seeds: int = 1, **config: Any) -> list[dict]:
    """Train the variant and, for each declared change, the variant with that one change reverted."""
    cls = task_class(task_name)
    variant = zoo.get_variant(variant_name, task_name)
    if not variant.changes:
        raise ValueError(f"variant {variant_name!r} declares no changes: nothing to ablate")
    entries = [Entry(variant_name, variant_name)]
    for change in variant.changes:
        entries.append(Entry(f"without {change.part}", variant_name, dict(change.revert),
                             parts=f"{change.part} reverted to classic"))
    rows = run_entries(task_name, entries, out, seeds, **config)
    metric = cls.headline[1]
    add_deltas(rows, metric, variant_name)
    for row in rows[1:]:  # what the change bought = full variant − variant without it
        delta = row[f"Δ vs {variant_name}"]
        row["bought by the change"] = None if delta is None else -delta
    write_outputs(rows, out, metric, f"zoo ablate {variant_name} on {task_name}",
                  "Leave-one-out: each row reverts one declared change to the classic choice, same budget.")
    return rows
