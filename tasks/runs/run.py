"""A finished run as a usable model: the run format, :func:`load_run` and portable export.

A run folder, as ``zoo train`` writes it, holds everything needed to use the model afterwards:

    run.json                  what rebuilding and using the model needs: the task, the variant and its full
                              config, the task config it was trained with, the preprocessing (tokenizer file,
                              image size and normalisation, classes) and the package and format versions
    checkpoints/{best,last}.pt training checkpoints (read with ``weights_only=True``)
    tokenizer.json, classes.json   the artefacts the preprocessing names
    metrics.json              the training's final numbers

``zoo export`` (:mod:`tasks.runs.export`) writes the same folder with ``model.safetensors`` in place of the
checkpoints: weights a colleague can load without unpickling anything (``--format hf`` names run.json
``config.json``, as Hugging Face folders do; ``--format onnx`` holds graphs, run with ``runtime="onnxruntime"``).
:func:`load_run` reads them all.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from plumbing.atomic import atomic_path
from tasks.engine.checkpoint import load_checkpoint, package_version
from tasks.engine.config import config_from_dict
from tasks.engine.distributed import DistInfo, select_device
from tasks.engine.precision import eval_context
from tasks.engine.registry import task_class
from tasks.engine.task import Task

RUN_FILE = "run.json"
RUN_FORMAT = 1  # bump when run.json changes incompatibly; load_run refuses newer formats
WEIGHTS_FILE = "model.safetensors"
CHECKPOINTS = ("best", "last")


def run_info(task: Task) -> dict[str, Any]:
    """The content of ``run.json`` for a task whose model has been built."""
    model_config = getattr(task, "model_config", None)
    return {
        "format": RUN_FORMAT,
        "package_version": package_version(),
        "task": task.name,
        "variant": task.config.variant,
        "variant_config": dataclasses.asdict(model_config) if model_config is not None else None,
        "config": task.config.to_dict(),
        "preprocessing": task.preprocessing(),
    }


@dataclass
class Run:
    """A trained model ready to use, with everything it was trained with.

    ``task`` is the task runner restored from the run (its preprocessing set, no data loaded): call its
    ``setup()`` to read data, as :func:`tasks.runs.evaluate.evaluate_run` does.
    """

    path: Path
    task: Task
    model: nn.Module  # eval mode, on ``device``
    info: dict[str, Any]
    weights: Path  # the checkpoint or safetensors file the weights came from
    metrics: dict[str, Any] | None = None  # the run's metrics.json, when it has one
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def config(self):
        """The task config the model was trained with."""
        return self.task.config

    @property
    def variant(self) -> str:
        return self.info["variant"]

    @property
    def variant_config(self) -> Any:
        """The variant's config dataclass (``None`` for a reference model outside the zoo)."""
        return getattr(self.task, "model_config", None)

    @property
    def preprocessing(self) -> dict[str, Any]:
        return self.info["preprocessing"]

    @property
    def precision(self) -> str:
        """What the run trained in, ``fp32`` or ``bf16`` (``run.json``'s ``precision``; older runs: fp32)."""
        return self.info.get("precision") or "fp32"

    def copy_artifacts(self, out: Path) -> None:
        """Copy the files the preprocessing names (tokenizer, classes) and ``metrics.json`` into ``out``, each
        written atomically: what an exported folder needs beside its weights to be used as the run."""
        for name in [*self.task.artifact_files(), *(["metrics.json"] if self.metrics is not None else [])]:
            with atomic_path(out / name) as tmp:
                shutil.copy2(self.path / name, tmp)

    def context(self) -> AbstractContextManager:
        """The precision the model computes in as it was trained: ``with run.context(): run.model(x)``.

        ``zoo evaluate`` and every task's ``predict`` run the model in it, so a bf16-trained model is scored
        and used in bf16, as its validation scores were measured.
        """
        return eval_context(self.info.get("precision"), self.model, self.device)


def read_run_info(path: str | Path) -> dict[str, Any]:
    """``run.json`` of the run folder ``path``, checked; one-line errors for anything that is not a run."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no run folder at {path}; pass the --out folder of a `zoo train` run")
    if not path.is_dir():
        raise ValueError(f"{path} is a file, not a run folder; pass the folder `zoo train` wrote (its --out)")
    file = path / RUN_FILE
    if not file.is_file() and _is_hf_export(path / "config.json"):
        file = path / "config.json"  # `zoo export --format hf`: run.json's fields in Hugging Face's file name
    if not file.is_file():
        if (path / "config.json").is_file() and (path / "checkpoints").is_dir():
            raise ValueError(f"{path} is a run written by an older package version (no {RUN_FILE}); retrain it "
                             "with this version to use it")
        raise FileNotFoundError(f"{path} is not a run folder (no {RUN_FILE}); pass the --out folder of `zoo train` "
                                "or of `zoo export`")
    try:
        info = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{file} is corrupt ({error}); re-export the run or retrain it") from None
    missing = [k for k in ("format", "task", "variant", "config", "preprocessing") if k not in info]
    if not isinstance(info, dict) or missing:
        raise ValueError(f"{file} lacks {missing or 'its fields'}; it was not written by `zoo train` or `zoo export`")
    if not isinstance(info["format"], int) or info["format"] > RUN_FORMAT:
        raise ValueError(f"{file} has run format {info['format']!r} (package {info.get('package_version')}); this "
                         f"package ({package_version()}) reads formats up to {RUN_FORMAT}: upgrade transformer-zoo")
    return info


def _is_hf_export(file: Path) -> bool:
    """``config.json`` written by ``zoo export --format hf`` (its ``library_name``), not a timm or HF model's."""
    try:
        return file.is_file() and json.loads(file.read_text()).get("library_name") == "transformer-zoo"
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return False


