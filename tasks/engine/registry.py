"""The task registry: task name -> its runner class, imported on first use.

Kept apart from the command line so that the CLI, ``zoo compare`` and run loading all look tasks up here
without importing each other.
"""

from __future__ import annotations

import importlib

from core.errors import unknown_name

# task name -> "module:TaskClass"; imported lazily so that `zoo --help` stays fast.
TASKS: dict[str, str] = {
    "translation": "tasks.translation.task:TranslationTask",
    "cifar": "tasks.cifar.task:CifarTask",
    "medseg": "tasks.medseg.task:MedsegTask",
}


def task_class(name: str):
    """The runner class of task ``name``; unknown names get a "did you mean" error."""
    if name not in TASKS:
        raise unknown_name("task", name, TASKS)
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def task_shape(name: str):
    """The input size task ``name`` measures models at (its runner's ``delta_shape``), for :mod:`zoo.analysis.delta`."""
    cls = task_class(name)
    if cls.delta_shape is None:
        raise ValueError(f"task {name!r} declares no input shape (Task.delta_shape), so its models cannot be measured "
                         "by zoo diff / zoo check")
    return cls.delta_shape
