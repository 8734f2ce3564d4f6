"""A finished medseg run as a MONAI bundle: ``python -m monai.bundle run`` predicts with it as ``zoo predict`` does.

The bundle (MONAI's bundle specification: ``configs/metadata.json`` and ``models/model.pt``, the rest free)::

    configs/metadata.json     MONAI's metadata: versions, task, authors, the network's inputs and outputs
    configs/inference.json    the runner's config: a :class:`BundleInference` built from its values
    configs/logging.conf      where the runner's log goes (the summary line: standard output)
    configs/run.json          the run's run.json, its ``weights`` pointing at ../models/model.pt, with the run's
                              artefacts and metrics.json beside it, so that configs/ reads as a run folder
    models/model.pt           the model's state_dict (``torch.load(..., weights_only=True)``)
    docs/README.md            how to run it

Run it with MONAI's runner; values of inference.json are replaced from the command line::

    python -m monai.bundle run --config_file B/configs/inference.json --meta_file B/configs/metadata.json \\
        --dataset_dir IN --output_dir PRED [--tta mirror] [--overlap 0.25] [--device cuda] [--bundle_root B]

The runner evaluates the config's ``run`` item, ``BundleInference.run``: the run is rebuilt from configs/run.json
and models/model.pt (:func:`load_bundle`, as :func:`tasks.runs.run.load_run` rebuilds a run folder) and every
volume of ``dataset_dir`` is predicted into ``output_dir`` by :func:`tasks.medseg.inference.predict.predict`, the code
of ``zoo predict``: the same label maps. ``bundle_root`` is written as the export's absolute folder, so
the command works from any folder; a bundle that was moved or copied needs ``--bundle_root`` (or the
``bundle_root`` value edited), and one that finds no configs/run.json there says so.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pickle
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

from plumbing.atomic import atomic_path, write_json_atomic, write_text_atomic
from tasks.engine.checkpoint import package_version
from tasks.medseg.config import INFERENCE_OPTIONS
from tasks.runs.run import RUN_FILE, Run, read_run_info, restore_task

log = logging.getLogger(__name__)

BUNDLE_VERSION = "0.1.0"
MODEL_FILE = "models/model.pt"
# the packages the bundle needs besides monai, torch and numpy (whose versions metadata.json has fields of its own)
PACKAGES = ("transformer-zoo", "nibabel", "scipy")
LOGGING_CONF = """[loggers]
keys=root

[handlers]
keys=consoleHandler

[formatters]
keys=fullFormatter

[logger_root]
level=INFO
handlers=consoleHandler

[handler_consoleHandler]
class=StreamHandler
level=INFO
formatter=fullFormatter
args=(sys.stdout,)

