"""Comparisons that hold up: ``zoo compare`` and ``zoo ablate``.

``compare`` trains several variants on one task with the same data, budget and seeds — or reads runs that
already finished (``zoo compare TASK --runs DIR ...``) — and tabulates, per variant: what changed,
parameters, forward FLOPs, optimizer steps, the task metric's mean over seeds with its 95 % interval, Δ vs
the task's baseline with its 95 % interval, a paired test on the same test examples (p-values
Holm-corrected over the variants), a verdict (better / worse / no significant difference at α),
throughput and wall time; with a plot of metric vs cost. ``ablate`` does the same for one variant and, for
each of its declared changes, the variant with only that change reverted: each row says what the change
bought and whether that is distinguishable from noise.

The trained comparison builds its table from the run folders it wrote, through the same code as
``--runs``, so rebuilding it from those folders gives the same table. With ``--folds K`` (tasks with folds) every
variant cross-validates on the same folds, and the variants are paired case by case over the union of the folds,
on one dataset or several (:mod:`tasks.compare.folds`).

A variant whose config differs from its classic counterpart where no declared change says so
(:mod:`zoo.analysis.counterpart`: a preset that also sets ``heads=1`` or adds a layer) would have its declared changes
credited with what that difference does: ``compare`` and ``ablate`` refuse to train it unless
``allow_undeclared`` (``--allow-undeclared``), and every report lists such differences, per row, from each
run's ``run.json`` (finished runs given to ``--runs`` are listed, not refused). Statistics: :mod:`tasks.compare.paired`
and :mod:`tasks.compare.stats`; budgets (epochs, time, training FLOPs): :mod:`tasks.engine.budget`; output:
:mod:`tasks.compare.report`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from plumbing.errors import check_positive
from tasks.compare.paired import describe_test, paired_statistics, task_metrics
from tasks.compare.report import write_comparison
from tasks.compare.run_results import RunResult, check_pairable, group_by_variant, read_result
from tasks.compare.stats import check_alpha
from tasks.engine.budget import parse_budget
from tasks.engine.config import check_folder
from tasks.engine.registry import task_class, task_shape
from tasks.sweeps.driver import run_sweep
from tasks.sweeps.launchers import Launch
from tasks.sweeps.plan import RunSpec
from tasks.sweeps.state import SWEEP_FILE
from zoo.analysis.counterpart import Counterpart, Difference, counterpart
from zoo.analysis.delta import measured_at
from zoo.registry import Variant, get_variant, list_variants

log = logging.getLogger(__name__)

COMPARE_EPOCHS = 2  # the default budget of zoo compare / zoo ablate: epochs=2
MAX_EPOCHS = 1000  # the epoch cap under a FLOP budget when --epochs is not given: the budget decides
OWN = "own"  # a task's `recipe` config field: each variant trains with the recipe it declares (--recipe own)
HEADLINE_FIELDS = ("mean", "ci95", "ci95_method", "delta", "delta_ci95", "p_value", "p_value_holm", "verdict", "test",
                   "other_p_values", "seed_delta_ci95", "seed_p_value_holm", "seed_verdict")


@dataclass
class Entry:
    """One row of a comparison: a variant, optionally with config overrides (an ablation). ``registration``: the
    variant as the sweep resolved it once at its start (``None``: a reference model, or not resolved)."""

    label: str
    variant: str
    model: dict[str, Any] = field(default_factory=dict)  # variant config overrides (a reverted change)
    parts: str = ""
    registration: Variant | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # task config overrides (the recipe row of an ablation)


def resolve_budget(cls, budget: str | None, epochs: int | None) -> tuple[str, int]:
    """The budget text and the epochs of every run: ``epochs=N`` sets them; under a time budget ``epochs``
    (default: the task's own) caps the run and is the schedule's horizon; under a FLOP budget it only caps."""
    if budget is None:
        epochs = COMPARE_EPOCHS if epochs is None else epochs
        check_positive("epochs", epochs)
        return f"epochs={epochs}", epochs
    parsed = parse_budget(budget)
    if parsed.kind == "epochs":
        if epochs is not None and epochs != parsed.value:
            raise ValueError(f"--epochs {epochs} and --budget {budget} disagree; give one of them")
        return budget, int(parsed.value)
    if epochs is not None:
        check_positive("epochs", epochs)
        return budget, epochs
    return budget, cls.config_class().epochs if parsed.kind == "time" else MAX_EPOCHS


def counterpart_of(task_name: str, registration: Variant | None, preset: str | None = None,
                   model: dict[str, Any] | None = None) -> Counterpart | None:
    """The classic counterpart of a variant (with its undeclared differences) as a run of the task builds it.

    Args:
        task_name: the task.
        registration: the variant's registration for the task (:meth:`tasks.engine.task.Task.resolve_variant`);
            ``None`` for one of its reference models (not a patch: it has none).
        preset: the run's ``preset`` (``None``: the task's default for the variant, as the run picks it).
        model: the run's ``--model-set`` overrides (for both sides).

    Returns:
        The :class:`~zoo.analysis.counterpart.Counterpart`, or ``None`` for a reference model.
    """
    if registration is None:
        return None
    return counterpart(registration, task_name, *measured_at(registration, task_shape(task_name), preset, model))


def refuse_undeclared(task_name: str, entries: list[Entry], preset: str | None, model: dict[str, Any]) -> None:
    """Refuse, before any training, the entries whose variant has undeclared differences at ``preset`` with the
    ``model`` overrides (each entry's own overrides added). An entry without its ``registration`` is resolved here.

    Raises:
        ValueError: naming each such variant, its differences and the fixes.
    """
    found, cls = {}, task_class(task_name)
    for entry in entries:
        if entry.variant not in found:
            registration = entry.registration or cls.resolve_variant(entry.variant)
            found[entry.variant] = counterpart_of(task_name, registration, preset, {**model, **entry.model})
    bad = [f"variant {name!r} differs from its classic counterpart ({reference.label}) where no declared change "
           f"reverts it: {', '.join(d.values for d in reference.differences)}"
           for name, reference in found.items() if reference is not None and reference.differences]
    if bad:
        raise ValueError(
            "; ".join(bad) + "; the comparison would credit the declared changes with what these differences do. "
            "Declare each in a change's revert or use the classic value, or pass --allow-undeclared "
            "(allow_undeclared=True) to train anyway, with the differences listed in the report")


def run_specs(task_name: str, entries: list[Entry], seeds: int, budget: str = "epochs=2",
              **config: Any) -> list[RunSpec]:
    """One run per entry and seed (0..seeds-1) under ``budget``, each with its full task config."""
    check_positive("seeds", seeds)
    parse_budget(budget)  # a bad budget fails before any training
    cls = task_class(task_name)
    specs = []
    for entry in entries:
        for seed in range(seeds):
            run_config = cls.config_class(**{**config, **entry.settings, "variant": entry.variant, "seed": seed,
                                             "model": {**config.get("model", {}), **entry.model}})
            values = {k: v for k, v in run_config.to_dict().items() if k not in ("out", "resume")}
            specs.append(RunSpec(task_name, entry.label, values, budget))
    return specs


def train_entries(task_name: str, entries: list[Entry], out: Path, seeds: int, budget: str = "epochs=2",
                  launch: Launch | None = None, sweep: dict[str, Any] | None = None,
                  **config: Any) -> dict[str, list[RunResult]]:
    """Train every entry ``seeds`` times (seeds 0..seeds-1) under ``budget`` as one sweep in ``out``
    (:func:`tasks.sweeps.driver.run_sweep`: ``launch`` says where; finished runs are reused, interrupted ones
    resumed); the finished runs per entry."""
    check_folder("--out", out, "a folder for the runs and the report")
    specs = run_specs(task_name, entries, seeds, budget, **config)
    folders = run_sweep(specs, out, launch, sweep)
    groups: dict[str, list[RunResult]] = {}
    for spec in specs:
        groups.setdefault(spec.label, []).append(read_result(folders[spec.name]))
    return groups


def forward_flops(task_name: str, task, model: torch.nn.Module) -> int:
    """Forward FLOPs of ``model``, the model of ``task``'s run, at the task's input size (zoo diff's counter and
    shape)."""
    from zoo.analysis.delta import module_flops

    spec = task_shape(task_name)
    if task.variant is None:  # a reference model, e.g. the CNN row of the cifar task
        shape = {**spec.shape, **task.delta_overrides()}
        inputs = (torch.zeros(1, shape["in_channels"], shape["image_size"], shape["image_size"]),)
    else:
        config = task.model_config
        inputs = task.variant.example_input(config, spec.for_config(config))
    return module_flops(model.cpu(), inputs)[1]


def parts_changed(task) -> str:
    """The parts the variant of ``task``'s run changes, as the comparison's column shows them."""
    if task.variant is None:
        return "(reference model, not a patch)"
    return ", ".join(task.variant.parts_changed) or "(base)"


def _parts_and_flops(entry: Entry, task_name: str, trainer) -> tuple[str, int]:
    """What the entry changed, and its forward FLOPs at the task's input size (``trainer``: anything with the
    ``task`` and ``model`` of a run, a Trainer or a :class:`tasks.runs.run.Run`; its task resolved the variant)."""
    return entry.parts or parts_changed(trainer.task), forward_flops(task_name, trainer.task, trainer.model)


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


# A row's fields that measure the machine, not the model: two trainings of the same runs differ in them (on another
# launcher, another load), so a check that two sweeps computed the same leaves them out.
MACHINE_COSTS = ("items/s", "wall s", "runs", "peak MiB")


def _cost(task_name: str, runs: list[RunResult], run, parts: str | None) -> dict[str, Any]:
    """Parameters, FLOPs, steps and time of a group's runs (means over seeds); ``run``: the first of them, loaded
    (:func:`tasks.runs.run.load_run`)."""
    part_text, flops = _parts_and_flops(Entry(run.variant, run.variant, parts=parts or ""), task_name, run)
    trained = [r.training for r in runs if r.training]
    spent = [t["budget"].get("train_flops") for t in trained if "budget" in t]
    return {"parts changed": part_text,
            "params": trained[0]["parameters"] if trained else sum(p.numel() for p in run.model.parameters()),
            "GFLOPs": flops / 1e9,
            "steps": _mean([t["history"][-1]["step"] for t in trained if t["history"]]),
            "train_TFLOPs": None if not spent or None in spent else _mean(spent) / 1e12,
            "items/s": _mean([t["items_per_s"] for t in trained]),
            "wall s": _mean([t["train_seconds"] for t in trained]),
            "peak MiB": max((t["peak_memory"]["mb"] for t in trained if t.get("peak_memory")), default=None)}


def budget_text(result: RunResult) -> str:
    """The budget a run was trained under, as the report states it."""
    spent = (result.training or {}).get("budget")
    epochs = result.info["config"]["epochs"]
    if spent is None or spent["kind"] == "epochs":
        return f"{epochs} epoch(s) per run"
    text = parse_budget(f"{spent['kind']}={spent['value']}").describe()
    return f"{text}, at most {epochs} epochs"


def build_comparison(task_name: str, groups: dict[str, list[RunResult]], reference: str, out: Path,
                     kind: str = "compare", alpha: float = 0.05, parts: dict[str, str] | None = None,
                     title: str | None = None, launch: Launch | None = None, scored_on: str | None = None,
                     extra: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The comparison of finished runs grouped by label (each group: one variant's seeds) against
    ``reference``; writes results.json, report.md and the plots under ``out``.

    The reference's row comes first. ``kind="compare"`` reports each variant against the reference (the
    baseline); ``kind="ablate"`` reports the reference (the full variant) against each row (the variant
    without one change): Δ is what the change bought. ``scored_on``: what the examples are, when not the test
    split (a cross-validation's pooled folds, :mod:`tasks.compare.folds`); ``extra``: fields added to each
    label's row (its mean over folds). Returns the comparison dict written to results.json, plus ``"table"``, the
    main markdown table.
    """
    check_alpha(alpha)
    groups = {reference: groups[reference], **groups}  # the reference's row first, the others in their order
    results = [r for runs in groups.values() for r in runs]
    for r in results:
        if r.task != task_name:
            raise ValueError(f"{r.path} is a {r.task} run, not a {task_name} one; compare runs of one task")
    others = [label for label in groups if label != reference]
    pairs = [(label, label, reference) if kind == "compare" else (label, reference, label) for label in others]
    splits = set.intersection(*(r.splits() for r in results))
    metrics = task_metrics(task_name, groups[reference][0].info, splits)
    for split in dict.fromkeys(m.split for m in metrics):
        check_pairable(groups, split, pairs)
    stats = {}
    for m in metrics:
        runs = {label: [(r.records(m.split)[1], m.stats(r.records(m.split)[0], r.info)) for r in g]
                for label, g in groups.items()}
        stats[m.key] = paired_statistics(m, runs, pairs, alpha)
    from tasks.runs.run import load_run

    undeclared, rows = {}, []
    for label, runs in groups.items():
        run = load_run(runs[0].run_path)  # its task resolves the group's variant, once
        undeclared[label] = _run_undeclared(task_name, runs[0], run.task.variant)
        row = {"variant": label, **_cost(task_name, runs, run, (parts or {}).get(label)), "seeds": len(runs),
               "recipe": runs[0].recipe, "runs": [str(r.path) for r in runs], "metric": metrics[0].key,
               "metrics": {m.key: stats[m.key][label] for m in metrics},
               "undeclared": [d.to_dict() for d in undeclared[label]], **(extra or {}).get(label, {})}
        headline = {"delta": 0.0, "delta_ci95": None, "p_value": None, "p_value_holm": None, "test": None,
                    "other_p_values": None, "seed_delta_ci95": None, "seed_p_value_holm": None, "seed_verdict": None,
                    "verdict": "baseline" if kind == "compare" else "full variant", **row["metrics"][metrics[0].key]}
        row.update({k: headline[k] for k in HEADLINE_FIELDS})
        rows.append(row)
    budgets = {label: budget_text(runs[0]) for label, runs in groups.items()}
    comparison = {
        "title": title or f"zoo compare {task_name}", "kind": kind, "task": task_name, "reference": reference,
        "alpha": alpha, "headline": metrics[0].key, "budget": budgets,
        "ci95_method": "; ".join(dict.fromkeys(r["ci95_method"] for r in rows)),
        "preamble": _preamble(kind, reference, groups, budgets, metrics[0], undeclared, scored_on)
        + recipe_text(groups) + _launch_text(out, launch),
        "metrics": {m.key: {"title": m.title, "unit": m.unit, "split": m.split, "higher_is_better": m.higher_is_better,
                            "role": m.role, "tests": list(dict.fromkeys(describe_test(m, stats[m.key][row]["test"])
                                                                        for row, _, _ in pairs))}
                    for m in metrics},
        "rows": rows,
    }
    table = write_comparison(comparison, out)
    return {**comparison, "table": table}


