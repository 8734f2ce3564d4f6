"""Run configuration: one dataclass per task, every field overridable from the command line.

:class:`TrainConfig` holds what every task shares; a task subclasses it with its own fields. The ``zoo``
command derives its flags from the dataclass fields (``batch_size`` -> ``--batch-size``), so a new field
is a new flag with no extra code; the flag's help is the field's trailing ``# comment`` in the source (the
nearest class in the hierarchy that comments it), so the text lives in one place. Every config validates
its fields when it is built.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import io
import json
import os
import tokenize
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from plumbing.atomic import write_json_atomic
from plumbing.configs import config_from_dict  # noqa: F401  (re-exported: run loading, sweeps)
from plumbing.errors import check_bool, check_int, check_number, check_positive, unknown_name


def cache_root() -> Path:
    """Where the package caches what it measured or generated: ``$ZOO_CACHE`` (default
    ``~/.cache/transformer-zoo``): matmul peaks, precision probes, the default medseg phantom."""
    return Path(os.environ.get("ZOO_CACHE", "~/.cache/transformer-zoo")).expanduser()

PRECISIONS = ("default", "fp32", "bf16", "auto")
TRACKERS = ("tensorboard", "mlflow")  # --track: tasks.runs.tracking


@dataclass
class TrainConfig:
    """Fields shared by every task runner."""

    task: str = ""  # the task runner (set by each task's config)
    variant: str = "classic"  # the zoo variant (or the task's reference model) to train
    preset: str | None = None  # the variant's preset; None: the task's default for it
    data: str | None = None  # a real dataset's folder; None: the embedded default data
    out: str | None = None  # output folder; None: runs/<task>-<variant>
    epochs: int = 10  # passes over the training data
    batch_size: int = 64  # examples per micro-batch
    lr: float = 1e-3  # peak learning rate
    weight_decay: float = 0.0  # AdamW's decoupled weight decay
    warmup: int = 100  # optimizer steps of learning-rate warm-up
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    accumulate: int = 1  # micro-batches per optimizer step
    seed: int = 0  # seeds data order, initialisation and augmentation
    device: str = "auto"  # auto (CUDA, then CPU), cpu, cuda, cuda:1, ...
    deterministic: bool = True  # deterministic algorithms (CPU runs are then bit-for-bit repeatable)
    num_threads: int = 0  # CPU threads for torch; 0 keeps torch's default
    resume: bool = False  # continue the run in --out from its last checkpoint (none yet: start from the beginning)
    checkpoint_every: int = 0  # also save last.pt every N optimizer steps (0: at epoch ends); bounds what a kill costs
    progress: bool = True  # progress bars
    figures: bool = True  # draw the run's plots (curves, confusion matrix, attention maps, overlays); scores unchanged
    doctor: bool = False  # examine the model before step 1 and the curve after each epoch; warnings in report.md
    precision: str = "default"  # default (bf16 autocast on CUDA, fp32 on CPU), fp32, bf16, or auto (a probe decides)
    compile: bool = False  # torch.compile the model for training and evaluation (costs compile time up front)
    track: str = ""  # also log to tensorboard (RUN/tensorboard) and/or mlflow (MLFLOW_TRACKING_URI, else RUN/mlruns)
    model: dict[str, Any] = field(default_factory=dict)  # override a variant config field (repeatable), e.g. d_model=64
    balance_weight: float = 1e-2  # weight of the MoE load-balancing loss (models without experts: unused)
    z_weight: float = 1e-3  # weight of the MoE router z-loss
    init_from: str | None = None  # start from these weights: a timm/MONAI .pth/.safetensors, a run or export folder
    init_partial: bool = False  # let --init-from load under half the model's parameters (e.g. an encoder only)
    freeze: str = ""  # parts that do not train, comma-separated (embedding,position...; backbone: all but the head)

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "accumulate"):
            check_positive(name, getattr(self, name))
        for name in ("warmup", "num_threads", "checkpoint_every"):
            check_positive(name, getattr(self, name), allow_zero=True)
        check_int("seed", self.seed, 0, 2**32 - 1, hint="the range numpy's seed takes")
        check_number("lr", self.lr, 0, low_open=True)
        check_number("grad_clip", self.grad_clip, 0, hint="0 disables clipping")
        for name in ("weight_decay", "balance_weight", "z_weight"):
            check_number(name, getattr(self, name), 0)
        for name in ("deterministic", "resume", "progress", "figures", "doctor", "compile", "init_partial"):
            check_bool(name, getattr(self, name))
        if self.precision not in PRECISIONS:
            raise unknown_name("precision", self.precision, PRECISIONS)
        tracker_names(self.track)
        freeze_names(self.freeze)
        if not isinstance(self.model, dict):
            raise TypeError(f"model must be a dict of variant config overrides, got {type(self.model).__name__}")

    @property
    def out_dir(self) -> Path:
        return Path(self.out) if self.out else Path("runs") / f"{self.task}-{self.variant}"

    def check_paths(self) -> None:
        """Refuse an output folder or a data folder that is a file, before any data is loaded.

        Kept out of ``__post_init__`` so that a config rebuilt from a finished run does not depend on the files
        that happen to exist where it is loaded.
        """
        check_folder("--out", self.out_dir, "a new folder, or a run's folder with --resume")
        if self.data is not None:
            check_folder("--data", Path(self.data), "the folder that holds the dataset")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: Path) -> None:
        write_json_atomic(path, self.to_dict())  # whole or not at all: a sweep reads it to reuse or resume the run


def tracker_names(track: object) -> list[str]:
    """``--track``'s ``"tensorboard,mlflow"`` as a list of trackers ("" for none); unknown names are refused."""
    if not isinstance(track, str):
        raise TypeError(f"track must be a comma-separated string of {', '.join(TRACKERS)}, got {track!r}")
    names = [name.strip() for name in track.split(",") if name.strip()]
    for name in names:
        if name not in TRACKERS:
            raise unknown_name("tracker (--track)", name, TRACKERS)
    return names


