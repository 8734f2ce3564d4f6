"""``zoo new-variant NAME --on classic|vit|swin --part PART``: write a small, working plugin folder.

The folder (``--out``, default ``./NAME``) holds a Python package registering the variant through the zoo's
public API, ready for ``--user-dir``:

    PKG/__init__.py       the registration: the declared change (classic choice, the variant's, the flaw), the
                          paper, the revert, the base it ``builds_on``; the module's registration as a kernel or
                          FFN type
    PKG/config.py         the presets: the base's, with the variant's choice switched on
    PKG/ffn.py | attention.py   the replaced module: a subclass of the core module the base uses, computing
                          exactly what it computes, with the place to edit marked ``EDIT HERE``
    README.md             a stub: what changed, and the commands to check, diff and compare it
    test_PKG.py           pytest running the conformance check (``zoo check``) at the tiny preset
    pyproject.toml        ``pip install -e DIR`` registers the variant through an entry point

Because the module starts as the classic one under another name, the variant builds and passes
``zoo check`` at once, and ``zoo diff`` shows the module replaced at its part and nothing else.

A part is scaffolded where the base builds it through a registration hook (see :data:`BASES`): attention
through :func:`core.attention.register_kernel`, the FFN through :func:`core.ffn.register_ffn`.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.resources
import importlib.util
import json
import keyword
import re
import string
import textwrap
from dataclasses import dataclass
from pathlib import Path

from plumbing.errors import unknown_name


@dataclass(frozen=True)
class Base:
    """A model a plugin can patch: its registration's imports, task, presets and the parts it has hooks for."""

    title: str
    task: str
    baseline: str  # the registered variant it builds on (builds_on=), which a comparison puts beside the plugin
    config_import: str
    config_class: str
    default_preset: str  # a Python expression
    build: tuple[str, str]  # (module, name)
    example: tuple[str, str]
    classic: dict[str, str]  # part -> the base's choice there, as the Change's ``classic`` text
    options: dict[str, bool]  # part -> whether its config has a ``<field>_options`` dict


@dataclass(frozen=True)
class Hook:
    """How a part is registered: the config field that picks it, the registering function, the module file."""

    field: str
    hook: tuple[str, str]
    kind: str
    module_file: str
    suffix: str  # of the module's class name


HOOKS: dict[str, Hook] = {
    "attention": Hook("kernel", ("core.attention", "register_kernel"), "attention kernel", "attention", "Attention"),
    "ffn": Hook("ffn", ("core.ffn", "register_ffn"), "FFN type", "ffn", "FFN"),
}

_SOFTMAX = "softmax(Q Kᵀ / √d_k) V over every key (scaled dot-product attention)"
BASES: dict[str, Base] = {
    "classic": Base(
        "the classic Transformer", "translation", "classic",
        "from core.model import PRESETS as BASE_PRESETS\nfrom core.model import TransformerConfig", "TransformerConfig",
        '"small"', ("core.model", "Transformer"), ("zoo.classic", "token_inputs"),
        {"attention": _SOFTMAX, "ffn": "position-wise FFN: W₂·ReLU(W₁·x + b₁) + b₂, hidden width 4·D"},
        {"attention": True, "ffn": True},
    ),
    "vit": Base(
        "ViT", "cifar", "vit",
        "from zoo.vit.config import DEFAULT_PRESET as BASE_DEFAULT\nfrom zoo.vit.config import PRESETS as "
        "BASE_PRESETS\nfrom zoo.vit.config import ViTConfig", "ViTConfig", "BASE_DEFAULT",
        ("zoo.vit", "VisionTransformer"), ("zoo.vision", "image_inputs"),
        {"attention": _SOFTMAX, "ffn": "ViT's position-wise FFN: W₂·GELU(W₁·x + b₁) + b₂, hidden width mlp_ratio·D"},
        {"attention": True, "ffn": True},
    ),
    "swin": Base(
        "Swin", "cifar", "swin",
        "from zoo.swin.config import DEFAULT_PRESET as BASE_DEFAULT\nfrom zoo.swin.config import PRESETS as "
        "BASE_PRESETS\nfrom zoo.swin.config import SwinConfig", "SwinConfig", "BASE_DEFAULT",
        ("zoo.swin", "SwinTransformer"), ("zoo.vision", "image_inputs"),
        {"attention": "softmax(Q Kᵀ / √d_k + relative position bias) V inside each (shifted) window"},
        {"attention": False},
    ),
}

NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
MAX_NAME = 30  # the written code stays within the 120-column lines


