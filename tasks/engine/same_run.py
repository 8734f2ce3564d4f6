"""One definition of "the same run": the config fields that do not change what a run computes.

A training run is identified by its task and its config. Four places ask whether two configs are the same run:
the sweep's folder hash (:func:`tasks.sweeps.plan.config_hash`: reuse a finished run), ``--resume`` (a checkpoint
continues only under the settings that wrote it), ``zoo compare --runs`` (seeds pooled as one variant) and
``zoo cv`` (a fold reused). All of them leave out exactly the fields of :data:`UNCHANGING` and compare the rest;
each field says why it cannot change a result. Anything not listed changes a result — ``epochs`` (the learning-rate
schedule is planned over them), ``device`` and ``compile`` (other kernels, other float rounding), ``deterministic``
(other algorithms on CUDA) — and so is a different run.
"""

from __future__ import annotations

from typing import Any

# field -> why it cannot change what the run computes
UNCHANGING: dict[str, str] = {
    "out": "where the run writes, not what it computes",
    "resume": "continuing from last.pt is bit for bit the uninterrupted run (tests/tasks/engine: signal and resume)",
    "progress": "progress bars only print",
    "num_threads": "how many cores a process uses: a sweep divides them between its workers. It may change the last "
                   "bits of some CPU reductions, never what is trained; run.json records it",
    "checkpoint_every": "checkpoints are written between optimizer steps and resume bit for bit",
    "doctor": "the doctor only watches the run and reports",
    "track": "trackers (TensorBoard, MLflow) only receive the metrics",
}


def result_settings(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without the fields of :data:`UNCHANGING`: what decides the run's result."""
    return {k: v for k, v in config.items() if k not in UNCHANGING}


def setting_differences(recorded: dict[str, Any], requested: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Fields outside :data:`UNCHANGING` whose values differ: name -> (recorded, requested), sorted by name.
    A field missing on one side counts as ``None`` there."""
    keys = (set(recorded) | set(requested)) - set(UNCHANGING)
    return {k: (recorded.get(k), requested.get(k)) for k in sorted(keys) if recorded.get(k) != requested.get(k)}
