"""A sweep folder's state: ``sweep.json`` and what each run folder on disk says.

``sweep.json`` (written atomically at every state change) holds the sweep as a file would describe it (``"sweep"``:
``zoo sweep OUT/sweep.json`` resumes it), the launcher, and per run: its label, seed, fold, config hash, state,
attempts and pre-emptions (over every sweep in this folder), the last exit status, the tail of its log when it
failed, and its seconds. States:

* ``pending``: not started, or waiting for a retry or a requeue;
* ``running``: handed to the launcher;
* ``done``: ``metrics.json`` and ``run.json`` are in its folder;
* ``preempted``: it stopped on a signal after saving ``last.pt`` (the sweep requeues it with ``--resume``);
* ``failed``: it exited otherwise; ``log_tail`` says why. Rerunning the sweep trains it again.

What a folder holds decides what a rerun does (:func:`folder_state`): a finished run is reused, one with a
checkpoint is resumed, anything else starts from the beginning.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from plumbing.atomic import write_json_atomic
from tasks.runs.run import RUN_FILE  # a run writes it when it starts; with metrics.json, it finished
from tasks.sweeps.plan import RunSpec, config_hash
from tasks.sweeps.process import LOG_FILE, resumable

SWEEP_FILE = "sweep.json"
SWEEP_FORMAT = 1
STATES = ("pending", "running", "done", "preempted", "failed")
CONFIG_FILE = "config.json"  # a run's settings, written by the sweep before it starts and by the run itself

log = logging.getLogger(__name__)


def folder_state(spec: RunSpec, folder: Path) -> str:
    """``"done"`` (finished), ``"partial"`` (a checkpoint to resume from) or ``"new"``.

    Raises:
        ValueError: the folder holds a run whose recorded config computes something else (its hash differs), or a
            finished run whose settings cannot be read (:func:`recorded_config`).
    """
    recorded = recorded_config(folder)
    if recorded is not None:
        found = config_hash(spec.task, recorded, spec.budget)
        if found != spec.key:
            raise ValueError(f"{folder} holds a run with other settings (config hash {found}, this sweep's "
                             f"{spec.key}); move it away or give the sweep another --out")
    if finished(folder):
        return "done"
    if resumable(folder):
        return "partial"
    return "new"


def finished(folder: Path) -> bool:
    """Whether the run in ``folder`` ran to its end (the trainer's last files, ``metrics.json`` and ``run.json``)."""
    return (folder / "metrics.json").is_file() and (folder / RUN_FILE).is_file()


def recorded_config(folder: Path) -> dict[str, Any] | None:
    """The settings a run folder records: its ``config.json``, or, where that cannot be read (cut short by a crash
    or a full disk), the ``config`` that ``run.json`` holds beside it; None when the folder records none.

    None is safe for a run that did not finish: it starts again, or resumes from a checkpoint, whose own settings
    ``--resume`` checks; the sweep first writes its ``config.json`` anew.

    Raises:
        ValueError: the run finished but neither file can be read, so nothing says what it computed.
    """
    unreadable = []
    for name, key in ((CONFIG_FILE, None), (RUN_FILE, "config")):
        path = folder / name
        if not path.is_file():
            continue
        try:  # a cut JSON text, or bytes that are no text, raise ValueError
            value = json.loads(path.read_text())
            value = value[key] if key else value
        except (ValueError, KeyError, TypeError) as error:
            unreadable.append(f"{path} ({type(error).__name__}: {error})")
            continue
        if isinstance(value, dict):
            if unreadable:
                log.warning("%s cannot be read: the settings of %s come from its %s", unreadable[0], folder, name)
            return value
        unreadable.append(f"{path} (a {type(value).__name__}, not a config object)")
    if unreadable and finished(folder):
        raise ValueError(f"{folder} holds a finished run whose settings cannot be read: {'; '.join(unreadable)}; "
                         "move the folder away to train the run again, or give the sweep another --out")
    return None


def log_tail(folder: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a run's ``train.log`` ("" when it has none)."""
    path = folder / LOG_FILE
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class SweepState:
    """The runs of one sweep folder and their states, written to ``sweep.json`` at every change."""

    def __init__(self, out: Path, sweep: dict[str, Any], launcher: dict[str, Any], specs: list[RunSpec]) -> None:
        self.out, self.sweep, self.launcher = Path(out), sweep, launcher
        previous = self._read()
        self.runs: dict[str, dict[str, Any]] = {}
        for spec in specs:
            before = previous.get(spec.name, {})
            self.runs[spec.name] = {"label": spec.label, "seed": spec.seed, "fold": spec.config.get("fold"),
                                    "hash": spec.key, "state": "pending", "attempts": before.get("attempts", 0),
                                    "preemptions": before.get("preemptions", 0),
                                    "exit_code": before.get("exit_code"), "log_tail": before.get("log_tail", ""),
                                    "seconds": before.get("seconds"), "started": None}

    def _read(self) -> dict[str, dict[str, Any]]:
        path = self.out / SWEEP_FILE
        if not path.is_file():
            return {}
        try:  # a damaged file (cut JSON, bytes that are no text, another shape) is rebuilt from the run folders
            runs = json.loads(path.read_text()).get("runs", {})
        except (ValueError, AttributeError):
            return {}
        return runs if isinstance(runs, dict) and all(isinstance(r, dict) for r in runs.values()) else {}

    def set(self, name: str, state: str, **fields: Any) -> None:
        run = self.runs[name]
        if state == "running":
            run["started"] = time.time()
            run["attempts"] += 1
        elif run.get("started") is not None:
            run["seconds"] = time.time() - run["started"]
        run.update(state=state, **fields)
        self.write()

    def count(self, state: str) -> int:
        return sum(run["state"] == state for run in self.runs.values())

    def failures(self) -> dict[str, dict[str, Any]]:
        return {name: run for name, run in self.runs.items() if run["state"] == "failed"}

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.out / SWEEP_FILE, {"format": SWEEP_FORMAT, "sweep": self.sweep,
                                                  "launcher": self.launcher, "runs": self.runs})
