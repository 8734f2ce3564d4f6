"""``zoo study``: is a change general, or specific to its task? One change across tasks, datasets and scales.

:func:`run_study` plans every cell (:mod:`tasks.study.grid`) and run (:mod:`tasks.study.plan`), trains them as one
sweep in ``out`` (:func:`tasks.sweeps.driver.run_sweep`: any launcher, finished runs reused, interrupted ones
resumed, so the same command resumes a study), and reads each cell three ways:

* **the task's paired test**: the change's side against the classic side, same seeds, paired on the test examples
  (:func:`tasks.compare.paired.paired_statistics`, the test ``zoo compare`` reports: Δ, its interval, p, verdict);
* **per seed**: each seed's test metric, oriented so that positive means better (a loss is negated), gives the
  differences ``new − classic`` and the noise floor ``classic(K+i) − classic(i)`` of a :class:`tasks.compare.meta.Cell`;
* **across cells**: :func:`tasks.compare.meta.meta_analysis`: each cell's standardised effect and Holm-corrected
  test, the random-effects pooled effect with τ² and I², the sign consistency across tasks and presets, and the
  measured scope beside the change's declared one.

With ``tune`` the learning rate of each side is chosen per cell on validation (:mod:`tasks.study.tune`) and the
verdict is given twice, at the shared rate and at the tuned ones, with whether tuning changed it. The report
(:mod:`tasks.study.report`) counts every run the study trained, the tuning runs included.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from plumbing.atomic import write_json_atomic
from plumbing.errors import check_int, unknown_name
from tasks.compare.meta import METHODS, Cell, Scope, meta_analysis
from tasks.compare.paired import paired_statistics, task_metrics
from tasks.compare.run_results import read_result
from tasks.compare.stats import check_alpha
from tasks.compare.sweep import resolve_budget
from tasks.engine.config import check_folder
from tasks.engine.registry import task_class
from tasks.study.grid import STUDY_EPOCHS, STUDY_SETTINGS, study_cells
from tasks.study.plan import Pairing, Regime, pairings, regime_runs, unique
from tasks.study.tune import Choice, choose, parse_tune, tuning_runs, validation_hash
from tasks.sweeps.driver import run_sweep
from tasks.sweeps.launchers import Launch
from tasks.sweeps.plan import RunSpec
from tasks.sweeps.state import SWEEP_FILE
from zoo.changes import get_change

log = logging.getLogger(__name__)

STUDY_FILE = "study.json"
STUDY_OWNS = ("task", "variant", "preset", "seed", "lr", "model", "out", "resume")  # fields --set cannot give
MIN_SEEDS = 2  # a cell's noise floor and paired t test need two seeds a side


def task_budgets(tasks: Sequence[str], budget: str | None) -> dict[str, tuple[str, int]]:
    """Each task's ``(budget text, epochs)``: ``budget`` for every task, else the task's study default epochs."""
    found = {}
    for task in tasks:
        cls = task_class(task)
        found[task] = resolve_budget(cls, budget, None if budget else STUDY_EPOCHS[task])
    return found


def task_settings(settings: dict[str, Any], tasks: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each task's share of ``--set``: ``KEY=VALUE`` for every task, ``TASK.KEY=VALUE`` for one
    (``translation.n_train``), each checked against the task's config fields (an unknown one is an error)."""
    found: dict[str, dict[str, Any]] = {task: {"progress": False, **STUDY_SETTINGS.get(task, {})} for task in tasks}
    for key, value in settings.items():
        task, _, name = key.rpartition(".")
        if task and task not in found:
            raise ValueError(f"--set {key}={value!r}: {task!r} is not one of the study's tasks ({', '.join(tasks)})")
        for t in [task] if task else tasks:
            if name in STUDY_OWNS:
                raise ValueError(f"--set {key}: the study sets {name} itself (the cell's model and preset, the seeds, "
                                 "the learning rates, the run folders); use --model-set for model fields, --tune for "
                                 "learning rates")
            known = {f.name for f in fields(task_class(t).config_class)}
            if name not in known:
                raise unknown_name(f"{t} config field (--set {key})", name, known)
            found[t][name] = value
    return found


def _oriented(value: float, higher_is_better: bool) -> float:
    return value if higher_is_better else -value


