"""``zoo export``: a finished run as weights anyone can load without unpickling — ``model.safetensors`` beside the
run's ``run.json`` and artefacts, a folder :func:`tasks.runs.run.load_run` (and ``zoo.load_run``) reads."""

from __future__ import annotations

import shutil
from pathlib import Path

from core.atomic import atomic_path, write_json_atomic
from tasks.runs.run import RUN_FILE, WEIGHTS_FILE, load_run


def export_run(path: str | Path, out: str | Path | None = None, format: str = "safetensors",
               checkpoint: str | Path = "best") -> Path:
    """Write ``model.safetensors`` and ``run.json`` (plus the run's artefacts) to ``out``; returns ``out``."""
    from safetensors.torch import save_model

    if format != "safetensors":
        from core.errors import unknown_name

        raise unknown_name("export format", format, ("safetensors",))
    run = load_run(path, checkpoint)
    out = Path(out) if out is not None else run.path / "export"
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for the exported run")
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / WEIGHTS_FILE) as tmp:  # safetensors writes 0600; atomic_path gives it the umask's mode
        save_model(run.model, str(tmp), metadata={"task": run.info["task"], "variant": run.variant})
    for name in run.task.artifact_files():
        shutil.copy2(run.path / name, out / name)
    if run.metrics is not None:
        shutil.copy2(run.path / "metrics.json", out / "metrics.json")
    write_json_atomic(out / RUN_FILE, {**run.info, "weights": WEIGHTS_FILE, "exported_from": str(run.weights)})
    return out
