"""Every module of plumbing/, core/, zoo/ and tasks/ imports; the imports among them — inside functions too, since an
import made on call is an import — form no cycle; and the floors of the house import one way only, downwards:

    zoo (the package's front door: zoo.create, zoo.load_run)
    tasks.cli                                   the `zoo` command
    tasks.site                                  the static site: variants, lessons, comparisons as pages
    tasks.lab                                   the lessons
    tasks.i18n                                  the Chinese text: glossary, the article's outline, translations
    tasks.translation, tasks.cifar, tasks.medseg   the task runners
    tasks.compare, tasks.plugins, tasks.doctor  comparisons, plugins, the doctor on runs
    tasks.sweeps                                many runs as one sweep folder, on a launcher (serial, local, Ray, SLURM)
    tasks.runs                                  a finished run: its folder, loading, evaluation, export
    tasks.engine                                Task, trainer, config, checkpoints, precision
    zoo.analysis                                delta, attribution, probes, counterpart, the doctor's checks
    zoo.*                                       registry, classic, vision base, the variants
    core                                        the classic Transformer and its interchangeable parts
    plumbing                                    atomic writes, errors, configs from JSON, tables: used on every floor

Packages on one floor of tasks/ do not import each other (a fourth task runner needs none of the three).
Imports under ``if TYPE_CHECKING:`` are annotations, never run: they make no cycle, but they too point downwards only
(a reader who follows an annotation of the engine must not climb into the comparisons above it).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("plumbing", "core", "zoo", "tasks")
# (package prefix, floor): a module may import modules on lower floors, and its own package on its own floor
FLOORS = (
    ("plumbing", -1), ("core", 0), ("zoo.analysis", 2), ("zoo", 1),
    ("tasks.engine", 3), ("tasks.runs", 4), ("tasks.sweeps", 5),
    ("tasks.compare", 6), ("tasks.plugins", 6), ("tasks.doctor", 6), ("tasks.study", 7),
    ("tasks.translation", 7), ("tasks.cifar", 7), ("tasks.medseg", 7), ("tasks.lm", 7),
    ("tasks.i18n", 8), ("tasks.lab", 9), ("tasks.site", 10), ("tasks.cli", 11),
)
FACADE, TOP = "zoo", 12  # zoo/__init__.py: what users import; nothing in the project imports it


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for layer in LAYERS for p in sorted((ROOT / layer).rglob("*.py"))}


def _imported(node: ast.Import | ast.ImportFrom, module: str) -> set[str]:
    """The project modules one import statement names (``from a import b`` names ``a.b`` when it is a module)."""
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    else:
        base = node.module or ""
        if node.level:  # relative: resolved against the importing module's package
            package = (module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]).split(".")
            base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
        names = {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names}
    return {name for name in names if name in MODULES}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def top_level_imports(module: str, source: str | None = None) -> set[str]:
    """Project modules imported when ``module`` (or ``source`` standing for it) is imported: its module-level
    statements, including those in top-level ``if``/``try`` blocks (not ``if TYPE_CHECKING``), not those inside
    functions or classes."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.update(_imported(node, module))
            elif isinstance(node, ast.If) and not _is_type_checking(node):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                    visit(block)

    visit(ast.parse(MODULES[module].read_text() if source is None else source).body)
    return found - {module}


def all_imports(module: str, source: str | None = None, annotations: bool = False) -> set[str]:
    """Project modules ``module`` imports anywhere, including inside functions (imports made on call); those under
    ``if TYPE_CHECKING:`` only with ``annotations`` (they never run, so they make no cycle, but they name a floor)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not annotations:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(_imported(node, module))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(MODULES[module].read_text() if source is None else source))
    return found - {module}


def floor(module: str) -> tuple[str, int]:
    """The package and floor of ``module`` (see the module docstring)."""
    if module == FACADE:
        return FACADE, TOP
    if module == "tasks":  # the package's own __init__.py, empty
        return "tasks", 0
    for prefix, level in FLOORS:
        if module == prefix or module.startswith(prefix + "."):
            return prefix, level
    raise AssertionError(f"{module} is on no floor: add its package to FLOORS")


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of nodes ``[a, b, ..., a]``, or None when it is acyclic."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once every successor is explored
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == "open":
                return path[path.index(successor):] + [successor]
            if successor not in state and (cycle := visit(successor)):
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


SOURCE = """
import torch
from core.masks import causal_mask
from zoo import classic
from . import feature_maps
from ..registry import register
if TYPE_CHECKING:
    from tasks.engine.config import TrainConfig
try:
    from core.position import RoPE
except ImportError:
    pass

def build():
    from core.ffn import FFN
"""


def test_the_import_reader_sees_module_level_imports_only():
    # read as if it were zoo/linear/kernel.py: `.` is zoo.linear, `..` is zoo
    assert top_level_imports("zoo.linear.kernel", SOURCE) == {
        "core.masks", "zoo.classic", "zoo.linear.feature_maps", "zoo.registry", "core.position"}
    # inside a function: counted; under TYPE_CHECKING: an annotation, never run
    assert all_imports("zoo.linear.kernel", SOURCE) - top_level_imports("zoo.linear.kernel", SOURCE) == {"core.ffn"}


def test_no_import_cycle_among_project_modules_counting_imports_on_call():
    graph = {module: all_imports(module) for module in MODULES}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_import_reader_sees_imports_on_call_but_not_annotations():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tasks.engine.task import Task\n" \
             "def f():\n    from tasks.runs.run import load_run\n"
    assert all_imports("zoo.registry", source) == {"tasks.runs.run"}
    assert all_imports("zoo.registry", source, annotations=True) == {"tasks.runs.run", "tasks.engine.task"}


def floor_violations(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, imports in graph.items():
        package, level = floor(module)
        for name in sorted(imports):
            their_package, their_level = floor(name)
            if their_level > level or (their_level == level and their_package != package and level >= 3):
                wrong.append(f"{module} -> {name}")
    return wrong


def test_the_floor_check_catches_an_import_upwards_and_between_siblings():
    assert floor_violations({"zoo.registry": {"tasks.runs.run"}}) == ["zoo.registry -> tasks.runs.run"]
    assert floor_violations({"tasks.cifar.task": {"tasks.translation.task"}}) == [
        "tasks.cifar.task -> tasks.translation.task"]
    assert floor_violations({"tasks.cli.main": {"zoo"}}) == ["tasks.cli.main -> zoo"]  # the front door is on top
    assert floor_violations({"zoo.deit.model": {"zoo.vit.model"}}) == []  # a variant may build on another


def test_floors_import_one_way_counting_imports_on_call_and_annotations():
    """Arrows point down: cli -> lab -> task runners -> compare/plugins/doctor -> runs -> engine -> zoo.analysis
    -> zoo -> core -> plumbing, and only the front door (zoo.load_run) reaches up into tasks. Annotations count:
    the engine's Task names no type of the comparisons, runs or sweeps above it (PairedMetric is the engine's)."""
    wrong = floor_violations({module: all_imports(module, annotations=True) for module in MODULES})
    assert not wrong, "imports against the floors (see tests/test_imports.py): " + ", ".join(wrong)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module):
    importlib.import_module(module)
