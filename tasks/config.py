"""Run configuration: one dataclass per task, every field overridable from the command line.

:class:`TrainConfig` holds what every task shares; a task subclasses it with its own fields. The ``zoo``
command derives its flags from the dataclass fields (``batch_size`` -> ``--batch-size``), so a new field
is a new flag with no extra code.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from core.errors import check_positive

# Fields that may differ between a checkpoint and the run that resumes it.
RESUMABLE_CHANGES = frozenset({"epochs", "out", "resume", "device", "progress", "num_threads"})


@dataclass
class TrainConfig:
    """Fields shared by every task runner."""

    task: str = ""
    variant: str = "classic"
    preset: str | None = None  # None: the variant's default preset
    data: str | None = None  # a real dataset's folder; None: the embedded default data
    out: str | None = None  # output folder; None: runs/<task>-<variant>
    epochs: int = 10
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup: int = 100  # optimizer steps of learning-rate warm-up
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    accumulate: int = 1  # micro-batches per optimizer step
    seed: int = 0
    device: str = "auto"  # auto (CUDA, then CPU), cpu, cuda, cuda:1, ...
    deterministic: bool = True  # deterministic algorithms (CPU runs are then bit-for-bit repeatable)
    num_threads: int = 0  # CPU threads for torch; 0 keeps torch's default
    resume: bool = False
    progress: bool = True  # progress bars
    model: dict[str, Any] = field(default_factory=dict)  # overrides of the variant's config (--model-set k=v)
    balance_weight: float = 1e-2  # weight of the MoE load-balancing loss (models without experts: unused)
    z_weight: float = 1e-3  # weight of the MoE router z-loss

    def __post_init__(self) -> None:
        check_positive("epochs", self.epochs)
        check_positive("batch_size", self.batch_size)
        check_positive("accumulate", self.accumulate)
        check_positive("warmup", self.warmup, allow_zero=True)
        check_positive("num_threads", self.num_threads, allow_zero=True)
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.grad_clip < 0:
            raise ValueError(f"grad_clip must be >= 0 (0 disables clipping), got {self.grad_clip}")

    @property
    def out_dir(self) -> Path:
        return Path(self.out) if self.out else Path("runs") / f"{self.task}-{self.variant}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")


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
            from core.errors import unknown_name

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
    for spec in fields(config_class):
        if spec.name in skip or not spec.init:
            continue
        if spec.name == "model":
            parser.add_argument("--model-set", dest="model", action="append", metavar="KEY=VALUE",
                                help="override a field of the variant's config (repeatable), e.g. d_model=64")
            continue
        kind = hints[spec.name]
        args = typing.get_args(kind)
        base = next((a for a in args if a is not type(None)), kind) if args else kind
        default = spec.default if spec.default is not dataclasses.MISSING else None
        if base is bool:
            parser.add_argument(_flag(spec.name), type=_parse_bool, nargs="?", const=True, default=None,
                                metavar="BOOL", help=f"(default: {default})")
        else:
            parser.add_argument(_flag(spec.name), type=base, default=None, help=f"(default: {default})")


def config_from_args(config_class: type, args: argparse.Namespace, **fixed: Any) -> Any:
    """Build ``config_class`` from the flags that were given, plus ``fixed`` values."""
    names = {f.name for f in fields(config_class)}
    given = {k: v for k, v in vars(args).items() if k in names and v is not None}
    if "model" in given:
        given["model"] = parse_assignments(given["model"])
    return config_class(**{**given, **fixed})


def config_differences(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Fields (outside :data:`RESUMABLE_CHANGES`) whose values differ: name -> (saved, current)."""
    keys = (set(saved) | set(current)) - RESUMABLE_CHANGES
    return {k: (saved.get(k), current.get(k)) for k in sorted(keys) if saved.get(k) != current.get(k)}
