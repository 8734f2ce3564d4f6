"""One definition of "the same run": the config fields that do not change what a run computes.

A training run is identified by its task and its config. Four places ask whether two configs are the same run,
and all of them compare :func:`result_settings` (the config without the fields of :data:`UNCHANGING`):

* the sweep's folder hash (:func:`tasks.sweeps.plan.config_hash`): a finished run is reused, never retrained;
* ``--resume`` (:func:`tasks.engine.checkpoint.load_checkpoint`): a checkpoint continues only the run that wrote it,
  so a resumed run equals the uninterrupted one;
* ``zoo compare --runs`` (:func:`tasks.compare.run_results.training_settings`): runs pooled as the seeds of one
  variant differ only in the seed (and the fields of :data:`UNCHANGING`);
* ``zoo cv``: a fold found in its folder is reused only when it is this run.

A config is compared in the form its task's config class gives it now (:func:`current_form`), whatever version of
the code recorded it: a run written before issue 36 recorded ``--patch-size`` as the flag's text ``"32,64,64"``,
today's config writes a list, and both are the same run to every consumer. A field added to a task's config after
runs were recorded is listed in :data:`ADDED_LATER` with the value that computes what those runs computed: a record
without it reads as having that value, and :func:`result_settings` leaves the field out while it holds that value,
so the sweep's folder names (and the runs in them) stay those of before; any other value is another run.

Each field of :data:`UNCHANGING` says why it cannot change a result. Every other field can, and two configs that
differ in one are two runs. :data:`CHANGING` gives the reason for the fields most often taken for settings that
"only say how it runs": ``epochs``, ``device``, ``compile``, ``deterministic``; error messages quote it.

A fifth consumer asks a different question: the precision probe (``--precision auto``) caches how long a training
step takes, keyed by :func:`timing_settings`. Its key keeps every field that changes a step's time, so it is the
result settings plus :data:`TIMED` (``num_threads``), less :data:`UNTIMED` (fields that change the result but not
how long one step takes).
"""

from __future__ import annotations

import dataclasses
from typing import Any

_ROUNDING = ("It may change the last bits of a float reduction (as the thread count does), never what is trained "
             "or which examples are scored")

# field -> why it cannot change what the run computes
UNCHANGING: dict[str, str] = {
    "out": "where the run writes, not what it computes",
    "resume": "continuing from last.pt is bit for bit the uninterrupted run (tests/tasks/engine: signal and resume)",
    "progress": "progress bars only print",
    "figures": "whether the run draws its plots (curves.png, the task's figures): figures, not scores",
    "num_threads": "how many cores a process uses: a sweep divides them between its workers. It may change the last "
                   "bits of some CPU reductions, never what is trained; run.json records it",
    "checkpoint_every": "checkpoints are written between optimizer steps and resume bit for bit",
    "doctor": "the doctor only watches the run and reports",
    "track": "trackers (TensorBoard, MLflow) only receive the metrics",
    "eval_batch_size": "how many examples one evaluation forward holds: in eval mode each example's output does not "
                       f"depend on the others of its batch. {_ROUNDING}",
    "sw_batch_size": f"how many sliding windows one 3D inference forward holds (as eval_batch_size). {_ROUNDING}",
    "attention_images": "how many test images the report draws with their attention maps: a figure, not a score",
    "overlay_slices": "how many test slices the report's overlays.png shows: a figure, not a score",
    "init_partial": "only allows an --init-from load that covers under half the model, which would otherwise be "
                    "refused: a run that loads computes the same with it or without it",
    "download": "whether missing CIFAR files are fetched into --data first: they are MD5-checked, so the data is the "
                "same (data and dataset name it)",
}

# field -> (the value that computes what runs recorded before the field existed computed, since when / why)
ADDED_LATER: dict[str, tuple[Any, str]] = {
    "recipe": ("default", "medseg's training recipe (issue 39): default is the training of before, AdamW and DiceCE"),
    "nsd_tolerance": (1.0, "medseg's NSD tolerance (issue 39): NSD is scored beside Dice and HD95, which it leaves "
                           "unchanged; a run recorded before it has no NSD, and zoo evaluate adds it"),
}