[formatter_fullFormatter]
format=%(asctime)s - %(name)s - %(levelname)s - %(message)s
"""


def export_bundle(run: Run, out: str | Path) -> Path:
    """Write the medseg ``run`` (from :func:`tasks.runs.run.load_run`) as a MONAI bundle in ``out``; returns ``out``.

    Each file is written atomically; files of ``out`` that the bundle does not name are left alone.
    """
    if run.task.name != "medseg":
        raise ValueError(f"{run.path} is a {run.task.name} run; MONAI bundles are exported from medseg runs")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file; give a folder for the bundle")
    configs = out / "configs"
    state = {name: tensor.detach().cpu() for name, tensor in run.model.state_dict().items()}
    with atomic_path(out / MODEL_FILE) as tmp:
        torch.save(state, tmp)
    run.copy_artifacts(configs)
    write_json_atomic(configs / RUN_FILE, {**run.info, "weights": f"../{MODEL_FILE}",
                                           "exported_from": str(run.weights)})
    write_json_atomic(configs / "metadata.json", bundle_metadata(run))
    write_json_atomic(configs / "inference.json", inference_config(run, out.resolve()))
    write_text_atomic(configs / "logging.conf", LOGGING_CONF)
    write_text_atomic(out / "docs" / "README.md", _readme(run, out.resolve()))
    return out


def bundle_metadata(run: Run) -> dict[str, Any]:
    """``configs/metadata.json``: MONAI's fields, the network's input and output read from the run's preprocessing."""
    pre = run.preprocessing
    classes = list(pre["class_names"])
    nifti = pre.get("nifti")
    channels = list(nifti["channel_names"]) if nifti else ["image"] * int(pre.get("in_channels", 1))
    if pre.get("spatial_dims") == 3:  # patches of the case's grid, slid over the whole case
        shape, patch = list(pre["patch_size"]), True
    else:  # one slice, zoomed to image_size
        shape, patch = [pre["image_size"]] * 2, False
    if nifti:  # only the CT window maps every voxel into [0, 1]; z-scores have no bounds
        rules = nifti["preprocessing"]["rules"]
        value_range = [0, 1] if all(r["rule"] == "ct-window" for r in rules) else []
    else:
        value_range = pre.get("intensity_range") or []
    final = (run.metrics or {}).get("final", {})
    return {
        "version": BUNDLE_VERSION,
        "changelog": {BUNDLE_VERSION: f"exported from the transformer-zoo run {run.path} ({run.weights.name})"},
        "monai_version": metadata.version("monai"),
        "pytorch_version": torch.__version__.split("+")[0],  # 2.5.1+cu121 -> 2.5.1, as MONAI writes it
        "numpy_version": np.__version__,
        "required_packages_version": {name: _version(name) for name in PACKAGES},
        "name": f"{run.variant} {pre['dataset']} segmentation",
        "task": f"Segmentation of {', '.join(classes[1:])} ({pre['dataset']})",
        "description": (f"A {run.variant} trained with transformer-zoo on {pre['dataset']}. Input volumes are "
                        f"preprocessed as in training ({pre['resize']}; intensities: {pre['intensity']}), predicted "
                        "as `zoo predict` does, and written as one uint8 label map per case on its input's grid."),
        "authors": "transformer-zoo",
        "copyright": "Copyright (c) the transformer-zoo authors",
        "data_source": pre["dataset"],
        "intended_use": "research; not for diagnostic use",
        "eval_metrics": {f"{split}_mean_dice": scores["dice"] for split, scores in final.items()
                         if isinstance(scores, dict) and scores.get("dice") is not None},
        "network_data_format": {
            "inputs": {"image": {
                "type": "image", "format": "magnitude", "modality": ", ".join(channels) if nifti else "n/a",
                "num_channels": len(channels), "spatial_shape": shape, "dtype": "float32",
                "value_range": value_range, "is_patch_data": patch,
                "channel_def": {str(i): name for i, name in enumerate(channels)}}},
            "outputs": {"pred": {
                "type": "image", "format": "labels", "num_channels": len(classes), "spatial_shape": shape,
                "dtype": "float32", "value_range": [], "is_patch_data": patch,
                "channel_def": {str(i): name for i, name in enumerate(classes)}}},
        },
    }


def inference_config(run: Run, bundle_root: Path) -> dict[str, Any]:
    """``configs/inference.json``: top-level values a user overrides, and the :class:`BundleInference` they build."""
    options = {name: getattr(run.task.config, name) for name in INFERENCE_OPTIONS}  # the run's own settings
    return {
        "bundle_root": str(bundle_root),
        "dataset_dir": None,  # required: the folder of volumes to predict
        "output_dir": "$@bundle_root + '/eval'",
        "device": "cpu",
        **options,
        "inference": {
            "_target_": f"{__name__}.BundleInference",
            "_desc_": "zoo predict: the run of configs/run.json on every volume of dataset_dir, into output_dir",
            **{name: f"@{name}" for name in ("bundle_root", "dataset_dir", "output_dir", "device", *options)},
        },
        "run": ["$@inference.run()"],
    }


