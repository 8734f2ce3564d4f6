"""Launch options of ``zoo compare``, ``zoo ablate`` and ``zoo cv``, and ``zoo sweep FILE``.

``--launcher serial|local|ray|submitit`` with ``--jobs N``, ``--resources cpu=C,gpu=G``, ``--retry N`` and the
``--slurm-*`` options say where a sweep's runs train (:mod:`tasks.sweeps.launchers`). ``zoo sweep FILE`` runs the
sweep a TOML or JSON file describes (:mod:`tasks.sweeps.plan`), or an earlier sweep's ``OUT/sweep.json``: run again,
it reuses finished runs, resumes interrupted ones and retrains failed ones.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tasks.engine.registry import task_class


def add_launch_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--launcher", default=None, choices=("serial", "local", "ray", "submitit"),
                   help="where the runs train: serial (default: one after another here), local (--jobs processes on "
                        "this machine), ray (Ray tasks: RAY_ADDRESS's cluster, else a local one; pip install -e "
                        "'.[ray]'), submitit (SLURM jobs, or its local executor; pip install -e '.[slurm]')")
    p.add_argument("--jobs", type=int, default=None, help="runs at once (local: the cores are divided between them)")
    p.add_argument("--resources", default=None, metavar="cpu=C,gpu=G",
                   help="per run, for ray and submitit (default cpu=1); torch uses C threads")
    p.add_argument("--retry", type=int, default=None, help="start a failed run up to N more times (default 0)")
    p.add_argument("--slurm-partition", default=None, help="SLURM partition (submitit)")
    p.add_argument("--slurm-time", type=int, default=None, metavar="MINUTES",
                   help="SLURM time limit per job; at its end the run checkpoints and the job requeues (submitit)")
    p.add_argument("--slurm-gpus-per-node", type=int, default=None,
                   help="GPUs per job (submitit; > 1: one DDP rank per GPU)")


def launch_from_args(args: argparse.Namespace, file: dict[str, Any] | None = None):
    """The :class:`~tasks.sweeps.launchers.Launch` the flags (over a sweep file's settings) describe."""
    from tasks.plugins.loader import user_dirs_of
    from tasks.sweeps.launchers import Launch

    file = file or {}
    slurm = dict(file.get("slurm", {}))
    for key in ("partition", "time", "gpus_per_node"):
        value = getattr(args, f"slurm_{key}", None)
        if value is not None:
            slurm[key] = value
    if "gpus_per_node" in slurm:  # a GPU count is a resource of the job
        gpus = slurm.pop("gpus_per_node")
        resources = args.resources or file.get("resources") or "cpu=1"
        resources = f"{resources},gpu={gpus}" if isinstance(resources, str) else {**resources, "gpu": gpus}
    else:
        resources = args.resources or file.get("resources")
    launcher = args.launcher or file.get("launcher", "serial")
    jobs = args.jobs if args.jobs is not None else file.get("jobs", 1)
    retry = args.retry if args.retry is not None else file.get("retry", 0)
    return Launch(launcher, jobs, resources, retry, slurm, tuple(str(Path(d).resolve()) for d in user_dirs_of(args)))


def _cmd_sweep(args: argparse.Namespace) -> int:
    from tasks.compare.sweep import ablate, compare
    from tasks.sweeps.plan import read_sweep_file

    spec = read_sweep_file(args.file)
    cls = task_class(spec["task"])
    launch = launch_from_args(args, spec)
    config = {**spec.get("set", {}), "model": dict(spec.get("model_set", {}))}
    config.setdefault("progress", False)
    if spec.get("epochs") is not None:
        config["epochs"] = spec["epochs"]
    out = Path(spec.get("out") or f"runs/sweep-{spec['task']}")
    common = {"seeds": spec.get("seeds", 1), "budget": spec.get("budget"), "alpha": spec.get("alpha", 0.05),
              "allow_undeclared": spec.get("allow_undeclared", False), "launch": launch}
    if spec["kind"] == "compare":
        comparison = compare(spec["task"], spec.get("variants"), out, baseline=spec.get("baseline"), **common,
                             **config)
    elif spec["kind"] == "ablate":
        comparison = ablate(spec["variant"], spec["task"], out, **common, **config)
    else:
        from tasks.engine.config import config_from_dict
        from tasks.engine.registry import tasks_with

        if spec["task"] not in tasks_with("cross_validate"):
            raise ValueError(f"{args.file}: kind = \"cv\" needs a task with cross-validation; {spec['task']!r} has "
                             f"none (the tasks that have it: {', '.join(tasks_with('cross_validate')) or 'none'})")

        fields = {**config, "out": str(out)}
        if not fields["model"]:
            fields.pop("model")
        cv_config = config_from_dict(cls.config_class, fields)
        _, lines = cls.cross_validate(cv_config, launch)
        print("\n".join(lines))
        return 0
    print_comparison(comparison, out)
    return 0


def print_comparison(comparison: dict, out) -> None:
    from tasks.compare.report import explain_tests

    print(comparison["table"])
    print("\n" + "\n".join(explain_tests(comparison, ("headline",))))
    print(f"\nwritten to {out}/ (report.md, results.json, metric_vs_cost.png)")


def add_sweep_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run (or resume) the sweep a TOML/JSON file describes: a compare, ablate or cv",
                       description="Run the sweep FILE describes (kind = compare | ablate | cv, task, variants or "
                                   "variant, seeds, budget, epochs, out, [set], [model_set], launcher, jobs, "
                                   "resources, retry, [slurm]); an earlier sweep's OUT/sweep.json works too and "
                                   "names exactly its runs. Run again, it reuses finished runs, resumes interrupted "
                                   "ones and retrains failed ones.")
    p.add_argument("file", help="the sweep file (.toml or .json), or an earlier sweep's OUT/sweep.json")
    add_launch_arguments(p)
    p.set_defaults(func=_cmd_sweep)