def _launch_text(out: Path, launch: Launch | None) -> str:
    """How a trained comparison's runs were launched, from its ``sweep.json`` ("" for finished ``--runs``)."""
    path = out / SWEEP_FILE
    if launch is None or not path.is_file():
        return ""
    launcher = json.loads(path.read_text()).get("launcher", {})
    if launcher.get("launcher", "serial") == "serial":
        return " The runs trained one after another in one process."
    threads = launcher.get("threads_per_run")
    where = {"local": "on this machine", "ray": f"as Ray tasks on {launcher.get('cluster', 'a Ray cluster')}",
             "submitit": f"as submitit jobs ({launcher.get('cluster', '?')} executor)"}[launcher["launcher"]]
    return (f" The runs trained {where}, up to {launcher.get('jobs')} at once, "
            f"{threads} thread(s) each (`--launcher {launcher['launcher']}`; `sweep.json` lists every run's state).")


def _run_undeclared(task_name: str, result: RunResult, registration: Variant | None) -> list[Difference]:
    """The undeclared differences of a finished run's variant (``registration``, ``None`` for a reference model),
    at the preset and overrides its run.json records."""
    config = result.info.get("config", {})
    reference = counterpart_of(task_name, registration, config.get("preset"), config.get("model"))
    return [] if reference is None else list(reference.differences)


