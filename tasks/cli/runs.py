"""Subcommands that use a finished run: ``zoo evaluate``, ``zoo predict``, ``zoo export``.

``zoo predict`` hands over to the run's task (:meth:`Task.predict_inputs <tasks.engine.task.Task.predict_inputs>`),
which reads the inputs, converts them exactly as the training data was, and writes the outputs; the options that
only one task understands are refused for the others.

``zoo predict`` and ``zoo evaluate`` also take a cross-validation folder (``zoo cv``'s ``OUT``): its folds' runs
predict as one ensemble (:mod:`tasks.runs.ensemble`) where the task supports it (medseg). The inference options
(``--tta``, ``--mirror-axes``, ``--overlap``, ``--sw-mode``, ``--sw-batch-size``) replace the run's own settings of
those names for this call, and are refused for a task whose config has no such field.

A task adds its own options to ``zoo predict`` and ``zoo evaluate`` with the classmethod
``add_arguments(command, parser)`` (e.g. lm's ``--prompt`` and ``--lengths``): the command line calls it for every
registered task, and a flag another task already defined is kept once. Given to ``zoo predict``, such an option
goes to the run's ``Task.predict_inputs`` (if the task lists it in ``predict_options``); given to ``zoo evaluate``,
an option whose dest is a config field of the run's task replaces the run's setting for this call.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tasks.engine.registry import task_class, task_names

# the options of `zoo predict` that a task may take (Task.predict_options), besides the shared --out, --device,
# --checkpoint and --batch-size
PREDICT_OPTIONS = ("beam_size", "temperature", "top_k", "top_p", "attention", "labels", "save_probabilities")


def _load(args: argparse.Namespace):
    """The run of ``args``, with torch on the CPU threads it was trained with (as ``zoo train`` sets them)."""
    import torch

    from tasks.runs.run import load_run

    run = load_run(args.run, args.checkpoint, args.device, args.task, getattr(args, "runtime", "torch"))
    if run.config.num_threads:
        torch.set_num_threads(run.config.num_threads)
    return run


def _load_members(args: argparse.Namespace, config_options: tuple[str, ...] = ()) -> list:
    """The run of ``args`` as a one-member list, or every fold's run of a cross-validation folder; each with the
    call's inference options (and ``config_options``, dests of the tasks' own options) applied to its config."""
    import dataclasses

    import torch

    from tasks.runs.ensemble import fold_count, load_members

    members = load_members(args.run, args.checkpoint, args.device, args.task) \
        if fold_count(args.run) is not None else [_load(args)]
    if len(members) > 1:
        task = members[0].task
        if "members" not in task.predict_options:
            raise ValueError(f"{args.run} is a cross-validation folder; ensembles of {task.name} runs are not "
                             "supported: give one fold's run (fold_k/)")
        if members[0].config.num_threads:
            torch.set_num_threads(members[0].config.num_threads)
    from tasks.medseg.config import INFERENCE_OPTIONS  # the config fields one call may set for itself

    names = (*INFERENCE_OPTIONS, *config_options)
    overrides = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    for run in members:
        fields = {f.name for f in dataclasses.fields(run.task.config)}
        unknown = [name for name in overrides if name not in fields]
        if unknown:
            flags = ", ".join(_flag(args, name) for name in unknown)
            offered = getattr(args, "task_options", {})
            takers = sorted({task for name in unknown for task in offered.get(name, ["medseg"])})
            raise ValueError(f"{flags}: not an option of {run.task.name} runs (they apply to {', '.join(takers)} runs)")
        run.task.config = dataclasses.replace(run.task.config, **overrides)  # validated by the config
    return members


def _flag(args: argparse.Namespace, dest: str) -> str:
    """The flag that sets ``dest`` (a task's own option may be named otherwise: --lengths sets eval_lengths)."""
    return getattr(args, "option_flags", {}).get(dest, "--" + dest.replace("_", "-"))


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from tasks.runs.evaluate import evaluate_run
    from tasks.runs.report import summary_lines

    if args.pred is not None or args.labels is not None or (args.run in task_names() and not Path(args.run).is_dir()):
        return _evaluate_folders(args)
    if args.nsd_tolerance is not None:  # the training run's record names its tolerance, which paired NSD relies on
        raise ValueError(f"--nsd-tolerance {args.nsd_tolerance:g} scores two folders (zoo evaluate medseg --pred DIR "
                         "--labels DIR); a run's NSD is scored at the tolerance it was trained with: train it with "
                         "--nsd-tolerance MM")
    members = _load_members(args, tuple(args.task_options))
    run = members[0]
    metrics, out = evaluate_run(run, args.data, args.split, args.out, members=members)
    lines = summary_lines({"task": run.task.name, "variant": run.variant, "epochs": 0, "train_seconds": 0,
                           "parameters": sum(p.numel() for p in run.model.parameters()),
                           "main_metric": run.task.main_metric, "best_valid": float("nan"), "final": metrics})
    print("\n".join(lines[2:]) if len(lines) > 2 else "no test metrics")
    print(f"outputs in {out}/ (metrics.json, report.md, predictions/)")
    return 0


def _evaluate_folders(args: argparse.Namespace) -> int:
    """``zoo evaluate TASK --pred DIR --labels DIR``: two folders of predictions, no run (``Task.score_folders``)."""
    if args.run not in task_names() or args.pred is None or args.labels is None:
        raise ValueError("score two folders of predictions with `zoo evaluate TASK --pred DIR --labels DIR` (e.g. "
                         "medseg's NIfTI label maps); to re-score a run, give its folder: `zoo evaluate RUN`")
    lines = task_class(args.run).score_folders(args.pred, args.labels, args.dataset_json, args.chill, args.out,
                                               nsd_tolerance=args.nsd_tolerance)
    print("\n".join(lines))
    return 0


def _cmd_predict(args: argparse.Namespace) -> int:
    members = _load_members(args)
    run = members[0]
    options = {"members": members} if len(members) > 1 else {}
    for name in dict.fromkeys((*PREDICT_OPTIONS, *args.task_options)):
        value = getattr(args, name)
        if value is None:
            continue
        if name not in run.task.predict_options:
            takers = [task for task in task_names() if name in task_class(task).predict_options]
            raise ValueError(f"{_flag(args, name)} is an option of {', '.join(takers)} runs; {args.run} is a "
                             f"{run.task.name} run")
        options[name] = value
    if args.batch_size is not None:
        options["batch_size"] = args.batch_size
    summary = type(run.task).predict_inputs(run, list(args.inputs), args.out, progress=not args.quiet, **options)
    print(summary, file=sys.stderr if args.out is None else sys.stdout)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    if args.format == "monai-bundle":
        from tasks.medseg.inference.bundle import export_bundle
        from tasks.runs.run import load_run

        run = load_run(args.run, args.checkpoint, task="medseg")
        out = export_bundle(run, Path(args.out) if args.out else run.path / "export-monai-bundle")
        print(f"exported {args.run} ({args.checkpoint}) as a MONAI bundle to {out}/; run it with: python -m "
              f"monai.bundle run --config_file {out}/configs/inference.json --meta_file {out}/configs/metadata.json "
              "--dataset_dir IMAGES --output_dir PREDICTIONS")
        return 0
    from tasks.compare.paired import metric_intervals
    from tasks.runs.export import export_run

    out = export_run(args.run, args.out, args.format, args.checkpoint, args.tolerance, metric_intervals)
    use = {"safetensors": f"zoo.load_run('{out}') or `zoo predict {out} ...`",
           "hf": f"zoo.load_run('{out}'), zoo.create(VARIANT, pretrained='{out}') or `zoo predict {out} ...`",
           "onnx": f"`zoo predict {out} ... --runtime onnxruntime` (or any ONNX runtime)"}[args.format]
    print(f"exported {args.run} ({args.checkpoint}) as {args.format} to {out}/; use it with {use}")
    if args.format == "onnx":
        import json

        for name, check in json.loads((out / "run.json").read_text())["onnx_check"].items():
            print(f"  {name}.onnx: max |onnxruntime - PyTorch| {check['max_abs_diff']:.2e} (limit "
                  f"{check['limit']:.2e}) on {check['examples']} ({check['exporter']} exporter)")
    return 0


def _inference_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tta", default=None, choices=("none", "mirror"), help="medseg: test-time augmentation; mirror "
                   "averages the probabilities over every flip along the axes training flipped (default: the run's "
                   "setting)")
    p.add_argument("--mirror-axes", default=None, metavar="AXES", help="medseg: mirror only these of the axes "
                   "training flipped, e.g. 0,1 (0 D, 1 H, 2 W; default: all of them)")
    p.add_argument("--overlap", type=float, default=None, help="medseg 3D: sliding-window overlap in [0, 1)")
    p.add_argument("--sw-mode", default=None, choices=("gaussian", "constant"), help="medseg 3D: window weighting")
    p.add_argument("--sw-batch-size", type=int, default=None, help="medseg 3D: windows per forward pass (memory)")


