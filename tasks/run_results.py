"""Finished runs as the input of a comparison: ``zoo compare TASK --runs DIR [DIR ...]``.

A folder is either a training run (``run.json``, ``metrics.json``, ``predictions/``) or the output of
``zoo evaluate`` (``metrics.json`` naming its run, ``predictions/``). Either way a comparison needs the same
things: the variant, the per-example records of a split with the hash of the data they were scored on, and
the training's cost (parameters, throughput, wall time, budget) from the training run's ``metrics.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.records import INDEX_FILE, read_records
from tasks.run import RUN_FILE, read_run_info


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
    def task(self) -> str:
        return self.info["task"]

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
    """Runs grouped by run.json ``variant`` (first appearance first): the runs of a group are its seeds.

    Runs of one variant trained with different ``--model-set`` overrides (e.g. an ablation's) are different
    models and are refused; so are two folders of one training run (a run and its evaluation, or a folder
    given twice): each run is one seed.
    """
    groups: dict[str, list[RunResult]] = {}
    for result in results:
        groups.setdefault(result.variant, []).append(result)
    for name, runs in groups.items():
        first, trained = runs[0], {}
        for run in runs:
            a, b = first.info["config"].get("model") or {}, run.info["config"].get("model") or {}
            if a != b:
                keys = sorted(k for k in {*a, *b} if a.get(k) != b.get(k))
                raise ValueError(f"runs {first.path} and {run.path} are both {name!r} but with different model "
                                 f"overrides ({', '.join(keys)}); compare them in separate invocations")
            seen = trained.setdefault(run.run_path.resolve(), run)
            if seen is not run:
                raise ValueError(f"{seen.path} and {run.path} come from the same training run ({run.run_path}); each "
                                 "run counts as one seed: give one folder per run")
    return groups


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