def recipe_text(groups: dict[str, list[RunResult]]) -> str:
    """What the preamble says of the training recipes (tasks whose runs record one, ``RunResult.recipe``; "" for the
    others): "each side trains with its own recipe (dynunet: nnunet, missformer: default)" when every run was given
    ``--recipe own``, "one shared recipe for every side: X" when every run was given X, else each row's recipe and
    whether it was its own or a shared one (an ablation's recipe row, or ``--runs`` trained otherwise)."""
    first = {label: runs[0] for label, runs in groups.items()}
    if any(r.recipe is None for r in first.values()):
        return ""
    requested = {r.recipe_requested for r in first.values()}
    if requested == {OWN}:
        listed = ", ".join(dict.fromkeys(f"{r.variant}: {r.recipe}" for r in first.values()))
        return f" Recipes: each side trains with its own recipe ({listed})."
    if len(requested) == 1:
        return f" Recipes: one shared recipe for every side: {next(iter(first.values())).recipe}."
    trained = {r.recipe for r in first.values()}
    if len(trained) == 1:  # given otherwise (`own` on one side, the name on another) but the same recipe trained
        return f" Recipes: every side trains with {trained.pop()}."
    listed = "; ".join(f"`{label}`: {r.recipe} ({'its own' if _is_own(r) else 'shared'})" for label, r in first.items())
    return f" Recipes differ between the rows: {listed}."