def read_cell(pairing: Pairing, runs: dict[str, list[RunSpec]], folders: dict[str, Path], alpha: float
              ) -> tuple[Cell, dict[str, Any]]:
    """A pairing's :class:`~tasks.compare.meta.Cell` (oriented per-seed differences and noise floor) and its row:
    the task's paired test of the new side against the classic one, and each side's per-seed values."""
    results = {role: [read_result(folders[s.name]) for s in specs] for role, specs in runs.items()}
    first = results["classic"][0]
    splits = set.intersection(*(r.splits() for group in results.values() for r in group))
    metric = task_metrics(first.task, first.info, splits)[0]
    stats = {role: [(r.records(metric.split)[1], metric.stats(r.records(metric.split)[0], r.info)) for r in group]
             for role, group in results.items()}
    paired = paired_statistics(metric, stats, [("new", "new", "classic")], alpha)
    values = {role: [_oriented(v, metric.higher_is_better) for v in paired[role]["per_seed"]] for role in runs}
    cell = Cell(pairing.cell.task, pairing.cell.dataset, pairing.cell.preset,
                tuple(n - c for n, c in zip(values["new"], values["classic"], strict=True)),
                tuple(n - c for n, c in zip(values["noise"], values["classic"], strict=True)))
    test = paired["new"]
    row = {"cell": pairing.cell.label, "metric": metric.key, "metric_title": metric.title,
           "higher_is_better": metric.higher_is_better,
           "classic": {"label": pairing.classic.label, "mean": paired["classic"]["mean"],
                       "per_seed": paired["classic"]["per_seed"], "lr": float(runs["classic"][0].config["lr"])},
           "new": {"label": pairing.new.label, "mean": paired["new"]["mean"], "per_seed": paired["new"]["per_seed"],
                   "lr": float(runs["new"][0].config["lr"])},
           "noise": {"per_seed": paired["noise"]["per_seed"]},
           "paired_test": {k: test.get(k) for k in ("delta", "delta_ci95", "p_value", "verdict", "test",
                                                    "seed_delta_ci95", "seed_p_value", "seed_verdict")},
           "runs": {role: [s.name for s in specs] for role, specs in runs.items()}}
    return cell, row


def analyse(change: str, cells: list[Cell], rows: list[dict[str, Any]], proposed: Sequence[str], method: str,
            alpha: float) -> dict[str, Any]:
    """One change in one regime across its cells: the meta-analysis, or why it cannot be run (fewer than two tasks
    reached)."""
    tasks = sorted({c.task for c in cells})
    if len(tasks) < 2:
        scope = Scope("not measured", f"the change reached {len(tasks)} task(s) ({', '.join(tasks) or 'none'}); "
                      "general against task-specific needs cells of at least 2 tasks")
        return {"change": change, "cells": rows, "scope": asdict(scope), "study": None}
    study = meta_analysis(cells, [t for t in proposed if t in tasks], method, alpha)
    for row, effect in zip(rows, study.cells, strict=True):
        row["effect"] = {k: getattr(effect, k) for k in ("mean_difference", "difference_sd", "seed_sd", "effect",
                                                          "variance", "p_value", "p_holm")}
    return {"change": change, "cells": rows, "scope": asdict(study.scope), "study": study,
            "pooled": asdict(study.pooled), "by_task": asdict(study.by_task), "by_preset": asdict(study.by_preset)}


def _costs(folders: dict[str, Path], tuning: set[str], out: Path) -> dict[str, Any]:
    """What the study trained: runs, training seconds (metrics.json) and wall seconds (sweep.json), tuning apart."""
    state = json.loads((out / SWEEP_FILE).read_text()).get("runs", {}) if (out / SWEEP_FILE).is_file() else {}
    totals = {"runs": 0, "train_seconds": 0.0, "wall_seconds": 0.0}
    parts = {"tuning": dict(totals), "verdict": dict(totals)}
    for name, folder in folders.items():
        part = parts["tuning" if name in tuning else "verdict"]
        metrics = json.loads((folder / "metrics.json").read_text())
        part["runs"] += 1
        part["train_seconds"] += float(metrics.get("train_seconds") or 0.0)
        part["wall_seconds"] += float(state.get(name, {}).get("seconds") or 0.0)
    return {**parts, "total": {k: parts["tuning"][k] + parts["verdict"][k] for k in totals}}