def check_name(name: str) -> str:
    """Validate a new variant's name; returns its Python package name (``-`` becomes ``_``)."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or len(name) > MAX_NAME:
        raise ValueError(f"variant name {name!r} must be lowercase letters and digits, words joined by - or _, "
                         f"starting with a letter, at most {MAX_NAME} characters (e.g. 'relu2-ffn')")
    pkg = name.replace("-", "_")
    if keyword.iskeyword(pkg):
        raise ValueError(f"variant name {name!r} is a Python keyword; choose another")
    from core.attention import KERNELS
    from core.ffn import FFN_TYPES
    from zoo.registry import list_variants

    for kind, taken in (("variant", list_variants()), ("attention kernel", KERNELS), ("ffn type", FFN_TYPES)):
        if name in taken:
            raise ValueError(f"{name!r} is already a registered {kind}; choose a new name for the variant")
    if importlib.util.find_spec(pkg) is not None:
        raise ValueError(f"the package name {pkg!r} is taken by an importable module "
                         f"({importlib.util.find_spec(pkg).origin}); choose another variant name")
    return pkg


def _template(name: str) -> string.Template:
    return string.Template(importlib.resources.files("tasks.plugins.templates").joinpath(f"{name}.txt").read_text())


def plan(name: str, on: str, part: str, out: Path) -> dict[Path, str]:
    """The files of the plugin folder ``out`` (path -> text), without writing them."""
    if on not in BASES:
        raise unknown_name("base (--on)", on, BASES)
    base = BASES[on]
    from core.parts import check_part

    check_part(part)
    if part not in base.classic:
        hooks = ", ".join(f"{p} ({HOOKS[p].hook[1]})" for p in base.classic)
        raise ValueError(
            f"--part {part} has no registration hook on {on}: the scaffold patches a part through its hook, and "
            f"{on} has them for {hooks}; for another part write the builder by hand, replacing only that part's modules"
        )
    pkg = check_name(name)
    hook = HOOKS[part]
    cls = "".join(w.capitalize() for w in re.split(r"[-_]", name)) + hook.suffix
    factory = f"build_{pkg}" if part == "ffn" else cls
    revert = {hook.field: "sdpa" if part == "attention" else "dense"}
    doc = f"The config class is {base.title}'s own ({base.config_class})."
    if base.options[part]:
        revert[f"{hook.field}_options"] = {}
        doc = textwrap.fill(f"{doc} Options of your module go in the config's {hook.field}_options dict, which reaches "
                            "its constructor as keywords; e.g. a preset of your own:", 110)
        doc += (f'\n``"tiny-wide": {{**BASE_PRESETS["tiny"], "{hook.field}": "{name}", '
                f'"{hook.field}_options": {{"gain": 2.0}}}}``.')
    else:
        doc = textwrap.fill(f"{doc} It passes no options to the {hook.kind}: give your module fixed settings.", 110)
    imports = sorted([hook.hook, base.build, base.example, ("zoo.registry", "Change, Paper, Variant, register")])
    values = dict(
        name=name, pkg=pkg, on=on, part=part, cls=cls, factory=factory, field=hook.field, hook=hook.hook[1],
        hook_kind=hook.kind, module_file=hook.module_file, base_title=base.title, task=base.task,
        baseline=base.baseline, config_import=base.config_import, config_class=base.config_class,
        default_preset=base.default_preset, build=base.build[1], example=base.example[1],
        classic_choice=base.classic[part], revert=json.dumps(revert), year=datetime.date.today().year,
        imports="\n".join(f"from {m} import {n}" for m, n in imports),
        local_imports="\n".join(f"from {m} import {n}" for m, n in sorted(
            [(".config", "CONFIG_CLASS, DEFAULT_PRESET, PRESETS"), (f".{hook.module_file}", factory)])),
        config_doc=doc,
        dist=f"{name}-zoo-plugin", out_name=str(out),
    )
    files = {
        Path(pkg) / "__init__.py": "registration.py",
        Path(pkg) / "config.py": "config.py",
        Path(pkg) / f"{hook.module_file}.py": hook.module_file + ".py",
        Path("README.md"): "README.md",
        Path("pyproject.toml"): "pyproject.toml",
        Path(f"test_{pkg}.py"): "test_variant.py",
    }
    return {out / path: _template(template).substitute(values) for path, template in files.items()}


def new_variant(name: str, on: str, part: str, out: str | Path | None = None) -> list[Path]:
    """Write the plugin folder of a new variant ``name`` patching ``part`` of ``on``; returns the files written.

    ``out`` (default ``./NAME``) must not exist or be an empty folder.
    """
    out = Path(out) if out is not None else Path(str(name))
    files = plan(name, on, part, out)  # every name is checked before anything is written
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} is a file; give a folder for the plugin")
    if out.is_dir() and any(out.iterdir()):
        raise FileExistsError(f"--out {out} already exists and is not empty; give a new folder (or remove it)")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(files)


def _cmd_new_variant(args: argparse.Namespace) -> int:
    written = new_variant(args.name, args.on, args.part, args.out)
    out = written[0].parent.parent
    base = BASES[args.on]
    module = written[2].relative_to(out)
    print(f"wrote {out}/: the plugin of variant {args.name!r}, the {args.part} of {base.title} replaced")
    for path in written:
        print(f"  {path.relative_to(out)}")
    print(f"\nedit {module} at EDIT HERE (it computes the classic {args.part} for now), then the change's text and "
          f"the paper in {written[0].relative_to(out)}; then:")
    print(f"  zoo check {args.name} --user-dir {out}\n  zoo diff {args.name} --user-dir {out}\n"
          f"  zoo compare {base.task} --variants {base.baseline},{args.name} --user-dir {out}")
    return 0


def add_scaffold_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("new-variant", help="write a working plugin folder for a new variant, to edit")
    p.add_argument("name", help="the new variant's name (lowercase, e.g. relu2-ffn)")
    p.add_argument("--on", required=True, choices=sorted(BASES), help="the model it patches")
    p.add_argument("--part", required=True, help=f"the part it replaces ({', '.join(HOOKS)})")
    p.add_argument("--out", default=None, help="the plugin folder to write (default: ./NAME); new or empty")
    p.set_defaults(func=_cmd_new_variant)