def _is_own(run: RunResult) -> bool:
    """Whether ``run`` trained with its variant's declared recipe: given ``own``, or given that recipe by name."""
    if run.recipe_requested == OWN:
        return True
    from zoo.registry import get_variant

    config_class = get_variant(run.variant, run.task).config_class
    return run.recipe == getattr(config_class, "recipe", None)


def _preamble(kind: str, reference: str, groups: dict[str, list[RunResult]], budgets: dict[str, str], metric,
              undeclared: dict[str, list[Difference]], scored_on: str | None = None) -> str:
    seeds = sorted({len(runs) for runs in groups.values()})
    budget = (f"the same budget for every run: {next(iter(budgets.values()))}" if len(set(budgets.values())) == 1
              else "budgets that differ: " + "; ".join(f"{k}: {v}" for k, v in budgets.items()))
    what = (f"Each variant against the baseline `{reference}`" if kind == "compare" else
            f"Leave-one-out: each row is `{reference}` with one declared change reverted to the classic choice; "
            f"'bought by the change' is `{reference}` minus the row")
    scored = (f"{metric.split} {metric.title}, paired on the same test examples" if scored_on is None else
              f"{metric.title} on {scored_on}, paired case by case")
    text = f"{what}, trained with {budget}; {'/'.join(map(str, seeds))} seed(s) per variant. Metric: {scored}."
    by_variant = {groups[label][0].variant: found for label, found in undeclared.items() if found}
    if by_variant:
        listed = "; ".join(f"`{name}`: {', '.join(d.values for d in found)}" for name, found in by_variant.items())
        text += (f" **Undeclared differences** from the classic counterpart, which no declared change reverts: "
                 f"{listed}. Such a row's Δ measures its declared changes in a model that also differs in these.")
    return text


