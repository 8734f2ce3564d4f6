"""The task registry: task name -> its runner class, filled by the tasks themselves.

A task registers itself as a variant does: its module decorates its :class:`~tasks.engine.task.Task` subclass with
:func:`register_task` when it is imported. The built-in tasks are the packages of ``tasks/`` that hold a ``task.py``;
they are imported once, on the first lookup, so that a fourth built-in task needs no edit here. A user's own task
registers the same way from a ``--user-dir`` plugin (:mod:`tasks.plugins.loader`), which every ``zoo`` command
loads before it reads its arguments.

Kept apart from the command line so that the CLI, ``zoo compare`` and run loading all look tasks up here
without importing each other.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from plumbing.errors import unknown_name

if TYPE_CHECKING:  # imported in the functions: a task module imports the registry while it defines its class
    from tasks.engine.task import Task

T = TypeVar("T", bound="type[Task]")

_REGISTRY: dict[str, type] = {}  # task name -> runner class, in registration order
_BUILTINS_IMPORTED = False


def register_task(cls: T) -> T:
    """Add the runner class ``cls`` (a :class:`~tasks.engine.task.Task` subclass naming itself in ``cls.name``) to
    the registry and return it, so that it serves as a class decorator::

        @register_task
        class ReverseTask(Task):
            name = "reverse"
            ...

    Once registered, the task is found by name everywhere: ``zoo train NAME``, ``zoo evaluate``, ``zoo predict``,
    ``zoo compare NAME``, ``zoo cv NAME`` (if it overrides ``Task.cross_validate``), and a variant may declare it.
    The same class registered again (its module imported anew, as a reloaded plugin is) replaces itself; another
    class under a taken name is refused.
    """
    from tasks.engine.task import Task

    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"register_task takes a subclass of tasks.engine.task.Task, got {cls!r}")
    name = cls.name
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"task class {cls.__qualname__} has name {name!r}; set the class attribute `name` to the "
                         "task's name (letters, digits, _), the word `zoo train NAME` takes")
    known = _REGISTRY.get(name)
    if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"task {name!r} is already registered (by {known.__module__}.{known.__qualname__}); "
                         "give the task a new name")
    _REGISTRY[name] = cls
    return cls


def builtin_task_modules() -> list[str]:
    """The modules of the built-in tasks: ``tasks.<package>.task`` for every package of ``tasks/`` with a
    ``task.py``, in name order (``tasks.engine.task`` holds the base class and registers nothing)."""
    root = Path(__file__).resolve().parents[1]
    return [f"tasks.{d.name}.task" for d in sorted(root.iterdir()) if (d / "__init__.py").is_file()
            and (d / "task.py").is_file()]


def _registry() -> dict[str, type]:
    """The registry, with the built-in tasks imported (once) so that they have registered."""
    global _BUILTINS_IMPORTED
    if not _BUILTINS_IMPORTED:
        for module in builtin_task_modules():
            importlib.import_module(module)
        _BUILTINS_IMPORTED = True
    return _REGISTRY


def task_names() -> list[str]:
    """The names of the registered tasks, in registration order: the built-in ones register on the first lookup,
    before the plugins the loader imports."""
    return list(_registry())


def task_class(name: str) -> type[Task]:
    """The runner class of task ``name``; unknown names get a "did you mean" error."""
    tasks = _registry()
    if name not in tasks:
        raise unknown_name("task", name, tasks)
    return tasks[name]


def tasks_with(hook: str) -> list[str]:
    """The registered tasks whose runner overrides the :class:`~tasks.engine.task.Task` hook ``hook`` (e.g.
    ``"cross_validate"``): the tasks a command that needs the hook offers, and names in its error."""
    from tasks.engine.task import Task

    if not hasattr(Task, hook):
        raise ValueError(f"{hook!r} is not a hook of tasks.engine.task.Task")
    return [name for name, cls in _registry().items() if next(k for k in cls.__mro__ if hook in k.__dict__) is not Task]


def task_shape(name: str):
    """The input size task ``name`` measures models at (its runner's ``delta_shape``), for :mod:`zoo.analysis.delta`."""
    cls = task_class(name)
    if cls.delta_shape is None:
        raise ValueError(f"task {name!r} declares no input shape (Task.delta_shape), so its models cannot be measured "
                         "by zoo diff / zoo check")
    return cls.delta_shape