def freeze_names(freeze: object) -> list[str]:
    """``--freeze``'s ``"embedding,position"`` as a list of parts (``backbone``: every part but the head)."""
    if not isinstance(freeze, str):
        raise TypeError(f"freeze must be a comma-separated string of parts, got {freeze!r}")
    from core.parts import BACKBONE, PARTS  # on call: the config module imports no torch (`zoo --help` stays fast)

    names = [name.strip() for name in freeze.split(",") if name.strip()]
    for name in names:
        if name not in (*PARTS, BACKBONE):
            raise unknown_name("part (--freeze)", name, (*PARTS, BACKBONE))
    return names


def check_folder(flag: str, path: Path, wanted: str) -> None:
    """Raise ValueError if ``path``, or the nearest of its parents that exists, is not a folder."""
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        where = "" if existing == path else f" ({existing} is a file)"
        raise ValueError(f"{flag} {path} is {'a file' if existing == path else 'not a folder'}{where}; pass {wanted}")


def field_help(config_class: type) -> dict[str, str]:
    """Each field's one-line help: its trailing ``# comment`` in the nearest class of the hierarchy that has one."""
    helps: dict[str, str] = {}
    for klass in reversed(config_class.__mro__):
        if dataclasses.is_dataclass(klass):
            helps.update(_trailing_comments(klass))
    return helps


@functools.cache
def _trailing_comments(klass: type) -> dict[str, str]:
    """``{field: comment}`` for the fields of ``klass``'s own body that carry a ``# comment`` on their line(s).

    Comment blocks above a field are not help: they explain why, at length.
    """
    try:
        source = inspect.getsource(klass)
    except (OSError, TypeError):  # no source (e.g. a class made in a REPL): flags keep only their defaults
        return {}
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    out = {}
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            text = next((comments[i] for i in range(node.lineno, node.end_lineno + 1) if i in comments), "")
            if text:
                out[node.target.id] = text
    return out


def parse_assignments(items: list[str] | None, config_class: type | None = None) -> dict[str, Any]:
    """Parse ``["d_model=64", "norm_first=true"]`` into a dict, converting values with JSON where possible.

    With ``config_class``, keys are checked against its fields and values converted to the field's type.
    """
    hints = typing.get_type_hints(config_class) if config_class is not None else {}
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        key, text = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if config_class is not None and key not in hints:
            from plumbing.errors import unknown_name

            raise unknown_name(f"field of {config_class.__name__}", key, hints)
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        if isinstance(value, str) and hints.get(key) is bool:
            value = _parse_bool(value)
        out[key] = value
    return out


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def add_config_arguments(parser: argparse.ArgumentParser, config_class: type, skip: tuple[str, ...] = ()) -> None:
    """Add one ``--flag`` per dataclass field; defaults stay ``None`` so only given flags override."""
    hints = typing.get_type_hints(config_class)
    helps = field_help(config_class)
    for spec in fields(config_class):
        if spec.name in skip or not spec.init:
            continue
        text = helps.get(spec.name, "").replace("%", "%%")  # argparse %-formats help strings
        if spec.name == "model":
            parser.add_argument("--model-set", dest="model", action="append", metavar="KEY=VALUE", help=text)
            continue
        kind = hints[spec.name]
        args = typing.get_args(kind)
        base = next((a for a in args if a is not type(None)), kind) if args else kind
        default = spec.default if spec.default is not dataclasses.MISSING else None
        if default is not None:  # a None default is described by the comment ("None: ...")
            text = f"{text} (default: {default})".lstrip()
        if base is bool:
            parser.add_argument(_flag(spec.name), type=_parse_bool, nargs="?", const=True, default=None,
                                metavar="BOOL", help=text)
        else:
            parser.add_argument(_flag(spec.name), type=base, default=None, help=text)


def config_from_args(config_class: type, args: argparse.Namespace, base: dict[str, Any] | None = None,
                     **fixed: Any) -> Any:
    """Build ``config_class`` from ``base`` (a recorded config's fields), the flags that were given over it, plus
    ``fixed`` values."""
    names = {f.name for f in fields(config_class)}
    given = {k: v for k, v in vars(args).items() if k in names and v is not None}
    if "model" in given:
        given["model"] = {**(base or {}).get("model", {}), **parse_assignments(given["model"])}
    return config_from_dict(config_class, {**(base or {}), **given, **fixed})


def read_config_file(config_class: type, path: str | Path) -> dict[str, Any]:
    """The fields of a recorded config (a run's ``config.json``), checked against ``config_class``.

    Raises:
        FileNotFoundError: no such file. ValueError: not a JSON object, another task's config, or unknown fields.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"--config {path}: no such file; pass a run's config.json (or its folder)")
    try:
        values = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"--config {path} is not JSON ({error}); pass a run's config.json") from None
    if not isinstance(values, dict):
        raise ValueError(f"--config {path} holds a {type(values).__name__}, not a config object")
    task = config_class().task
    if values.get("task", task) != task:
        raise ValueError(f"--config {path} is the config of a {values['task']} run, not a {task} one; "
                         f"use zoo train {values['task']} --config {path}")
    config_from_dict(config_class, values)  # unknown fields and bad values fail here, naming them
    return values