def compare(task_name: str, variants: list[str] | None, out: Path, seeds: int = 1, budget: str | None = None,
            alpha: float = 0.05, baseline: str | None = None, allow_undeclared: bool = False,
            launch: Launch | None = None, folds: int | None = None, **config: Any) -> dict[str, Any]:
    """Train ``variants`` (default: every variant of the task and its reference models) ``seeds`` times each
    under ``budget`` (``epochs=N``, ``time=SECONDS``, ``flops=X``; default ``epochs=2``) and compare them with
    ``baseline`` (default: the task's). ``config``: task config fields for every run (``epochs`` caps a time
    or FLOP budget). A variant with undeclared differences from its classic counterpart is refused before any
    training (:func:`refuse_undeclared`) unless ``allow_undeclared``. ``launch``: where the runs train (default:
    one after another in this process; :class:`tasks.sweeps.launchers.Launch`). ``folds``: cross-validate
    instead, every variant on the same ``folds`` folds of each dataset of ``config["data"]`` (a folder or a list),
    paired case by case over the folds (:func:`tasks.compare.folds.compare_folds`, which says what it returns).
    Returns the comparison (see :func:`build_comparison`)."""
    cls = task_class(task_name)
    check_alpha(alpha)
    if folds is not None:
        from tasks.compare.folds import check_folds

        check_folds(task_name, folds)  # before anything else: a task without folds, or fewer than two
    elif isinstance(config.get("data"), list):  # --data on the command line: a folder, or `embedded[:NAME]`
        from tasks.compare.folds import datasets

        if len(config["data"]) > 1:
            raise ValueError(f"--data given {len(config['data'])} times: several datasets are compared under "
                             "cross-validation; add --folds K (e.g. --folds 5), or give one --data")
        config.update(datasets(cls, config.pop("data"))[0].fields)
    names = variants or [*list_variants(task_name), *getattr(cls, "reference_models", ())]
    entries = [Entry(n, n, registration=cls.resolve_variant(n)) for n in names]  # a clear error before any training
    baseline = baseline or cls.baseline
    if baseline not in names:
        raise ValueError(f"the baseline {baseline!r} is not among the variants ({', '.join(names)}); add it, or "
                         f"pass --baseline with one of them")
    if not allow_undeclared:
        refuse_undeclared(task_name, entries, config.get("preset"), config.get("model", {}))
    budget, config["epochs"] = resolve_budget(cls, budget, config.get("epochs"))
    launch = launch or Launch()
    sweep = sweep_record("compare", task_name, out, seeds, budget, alpha, launch,
                         config if folds is None else {**config, "folds": folds}, variants=names,
                         baseline=baseline, allow_undeclared=allow_undeclared)
    if folds is not None:
        from tasks.compare.folds import compare_folds

        check_positive("seeds", seeds)
        return compare_folds(task_name, entries, baseline, out, folds, seeds, budget, alpha, launch, sweep,
                             run_specs=run_specs, build_comparison=build_comparison, **config)
    groups = train_entries(task_name, entries, out, seeds, budget, launch, sweep, **config)
    return build_comparison(task_name, groups, baseline, out, alpha=alpha, launch=launch)


