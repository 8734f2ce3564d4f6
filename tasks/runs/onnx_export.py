"""``zoo export RUN --format onnx``: the run's graphs as ONNX files, each checked through onnxruntime.

Every graph the task declares (:meth:`tasks.engine.task.Task.onnx_graphs`: a classifier's or segmenter's
``model``, a translation model's ``encoder`` and ``decoder_step``) is traced on a cut of the run's own test
examples (batch 2, variable sequence axes 2 long; 1 where the examples hold only 2) and then run by onnxruntime on
the whole examples beside PyTorch. Every dynamic axis is thus checked at another size than the one traced, so a
graph that baked in its traced batch (or length) is refused; examples of size 1 along a dynamic axis, which could
not show it, are refused too. An export whose outputs differ in shape, or whose largest difference exceeds
``tolerance × max(1, max |PyTorch output|)``, is deleted and refused, with that difference in the message.

Tracing uses PyTorch's TorchScript-based exporter, which is fast; a graph it cannot express (or that does not
check) is exported again with ``torch.export`` (``dynamo=True``, which needs onnxscript). The folder holds the
ONNX files beside ``run.json`` and the run's artefacts (tokenizer, classes): ``zoo predict EXPORT --runtime
onnxruntime`` (:mod:`tasks.runs.onnx_runtime`) uses it without building the PyTorch model.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from plumbing.atomic import write_json_atomic
from plumbing.errors import import_extra
from tasks.engine.export_graphs import Graph
from tasks.runs.run import RUN_FILE, Run

TOLERANCE = 1e-4  # relative to the output's magnitude: float32 kernels of two runtimes, not a model change
OPSET = 17


def export_onnx(run: Run, out: Path, tolerance: float = TOLERANCE, n: int = 8) -> dict[str, Any]:
    """Write ``out/<graph>.onnx`` for each of the run's graphs and ``out/run.json``; returns the checks
    ``{graph: {"max_abs_diff", "limit", "examples", "exporter"}}``. Raises ValueError when a graph disagrees."""
    ort = import_extra("onnxruntime", "zoo export --format onnx", "onnx")
    import_extra("onnx", "zoo export --format onnx", "onnx")
    if not tolerance > 0:
        raise ValueError(f"--tolerance must be > 0, got {tolerance}")
    run.task.setup()  # the test examples the graphs are checked on
    model = run.model.float().eval()
    checks = {}
    for graph in run.task.onnx_graphs(model, n):
        file = out / f"{graph.name}.onnx"
        checks[graph.name] = export_graph(graph, file, tolerance, ort)
    run.copy_artifacts(out)
    info = {**run.info, "runtime": "onnxruntime", "precision": "fp32", "exported_from": str(run.weights),
            "graphs": {name: f"{name}.onnx" for name in checks}, "onnx_check": checks}
    write_json_atomic(out / RUN_FILE, info)
    return checks


def export_graph(graph: Graph, file: Path, tolerance: float = TOLERANCE, ort=None) -> dict[str, Any]:
    """Export ``graph`` (TorchScript exporter, else torch.export) and check it at other sizes of its dynamic axes than
    those traced; the file is removed if neither export agrees with PyTorch within the limit. Returns the check (see
    :func:`export_onnx`; ``traced``: the sizes the graph was traced at)."""
    ort = ort or import_extra("onnxruntime", "ONNX export", "onnx")
    for name, axes in graph.dynamic.items():
        for axis, label in axes.items():
            if name in graph.inputs and graph.inputs[name].shape[axis] < 2:
                raise ValueError(f"the {graph.name} graph's example {name} has size 1 along its dynamic axis {axis} "
                                 f"({label}): the check must run another size than the one traced; give at least 2 "
                                 "examples along it")
    # eval mode, and a wrapper's own flag too: the exporter restores the wrapper's mode on its whole tree afterwards,
    # which would leave a model shared by two graphs (encoder, decoder step) with its dropout on for the second
    graph.module.eval()
    with torch.no_grad():
        expected = graph.module(*graph.inputs.values())
    expected = [t.float().numpy() for t in (expected if isinstance(expected, tuple) else (expected,))]
    limit = tolerance * max(1.0, max(float(np.abs(e).max()) for e in expected))
    failures = []
    for exporter in ("torchscript", "dynamo"):
        try:
            _export(graph, file, exporter)
            session = ort.InferenceSession(str(file), providers=["CPUExecutionProvider"])
            got = session.run(list(graph.outputs), {k: v.numpy() for k, v in graph.inputs.items()})
        except Exception as error:  # an exporter that cannot express the model: try the other
            failures.append(f"{exporter}: {type(error).__name__}: {str(error).splitlines()[0][:200]}")
            continue
        shapes = _shapes(graph.inputs)
        wrong = next(((n, g.shape, e.shape) for n, g, e in zip(graph.outputs, got, expected) if g.shape != e.shape),
                     None)
        if wrong is not None:  # e.g. the traced batch baked into a reshape
            failures.append(f"{exporter}: onnxruntime's {wrong[0]} is {list(wrong[1])}, PyTorch's {list(wrong[2])} on "
                            f"{shapes} (traced on {_shapes(_traced(graph))}: a dynamic axis was fixed at its traced "
                            "size)")
            continue
        diff = max(float(np.abs(g.astype(np.float32) - e).max()) for g, e in zip(got, expected))
        if diff <= limit:
            return {"max_abs_diff": diff, "limit": limit, "examples": shapes, "traced": _shapes(_traced(graph)),
                    "exporter": exporter}
        failures.append(f"{exporter}: max |onnxruntime - PyTorch| = {diff:.3g} > {limit:.3g} on {shapes}")
    file.unlink(missing_ok=True)
    raise ValueError(f"the {graph.name} graph did not export faithfully ({'; '.join(failures)}); it was not "
                     "written. Raise --tolerance only if the difference is float rounding")


def _export(graph: Graph, file: Path, exporter: str) -> None:
    """Trace ``graph`` on its inputs cut along every dynamic axis (:func:`_traced`), so that the check runs other
    sizes."""
    cut = _traced(graph)
    names, outputs = list(graph.inputs), list(graph.outputs)
    file.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporters' deprecation and tracer warnings
        if exporter == "torchscript":
            torch.onnx.export(graph.module, tuple(cut.values()), str(file), input_names=names, output_names=outputs,
                              dynamic_axes=graph.dynamic, opset_version=OPSET, dynamo=False)
        else:
            import_extra("onnxscript", "zoo export --format onnx (torch.export path)", "onnx")
            shapes = {name: {axis: torch.export.Dim.AUTO for axis in graph.dynamic.get(name, {})} for name in names}
            program = torch.onnx.export(graph.module, tuple(cut.values()), input_names=names, output_names=outputs,
                                        dynamic_shapes=shapes, opset_version=max(OPSET, 18), dynamo=True,
                                        verbose=False)
            program.save(str(file))


def _traced(graph: Graph) -> dict[str, torch.Tensor]:
    """The inputs the graph is traced on: each cut to 2 along its dynamic axes, and always below the examples' size
    there (1 where they hold 2), so that the check's sizes differ from the traced ones."""
    out = {}
    for name, tensor in graph.inputs.items():
        for axis in graph.dynamic.get(name, {}):
            tensor = tensor.narrow(axis, 0, min(2, tensor.shape[axis] - 1))
        out[name] = tensor.contiguous()
    return out


def _shapes(inputs: dict[str, torch.Tensor]) -> str:
    return ", ".join(f"{k} {list(v.shape)}" for k, v in inputs.items())
