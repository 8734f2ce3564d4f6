"""Plugins: variants, attention kernels, FFN types and tasks registered from outside the package.

A plugin is ordinary Python that calls the public registration API the built-in variants and tasks call:
:func:`zoo.registry.register` (a :class:`~zoo.registry.Variant` with its declared changes),
:func:`core.attention.register_kernel`, :func:`core.ffn.register_ffn` and
:func:`tasks.engine.registry.register_task` (a :class:`~tasks.engine.task.Task` subclass; the plugin may then
register existing variants, e.g. ``classic``, for its own task). It is found in three places, all loaded by every
``zoo`` command before it reads its arguments (so that ``zoo train MYTASK`` knows a plugin's task):

* ``--user-dir DIR`` (repeatable): DIR is a Python package (it has an ``__init__.py``), imported by its
  folder name; or a folder of modules and packages, each imported (``test_*.py``, ``conftest.py``,
  ``setup.py`` and names starting with ``_`` or ``.`` are skipped). ``zoo new-variant`` writes such a folder.
* ``ZOO_USER_DIR``: folders separated as in ``PATH`` (``:``; ``;`` on Windows), loaded the same way.
* installed distributions that declare an entry point in the group ``transformer_zoo.variants``, e.g.
  ``[project.entry-points."transformer_zoo.variants"] swiglu = "swiglu"``: the module is imported (a
  ``module:function`` entry point is called once, without arguments).

Loading is idempotent (a module already imported from the same file is not imported again). What is
refused gets a one-line :class:`PluginError` naming the plugin file: an import that fails (the file and
line where it failed), a variant name that already exists, a kernel or FFN type name that already exists
(the core's entry is put back), a task name that already exists, an unknown part (``Change`` refuses it) and an
unknown task.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import sys
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "transformer_zoo.variants"
ENV_VAR = "ZOO_USER_DIR"
SKIPPED_FILES = ("conftest.py", "setup.py")


class PluginError(ValueError):
    """A plugin that cannot be loaded; the message is one line and names the plugin file."""


@dataclass(frozen=True)
class Loaded:
    """What one plugin source registered: its variants (name, tasks), kernels, FFN types and tasks."""

    source: str
    variants: tuple[tuple[str, tuple[str, ...]], ...]
    kernels: tuple[str, ...]
    ffns: tuple[str, ...]
    tasks: tuple[str, ...] = ()


def _registries() -> tuple[dict[str, tuple], dict[str, Any], dict[str, Any], tuple[str, ...]]:
    """Snapshots of the variant registry (name -> its registrations), the kernels, the FFN types and the tasks."""
    from core.attention import KERNELS
    from core.ffn import FFN_TYPES
    from tasks.engine.registry import task_names
    from zoo.registry import list_variants, registrations

    return ({n: tuple(registrations(n)) for n in list_variants()}, dict(KERNELS), dict(FFN_TYPES),
            tuple(task_names()))


def _inside(file: str | os.PathLike | None, root: Path) -> bool:
    if not file:
        return False
    try:
        return Path(file).resolve().is_relative_to(root)
    except (OSError, ValueError):
        return False


def _where_it_failed(error: BaseException, root: Path | None, fallback: str) -> str:
    """``file:line`` of the deepest traceback frame inside the plugin ``root`` (a syntax error's own
    location first), else ``fallback``."""
    if isinstance(error, SyntaxError) and error.filename and (root is None or _inside(error.filename, root)):
        return f"{error.filename}:{error.lineno}"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if root is not None and _inside(f.filename, root)]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else fallback


def _file_of(obj: object, root: Path | None, fallback: str) -> str:
    """The source file of ``obj`` when it lies inside the plugin ``root``, else ``fallback``."""
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    file = getattr(module, "__file__", None)
    return file if file and (root is None or _inside(file, root)) else fallback


def _check_new(before: tuple, source: str, root: Path | None, fallback: str) -> Loaded:
    """Validate what was registered since ``before``; put back a core kernel or FFN type a plugin replaced.

    An existing variant name is refused, unless the plugin registers it for tasks it registered itself: a user's
    own task trains the zoo's variants (``classic`` as its baseline) without renaming them.
    """
    from core.attention import KERNELS
    from core.ffn import FFN_TYPES
    from plumbing.errors import unknown_name

    variants, kernels, ffns, tasks_before = before
    after, _, _, tasks_after = _registries()
    new_tasks = tuple(t for t in tasks_after if t not in tasks_before)
    new_variants = []
    for name, regs in after.items():
        added = regs[len(variants.get(name, ())):]
        for variant in added:
            where = _file_of(variant.build, root, _file_of(variant.config_class, root, fallback))
            if name in variants and not set(variant.tasks) <= set(new_tasks):
                tasks = ", ".join(t for v in variants[name] for t in v.tasks)
                raise PluginError(f"plugin {where}: registers variant {name!r}, which already exists (for {tasks}); "
                                  "give the variant a new name")
            for task in variant.tasks:
                if task not in tasks_after:
                    raise PluginError(f"plugin {where}: variant {name!r} declares "
                                      f"{unknown_name('task', task, tasks_after)}")
            new_variants.append((name, tuple(variant.tasks)))
    for kind, table, old in (("attention kernel", KERNELS, kernels), ("ffn type", FFN_TYPES, ffns)):
        for name, value in list(table.items()):
            if name in old and old[name] is not value:
                table[name] = old[name]  # the core's own entry stays what every other variant relies on
                raise PluginError(f"plugin {_file_of(value, root, fallback)}: registers the {kind} {name!r}, which "
                                  "already exists; register it under a new name")
    return Loaded(source, tuple(new_variants), tuple(k for k in KERNELS if k not in kernels),
                  tuple(f for f in FFN_TYPES if f not in ffns), new_tasks)


def _import_registering(name: str, file: Path, root: Path, source: str) -> Loaded:
    """Import module ``name`` (from ``file``, under the plugin folder ``root``) and check what it registered."""
    existing = sys.modules.get(name)
    if existing is not None:
        origin = getattr(existing, "__file__", None)
        if origin and Path(origin).resolve() == file.resolve():
            return Loaded(source, (), (), ())  # loaded already: nothing new
        raise PluginError(f"plugin {file}: its module name {name!r} is taken by the already imported "
                          f"{origin or 'built-in module'}; rename the plugin file or folder")
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or Path(spec.origin).resolve() != file.resolve():
        raise PluginError(f"plugin {file}: the module name {name!r} resolves to {getattr(spec, 'origin', None)} "
                          "first on sys.path; rename the plugin file or folder")
    before = _registries()
    try:
        importlib.import_module(name)
    except PluginError:
        raise
    except Exception as error:  # any failure of the user's code becomes one line naming its file
        sys.modules.pop(name, None)
        raise PluginError(f"plugin {_where_it_failed(error, root, str(file))}: failed to import "
                          f"({type(error).__name__}: {' '.join(str(error).split())})") from error
    return _check_new(before, source, root, str(file))


def plugin_modules(folder: Path) -> tuple[Path, list[tuple[str, Path]]]:
    """The ``sys.path`` entry and ``(module name, file)`` of every module a user folder holds.

    A package folder (with ``__init__.py``) is one module, named after the folder; any other folder holds
    its ``*.py`` modules and its packages, in name order.
    """
    if (folder / "__init__.py").is_file():
        return folder.parent, [(folder.name, folder / "__init__.py")]
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(("_", ".", "test_")) or entry.name in SKIPPED_FILES:
            continue
        if entry.suffix == ".py" and entry.is_file() and not entry.stem.endswith("_test"):
            found.append((entry.stem, entry))
        elif entry.is_dir() and (entry / "__init__.py").is_file() and entry.name != "tests":
            found.append((entry.name, entry / "__init__.py"))
    return folder, found


def load_user_dir(folder: str | os.PathLike, origin: str = "--user-dir") -> list[Loaded]:
    """Import the plugin package or modules in ``folder`` (see the module docstring); returns what each
    module registered. ``origin`` names where the folder came from in error messages."""
    path = Path(folder).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{origin} {folder}: no such folder; give the folder holding your plugin package or "
                                "modules (zoo new-variant NAME --out DIR writes one)")
    if not path.is_dir():
        raise NotADirectoryError(f"{origin} {folder} is a file; give the folder that holds it")
    root = path.resolve()
    entry, modules = plugin_modules(root)
    for name, file in modules:
        if not name.isidentifier():
            raise PluginError(f"plugin {file}: {name!r} is not a Python module name; rename it (letters, digits, _)")
    if not modules:
        log.warning("%s %s holds no Python package or module to import", origin, folder)
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))
        importlib.invalidate_caches()
    return [_import_registering(name, file, root, f"{origin} {folder}") for name, file in modules]


def _distribution_root(module: str) -> Path | None:
    """The folder of an entry point's top-level package, or its module file: where its own frames lie."""
    try:
        spec = importlib.util.find_spec(module.partition(".")[0])
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin).resolve()
    return origin.parent if spec.submodule_search_locations else origin


