"""``zoo export``: a finished run in the formats other tools read.

- ``safetensors``: ``model.safetensors`` + ``run.json`` + the run's artefacts; read by ``zoo.load_run`` and
  ``zoo predict``.
- ``hf``: ``config.json`` (variant, config, preprocessing) + ``model.safetensors`` + ``README.md`` (a model card);
  read by the same and by ``zoo.create(name, pretrained=FOLDER)``, laid out as Hugging Face Hub folders are.
- ``onnx``: one ``.onnx`` graph per computation, checked through onnxruntime (:mod:`tasks.runs.onnx_export`); read
  by ``zoo predict EXPORT --runtime onnxruntime`` and any ONNX runtime.
- ``monai-bundle`` (medseg runs): ``configs/`` + ``models/model.pt`` (:mod:`tasks.medseg.inference.bundle`); run by
  ``python -m monai.bundle run``.

None of them pickles code: the weights are safetensors (or a plain state dict read with ``weights_only=True``).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plumbing.atomic import atomic_path, write_json_atomic, write_text_atomic
from plumbing.errors import unknown_name
from tasks.runs.run import RUN_FILE, WEIGHTS_FILE, Run, load_run

if TYPE_CHECKING:  # annotations only
    from zoo.registry import Variant

FORMATS = ("safetensors", "hf", "onnx", "monai-bundle")
HF_CONFIG = "config.json"
LIBRARY = "transformer-zoo"  # config.json's library_name: how load_run tells an hf export from timm's folders


def export_run(path: str | Path, out: str | Path | None = None, format: str = "safetensors",
               checkpoint: str | Path = "best", tolerance: float | None = None,
               intervals: Callable[[Path, dict], list[dict]] | None = None) -> Path:
    """Export the run at ``path`` as ``format`` (see the module docstring) to ``out`` (default ``RUN/export``,
    ``RUN/export-<format>`` for the others); returns ``out``.

    ``tolerance``: the ONNX check's (default :data:`tasks.runs.onnx_export.TOLERANCE`); ``intervals``: gives the
    model card each metric with its interval (``tasks.compare.paired.metric_intervals``; None: values only).
    ``monai-bundle`` is written by :func:`tasks.medseg.inference.bundle.export_bundle`, which ``zoo export`` calls.
    """
    if format not in FORMATS or format == "monai-bundle":
        if format == "monai-bundle":
            raise ValueError("monai-bundle exports are written by tasks.medseg.inference.bundle.export_bundle "
                             "(`zoo export RUN --format monai-bundle`)")
        raise unknown_name("export format", format, FORMATS)
    run = load_run(path, checkpoint)
    out = Path(out) if out is not None else run.path / ("export" if format == "safetensors" else f"export-{format}")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for the exported run")
    out.mkdir(parents=True, exist_ok=True)
    if format == "onnx":
        from tasks.runs.onnx_export import TOLERANCE, export_onnx

        export_onnx(run, out, TOLERANCE if tolerance is None else tolerance)
        return out
    with atomic_path(out / WEIGHTS_FILE) as tmp:  # safetensors writes 0600; atomic_path gives it the umask's mode
        from safetensors.torch import save_model

        save_model(run.model, str(tmp), metadata={"task": run.info["task"], "variant": run.variant})
    run.copy_artifacts(out)
    info = {**run.info, "weights": WEIGHTS_FILE, "exported_from": str(run.weights)}
    if format == "safetensors":
        write_json_atomic(out / RUN_FILE, info)
        return out
    write_json_atomic(out / HF_CONFIG, {"library_name": LIBRARY, "model_type": LIBRARY,
                                        "architectures": [run.variant], **info})
    found = intervals(run.path, run.info) if intervals is not None else []
    write_text_atomic(out / "README.md", model_card(run, out, found))
    return out


def model_card(run: Run, out: Path, intervals: list[dict[str, Any]]) -> str:
    """``README.md`` of an ``hf`` export: what the model is, how to use it, its data, results and what changed.

    Its code names the export by its absolute path, so that it runs as printed from any directory (``create``
    reads the task and config the export records); a moved folder is named by its new path instead.
    """
    info, metrics = run.info, run.metrics or {}
    config, task, variant = info["config"], info["task"], run.variant
    folder = str(out.resolve())
    data = info["preprocessing"].get("dataset") or config.get("data") or "the embedded default data"
    lines = ["---", f"library_name: {LIBRARY}", f"tags: [{LIBRARY}, {task}, {variant}]", "---", "",
             f"# {variant} for {task}, trained on {data}", "",
             f"Exported by transformer-zoo {info.get('package_version', '?')} from `{run.weights}`.", "",
             "## Use", "", "```python", "import zoo", "",
             f"run = zoo.load_run({_literal(folder)})  # the model with its preprocessing",
             f"model = zoo.create({_literal(variant)}, pretrained={_literal(folder)})  # the bare model; "
             "num_classes=K re-heads it",
             "```", "", f"`zoo predict {shlex.quote(folder)} INPUTS...` predicts with the same preprocessing it was "
             "trained with. The paths are this folder's when it was exported: give its new path if it moved.",
             "", "## Results", ""]
    if intervals:
        lines += ["| metric | split | value | 95 % interval (bootstrap over examples) | examples |",
                  "|---|---|---|---|---|"]
        lines += [f"| {m['title']} | {m['split']} | {m['value']:.4g} | [{m['low']:.4g}, {m['high']:.4g}] | {m['n']} |"
                  for m in intervals]
    else:
        final = metrics.get("final") or {}
        scalars = [(split, k, v) for split, values in final.items() if isinstance(values, dict)
                   for k, v in values.items() if isinstance(v, int | float)]
        lines += ["| split | metric | value |", "|---|---|---|"] + [f"| {s} | {k} | {v:.4g} |" for s, k, v in scalars] \
            if scalars else ["No test metrics were recorded."]
    lines += ["", "## Training", "",
              f"{metrics.get('epochs', '?')} epochs, {metrics.get('parameters', 0):,} parameters, "
              f"{metrics.get('train_seconds', 0):.0f} s of training, precision {info.get('precision') or 'fp32'}; "
              f"seed {config.get('seed')}, batch {config.get('batch_size')}, lr {config.get('lr')}."]
    if info.get("init_from"):
        lines.append(f"Started from `{info['init_from']['source']}` ({info['init_from']['counts']}).")
    lines += ["", *_what_changed(run.task.variant)]
    return "\n".join(lines) + "\n"


def _literal(text: str) -> str:
    """``text`` as a double-quoted Python string literal (a JSON string is one, whatever the path holds)."""
    return json.dumps(text, ensure_ascii=False)


def _what_changed(registered: Variant | None) -> list[str]:
    """The model card's "what changed" section: the declared changes of the run's variant (``registered``, as its
    task resolved it; ``None`` for a reference model outside the zoo)."""
    if registered is None:
        return ["## What changed", "", "A reference model outside the zoo: not a patch on the classic Transformer."]
    rows = ["## What changed against the classic Transformer", "", registered.summary, "",
            "| part | classic | this model | why |", "|---|---|---|---|"]
    rows += [f"| {c.part} | {c.classic} | {c.variant} | {c.flaw} |" for c in registered.changes]
    return rows + ["", f"Paper: {registered.paper.title} ({registered.paper.year}), {registered.paper.url}"]
