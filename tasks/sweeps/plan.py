"""What a sweep runs: one :class:`RunSpec` per training run, named by what it is and a hash of its config.

A run folder's name is ``<label>-seed<S>[-fold<K>]-<hash>``: the comparison row it belongs to (a variant, or
"without <change>" in an ablation), its seed, its fold, and the first 10 hex digits of a SHA-256 over the task and
every config field that can change what the run computes (:func:`tasks.engine.same_run.result_settings`: where it
writes, whether it resumes, progress bars, thread count, checkpoint cadence and the like are left out, each with its
reason there), so that rerunning the same sweep with another launcher finds its runs again; any other change — a
learning rate, a preset, an override, the epochs, the device — is a new folder, never a silent reuse of a run trained
otherwise.

Sweep files: a TOML or JSON object that ``zoo sweep FILE`` runs, or resumes when run again::

    kind = "compare"                 # compare (default), ablate or cv
    task = "translation"
    variants = ["classic", "pre-ln"] # compare; ablate takes variant = "rope"
    seeds = 2
    budget = "epochs=2"              # or epochs = 2; time=SECONDS; flops=X
    epochs = 3                       # with time= or flops=: the cap (and a time budget's schedule horizon)
    out = "runs/sweep-translation"
    launcher = "local"               # serial, local, ray, submitit
    jobs = 2
    [set]                            # task config fields of every run
    preset = "tiny"
    [model_set]                      # variant config fields of every run
    dropout = 0.0
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plumbing.errors import unknown_name
from tasks.engine.same_run import result_settings

KINDS = ("compare", "ablate", "cv")
SWEEP_KEYS = ("kind", "task", "variants", "variant", "seeds", "budget", "epochs", "alpha", "baseline", "out", "set",
              "model_set", "allow_undeclared", "launcher", "jobs", "resources", "retry", "slurm")


def config_hash(task: str, config: dict[str, Any], budget: str | None = None) -> str:
    """10 hex digits identifying what a run of ``task`` with ``config`` under ``budget`` computes (see the module
    docstring)."""
    text = json.dumps({"task": task, "config": result_settings(config), **({"budget": budget} if budget else {})},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def slug(text: str) -> str:
    """``text`` as a folder-name fragment: letters, digits, ``.``, ``_`` and ``-``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


@dataclass(frozen=True)
class RunSpec:
    """One training run of a sweep.

    Attributes:
        task: the task it trains.
        label: the row of the comparison it belongs to (a variant, or ``without <change>``).
        config: its task config fields (``out`` and ``resume`` are the sweep's to set).
        budget: what stops it besides its epochs (``time=SECONDS``, ``flops=X``; :mod:`tasks.engine.budget`).
        name: its folder's name; by default ``<label>-seed<S>[-fold<K>]-<hash>`` (``zoo cv`` keeps nnU-Net's
            ``fold_<K>`` and checks the settings of a fold it finds itself).
    """

    task: str
    label: str
    config: dict[str, Any] = field(hash=False)
    budget: str | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            fold = self.config.get("fold")
            fold_part = "" if fold in (None, "", "all") else f"-fold{fold}"
            name = f"{slug(self.label)}-seed{self.config.get('seed', 0)}{fold_part}-{self.key}"
            object.__setattr__(self, "name", name)

    @property
    def key(self) -> str:
        return config_hash(self.task, self.config, self.budget)

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0))

    def folder(self, out: Path) -> Path:
        return Path(out) / self.name


def read_sweep_file(path: str | Path) -> dict[str, Any]:
    """The sweep a TOML or JSON file describes (see the module docstring), checked; ``sweep.json`` written by an
    earlier sweep is read too (its ``"sweep"`` entry).

    Raises:
        FileNotFoundError: no such file. ValueError: not TOML / JSON, an unknown key or kind, a missing task.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sweep file {path}: no such file; write one as in `zoo sweep --help`")
    text = path.read_text()
    if path.suffix == ".toml":
        if sys.version_info < (3, 11):
            raise ValueError(f"sweep file {path}: TOML needs Python 3.11 (tomllib); write it as JSON")
        import tomllib

        try:
            spec = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"sweep file {path} is not valid TOML: {error}") from None
    else:
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"sweep file {path} is not valid JSON ({error}); name a TOML file *.toml") from None
    if isinstance(spec, dict) and isinstance(spec.get("sweep"), dict):  # an earlier sweep's sweep.json
        study = path.parent / "study.json"
        if not spec["sweep"] and study.is_file():
            command = json.loads(study.read_text()).get("command") or "the zoo study command that wrote it"
            raise ValueError(f"{path} is a zoo study's sweep; resume it by running the study again: {command}")
        spec = spec["sweep"]
    if not isinstance(spec, dict):
        raise ValueError(f"sweep file {path} holds a {type(spec).__name__}, not a table of settings")
    for key in spec:
        if key not in SWEEP_KEYS:
            raise unknown_name(f"key of sweep file {path}", key, SWEEP_KEYS)
    spec.setdefault("kind", "compare")
    if spec["kind"] not in KINDS:
        raise unknown_name(f"kind in sweep file {path}", spec["kind"], KINDS)
    if "task" not in spec:
        raise ValueError(f"sweep file {path} names no task; add task = \"translation\" (or cifar, medseg)")
    for key in ("set", "model_set", "slurm"):
        if not isinstance(spec.get(key, {}), dict):
            raise ValueError(f"sweep file {path}: {key} must be a table of key = value, got {spec[key]!r}")
    if spec["kind"] == "ablate" and "variant" not in spec:
        raise ValueError(f"sweep file {path}: an ablation needs variant = \"NAME\"")
    return spec