# field -> why it does change the result, for the fields most often mistaken for settings of how a run runs
CHANGING: dict[str, str] = {
    "epochs": "the learning-rate schedule is planned over epochs x steps per epoch: a run of other epochs steps "
              "with other learning rates from its first step on",
    "device": "other kernels, other float rounding (and bf16 autocast by default on CUDA)",
    "compile": "compiled code rounds differently and draws other dropout masks than eager code",
    "deterministic": "deterministic algorithms are other algorithms on CUDA (and a non-deterministic run does not "
                     "repeat itself)",
}

# fields of UNCHANGING that still change how long a training step takes: the precision probe's key keeps them
TIMED: dict[str, str] = {
    "num_threads": "a CPU step's time depends on the cores it uses",
}

# fields that change the result but not how long one training step takes: the precision probe's key leaves them out
UNTIMED: dict[str, str] = {
    "epochs": "how many steps there are, not how long one takes",
    "lr": "a number the optimizer multiplies by",
    "warmup": "the schedule's shape, not the step's work",
    "precision": "the probe times both precisions itself; this is what it chooses between",
}


def current_form(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a run's recorded ``config.json``, its ``run.json`` ``config``, a checkpoint's) with each value in
    the form its task's config class gives it now: rebuilt by :func:`plumbing.configs.config_from_dict` and written
    back by the class's ``to_dict`` (a patch recorded as ``"16,32,32"`` reads ``[16, 32, 32]``). The same keys come
    back, plus each field of :data:`ADDED_LATER` the record lacks, at its earlier value; another field the record
    lacks stays missing, a field this code no longer knows keeps its recorded value.

    A record that cannot be rebuilt (no task, a task not registered here, a value this code refuses) comes back as
    written, and is compared as such: then it differs where it did before, and nothing raises here.
    """
    from plumbing.configs import config_from_dict
    from tasks.engine.registry import task_class

    try:
        config_class = task_class(config["task"]).config_class
        known = {f.name for f in dataclasses.fields(config_class) if f.init}
        rebuilt = config_from_dict(config_class, {k: v for k, v in config.items() if k in known}).to_dict()
    except (KeyError, TypeError, ValueError):
        return config
    added = {k: value for k, (value, _) in ADDED_LATER.items() if k in known and k not in config}
    return {**{k: rebuilt.get(k, v) for k, v in config.items()}, **added}


def result_settings(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (in its :func:`current_form`) without the fields of :data:`UNCHANGING`, nor those of
    :data:`ADDED_LATER` at their earlier value: what decides the run's result."""
    return {k: v for k, v in current_form(config).items()
            if k not in UNCHANGING and not (k in ADDED_LATER and v == ADDED_LATER[k][0])}


def setting_differences(recorded: dict[str, Any], requested: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Fields outside :data:`UNCHANGING` whose values differ, both configs in their :func:`current_form`:
    name -> (recorded, requested), sorted by name. A field missing on one side counts as ``None`` there."""
    recorded, requested = current_form(recorded), current_form(requested)
    keys = (set(recorded) | set(requested)) - set(UNCHANGING)
    return {k: (recorded.get(k), requested.get(k)) for k in sorted(keys) if recorded.get(k) != requested.get(k)}


def describe_differences(differences: dict[str, tuple[Any, Any]], recorded: str = "recorded",
                         requested: str = "now") -> str:
    """``differences`` (from :func:`setting_differences`) as one line for an error message, each field with both
    values and, for a field of :data:`CHANGING`, why it changes the result:
    ``"epochs: recorded 1 vs now 2 (the learning-rate schedule ...); lr: recorded 0.01 vs now 0.02"``."""
    return "; ".join(f"{k}: {recorded} {a!r} vs {requested} {b!r}" + (f" ({CHANGING[k]})" if k in CHANGING else "")
                     for k, (a, b) in differences.items())


def timing_settings(config: dict[str, Any]) -> dict[str, Any]:
    """What decides how long one training step takes (the precision probe's cache key): :func:`result_settings`
    with the fields of :data:`TIMED` kept and those of :data:`UNTIMED` left out."""
    left_out = (set(UNCHANGING) - set(TIMED)) | set(UNTIMED)
    return {k: v for k, v in config.items() if k not in left_out}
