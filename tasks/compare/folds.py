"""Cross-validation as the protocol of a comparison: ``zoo compare TASK --folds K [--data DIR ...]``.

"nnU-Net Revisited" (Isensee et al., MICCAI 2024) asks of every "X beats the CNN" claim: the same folds for every
method, each case predicted once by the fold that did not train on it, several datasets, cost beside accuracy. So:

- the task draws the folds once per dataset (its ``plan_folds`` hook, for the tasks that override
  :meth:`~tasks.engine.task.Task.cross_validate`: medseg draws nnU-Net's ``splits_final.json`` as ``zoo cv``
  does) and every variant's fold ``k`` trains on that file's fold ``k``;
- every run of every variant, seed, fold and dataset is one sweep (:func:`tasks.sweeps.driver.run_sweep`: any
  launcher; a rerun reuses what finished and resumes what stopped);
- a variant's *pooled* result is its K fold runs' validation records together (:func:`pooled_result`): each
  training case exactly once, scored by the fold that held it out. The variants are paired case by case on that
  union with the statistics of an ordinary comparison (:func:`tasks.compare.sweep.build_comparison`,
  :mod:`tasks.compare.paired`); the mean over folds of each fold's own score is reported beside it, as nnU-Net's
  cross-validation summary gives it;
- peak memory and the training time of all folds are columns beside the metric;
- with two datasets or more, one table per dataset and the cross-dataset statistics of ``zoo study``
  (:func:`tasks.compare.meta.meta_analysis` ``across="dataset"``: one cell per dataset of the one task, the scope
  and the signs read across the datasets) for each variant against the baseline.

Nothing here names a task: the folds come from the task's hook, the records from the runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from plumbing.atomic import write_json_atomic, write_text_atomic
from plumbing.errors import check_int
from plumbing.tables import markdown_table
from tasks.compare.meta import Cell, meta_analysis, rule_text, signs_text
from tasks.compare.paired import example_ids, run_score
from tasks.compare.run_results import RunResult, read_result
from tasks.engine.config import check_folder
from tasks.engine.paired_metric import PairedMetric
from tasks.engine.registry import task_class, tasks_with
from tasks.runs.records import _plain
from tasks.sweeps.driver import run_sweep
from tasks.sweeps.launchers import Launch
from tasks.sweeps.plan import RunSpec, slug

EMBEDDED = "embedded"  # a --data value meaning the task's embedded data (embedded:NAME: its `dataset` NAME)


@dataclass(frozen=True)
class Dataset:
    """One dataset of a cross-validated comparison: its label in the tables and the config fields that select it."""

    label: str
    fields: dict[str, Any]


def check_folds(task_name: str, folds: object) -> type:
    """The task's runner class when ``--folds folds`` can be asked of it.

    Raises:
        ValueError: the task has no cross-validation, or fewer than two folds. TypeError: not an int.
    """
    cls = task_class(task_name)
    if task_name not in tasks_with("cross_validate") or not hasattr(cls, "plan_folds"):
        having = [n for n in tasks_with("cross_validate") if hasattr(task_class(n), "plan_folds")]
        raise ValueError(f"--folds {folds}: task {task_name!r} has no cross-validation (tasks with folds: "
                         f"{', '.join(having) or 'none'}); drop --folds to compare on its own test split")
    check_int("--folds", folds, 2, hint="a cross-validation needs at least two folds; drop --folds for none")
    return cls


def datasets(cls: type, data: str | list[str] | None) -> list[Dataset]:
    """The datasets ``--data`` names: each a folder, ``embedded`` (the task's embedded data) or ``embedded:NAME``
    (the embedded data the task's ``dataset`` field calls NAME, e.g. medseg's ``phantom-nifti``); none: the
    config's own data. Labels are the folders' names (numbered where two are alike).

    Raises:
        FileNotFoundError: a folder that does not exist. ValueError: a file; ``embedded:NAME`` for a task whose
            config has no ``dataset`` field.
    """
    items = [data] if isinstance(data, str) else list(data or [None])
    fields = {f for f in cls.config_class.__dataclass_fields__}
    found: list[Dataset] = []
    for item in items:
        if item is None:
            found.append(Dataset(EMBEDDED, {}))
        elif item == EMBEDDED or item.startswith(EMBEDDED + ":"):
            name = item.partition(":")[2]
            if name and "dataset" not in fields:
                raise ValueError(f"--data {item}: task {cls.name!r} has one embedded dataset; pass --data {EMBEDDED}")
            found.append(Dataset(name or EMBEDDED, {"data": None, **({"dataset": name} if name else {})}))
        else:
            check_folder("--data", Path(item), f"a dataset folder, or {EMBEDDED} for the task's embedded data")
            if not Path(item).exists():
                raise FileNotFoundError(f"--data {item} does not exist; pass a dataset folder, or {EMBEDDED} for "
                                        "the task's embedded data")
            found.append(Dataset(Path(item).resolve().name, {"data": str(Path(item).resolve())}))
    labels = [d.label for d in found]
    return [replace(d, label=f"{d.label}-{labels[:i + 1].count(d.label)}") if labels.count(d.label) > 1 else d
            for i, d in enumerate(found)]


def validation_split(result: RunResult) -> str:
    """The split a fold run scored its held-out cases on: ``valid``, or ``test`` where the data has no test split
    of its own and the fold's validation cases are its test split."""
    return "valid" if "valid" in result.splits() else "test"


def pooled_result(folds: list[RunResult], splits_file: Path) -> RunResult:
    """One seed of a variant over its K fold runs (fold order): every fold's validation records together, each
    case once, as one :class:`RunResult` whose records (every split a metric may ask for) are that union sorted by
    case; its training summary sums the folds' training time and keeps their largest peak memory.

    Raises:
        ValueError: a case scored by two folds, or the union is not the held-out cases of ``splits_file``.
    """
    records, hashes = [], []
    for result in folds:
        scored, data_hash = result.records(validation_split(result))
        records += scored
        hashes.append(data_hash)
    ids = example_ids(records)
    twice = sorted({str(i) for i in ids if ids.count(i) > 1})
    held = sorted(c for fold in json.loads(splits_file.read_text()) for c in fold["val"])
    if twice or sorted(map(str, ids)) != held:
        raise ValueError(f"the folds of {folds[0].path.parent} do not predict each case of {splits_file} once "
                         f"(scored twice: {twice[:5]}; {len(ids)} records for {len(held)} held-out cases): retrain "
                         "them with that split file")
    order = sorted(range(len(ids)), key=lambda i: str(ids[i]))
    union = ([records[i] for i in order], hashlib.sha256("|".join(hashes).encode()).hexdigest())
    first = folds[0]
    trained = [r.training for r in folds if r.training]
    training = None if not trained else {
        **trained[0], "train_seconds": sum(t["train_seconds"] for t in trained),
        "items_per_s": statistics.fmean(t["items_per_s"] for t in trained),
        "peak_memory": max((t.get("peak_memory") or {} for t in trained), key=lambda p: p.get("mb", -1.0))}
    return RunResult(first.path, first.run_path, first.info, training, {s: union for s in ("test", "valid")})


def fold_scores(metric: PairedMetric, seeds: list[list[RunResult]]) -> dict[str, Any]:
    """Each fold's own ``metric`` on its validation cases (mean over the seeds), and their mean and sample SD over
    the folds: nnU-Net's "mean over folds", beside the pooled per-case figure. ``seeds``: per seed, its K runs."""
    values = []
    for k in range(len(seeds[0])):
        per_seed = []
        for runs in seeds:
            records = runs[k].records(validation_split(runs[k]))[0]
            per_seed.append(run_score(metric, metric.stats(records, runs[k].info)))
        values.append(statistics.fmean(per_seed))
    kept = [v for v in values if math.isfinite(v)]
    return {"values": values, "mean": statistics.fmean(kept) if kept else None,
            "sd": statistics.stdev(kept) if len(kept) > 1 else None}


def case_values(metric: PairedMetric, runs: list[RunResult]) -> np.ndarray:
    """Per case, ``metric``'s value averaged over the seeds' pooled results ``runs`` (NaN: no seed scored it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a case no seed scored stays NaN
        return np.nanmean([metric.value(metric.stats(r.records("test")[0], r.info)) for r in runs], axis=0)


def dataset_cell(task_name: str, label: str, preset: str, metric: PairedMetric, variant: list[RunResult],
                 baseline: list[RunResult]) -> Cell:
    """A dataset as a cell of :func:`~tasks.compare.meta.meta_analysis`: the per-case differences variant −
    baseline (seed-averaged; oriented so that positive is better), and the noise floor from the baseline's seeds
    paired two by two (seed 0 − seed 1, seed 2 − seed 3, ...: per case, a difference of two independent baseline
    runs), the unit of both being one case. The cell is (``task_name``, ``label``, ``preset``): the meta-analysis
    groups it by its dataset (``across="dataset"``)."""
    sign = 1.0 if metric.higher_is_better else -1.0
    differences = sign * (case_values(metric, variant) - case_values(metric, baseline))
    noise = np.concatenate([case_values(metric, baseline[i:i + 1]) - case_values(metric, baseline[i + 1:i + 2])
                            for i in range(0, len(baseline) - 1, 2)])
    return Cell(task_name, label, preset, tuple(differences[np.isfinite(differences)]),
                tuple(noise[np.isfinite(noise)]))


def across_datasets(task_name: str, preset: str, metric: PairedMetric, pooled: dict[str, dict[str, list[RunResult]]],
                    reference: str, alpha: float) -> dict[str, Any]:
    """For each variant but ``reference``, the random-effects meta-analysis over the datasets (cells) of ``pooled``
    (dataset → label → its seeds' pooled results), its scope and signs across the datasets, or why there is none
    (fewer than two baseline seeds; a cell without spread)."""
    out: dict[str, Any] = {}
    seeds = min(len(runs) for groups in pooled.values() for runs in groups.values())
    for label in next(iter(pooled.values())):
        if label == reference:
            continue
        if seeds < 2:
            out[label] = {"why": f"needs --seeds 2 or more: the noise floor is baseline vs baseline with another "
                                 f"seed (got {seeds})"}
            continue
        try:
            cells = [dataset_cell(task_name, name, preset, metric, groups[label], groups[reference])
                     for name, groups in pooled.items()]
            study = meta_analysis(cells, alpha=alpha, across="dataset")
        except ValueError as error:
            out[label] = {"why": str(error)}
            continue
        p = study.pooled
        out[label] = {"pooled_effect": p.estimate, "interval": list(p.interval), "se": p.se, "tau2": p.tau2,
                      "i2": p.i2, "q_p": p.q_p, "method": p.method, "scope": study.scope.scope,
                      "reason": study.scope.reason, "signs": study.by_dataset.signs,
                      "agreeing": study.by_dataset.agreeing,
                      "cells": {e.cell.dataset: {"effect": e.effect, "mean_difference": e.mean_difference,
                                                 "p_holm": e.p_holm} for e in study.cells}}
    return out


def compare_folds(task_name: str, entries: list, baseline: str, out: Path, folds: int, seeds: int, budget: str,
                  alpha: float, launch: Launch, sweep: dict[str, Any], data: str | list[str] | None = None, *,
                  run_specs: Callable[..., list[RunSpec]], build_comparison: Callable[..., dict[str, Any]],
                  **config: Any) -> dict[str, Any]:
    """Train every entry's ``folds`` folds ``seeds`` times on each dataset of ``data`` as one sweep in ``out``
    and compare the entries with ``baseline`` case by case over the union of the folds (see the module
    docstring). ``entries``, ``budget`` and ``sweep`` as :func:`tasks.compare.sweep.compare` resolved them;
    ``run_specs`` and ``build_comparison`` are that module's, handed in by it (this module sits below it: an
    import of it here would close a circle).

    Returns:
        One dataset: its comparison (:func:`tasks.compare.sweep.build_comparison`, written to ``out``). Several:
        ``{"datasets": label → comparison (written to out/<label>/), "across_datasets": variant → pooled effect,
        "table": every dataset's table}``, written to ``out/results.json`` and ``out/report.md``.
    """
    cls = check_folds(task_name, folds)  # also checked by compare() before anything else; cheap
    check_folder("--out", out, "a folder for the runs and the report")
    sets = datasets(cls, data)
    several = len(sets) > 1
    plans, specs = {}, []
    for d in sets:  # every dataset's folds drawn before any training: a bad --folds fails here
        fields = {**config, **d.fields, "folds": folds}
        folder = out / slug(d.label) if several else out
        splits = cls.plan_folds(cls.config_class(**fields), folder).resolve()
        plans[d.label] = (folder, splits, [])
        for k in range(folds):
            batch = run_specs(task_name, entries, seeds, budget, **fields, fold=str(k), splits=str(splits))
            specs += batch
            plans[d.label][2].append(batch)
    folders = run_sweep(specs, out, launch, sweep)
    comparisons, pooled = {}, {}
    for d in sets:
        folder, splits, batches = plans[d.label]
        runs = {e.label: [[read_result(folders[batch[i * seeds + s].name]) for batch in batches]
                          for s in range(seeds)] for i, e in enumerate(entries)}  # label → seed → fold
        pooled[d.label] = {label: [pooled_result(fold_runs, splits) for fold_runs in per_seed]
                           for label, per_seed in runs.items()}
        metrics = task_class(task_name).paired_metrics(pooled[d.label][baseline][0].info)
        extra = {label: {"over_folds": {m.key: fold_scores(m, per_seed) for m in metrics if m.role != "per-class"}}
                 for label, per_seed in runs.items()}
        scored_on = (f"the {folds} folds' validation cases together ({dataset_text(d)}; each case once, predicted "
                     f"by the fold that did not train on it; folds: {splits})")
        comparisons[d.label] = build_comparison(
            task_name, pooled[d.label], baseline, folder, alpha=alpha, launch=None if several else launch,
            title=f"zoo compare {task_name} --folds {folds}" + (f" on {d.label}" if several else ""),
            scored_on=scored_on, extra=extra)
    if not several:
        return comparisons[sets[0].label]
    headline = task_class(task_name).paired_metrics(pooled[sets[0].label][baseline][0].info)[0]
    meta = across_datasets(task_name, config.get("preset") or "default", headline, pooled, baseline, alpha)
    result = {"title": f"zoo compare {task_name} --folds {folds} on {len(sets)} datasets", "folds": folds,
              "datasets": {label: {k: v for k, v in c.items() if k != "table"} for label, c in comparisons.items()},
              "across_datasets": meta}
    lines = report_lines(result, comparisons, headline, alpha)
    write_json_atomic(out / "results.json", _plain(result))
    write_text_atomic(out / "report.md", "\n".join(lines) + "\n")
    return {**result, "table": "\n".join(lines)}


def dataset_text(d: Dataset) -> str:
    """Where a dataset's runs read their data, for the report."""
    if d.fields.get("data"):
        return f"--data {d.fields['data']}"
    return "the task's embedded data" + (f" ({d.fields['dataset']})" if d.fields.get("dataset") else "")


def report_lines(result: dict[str, Any], comparisons: dict[str, dict[str, Any]], headline: PairedMetric,
                 alpha: float) -> list[str]:
    """``report.md`` of a comparison over several datasets: each dataset's table, then the pooled effects."""
    lines = [f"# {result['title']}", ""]
    for label, comparison in comparisons.items():
        lines += [f"## {label}", "", comparison["preamble"], "", comparison["table"], "",
                  f"Details: [{slug(label)}/report.md]({slug(label)}/report.md)", ""]
    lines += ["## Across datasets", "",
              f"Each variant against the baseline on {headline.title}, one cell per dataset: the per-case differences "
              "(seed-averaged, positive = better) standardised by the baseline's seed-to-seed SD per case (its seeds "
              "paired two by two), pooled by a random-effects meta-analysis (`zoo study`'s statistics, "
              f"tasks.compare.meta; intervals at {100 * (1 - alpha):g} %).", ""]
    rows, scopes = [], []
    for label, m in result["across_datasets"].items():
        if "why" in m:
            rows.append({"variant": label, "pooled effect [CI]": "–", "I²": "–", "τ²": "–", "scope": m["why"]})
            continue
        scopes.append(f"- {label}: **{m['scope']}** across datasets: {m['reason']}. Signs by dataset: "
                      f"{signs_text(m['signs'])} ({m['agreeing']} of {len(m['signs'])} agree with the pooled sign).")
        cells = "; ".join(f"{name} {c['effect']:+.3g} (p Holm {c['p_holm']:.2g})" for name, c in m["cells"].items())
        rows.append({"variant": label,
                     "pooled effect [CI]": f"{m['pooled_effect']:+.3g} [{m['interval'][0]:+.3g}, "
                                           f"{m['interval'][1]:+.3g}]",
                     "I²": f"{100 * m['i2']:.0f} %", "τ²": f"{m['tau2']:.3g}", "scope": m["scope"], "cells": cells})
    lines += [markdown_table(rows), ""]
    if scopes:
        lines += [*scopes, "", f"The scope's rule, across datasets: {rule_text(alpha, across='dataset')}", ""]
    return lines
