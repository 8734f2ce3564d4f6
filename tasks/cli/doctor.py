"""``zoo doctor``: examine a trained run, or a variant at initialisation, and rank what is wrong with it.

    zoo doctor RUN [--checkpoint best|last]                       a finished run, on a batch of its own data
    zoo doctor --variant V [--task T] [--preset P] [--model-set k=v]   a fresh model, as zoo train would build it
    ... --lab-mistake NAME                                        inject a mistake first (zoo doctor --list-mistakes)

Writes ``doctor.md``, ``doctor.json`` and one figure per check under ``--out`` (default ``RUN/doctor`` or
``runs/doctor/VARIANT-TASK[-MISTAKE]``) and prints the ranked findings, or "nothing found" with what was checked.
Exits 1 when a finding is at ``--fail-on`` (default ``error``) or worse, so that it can gate a CI job; 2 on a
usage error, as every zoo command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from zoo.analysis.doctor.findings import SEVERITIES
from zoo.analysis.doctor.render import write_diagnosis


def _cmd_doctor(args: argparse.Namespace) -> int:
    from tasks.doctor.mistakes import MISTAKES, get_mistake

    if args.list_mistakes:
        width = max(len(name) for name in MISTAKES)
        for m in MISTAKES.values():
            print(f"{m.name:<{width}}  [{m.lesson}] {m.what}")
        return 0
    if (args.run is None) == (args.variant is None):
        raise ValueError("give a run folder (zoo doctor RUN) or --variant V, not both and not neither")
    if args.run is not None and (args.task or args.preset or args.model_set):
        raise ValueError("--task, --preset and --model-set describe a fresh model (--variant); a run has its own")
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    if args.lab_mistake is not None:
        get_mistake(args.lab_mistake)  # an unknown name fails before any work
    if args.run is not None:
        out = Path(args.out or Path(args.run) / "doctor")
    else:
        from zoo.registry import get_variant

        task = args.task or get_variant(args.variant).tasks[0]  # passed down: the doctor does not look it up again
        suffix = f"-{args.lab_mistake}" if args.lab_mistake else ""
        out = Path(args.out or f"runs/doctor/{args.variant}-{task}{suffix}")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for the doctor's report")
    import torch

    from tasks.doctor.runs import doctor_run, doctor_variant
    from tasks.engine.config import parse_assignments

    torch.set_num_threads(args.threads)
    if args.run is not None:
        diagnosis = doctor_run(args.run, args.checkpoint, args.device, args.batch_size, args.lab_mistake)
    else:
        diagnosis = doctor_variant(args.variant, task, args.preset, parse_assignments(args.model_set),
                                   args.lab_mistake, args.device, args.batch_size, args.seed)
    files = write_diagnosis(diagnosis, out, figures=not args.no_figures)
    print(f"zoo doctor: {diagnosis.context.get('source')}")
    print(diagnosis.table())
    figures = [f for f in files if f.endswith(".png")]
    print(f"written to {out}/ (doctor.md, doctor.json{', ' + str(len(figures)) + ' figures' if figures else ''})")
    return _exit_status(diagnosis, args.fail_on)


def _exit_status(diagnosis, fail_on: str) -> int:
    """1 (and a line saying why) when a finding is at ``fail_on`` or worse; 0 otherwise, or for ``never``."""
    if fail_on == "never" or diagnosis.healthy:
        return 0
    failing = diagnosis.at_least(fail_on)
    if not failing:
        print(f"exit status 0: no finding at {fail_on} or worse (--fail-on {fail_on})")
        return 0
    print(f"exit status 1: {len(failing)} finding(s) at {fail_on} or worse, first: {failing[0].problem} "
          f"(--fail-on {fail_on}; --fail-on never exits 0 whatever is found)")
    return 1


def add_doctor_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="examine a run or a model: ranked findings with evidence, cause and fix",
                       description="Run the debugging chain (attention saturation, score scale, mask leaks, "
                                   "position signal, initialisation and gradients by depth, training curve, "
                                   "train/inference gap) on a finished run or on a variant at initialisation.")
    p.add_argument("run", nargs="?", default=None, help="a run folder written by `zoo train` (its --out)")
    p.add_argument("--checkpoint", default="best", help="a run's best, last, or a checkpoint path (default: best)")
    p.add_argument("--variant", default=None, help="examine this variant at initialisation instead of a run")
    p.add_argument("--task", default=None, help="with --variant: the task whose data and model size (default: the "
                   "variant's first)")
    p.add_argument("--preset", default=None, help="with --variant: the preset (default: the task's, as zoo train)")
    p.add_argument("--model-set", action="append", metavar="KEY=VALUE", help="with --variant: a variant config field")
    p.add_argument("--lab-mistake", default=None, metavar="NAME",
                   help="inject a mistake before examining (the lab's, or the doctor's own; see --list-mistakes)")
    p.add_argument("--list-mistakes", action="store_true", help="list the mistakes --lab-mistake injects and exit")
    p.add_argument("--batch-size", type=int, default=64, help="examples in the examined batch (default: 64)")
    p.add_argument("--out", default=None, help="output folder (default: RUN/doctor or runs/doctor/VARIANT-TASK)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    p.add_argument("--seed", type=int, default=0, help="with --variant: the initialisation seed (default: 0)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: small models run fastest)")
    p.add_argument("--no-figures", action="store_true", help="write doctor.md and doctor.json only")
    p.add_argument("--fail-on", default="error", choices=(*SEVERITIES, "never"),
                   help="exit 1 when a finding is at this severity or worse (default: error; never: always exit 0)")
    p.set_defaults(func=_cmd_doctor)