def compare_runs(task_name: str, paths: list[str | Path], out: Path, alpha: float = 0.05,
                 baseline: str | None = None) -> dict[str, Any]:
    """The comparison of finished runs (training runs or ``zoo evaluate`` folders), grouped by variant, without
    training anything; runs evaluated on different data are refused."""
    cls = task_class(task_name)
    check_folder("--out", out, "a folder for the report")
    groups = group_by_variant([read_result(p) for p in paths])
    baseline = baseline or cls.baseline
    if baseline not in groups:
        raise ValueError(f"no run of the baseline {baseline!r} among --runs (they are runs of: {', '.join(groups)}); "
                         "add one, or pass --baseline with one of those")
    return build_comparison(task_name, groups, baseline, out, alpha=alpha)


def ablation_entries(variant) -> list[Entry]:
    """The full variant, then one row per independent declared change with that change alone reverted
    (:meth:`zoo.registry.Variant.independent_changes`: a part that only follows another change, such as
    the head Swin's hierarchy widens, has no row of its own; its cause's row reverts it)."""
    entries = [Entry(variant.name, variant.name, registration=variant)]
    for change in variant.independent_changes():
        reach = [p for p in change.parts if p != change.part]
        parts = f"{change.part} reverted to classic" + (f" (reaching {', '.join(reach)})" if reach else "")
        entries.append(Entry(f"without {change.name}", variant.name, dict(change.revert), parts, variant))
    return entries


def check_recipe_flag(cls, recipe: str, recorded: str | None = None) -> str:
    """``--recipe`` of ``zoo compare`` / ``zoo ablate`` as the ``recipe`` config field of every run.

    Raises:
        ValueError: the task has no training recipes, its config knows no such recipe (with a "did you mean"), or
            ``--set recipe=`` (``recorded``) says otherwise.
    """
    if "recipe" not in {f.name for f in dataclasses.fields(cls.config_class)}:
        raise ValueError(f"--recipe {recipe}: the {cls.name} task has no training recipes (no recipe field in its "
                         "config); drop --recipe")
    if recorded is not None and recorded != recipe:
        raise ValueError(f"--recipe {recipe} and --set recipe={recorded} disagree; give one of them")
    cls.config_class(recipe=recipe)  # the task's config checks the name, before any training
    return recipe