class BundleInference:
    """The ``inference`` item of a bundle's inference.json: the bundle's run predicting a folder as ``zoo predict``.

    Args:
        bundle_root: the bundle folder (configs/run.json, models/model.pt).
        dataset_dir: the folder of volumes to predict (.nii / .nii.gz for a run trained on NIfTI data).
        output_dir: the folder of the label maps, one per case, named like its input.
        device: cpu, cuda, cuda:N or auto.
        tta, mirror_axes, overlap, sw_mode, sw_batch_size: replace the run's settings of those names; ``None`` keeps
            the run's (checked by the run's config, as ``zoo predict --tta ...`` is).
    """

    def __init__(self, bundle_root: str | Path, dataset_dir: str | Path | None = None,
                 output_dir: str | Path | None = None, device: str = "cpu", **options: Any) -> None:
        unknown = sorted(set(options) - set(INFERENCE_OPTIONS))
        if unknown:
            raise ValueError(f"unknown bundle inference option(s) {unknown}; the options are {list(INFERENCE_OPTIONS)}")
        self.bundle_root = Path(str(bundle_root))
        self.dataset_dir = dataset_dir
        self.output_dir = output_dir
        self.device = device
        self.options = {name: value for name, value in options.items() if value is not None}

    def load(self) -> Run:
        """The bundle's run, its config carrying this call's options."""
        run = load_bundle(self.bundle_root, self.device)
        run.task.config = dataclasses.replace(run.task.config, **self.options)  # validated by the config
        if run.config.num_threads:  # the threads it was trained with, as zoo predict sets them
            torch.set_num_threads(run.config.num_threads)
        return run

    def run(self) -> str:
        """Predict every volume of ``dataset_dir`` into ``output_dir``; returns (and logs) ``zoo predict``'s summary."""
        from tasks.medseg.inference.predict import predict

        if self.dataset_dir is None or self.output_dir is None:
            missing = "--dataset_dir" if self.dataset_dir is None else "--output_dir"
            raise ValueError(f"no {missing[2:]}: run the bundle with {missing} DIR (dataset_dir: the folder of volumes "
                             "to predict; output_dir: where their label maps go)")
        summary = predict(self.load(), [str(self.dataset_dir)], str(self.output_dir), progress=False)
        log.info(summary)
        return summary


def load_bundle(bundle_root: str | Path, device: str = "cpu") -> Run:
    """The run of a bundle written by :func:`export_bundle`, rebuilt as :func:`tasks.runs.run.load_run` rebuilds a
    run folder (configs/ is one) with the state_dict its run.json's ``weights`` names."""
    root = Path(bundle_root)
    configs = root / "configs"
    if not (configs / RUN_FILE).is_file():
        raise FileNotFoundError(f"no configs/{RUN_FILE} in {root}: not a bundle exported from a zoo run, or one "
                                "that was moved; give its folder with --bundle_root")
    info = read_run_info(configs)
    task = restore_task(info, configs, device)
    model = task.build_saved_model(info["variant"], info.get("variant_config"))
    weights = (configs / info.get("weights", f"../{MODEL_FILE}")).resolve()
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    except (OSError, EOFError, pickle.UnpicklingError, RuntimeError, TypeError, ValueError) as error:
        raise ValueError(f"{weights} is missing, corrupt or not this model's state_dict ({type(error).__name__}: "
                         f"{str(error)[:200]}); export the bundle again") from None
    metrics_file = configs / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else None
    return Run(root, task, model.to(task.device).eval(), info, weights, metrics, task.device)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return package_version() if package == "transformer-zoo" else "unknown"


def _readme(run: Run, root: Path) -> str:
    classes = ", ".join(run.preprocessing["class_names"][1:])
    return (f"# {run.variant} segmentation of {classes}\n\n"
            f"Exported from the transformer-zoo run `{run.path}` ({run.weights.name}). Predict a folder of volumes "
            "with MONAI's bundle runner (transformer-zoo must be installed):\n\n"
            f"    python -m monai.bundle run --config_file {root}/configs/inference.json \\\n"
            f"        --meta_file {root}/configs/metadata.json --dataset_dir IN --output_dir PRED\n\n"
            "Any value of configs/inference.json can be replaced the same way: `--tta mirror`, `--overlap 0.25`, "
            "`--device cuda`; after moving the bundle, `--bundle_root NEW_FOLDER`. The label maps are those `zoo "
            "predict` writes with the run: one uint8 label volume per case, named like its input.\n")
