"""Every module of core/, zoo/ and tasks/ imports; the top-level imports among them form no cycle; and the layers
import one way only (tasks → zoo → core)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("core", "zoo", "tasks")  # each may import only the layers before it


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


def all_imports(module: str, source: str | None = None) -> set[str]:
    """Project modules ``module`` imports anywhere, including inside functions (imports made on call)."""
    nodes = ast.walk(ast.parse(MODULES[module].read_text() if source is None else source))
    return {name for node in nodes if isinstance(node, ast.Import | ast.ImportFrom) for name in _imported(node, module)}


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
    assert all_imports("zoo.linear.kernel", SOURCE) - top_level_imports("zoo.linear.kernel", SOURCE) == {
        "core.ffn", "tasks.engine.config"}


def test_no_import_cycle_among_project_modules():
    graph = {module: top_level_imports(module) for module in MODULES}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_layers_import_one_way():
    """core never imports zoo or tasks (not even on call); zoo never imports tasks at import time."""
    wrong = []
    for module in MODULES:
        layer = LAYERS.index(module.split(".")[0])
        imports = all_imports(module) if layer == 0 else top_level_imports(module)
        wrong += [f"{module} -> {name}" for name in sorted(imports) if LAYERS.index(name.split(".")[0]) > layer]
    assert not wrong, "imports against the layering (tasks -> zoo -> core): " + ", ".join(wrong)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module):
    importlib.import_module(module)