def weights_file(path: Path, checkpoint: str | Path) -> Path:
    """The file holding the weights: ``best``/``last`` checkpoint, the exported safetensors, or a given path."""
    if checkpoint not in CHECKPOINTS:
        file = Path(checkpoint)
        if not file.is_file():
            raise FileNotFoundError(f"no checkpoint file {file}; use best, last or the path of a .pt/.safetensors")
        return file
    file = path / "checkpoints" / f"{checkpoint}.pt"
    if file.is_file():
        return file
    if (path / WEIGHTS_FILE).is_file() and not (path / "checkpoints").is_dir():
        return path / WEIGHTS_FILE  # an exported run has one set of weights
    found = sorted(p.name for p in (path / "checkpoints").glob("*.pt")) if (path / "checkpoints").is_dir() else []
    raise FileNotFoundError(f"no {checkpoint} checkpoint at {file} (found: {', '.join(found) or 'none'}); "
                            "the run may not have finished an epoch")


def load_weights(model: nn.Module, file: Path, task: str) -> None:
    """Load ``file`` (a training checkpoint or safetensors) into ``model``; errors name the file."""
    if file.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_model

        try:
            missing, unexpected = load_model(model, file, strict=False)
        except (SafetensorError, OSError, ValueError) as error:
            raise ValueError(f"{file} is corrupt or not a safetensors file ({error}); export the run again") from None
    else:
        state = load_checkpoint(file)
        if state.get("task", task) != task:
            raise ValueError(f"checkpoint {file} belongs to a {state['task']} run, but run.json says {task}")
        result = model.load_state_dict(state["model"], strict=False)
        missing, unexpected = result.missing_keys, result.unexpected_keys
    if missing or unexpected:
        raise ValueError(f"{file} does not fit the model run.json describes (missing {list(missing)[:5]}, "
                         f"unexpected {list(unexpected)[:5]}); it belongs to another run")


RUNTIMES = ("torch", "onnxruntime")


def restore_task(info: dict[str, Any], folder: Path, device: str = "cpu") -> Task:
    """The task runner a run.json ``info`` describes, its preprocessing restored from ``folder`` (the tokenizer or
    classes files beside run.json), no data loaded, no model built."""
    cls = task_class(info["task"])
    config = config_from_dict(cls.config_class, {k: v for k, v in info["config"].items() if k != "task"})
    runner = cls(config, select_device(device), DistInfo())
    runner.restore(info["preprocessing"], folder)
    return runner


def load_run(path: str | Path, checkpoint: str | Path = "best", device: str = "cpu",
             task: str | None = None, runtime: str = "torch") -> Run:
    """Load a finished run: its model (eval mode, on ``device``), config, preprocessing and metrics.

    Args:
        path: a folder written by ``zoo train`` or ``zoo export``.
        checkpoint: ``best``, ``last`` or the path of a checkpoint / safetensors file.
        device: ``cpu``, ``cuda``, ``auto``...
        task: when given, a run of another task is refused (e.g. a translation run given to an image command).
        runtime: ``torch`` builds the PyTorch model; ``onnxruntime`` runs the graphs of a ``zoo export --format
            onnx`` folder instead (:mod:`tasks.runs.onnx_runtime`; CPU only).
    """
    path = Path(path)
    info = read_run_info(path)
    if task is not None and info["task"] != task:
        raise ValueError(f"{path} is a {info['task']} run, not a {task} run; give it to a {info['task']} command")
    runner = restore_task(info, path, device)
    dev = runner.device
    if runtime not in RUNTIMES:
        from plumbing.errors import unknown_name

        raise unknown_name("runtime", runtime, RUNTIMES)
    if (runtime == "onnxruntime") != ("graphs" in info):
        raise ValueError(f"{path} is an ONNX export: use it with --runtime onnxruntime" if "graphs" in info else
                         f"{path} holds no ONNX graphs; export it with `zoo export {path} --format onnx` first")
    if runtime == "onnxruntime":
        from tasks.runs.onnx_runtime import onnx_model

        if dev.type != "cpu":
            raise ValueError(f"--runtime onnxruntime runs on the CPU here; pass --device cpu, not {device}")
        config = runner.restore_model_config(info["variant"], info.get("variant_config"))
        model, file = onnx_model(path, info, config, torch.get_num_threads(), runner.variant), path
    else:
        model = runner.build_saved_model(info["variant"], info.get("variant_config"))
        file = weights_file(path, checkpoint)
        load_weights(model, file, info["task"])
    metrics_file = path / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else None
    return Run(path, runner, model.to(dev).eval(), info, file, metrics, dev)
