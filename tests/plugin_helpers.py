"""Helpers of the plugin tests: a registry restored after each test, and plugin folders written on the fly.

Plugins register into process-wide tables (the variant registry, the kernels, the FFN types, the tasks) and are
imported as top-level modules; a test that loads one must leave none of it behind, or a later test (the
README's variant table, a parametrisation over every variant) would see it.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import tasks.engine.registry
import tasks.plugins.loader
import zoo.registry
from core.attention import KERNELS
from core.ffn import FFN_TYPES

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "swiglu"  # the worked example plugin
PACKAGE_ROOTS = tuple(REPO / d for d in ("core", "zoo", "tasks", "tests"))


def _is_plugin(module: object) -> bool:
    """A module imported from outside the package and the environment: a plugin (tmp_path, examples/)."""
    file = getattr(module, "__file__", None)
    if not file:
        return False
    path = Path(file).resolve()
    return not path.is_relative_to(Path(sys.prefix).resolve()) and not any(
        path.is_relative_to(root) for root in PACKAGE_ROOTS)


@contextlib.contextmanager
def isolated_registry() -> Iterator[None]:
    """Restore the variant and task registries, kernels, FFN types, ``sys.path`` and the plugin modules on exit."""
    tasks.engine.registry.task_names()  # the built-in tasks register (and import what they use) before the snapshot
    variants = {name: list(regs) for name, regs in zoo.registry._REGISTRY.items()}
    task_runners = dict(tasks.engine.registry._REGISTRY)
    kernels, ffns = dict(KERNELS), dict(FFN_TYPES)
    path, modules, called = list(sys.path), set(sys.modules), set(tasks.plugins.loader._CALLED)
    try:
        yield
    finally:
        zoo.registry._REGISTRY.clear()
        zoo.registry._REGISTRY.update(variants)
        tasks.engine.registry._REGISTRY.clear()
        tasks.engine.registry._REGISTRY.update(task_runners)
        KERNELS.clear()
        KERNELS.update(kernels)
        FFN_TYPES.clear()
        FFN_TYPES.update(ffns)
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            if _is_plugin(sys.modules[name]):
                del sys.modules[name]
        tasks.plugins.loader._CALLED.clear()
        tasks.plugins.loader._CALLED.update(called)
        importlib.invalidate_caches()


def write_plugin(folder: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> dedented source) under ``folder``; returns ``folder``."""
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return folder


HEADER = """
import torch
from torch import nn

from core.attention import ReferenceAttention, register_kernel
from core.ffn import PositionwiseFFN, register_ffn
from core.model import PRESETS, Transformer, TransformerConfig
from zoo.classic import VASWANI, token_inputs
from zoo.registry import Change, Variant, register
"""


def variant_source(name: str, change: str, presets: str = "PRESETS", extra: str = "",
                   tasks: str = '("translation",)', build: str = "Transformer", registration: str = "") -> str:
    """A plugin module registering variant ``name`` on the classic Transformer with one ``change`` (source of
    a ``Change(...)``), after the definitions in ``extra``; ``registration``: more ``Variant`` keywords
    (source, e.g. ``'builds_on="linear"'``)."""
    more = f", {registration}" if registration else ""
    return HEADER + textwrap.dedent(extra) + (
        f"\nregister(Variant(name={name!r}, paper=VASWANI, tasks={tasks}, config_class=TransformerConfig,\n"
        f"                 presets={presets}, build={build}, changes=({change},), example_input=token_inputs{more}))\n"
    )


def ffn_extra(cls: str, ffn: str) -> str:
    """Plugin source registering FFN type ``ffn``: the classic FFN under the class name ``cls``."""
    return f"""
class {cls}(PositionwiseFFN):
    pass


register_ffn("{ffn}", lambda d, f, a, p, layer: {cls}(d, f, a, p))
"""


# Plugins that declare only an FFN change but differ from their classic counterpart elsewhere, where no
# measurement of modules can see it or where it would be booked to the FFN (``variant_source`` keywords; the
# FFN type is "mine", renamed per plugin by the tests).
UNDECLARED = {
    # presets with one head and a third decoder layer: 57,632 parameters at tiny, the classic tiny has 44,800
    "wide": dict(presets='{n: dict(v, ffn="mine", heads=1, decoder_layers=3) for n, v in PRESETS.items()}',
                 change='Change("ffn", "dense", "mine", "a flaw", revert={"ffn": "dense", "ffn_options": {}})',
                 extra=ffn_extra("WideFFN", "mine")),
    # builds on linear attention, with another chunk size inside kernel_options: no module or parameter changes
    "chunky": dict(presets='{n: dict(v, ffn="mine", kernel_options={"chunk_size": 16}) for n, v in PRESETS.items()}',
                   change='Change("ffn", "dense", "mine", "a flaw", revert={"ffn": "dense", "ffn_options": {}})',
                   extra=ffn_extra("ChunkyFFN", "mine"),
                   registration='base_overrides={"kernel": "linear"}, builds_on="linear"'),
}
