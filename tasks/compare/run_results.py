"""Finished runs as the input of a comparison: ``zoo compare TASK --runs DIR [DIR ...]``.

A folder is either a training run (``run.json``, ``metrics.json``, ``predictions/``) or the output of
``zoo evaluate`` (``metrics.json`` naming its run, ``predictions/``). Either way a comparison needs the same
things: the variant, the per-example records of a split with the hash of the data they were scored on, and
the training's cost (parameters, throughput, wall time, budget) from the training run's ``metrics.json``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.engine.registry import task_class
from tasks.engine.same_run import ADDED_LATER, result_settings
from tasks.runs.records import INDEX_FILE, read_records
from tasks.runs.run import RUN_FILE, read_run_info


@dataclass
class RunResult:
    """One finished run (or evaluation) as a comparison reads it."""

    path: Path  # the folder given: a training run or a `zoo evaluate` output
    run_path: Path  # the training run (the same folder for a training run)
    info: dict[str, Any]  # the training run's run.json
    training: dict[str, Any] | None  # the training run's metrics.json (None for an exported run without one)
    _records: dict[str, tuple[list[dict], str]] = field(default_factory=dict, repr=False)

    @property
    def variant(self) -> str:
        return self.info["variant"]

    @property
    def label(self) -> str:
        """Its group in a comparison: the variant, and where its weights started (``--init-from``) and what did
        not train (``--freeze``) when it did not start from scratch: ``vit (from long-run)``."""
        config = self.info["config"]
        start = [f"from {Path(config['init_from']).name}"] if config.get("init_from") else []
        start += [f"frozen {config['freeze']}"] if config.get("freeze") else []
        return f"{self.variant} ({', '.join(start)})" if start else self.variant

    @property
    def task(self) -> str:
        return self.info["task"]

    @property
    def recipe(self) -> str | None:
        """The training recipe the run trained with (``Task.training_recipe``: a ``--recipe own`` resolved to the
        variant's declared one), or None for a task without recipes."""
        read = getattr(task_class(self.task), "training_recipe", None)
        return None if read is None else read(self.info)

    @property
    def recipe_requested(self) -> str | None:
        """The ``--recipe`` the run was given (``own``: the variant's declared recipe), or None without one."""
        return self.info["config"].get("recipe") if self.recipe is not None else None

    def splits(self) -> set[str]:
        """The splits this folder has per-example records of."""
        index = self.path / "predictions" / INDEX_FILE
        return set(json.loads(index.read_text())) if index.is_file() else set()

    def records(self, split: str) -> tuple[list[dict], str]:
        """The records of ``split`` and the hash of the data they were scored on (read once)."""
        if split not in self._records:
            self._records[split] = read_records(self.path, split)
        return self._records[split]


def read_result(path: str | Path) -> RunResult:
    """The :class:`RunResult` of a training run or evaluation folder; one-line errors for anything else."""
    path = Path(path)
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is a file"
        raise FileNotFoundError(f"--runs {path} {what}; pass the folders of finished runs (zoo train --out) or "
                                "of evaluations (zoo evaluate --out)")
    run_path = path if (path / RUN_FILE).is_file() else _evaluated_run(path)
    info = read_run_info(run_path)
    metrics_file = run_path / "metrics.json"
    training = json.loads(metrics_file.read_text()) if metrics_file.is_file() else None
    if not (path / "predictions" / INDEX_FILE).is_file():
        raise FileNotFoundError(f"{path} has no per-example records (predictions/{INDEX_FILE}); score it with "
                                f"`zoo evaluate {run_path}` and pass the evaluation's folder")
    return RunResult(path, run_path, info, training)


def _evaluated_run(path: Path) -> Path:
    """The training run a ``zoo evaluate`` folder was made from (its metrics.json ``run``)."""
    metrics_file = path / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
    if "run" not in metrics:
        raise FileNotFoundError(f"{path} is neither a run folder ({RUN_FILE}) nor a `zoo evaluate` output "
                                "(metrics.json naming its run); pass one of those")
    for candidate in (Path(metrics["run"]), path.parent.parent):  # as given, or the default runs/X/evaluations/Y
        if (candidate / RUN_FILE).is_file():
            return candidate
    raise FileNotFoundError(f"{path} evaluates the run {metrics['run']}, which is gone; pass the run folder itself")


def group_by_variant(results: list[RunResult]) -> dict[str, list[RunResult]]:
    """Runs grouped by run.json ``variant`` (first appearance first; a run that started from other weights is a
    group of its own, :attr:`RunResult.label`; when runs of one variant trained with several recipes, each recipe is
    a group, labelled e.g. ``dynunet (recipe nnunet)``): the runs of a group are its seeds.

    The runs of a group must be seeds of one experiment, so are refused: two folders of one training run (a run
    and its evaluation, or a folder given twice), two runs of one seed (CPU runs of a seed are bit-identical:
    one seed counted twice), runs with different ``--model-set`` overrides (e.g. an ablation's), runs on
    different data (:func:`data_source`) and runs trained or scored with different settings
    (:func:`training_settings`).
    """
    recipes: dict[str, set[str | None]] = {}
    for result in results:
        recipes.setdefault(result.label, set()).add(result.recipe)
    groups: dict[str, list[RunResult]] = {}
    for result in results:  # a variant trained with several recipes: a group per recipe, `dynunet (recipe nnunet)`
        label = result.label if len(recipes[result.label]) == 1 else f"{result.label} (recipe {result.recipe})"
        groups.setdefault(label, []).append(result)
    for name, runs in groups.items():
        first, trained, seeds = runs[0], {}, {}
        for run in runs:
            seen = trained.setdefault(run.run_path.resolve(), run)
            if seen is not run:
                raise ValueError(f"{seen.path} and {run.path} come from the same training run ({run.run_path}); each "
                                 "run counts as one seed: give one folder per run")
            _check_comparable(name, first, run)
            seed = run.info["config"].get("seed")
            twin = seeds.setdefault(seed, run)
            if twin is not run:
                raise ValueError(f"runs {twin.path} and {run.path} are both {name!r} seed {seed}: runs of one seed "
                                 "repeat each other (bit for bit on the CPU), so pooled they would count one seed "
                                 "twice with too narrow an interval; give one run per seed (train more with --seed N)")
    return groups


def _check_comparable(name: str, first: RunResult, run: RunResult) -> None:
    """Refuse ``run`` as another seed of ``first`` when they differ in model, data or settings."""
    fix = "compare them in separate invocations or retrain with the same settings"
    a, b = first.info["config"].get("model") or {}, run.info["config"].get("model") or {}
    if a != b:
        keys = sorted(k for k in {*a, *b} if a.get(k) != b.get(k))
        raise ValueError(f"runs {first.path} and {run.path} are both {name!r} but with different model overrides "
                         f"({', '.join(keys)}); {fix}")
    source_a, source_b = data_source(first), data_source(run)
    if not _same_data(source_a, source_b):
        raise ValueError(f"runs {first.path} ({_describe(source_a)}) and {run.path} ({_describe(source_b)}) are both "
                         f"{name!r} but on different data: their scores are not seeds of one mean; compare them in "
                         "separate invocations or train and evaluate them on the same data")
    a, b = training_settings(first), training_settings(run)
    for key, (earlier, _) in ADDED_LATER.items():  # result_settings leaves such a field out at its earlier value
        a.setdefault(key, earlier)
        b.setdefault(key, earlier)
    if first.recipe is not None:  # `--recipe own` and the recipe it resolves to train alike: compare what trained
        a["recipe"], b["recipe"] = first.recipe, run.recipe
    differ = [k for k in a if k in b and a[k] != b[k]]
    if "preset" in differ and first.info.get("variant_config") == run.info.get("variant_config"):
        differ.remove("preset")  # None and the preset it resolved to build the same model
    if differ:
        values = ", ".join(f"{k}: {a[k]!r} in {first.path} vs {b[k]!r} in {run.path}" for k in differ)
        raise ValueError(f"runs {first.path} and {run.path} are both {name!r} but trained with different settings "
                         f"({values}): pooled as seeds they would mix experiments; {fix}")


# run.json ``config`` fields that are not settings of the training: ``task`` and ``variant`` are the grouping, ``seed``
# is what the runs of a group differ in, and ``model``, ``data`` and ``dataset`` are checked on their own (naming the
# overrides, the data source). Every other field is compared unless it cannot change a result
# (:mod:`tasks.engine.same_run`, the one definition the sweep, --resume and zoo cv use too).
GROUPING = ("task", "variant", "seed", "model", "data", "dataset")


def training_settings(result: RunResult) -> dict[str, Any]:
    """What the seeds of one variant must share: the run.json ``config``'s result settings
    (:func:`tasks.engine.same_run.result_settings`) outside :data:`GROUPING`, with ``precision`` as the run used it
    (run.json ``precision``: ``default`` is fp32 on the CPU, bf16 on CUDA) and, for a training run's metrics.json, a
    time or FLOP ``budget``."""
    config = result.info["config"]
    settings = {k: v for k, v in result_settings(config).items() if k not in GROUPING}
    settings["precision"] = result.info.get("precision", config.get("precision"))
    if result.training is not None:
        budget = result.training.get("budget") or {"kind": "epochs"}
        settings["budget"] = None if budget["kind"] == "epochs" else f"{budget['kind']}={budget['value']}"
    return settings


def data_source(result: RunResult) -> dict[str, str | None]:
    """Which data a run was trained on and its records scored on: ``{"data": --data or None (the task's
    default), "dataset": the dataset it resolved to, "scored": None, or the --data of a `zoo evaluate` folder
    scored on other data than the run's own}``. The default data may follow the seed (translation's
    generated corpus): seeds of it are one source."""
    config = result.info["config"]
    dataset = result.info.get("preprocessing", {}).get("dataset", config.get("dataset"))
    return {"data": config.get("data"), "dataset": dataset, "scored": _scored_on(result)}


def _scored_on(result: RunResult) -> str | None:
    """The data of an evaluation folder whose records were not scored on its run's own data (split hashes that
    differ from the training run's own records); None for a training run or an evaluation of the run's data."""
    if result.path.resolve() == result.run_path.resolve():
        return None
    own, mine = _split_hashes(result.run_path), _split_hashes(result.path)
    common = own.keys() & mine.keys()
    if not common or all(own[s] == mine[s] for s in common):
        return None  # the run's own data (or nothing to tell it by: an exported run without records)
    metrics = json.loads((result.path / "metrics.json").read_text())
    return str(metrics.get("data"))


def _split_hashes(folder: Path) -> dict[str, str]:
    index = folder / "predictions" / INDEX_FILE
    return {s: e["data_hash"] for s, e in json.loads(index.read_text()).items()} if index.is_file() else {}


def _same_data(a: dict[str, str | None], b: dict[str, str | None]) -> bool:
    return a["dataset"] == b["dataset"] and all(_same_folder(a[k], b[k]) for k in ("data", "scored"))


def _same_folder(a: str | None, b: str | None) -> bool:
    """Whether two recorded folders are one: equal as written, or both still there and the same folder."""
    if a is None or b is None:
        return a == b
    a, b = os.path.normpath(os.path.expanduser(a)), os.path.normpath(os.path.expanduser(b))
    return a == b or (os.path.isdir(a) and os.path.isdir(b) and os.path.samefile(a, b))


def _describe(source: dict[str, str | None]) -> str:
    text = "trained on " + (f"--data {source['data']}" if source["data"] is not None else "the task's default data")
    if source["dataset"] not in (None, "auto"):
        text += f" ({source['dataset']})"
    return text + (f", scored on {source['scored']}" if source["scored"] is not None else "")


def check_pairable(groups: dict[str, list[RunResult]], split: str, pairs: list[tuple[str, str, str]]) -> None:
    """Refuse to pair runs evaluated on different data: for each pair ``(row, a, b)``, every run of ``a`` must
    have been scored on data (split hash in predictions/index.json) that a run of ``b`` was scored on, and
    the other way round. Seeds may differ in data (translation's corpus follows the seed) as long as each
    seed's data is there on both sides."""
    for _, a, b in pairs:
        hashes = {label: {r.records(split)[1]: r for r in groups[label]} for label in (a, b)}
        for one, other in ((a, b), (b, a)):
            lonely = [h for h in hashes[one] if h not in hashes[other]]
            if lonely:
                run, peer = hashes[one][lonely[0]], next(iter(hashes[other].values()))
                raise ValueError(
                    f"runs {run.path} ({_short(lonely[0])}) and {peer.path} ({_short(peer.records(split)[1])}) were "
                    f"evaluated on different {split} data (the split hashes in predictions/{INDEX_FILE} differ), and "
                    f"no run of {other!r} was scored on the data of {run.path}: their examples cannot be paired. "
                    "Evaluate them on the same data (zoo evaluate RUN --data DIR) or train them with the same seeds")


def _short(data_hash: str) -> str:
    return data_hash[:19] + "…" if len(data_hash) > 20 else data_hash
