"""The doctor on the task layer: examine a finished run (:func:`doctor_run`) or a variant at initialisation
(:func:`doctor_variant`) on a batch of the task's own data; ``zoo doctor`` calls these.

A run is loaded with :func:`tasks.runs.run.load_run`, its data read by ``run.task.setup()``; its ``metrics.jsonl``
(and ``doctor/steps.jsonl``, written by ``zoo train --doctor``) feed the training-curve check, and a batch of its
training data the validation/training gap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from plumbing.errors import check_positive
from tasks.doctor.mistakes import Mistake, get_mistake
from tasks.engine.distributed import DistInfo, select_device
from tasks.engine.registry import task_class
from zoo.analysis.doctor import Batch, Diagnosis, examine
from zoo.analysis.doctor.training import STEPS_FILE, eval_split, read_jsonl
from zoo.registry import get_variant


def _batch(task, split: str, n: int) -> Batch:
    """The task's doctor batch of ``split``; a task that offers none cannot be examined."""
    batch = task.doctor_batch(split, n)
    if batch is None:
        raise ValueError(f"zoo doctor cannot examine {task.name} models: the task gives no batch to examine "
                         "(Task.doctor_batch); from Python, zoo.analysis.doctor.examine(model, batch) takes any batch")
    return batch


def doctor_run(path: str | Path, checkpoint: str = "best", device: str = "cpu", batch_size: int = 64,
               mistake: str | None = None) -> Diagnosis:
    """Examine the trained model of the run folder ``path`` (see the module docstring)."""
    from tasks.runs.run import load_run

    check_positive("batch_size", batch_size)
    harm = get_mistake(mistake) if mistake else None
    if harm is not None and harm.overrides:
        raise ValueError(f"--lab-mistake {mistake} changes how the model is built ({harm.overrides}); it applies to "
                         "a fresh model: use zoo doctor --variant ... --lab-mistake instead")
    run = load_run(path, checkpoint, device)
    task = run.task
    task.setup()
    model = run.model if harm is None else harm.apply(run.model)
    split = eval_split(task)
    history = read_jsonl(run.path / "metrics.jsonl")
    steps = read_jsonl(run.path / "doctor" / STEPS_FILE)
    diagnosis = examine(model, _batch(task, split, batch_size), trained=True,
                        warmup_steps=run.config.warmup, train_batch=_batch(task, "train", batch_size),
                        history=history, steps=steps, metric=task.main_metric, higher_is_better=task.higher_is_better,
                        plateau=task.target_entropy())
    diagnosis.context["source"] = (f"run {run.path} ({Path(run.weights).name}), {split} batch"
                                   + (f", with the mistake {mistake!r} injected" if mistake else ""))
    return diagnosis


def doctor_variant(variant: str, task_name: str | None = None, preset: str | None = None,
                   model_set: dict[str, Any] | None = None, mistake: str | None = None, device: str = "cpu",
                   batch_size: int = 64, seed: int = 0, n_train: int | None = None) -> Diagnosis:
    """Examine ``variant`` at initialisation, built by the task runner exactly as ``zoo train`` would build it,
    on a batch of the task's embedded data (``mistake``: inject one of :data:`tasks.doctor.mistakes.MISTAKES`).

    ``task_name``: default, the variant's first task (one lookup by name to find it); the registration itself is
    resolved once, by the task (:attr:`tasks.engine.task.Task.variant`), and read from there.
    """
    check_positive("batch_size", batch_size)
    task_name = task_name or get_variant(variant).tasks[0]
    cls = task_class(task_name)
    harm: Mistake | None = get_mistake(mistake) if mistake else None
    fields = dict(model_set or {})
    if harm is not None:
        clash = {k: v for k, v in harm.overrides.items() if k in fields and fields[k] != v}
        if clash:
            raise ValueError(f"--model-set {clash} contradicts --lab-mistake {mistake}, which sets "
                             f"{ {k: harm.overrides[k] for k in clash} }; drop one of them")
        fields.update(harm.overrides)
    extra = {"n_train": n_train} if n_train and "n_train" in cls.config_class.__dataclass_fields__ else {}
    config = cls.config_class(variant=variant, preset=preset, model=fields, seed=seed, device=device, progress=False,
                              **extra)
    task = cls(config, select_device(device), DistInfo())
    task.setup()
    torch.manual_seed(seed)  # the initialisation `zoo train --seed` would draw
    model = task.build_model().to(task.device)
    if harm is not None and harm.apply is not None:
        model = harm.apply(model)
    warmup = harm.warmup if harm is not None and harm.warmup is not None else config.warmup
    diagnosis = examine(model, _batch(task, eval_split(task), batch_size), trained=False,
                        warmup_steps=warmup)
    own = task.variant.default_preset if task.variant is not None else None  # None: a reference model
    shown = preset or (f"{task.preset} (the task's default)" if task.preset
                       else f"{own} (the variant's default)" if own else "the variant's default")
    diagnosis.context["source"] = (f"variant {variant} ({task_name}, preset {shown}) at "
                                   f"initialisation, seed {seed}" + (f", with the mistake {mistake!r} injected"
                                                                     if mistake else ""))
    return diagnosis