class _TaskOptions:
    """The parser a task's ``add_arguments(command, parser)`` hook adds to: a flag whose dest the command already
    has (another task's, or a shared one) is not added twice; records which tasks offer each added dest."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser, self.task = parser, ""
        self.dests: dict[str, list[str]] = {}  # dest -> the tasks whose hook added it
        self.flags: dict[str, str] = {}  # dest -> its first flag
        self._known = {action.dest for action in parser._actions}

    def add_argument(self, *flags: str, **kwargs) -> None:
        dest = kwargs.get("dest") or flags[0].lstrip("-").replace("-", "_")
        if dest in self.dests:
            self.dests[dest].append(self.task)
        elif dest not in self._known:
            self.parser.add_argument(*flags, **kwargs)
            self.dests[dest], self.flags[dest] = [self.task], flags[0]
            self._known.add(dest)


def _task_arguments(command: str, p: argparse.ArgumentParser) -> None:
    """Let every registered task add its own options to ``command`` (``Task.add_arguments``; the default adds none)."""
    options = _TaskOptions(p)
    for name in task_names():
        options.task = name
        task_class(name).add_arguments(command, options)
    p.set_defaults(task_options=options.dests, option_flags=options.flags)


def _run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run folder written by `zoo train` (its --out) or `zoo export`; zoo predict and zoo "
                   "evaluate also take a `zoo cv` folder (its folds as one ensemble)")
    p.add_argument("--checkpoint", default="best", help="best, last, or the path of a checkpoint (default: best)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    p.add_argument("--task", default=None, help="refuse a run of any other task (a check for scripts)")


def add_run_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="re-score a finished run on a split of its data or of another folder; "
                       "`zoo evaluate medseg --pred DIR --labels DIR` scores two folders of label maps")
    _run_arguments(p)
    p.add_argument("--data", default=None, help="a compatible data folder (default: the run's own data)")
    p.add_argument("--split", default=None, help="the split to score (default: the task's test splits)")
    p.add_argument("--out", default=None, help="output folder (default: RUN/evaluations/<data>-<split>; with "
                   "--pred: the --pred folder)")
    p.add_argument("--pred", default=None, metavar="DIR", help="medseg: a folder of predicted NIfTI label maps")
    p.add_argument("--labels", default=None, metavar="DIR", help="medseg: the reference label maps (same names)")
    p.add_argument("--dataset-json", default=None, metavar="FILE", help="medseg: dataset.json naming the classes "
                   "(default: the labels' own, else the label values found)")
    p.add_argument("--chill", action="store_true", help="medseg: allow references that have no prediction")
    p.add_argument("--nsd-tolerance", type=float, default=None, metavar="MM", help="medseg with --pred: the normalised "
                   "surface Dice's tolerance in mm (> 0; default 1, a training run's), recorded in metrics.json")
    _inference_arguments(p)
    _task_arguments("evaluate", p)
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("predict", help="use a finished run on new inputs: sentences, images or volumes")
    _run_arguments(p)
    p.add_argument("inputs", nargs="*", help="translation: text files (default: standard input); cifar: image files "
                   "or folders; medseg: volume files (.h5, .npz; .nii/.nii.gz for runs trained on NIfTI) or folders")
    p.add_argument("--out", default=None, help="output file (translation: default standard output; cifar: a CSV, "
                   "default predictions.csv) or folder (medseg: default predictions/)")
    p.add_argument("--batch-size", type=int, default=None, help="inputs per forward pass")
    p.add_argument("--beam-size", type=int, default=None, help="translation: beam search with this beam (1: greedy)")
    p.add_argument("--temperature", type=float, default=None, help="translation: sample at this temperature (> 0); "
                   "lm: 0 is greedy")
    p.add_argument("--top-k", type=int, default=None, help="translation, lm: sample from the k most probable tokens")
    p.add_argument("--top-p", type=float, default=None, help="translation, lm: sample from the nucleus of mass p")
    p.add_argument("--attention", default=None, metavar="DIR", help="cifar: write attention maps as PNGs to DIR")
    p.add_argument("--labels", default=None, metavar="DIR", help="medseg: label volumes to score the predictions")
    p.add_argument("--save-probabilities", action="store_true", default=None, help="medseg: also write each case's "
                   "class probabilities as CASE.npz beside its label map")
    _inference_arguments(p)
    p.add_argument("--runtime", default="torch", choices=("torch", "onnxruntime"), help="onnxruntime: run the graphs "
                   "of a `zoo export --format onnx` folder instead of the PyTorch model (default: torch)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _task_arguments("predict", p)
    p.set_defaults(func=_cmd_predict)

    p = sub.add_parser("export", help="write a run for other tools: safetensors + run.json, a Hugging Face "
                       "folder, ONNX graphs checked with onnxruntime, or a MONAI bundle (no pickle in any)")
    p.add_argument("run", help="a run folder written by `zoo train`")
    p.add_argument("--format", default="safetensors", choices=("safetensors", "hf", "onnx", "monai-bundle"),
                   help="safetensors (default): model.safetensors + run.json; hf: config.json + model.safetensors + "
                   "a README.md model card; onnx: one graph per computation, checked against PyTorch on the run's "
                   "test examples; monai-bundle (medseg): configs/ + models/model.pt for `python -m monai.bundle run`")
    p.add_argument("--tolerance", type=float, default=None, help="onnx: the largest |onnxruntime - PyTorch| allowed, "
                   "relative to max(1, max |output|) (default 1e-4)")
    p.add_argument("--checkpoint", default="best", help="best, last, or the path of a checkpoint (default: best)")
    p.add_argument("--out", default=None, help="output folder (default: RUN/export, RUN/export-FORMAT for the others)")
    p.set_defaults(func=_cmd_export)