_CALLED: set[str] = set()  # callable entry points already run in this process (a second call would re-register)


def load_entry_points(group: str = ENTRY_POINT_GROUP) -> list[Loaded]:
    """Load every installed entry point of ``group``: import its module (call it once if it names a callable)."""
    loaded = []
    for point in sorted(importlib.metadata.entry_points(group=group), key=lambda p: (p.name, p.value)):
        dist = getattr(point, "dist", None)
        source = f"entry point {point.name} = {point.value}" + (f" of {dist.name} {dist.version}" if dist else "")
        before = _registries()
        try:
            target = point.load()
            if callable(target) and not isinstance(target, ModuleType) and point.value not in _CALLED:
                _CALLED.add(point.value)
                target()
        except PluginError:
            raise
        except Exception as error:
            root = _distribution_root(point.module)
            where = _where_it_failed(error, root, str(root) if root else "file unknown")
            raise PluginError(f"plugin {source} ({where}): failed to load "
                              f"({type(error).__name__}: {' '.join(str(error).split())})") from error
        module = sys.modules.get(point.module)
        loaded.append(_check_new(before, source, None, getattr(module, "__file__", None) or source))
    return loaded


def env_user_dirs(environ: dict[str, str] | None = None) -> list[str]:
    """The folders in ``ZOO_USER_DIR`` (separated by ``os.pathsep``, empty entries ignored)."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return [d for d in value.split(os.pathsep) if d.strip()]


def load_plugins(user_dirs: Sequence[str] | None = None, entry_points: bool = True,
                 environ: dict[str, str] | None = None) -> list[Loaded]:
    """Load every plugin: installed entry points, then ``ZOO_USER_DIR``, then ``user_dirs`` (``--user-dir``).

    A folder named twice is loaded once. Returns what each source registered.
    """
    loaded = load_entry_points() if entry_points else []
    seen: set[Path] = set()
    sources: Iterable[tuple[str, str]] = [*((d, ENV_VAR) for d in env_user_dirs(environ)),
                                          *((d, "--user-dir") for d in user_dirs or ())]
    for folder, origin in sources:
        key = Path(folder).expanduser().resolve()
        if key not in seen:
            seen.add(key)
            loaded += load_user_dir(folder, origin)
    for item in loaded:
        if item.variants or item.kernels or item.ffns or item.tasks:
            log.debug("%s registered variants %s, kernels %s, ffn types %s, tasks %s", item.source,
                      [n for n, _ in item.variants], list(item.kernels), list(item.ffns), list(item.tasks))
    return loaded


def user_dirs_of(args: argparse.Namespace) -> list[str]:
    """The ``--user-dir`` folders given before and after the subcommand, in that order."""
    return [*(getattr(args, "user_dir_global", None) or []), *(getattr(args, "user_dir", None) or [])]


def add_user_dir_flag(parser: argparse.ArgumentParser, dest: str = "user_dir", default: Any = None) -> None:
    """Add ``--user-dir DIR`` (repeatable) to ``parser``, and to each of its subcommands, recursively.

    The subcommands' flag has its own ``dest`` and no default, so that ``zoo --user-dir A check X --user-dir B``
    keeps both (argparse copies a subcommand's values over its parent's).
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                add_user_dir_flag(sub, "user_dir", argparse.SUPPRESS)
    parser.add_argument("--user-dir", dest=dest, action="append", metavar="DIR", default=default,
                        help=f"import plugin variants from DIR (repeatable; also ${ENV_VAR}, separated as in PATH, "
                             f"and installed '{ENTRY_POINT_GROUP}' entry points)")