def run_study(changes: Sequence[str], tasks: Sequence[str], out: str | Path, presets: Sequence[str] = ("tiny",),
              datasets: str = "first", data: list[str] | None = None, seeds: int = 3, budget: str | None = None,
              tune: str | None = None, launch: Launch | None = None, settings: dict[str, Any] | None = None,
              model_set: dict[str, Any] | None = None, proposed: Sequence[str] = (), method: str = "dl",
              alpha: float = 0.05, command: str = "") -> dict[str, Any]:
    """Train and read a study; write ``study.json``, ``results.json``, ``report.md`` and the forest plots in ``out``.

    Args:
        changes: names in the catalogue of travelling changes (``zoo changes``).
        tasks, presets, datasets, data: the cells (:func:`tasks.study.grid.study_cells`).
        seeds: K, seeds a side per cell (the noise floor trains K more of the classic side); at least 2.
        budget: every run's budget (``epochs=N``, ``time=S``, ``flops=X``); None: each task's study default.
        tune: ``lr=A,B,C`` to also give each side its own learning rate, chosen on validation.
        launch: where the runs train (default: one after another in this process).
        settings, model_set: task and model config fields every run sets (``--set``, ``--model-set``).
        proposed: the tasks the changes were proposed on (the task-specific rule reads them; default: where
            significant).
        method: the between-cell variance τ²: ``dl`` (DerSimonian–Laird) or ``pm`` (Paule–Mandel).
        alpha: the level of every test and interval.

    Returns:
        The results written to ``results.json``, plus ``"report"``: the markdown of report.md.
    """
    from tasks.study.report import write_report

    started = time.perf_counter()
    out = Path(out)
    check_folder("--out", out, "a folder for the study's runs and report")
    check_int("seeds", seeds, MIN_SEEDS, hint="a cell's noise floor and paired test need 2 seeds a side; 3 or more "
                                              "is better")
    check_alpha(alpha)
    if method not in METHODS:
        raise unknown_name("meta-analysis method", method, METHODS)
    if not changes:
        raise ValueError("no change given; name one or more of `zoo changes`, e.g. zoo study pre-ln,rmsnorm")
    entries = [get_change(name) for name in dict.fromkeys(changes)]
    lrs = parse_tune(tune)
    cells = study_cells(list(tasks), list(presets), datasets, data)
    budgets = task_budgets(sorted({c.task for c in cells}), budget)
    per_task = task_settings(settings or {}, sorted(budgets))
    pairs = pairings(entries, cells, model_set)
    if all(p.reason for p in pairs):
        raise ValueError(f"no change of {', '.join(e.name for e in entries)} applies to any cell: "
                         + "; ".join(dict.fromkeys(f"{p.change} on {p.cell.task}: {p.reason}" for p in pairs)))

    def runs_of(regime: Regime) -> dict[tuple[str, str, str], list[RunSpec]]:
        found = {}
        for task, (text, epochs) in budgets.items():
            task_pairs = [p for p in pairs if p.cell.task == task]
            found |= regime_runs(task_pairs, regime, seeds, text, {**per_task[task], "epochs": epochs})
        return found

    shared = runs_of(Regime("shared"))
    sides = list({(s.cell.label, s.label): s for p in pairs if not p.reason for s in (p.classic, p.new)}.values())
    tuning: dict[tuple[str, str], list[RunSpec]] = {}
    for task, (text, epochs) in budgets.items():
        task_sides = [s for s in sides if s.cell.task == task]
        tuning |= tuning_runs(task_sides, lrs, text, {**per_task[task], "epochs": epochs}) if lrs else {}
    hashes: dict[str, str | None] = {}  # each tuned cell's validation split, checked before any training
    for (cell, _), specs in tuning.items():
        hashes[cell] = hashes[cell] if cell in hashes else validation_hash(specs[0])
    record = {"command": command, "changes": [e.name for e in entries], "tasks": list(tasks), "presets": list(presets),
              "datasets": datasets, "data": list(data or []), "seeds": seeds, "budget": budget,
              "budgets": {t: b for t, (b, _) in budgets.items()}, "tune": lrs, "settings": settings or {},
              "model_set": model_set or {}, "proposed": list(proposed), "method": method, "alpha": alpha}
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / STUDY_FILE, record)
    first = unique([s for specs in shared.values() for s in specs] + [s for specs in tuning.values() for s in specs])
    log.info("study: %d cell(s), %d change(s), %d run(s)%s", len(cells), len(entries), len(first),
             " before the tuned regime's" if lrs else "")
    folders = run_sweep(first, out, launch)
    regimes: dict[str, dict[tuple[str, str, str], list[RunSpec]]] = {"shared": shared}
    choices: dict[tuple[str, str], Choice] = {}
    if lrs:
        choices = {key: choose(*key, specs, folders, hashes[key[0]])
                   for key, specs in tuning.items()}
        regimes["tuned"] = runs_of(Regime("tuned", {key: c.chosen for key, c in choices.items()}))
        every = unique(first + [s for specs in regimes["tuned"].values() for s in specs])
        folders = run_sweep(every, out, launch)
    analyses: dict[str, dict[str, Any]] = {}
    for regime, runs in regimes.items():
        for entry in entries:
            applied = [p for p in pairs if p.change == entry.name and not p.reason]
            read = [read_cell(p, {role: runs[(p.cell.label, p.change, role)] for role in ("classic", "new", "noise")},
                              folders, alpha) for p in applied]
            analyses.setdefault(entry.name, {})[regime] = analyse(entry.name, [c for c, _ in read],
                                                                  [r for _, r in read], proposed, method, alpha)
    tuning_names = {s.name for specs in tuning.values() for s in specs} - {
        s.name for regime_runs_ in regimes.values() for specs in regime_runs_.values() for s in specs}
    results = {
        **record,
        "cells": [c.label for c in cells],
        "declared": {e.name: e.change.scope for e in entries},
        "not_applied": [{"change": p.change, "cell": p.cell.label, "reason": p.reason} for p in pairs if p.reason],
        "choices": [c.to_dict() for c in choices.values()],
        "analyses": analyses,
        "cost": {**_costs(folders, tuning_names, out), "study_seconds": time.perf_counter() - started},
    }
    report = write_report(results, out)
    return {**results, "report": report}