def recipe_entry(cls, variant: Variant, recipe: str | None) -> Entry | None:
    """The ablation row "own vs shared recipe": ``variant`` trained with the task's shared default recipe (the
    config's ``recipe`` field default), against the full variant trained with its own (its config class's ``recipe``
    attribute), every other setting equal. None when the task has no recipes, the variant declares none other than the
    default, or ``recipe`` (``--recipe``) names one recipe shared by every row (there is then nothing to ablate; only
    ``own``, or no ``--recipe``, trains the full variant with its own).
    """
    task_fields = {f.name: f for f in dataclasses.fields(cls.config_class)}
    own = getattr(variant.config_class, "recipe", None)
    if "recipe" not in task_fields or own is None or own == task_fields["recipe"].default:
        return None
    shared = task_fields["recipe"].default
    if recipe not in (None, OWN):
        log.warning("%s: no 'own vs shared recipe' row: --recipe %s trains every row with one recipe (give --recipe %s "
                    "for the row: the variant's own %s against the shared %s)", variant.name, recipe, OWN, own, shared)
        return None
    return Entry(f"own vs shared recipe (this row: shared {shared})", variant.name,
                 parts=f"recipe: own {own} -> shared {shared} (training only, the network unchanged)",
                 registration=variant, settings={"recipe": shared})


def ablate(variant_name: str, task_name: str, out: Path, seeds: int = 1, budget: str | None = None,
           alpha: float = 0.05, allow_undeclared: bool = False, launch: Launch | None = None,
           **config: Any) -> dict[str, Any]:
    """Train the variant and, for each declared change, the variant with that one change reverted; each row
    reports what the change bought (the variant minus the row), tested paired on the same test examples. A variant
    that declares its own training recipe (:func:`recipe_entry`) trains every row with it, plus a row with the shared
    default recipe: what its own recipe bought. A variant with undeclared differences from its classic counterpart is
    refused before any training unless ``allow_undeclared``."""
    cls = task_class(task_name)
    check_alpha(alpha)
    variant = get_variant(variant_name, task_name)
    entries = ablation_entries(variant)
    recipe_row = recipe_entry(cls, variant, config.get("recipe"))
    if recipe_row is not None:
        config["recipe"] = OWN  # every other row trains with the variant's own recipe too
        entries.append(recipe_row)
    fixed = [f"{c.name} ({c.no_revert})" for c in variant.changes if not c.revertible]
    if len(entries) == 1:
        raise ValueError(f"variant {variant_name!r} declares no change that can be reverted: nothing to ablate"
                         + (f"; without a revert: {'; '.join(fixed)}" if fixed else ""))
    if fixed:
        log.warning("%s: no ablation row for the changes without a revert: %s", variant_name, "; ".join(fixed))
    if not allow_undeclared:
        refuse_undeclared(task_name, entries[:1], config.get("preset"), config.get("model", {}))
    budget, config["epochs"] = resolve_budget(cls, budget, config.get("epochs"))
    launch = launch or Launch()
    sweep = sweep_record("ablate", task_name, out, seeds, budget, alpha, launch, config, variant=variant_name,
                         allow_undeclared=allow_undeclared)
    groups = train_entries(task_name, entries, out, seeds, budget, launch, sweep, **config)
    return build_comparison(task_name, groups, variant_name, out, kind="ablate", alpha=alpha,
                            parts={e.label: e.parts for e in entries},
                            title=f"zoo ablate {variant_name} on {task_name}", launch=launch)


def sweep_record(kind: str, task_name: str, out: Path, seeds: int, budget: str, alpha: float, launch: Launch,
                 config: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The sweep as a sweep file says it (:mod:`tasks.sweeps.plan`), for ``sweep.json``: ``zoo sweep
    OUT/sweep.json`` runs exactly these runs again (reusing what finished). ``epochs`` is recorded with the budget:
    under a time or FLOP budget it is the cap (and a time budget's schedule horizon) that the budget text leaves
    out, and without it a rerun would take the task's default and train every run again into new folders."""
    settings = {k: v for k, v in config.items() if k not in ("model", "epochs")}
    return {"kind": kind, "task": task_name, **fields, "seeds": seeds, "budget": budget, "epochs": config["epochs"],
            "alpha": alpha, "out": str(out), "set": settings, "model_set": dict(config.get("model", {})),
            "launcher": launch.launcher, "jobs": launch.jobs, "retry": launch.retry,
            **({"resources": launch.resources} if launch.resources else {}),
            **({"slurm": launch.slurm} if launch.slurm else {})}
