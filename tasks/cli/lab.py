"""``zoo lab LESSON [--quick]``, ``zoo lab --list``, ``zoo lab LESSON --notebook OUT.ipynb [--lang zh]`` and the
exercises: ``zoo lab LESSON --exercise [--out DIR]``, ``zoo lab --check DIR``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tasks.lab.lesson import LESSONS, LabSettings, get_lesson, run_lesson


def add_lab_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lab", help="the classic pitfalls as runnable, measured experiments",
                       description="Run a lesson: the right choice against the classic mistake, same seed and "
                                   "budget, measured on our own models. `zoo lab --list` lists the lessons; "
                                   "`--notebook OUT.ipynb` writes a lesson as a Jupyter notebook instead of running "
                                   "it; `--exercise` writes it with the mistake left in for you to find, and "
                                   "`--check DIR` measures your fix.")
    p.add_argument("lesson", nargs="?", help=f"one of: {', '.join(LESSONS)}, or 'all'")
    p.add_argument("--list", action="store_true", help="list the lessons and exit")
    p.add_argument("--quick", action="store_true", help="reduced budgets: each lesson in about 3 minutes on 2 cores")
    p.add_argument("--out", default=None, help="output folder (default: runs/lab/LESSON)")
    p.add_argument("--seed", type=int, default=0, help="seed of every run in the lesson (default: 0)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: the lessons' small models run fastest on one thread, and "
                        "several threads slow them down badly on a busy machine)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--lang", default="en", help="language of the verdict printed, the notebook and the exercise: "
                                                "en (default) or zh")
    p.add_argument("--notebook", default=None, metavar="OUT.ipynb",
                   help="write the lesson as a Jupyter notebook at OUT.ipynb (with LESSON 'all': a folder, one "
                        "LESSON.ipynb each) with --quick and --seed as its parameters, and run nothing")
    p.add_argument("--execute", action="store_true",
                   help="with --notebook: also run the notebook headless in a fresh kernel of this Python and save "
                        "its outputs in it (the lesson then runs, in the notebook's folder)")
    p.add_argument("--exercise", action="store_true",
                   help="write the lesson with its mistake left in place under --out (default: "
                        "runs/lab/LESSON-exercise), for you to find and fix")
    p.add_argument("--check", default=None, metavar="DIR",
                   help="measure whether the fix in exercise folder DIR restores the correct behaviour")
    # Shrinks every budget below --quick's, as the tests do: a notebook and `zoo lab --quick` at one scale compare.
    p.add_argument("--scale", type=float, default=1.0, help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_lab)


def _cmd_lab(args: argparse.Namespace) -> int:
    from tasks.i18n import check_lang

    lang = check_lang(args.lang)
    if args.check is not None:
        return _check(Path(args.check))
    if args.list or args.lesson is None:
        width = max(len(name) for name in LESSONS)
        for lesson in LESSONS.values():
            title, question = (lesson.title_zh, lesson.question_zh) if lang == "zh" else (lesson.title, lesson.question)
            print(f"{lesson.name:<{width}}  [{lesson.part}] {title}: {question}")
        if not args.list:
            print("\nrun one with: zoo lab LESSON [--quick]", file=sys.stderr)
        return 0
    names = list(LESSONS) if args.lesson == "all" else [args.lesson]
    lessons = [get_lesson(name) for name in names]  # unknown names fail here, before any work
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    if not args.scale > 0:
        raise ValueError(f"--scale must be > 0 (a fraction of the budgets, e.g. 0.1), got {args.scale}")
    if args.execute and args.notebook is None:
        raise ValueError("--execute runs the notebook --notebook writes: give --notebook OUT.ipynb too")
    if args.notebook is not None and args.exercise:
        raise ValueError("--notebook writes the lesson and --exercise its mistake for you to fix: give one of them")
    if args.notebook is not None:
        return _notebooks(names, Path(args.notebook), lang, args)
    if args.exercise:
        return _exercises(names, args.out, lang)
    import torch

    torch.set_num_threads(args.threads)
    for lesson in lessons:
        name = lesson.name
        out = Path(args.out) / name if args.out and len(names) > 1 else Path(args.out or f"runs/lab/{name}")
        print(f"lesson {name}: {lesson.title}{' (quick)' if args.quick else ''}", file=sys.stderr)
        settings = LabSettings(out=out, quick=args.quick, seed=args.seed, progress=not args.quiet, scale=args.scale)
        result = run_lesson(name, settings)
        title, verdict = (lesson.title_zh, result.verdict_zh) if lang == "zh" else (lesson.title, result.verdict)
        print(f"\n{title}\n  {verdict[0]}\n  {verdict[1]}")
        figures = ", ".join(result.figures)
        if lang == "zh":
            if not result.holds:
                print("  （这次运行中预期的方向没有成立，详见 lesson.zh.md）")
            print(f"  已写入 {out}/lesson.zh.md" + (f"，图：{figures}" if figures else ""))
        else:
            if not result.holds:
                print("  (the expected direction did not hold in this run; see lesson.md)")
            print(f"  written to {out}/lesson.md" + (f" with {figures}" if figures else ""))
    return 0


def _notebooks(names: list[str], target: Path, lang: str, args: argparse.Namespace) -> int:
    """One notebook at ``target`` (``.ipynb``), or with several lessons one ``NAME.ipynb`` each in folder ``target``."""
    from tasks.lab.notebook import execute_notebook, write_notebook

    if len(names) > 1 and target.suffix == ".ipynb":
        raise ValueError(f"zoo lab all --notebook writes one notebook per lesson into a folder, got {str(target)!r}: "
                         "give a folder, e.g. --notebook notebooks/")
    for name in names:
        path = target / f"{name}.ipynb" if len(names) > 1 else target
        write_notebook(name, path, lang, quick=args.quick, seed=args.seed, scale=args.scale)
        if args.execute:
            print(f"lesson {name}: running {path} in a fresh kernel{' (quick)' if args.quick else ''}", file=sys.stderr)
            execute_notebook(path)
            print(f"wrote and ran {path}: its outputs are saved in it; the lesson's run is in "
                  f"{path.parent / 'runs' / 'lab' / name}")
        else:
            print(f"wrote {path}: run it with jupyter (its kernel: this Python, with the package installed)")
    return 0


def _exercises(names: list[str], out: str | None, lang: str) -> int:
    from tasks.lab.exercise import write_exercise

    for name in names:
        folder = Path(out) / name if out and len(names) > 1 else Path(out or f"runs/lab/{name}-exercise")
        path = write_exercise(name, folder, lang)
        print(f"wrote the exercise {name} to {path}: find the mistake, fix it, then run zoo lab --check {folder}")
    return 0


def _check(folder: Path) -> int:
    """Measure an exercise folder; exit 0 when the learner's fix restores the correct behaviour, 1 when not."""
    from tasks.lab.exercise import check_exercise

    check = check_exercise(folder)
    print(check.message)  # the verdict and its evidence: each measure, yours beside the correct and the mistake's
    return 0 if check.fixed else 1
