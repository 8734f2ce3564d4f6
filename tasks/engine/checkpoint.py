"""Checkpoints that never lose work.

* Written atomically: to a temporary file in the same folder, flushed to disk, then ``os.replace``d over
  the old one, so a crash mid-write leaves the previous checkpoint intact.
* Complete: model, optimizer, scheduler, grad-scaler and RNG states, epoch, step, config and package
  version, the budget, the steps the schedule was planned for and each session's costs
  (:mod:`tasks.engine.sessions`), so ``--resume`` continues exactly where the run stopped and stops where the
  uninterrupted run stops.
* Safe to load: ``torch.load(..., weights_only=True)`` never executes code from the file. Everything
  stored is tensors, numbers, strings, lists and dicts.
"""

from __future__ import annotations

import random
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

from plumbing.atomic import atomic_open
from tasks.engine.same_run import describe_differences, setting_differences

FORMAT_VERSION = 1


def package_version() -> str:
    try:
        return metadata.version("transformer-zoo")
    except metadata.PackageNotFoundError:
        return "unknown"


def rng_state() -> dict[str, Any]:
    """Every random number generator a training step may draw from."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (:mod:`plumbing.atomic`: temporary file + fsync + ``os.replace``)."""
    state = {**state, "format_version": FORMAT_VERSION, "package_version": package_version()}
    with atomic_open(path, binary=True, fsync=True) as f:
        torch.save(state, f)


def load_checkpoint(path: Path, expected_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load a checkpoint safely; clear errors for a missing, corrupt or mismatched file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}; train without --resume first")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated zip, bad pickle, not a torch file...
        raise ValueError(
            f"checkpoint {path} is corrupt or truncated and cannot be loaded ({type(error).__name__}: "
            f"{str(error)[:200]}); delete it, or resume from the other checkpoint in {path.parent}"
        ) from None
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise ValueError(f"{path} is not a zoo training checkpoint (no model/config entries)")
    if expected_config is not None:
        check_same_run(path, state["config"], expected_config)
    return state


def check_same_run(path: Path, saved: dict[str, Any], requested: dict[str, Any]) -> None:
    """Refuse to resume the checkpoint ``path`` (written under ``saved``) with ``requested`` unless they are the
    same run (:mod:`tasks.engine.same_run`): a resumed run must equal the uninterrupted one.

    Other ``epochs`` are refused too: the learning-rate schedule of the steps already taken was planned over the old
    total, so a longer (or shorter) resume would equal neither the old run nor a fresh run of the new length.

    Raises:
        ValueError: naming each differing field with both values, and the fix.
    """
    diff = setting_differences(saved, requested)
    if not diff:
        return
    fix = "use the same settings to resume (--config RUN/config.json), or a new --out folder to start afresh"
    if "epochs" in diff:
        old, new = diff["epochs"]
        others = " and the other recorded settings" if len(diff) > 1 else ""
        fix = (f"resume with --epochs {old}{others} (the run as planned), or train {new} epochs into a new --out "
               "folder (a fresh run of that length)")
    raise ValueError(f"checkpoint {path} was written by a different run configuration "
                     f"({describe_differences(diff, 'checkpoint')}); {fix}")
