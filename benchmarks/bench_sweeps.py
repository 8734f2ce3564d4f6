"""Wall time of one sweep on each launcher: serial against ``local --jobs N`` and ``ray``, as ratios, in one run; and
(``--breakdown``) one run's fixed cost, part by part.

Run: ``.venv/bin/python benchmarks/bench_sweeps.py [--quick | --study] [--epochs N] [--seeds S] [--rounds R]
[--jobs N] [--launchers L,...] [--breakdown]``.

The sweep is ``zoo compare translation --variants classic,pre-ln --seeds S`` at preset ``tiny`` (``--seeds`` default 2:
4 runs; ``--quick``: 1 epoch of 512 pairs; ``--study``: a study's default run, 3 epochs of the default corpus; else 2
epochs of the default corpus; ``--epochs N`` to change), each launcher into a fresh folder, ``R`` rounds with the
launchers' order rotated each round. Serial runs in this process with torch's default threads (this machine's cores);
``local`` and ``ray`` run ``--jobs`` runs at once, the cores divided between them (one thread each on two cores).
Reported: per launcher the median wall time of the whole sweep, its speed-up over serial, the fixed cost of its runs (a
run's wall time besides its training loop, as a share of that loop: the first run of a process carries the imports), and
whether its ``results.json`` statistics equal serial's to the last digit (they need the same thread count to: a run's
float reductions follow torch's threads, so the parallel launchers are also checked against a serial sweep at their
thread count). A Ray cluster is started once, outside the timings (``ray.init``: seconds), and kept for the rounds.

A process pays a start-up that a serial sweep in this process does not: importing torch and the zoo, and torch's
compiler (``torch._dynamo``, which the optimizer's first parameter group imports, and with it
``torch._inductor.config``). Seconds each, and many more where ``PYTHONDONTWRITEBYTECODE`` is set and the
environment holds no compiled bytecode (this machine's: ``import torch`` 7 s, the compiler 5-6 s more, at a load of
2-3). ``local`` pays it once per worker (its workers train run after run, :mod:`tasks.sweeps.worker`); ``ray`` once
per Ray worker (a Ray task trains in a worker process the Ray worker keeps,
:func:`tasks.sweeps.worker.run_in_kept_worker`). A sweep of 4 runs on 2 workers pays it once for every 2 runs; a
study's hundreds of runs hardly at all. The load average (other users of the machine) is printed with the table.

``--breakdown`` (see :func:`breakdown`) trains one of the sweep's runs (``--task lm`` or ``cifar``: that task's study
default run with ``--study``) in this process after a first one, on one thread, and prints its fixed cost part by part
in seconds and as % of its training time: data, model build, run folder, checkpoint reload, the final evaluation, the
report's sections, the outputs, the rest.

Measured on 2 cores shared with other sessions (load average 7-9), ``--study --breakdown --rounds 3``, the same
command on the code before and after issue 38's cost work: the fixed cost of a study's default run fell from 26.2 % to
10.5 % of its training time (target <= 15 %): data 9.1 % -> 0.0 % (the generated corpus and its tokenizer are made
once per process and settings), the final evaluation 15.2 % -> 8.0 % (a beam of one reuses the greedy translations;
sacreBLEU tokenises each split once for corpus, bucket and sentence BLEU), the outputs 1.3-1.8 %, the rest < 1 %; the
numbers, predictions and report a run writes are byte-identical. A study's other default runs, after (``--task``, 1
round, same load): lm tiny 1 epoch 5.1 % (the final evaluation 3.1 %, the outputs 1.0 %, data 0.8 %); cifar tiny 5
epochs 37.2 %: its final evaluation was 30 % (matplotlib's attention.png and confusion_matrix.png, about 1.9 s and
1.2 s under a profiler, and the prediction records, 1.2 s); a study's cifar runs draw no attention figure
(tasks.study.grid.STUDY_SETTINGS, a field that cannot change a result), which gives 17.3 % (1 round, load 3-5: the
final evaluation 9.2 %, the outputs 4.7 %, data 1.9 %), still above 15 %: the confusion matrix and curves are drawn
for every run. The settings of a study's default run are read from tasks.study.grid (STUDY_EPOCHS, STUDY_SETTINGS:
translation decodes greedily). Then a field ``figures`` (``--figures false``: no curves.png, confusion matrix,
attention or extrapolation plot; scores and records unchanged, tests/tasks/cifar) that a study's runs all take; the
three default runs again, ``--study --breakdown --rounds 3`` on a quiet machine (load 0.8-3.0): translation 8.4 %
(the final evaluation 7.7 %), lm 4.8 % (the final evaluation 3.3 %, data 1.0 %), cifar 5.8 % (data 2.1 %, the final
evaluation 2.0 %): all three within 15 %. The sweep table at
``--study`` could not be measured fairly in that session: under that load, serial's two-thread runs trained 40x slower
than on an idle machine (220-260 s for ~6 s) while one-thread runs slowed about 4x, which would inflate the parallel
launchers' ratios; the last fair figures (before this work, load 1.2-1.6): local 1.23x, ray 0.95x.

Measurements, not tests: nothing is asserted, exit code 0.

After issue 38's cost work, a study-sized sweep (``--study --seeds 8``: 16 runs, 1 round): with this machine's
``PYTHONDONTWRITEBYTECODE=1`` (load 1.2-2.2) serial 95.5 s, local 67.4 s (1.42x), ray 67.1 s (1.42x); with bytecode
cached (``env -u PYTHONDONTWRITEBYTECODE``, as on a user's machine; load 1.2-1.3) serial 115.3 s, local 69.9 s (1.65x),
ray 64.4 s (1.79x); the 4-run ``--study`` sweep with bytecode, 2 rounds: local 1.22x, ray 1.52x. Statistics equal to
serial at the same threads in each.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

from bench_core import bench_parser

from tasks.compare.sweep import MACHINE_COSTS, compare
from tasks.study.grid import STUDY_EPOCHS, STUDY_SETTINGS  # a study's default run per task: its epochs and settings
from tasks.sweeps.launchers import Launch

TIMING = MACHINE_COSTS  # costs of the machine, not statistics


def _numbers(out: Path) -> list[dict]:
    rows = json.loads((out / "results.json").read_text())["rows"]
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def _fixed_costs(out: Path) -> list[float]:
    """Each run's cost besides its training loop, as a fraction of it: (the run's wall time in the sweep − its
    ``train_seconds``) / ``train_seconds`` — process start, imports, data, the final evaluation, the report."""
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    fractions = []
    for name, run in runs.items():
        trained = json.loads((out / name / "metrics.json").read_text())["train_seconds"]
        fractions.append((run["seconds"] - trained) / trained)
    return fractions



# The parts of a run besides its training loop that --breakdown times: (label, owner, attribute); the owners are
# looked up when it runs (the task class of the sweep's task, the run folder's callback, the trainer's module).
PARTS = (
    ("data: corpus or files, tokenizer, encoding", "task", "setup"),
    ("model build", "task", "build_model"),
    ("run folder at start: config.json, tokenizer, run.json", "folder", "on_start"),
    ("best checkpoint reloaded for the test", "trainer", "load_checkpoint"),
    ("final evaluation on the test splits", "task", "final_report"),
    ("report sections: delta analysis, layer statistics", "folder", "section"),
    ("metrics.json, curves.png, report.md", "folder", "on_finish"),
)


def _argv(task: str, settings: dict, out: Path) -> list[str]:
    """``zoo train``'s command line for one run of ``task`` (its default variant, seed 0), one thread."""
    flags = [[f"--{key.replace('_', '-')}", str(value).lower() if isinstance(value, bool) else str(value)]
             for key, value in settings.items()]
    return ["train", task, *sum(flags, []), "--num-threads", "1", "--out", str(out)]


@contextlib.contextmanager
def _timing(task: str, seconds: dict[str, float]):
    """Add each of :data:`PARTS`' wall time to ``seconds[label]`` while the context lasts."""
    from tasks.engine import trainer
    from tasks.engine.registry import task_class
    from tasks.runs.training import RunFolder

    owners = {"task": task_class(task), "folder": RunFolder, "trainer": trainer}

    def timed(label: str, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - start
        return wrapper

    with contextlib.ExitStack() as patches:
        for label, owner, name in PARTS:
            target = owners[owner]
            patches.enter_context(mock.patch.object(target, name, timed(label, getattr(target, name))))
        yield


def breakdown(settings: dict, rounds: int, task: str = "translation") -> None:
    """Print the fixed cost of one run of ``task`` with ``settings``, part by part, in seconds and as % of its training
    time.

    The run trains in this process on one thread (as in a local launcher's worker on two cores), after a first,
    untimed run with the same settings: torch, the zoo and the compiler configuration are imported and the
    per-process caches (the generated corpus and tokenizer, the delta analysis) hold this run's, as in a warm worker
    that has seen these settings before. "training" is the run's ``train_seconds`` (its loop: steps, each epoch's
    validation and checkpoints); "other" is the rest of the call (arguments, config, the trainer's set-up). The
    worker's handoff (a JSON line each way) is not in it: the sweep table's fixed cost per run includes it.
    """
    from tasks.cli.main import main as zoo

    with tempfile.TemporaryDirectory() as root:
        quiet = contextlib.redirect_stdout(io.StringIO())  # the runs' own summaries; the table is the output
        start = time.perf_counter()
        with quiet:
            zoo(_argv(task, settings, Path(root) / "first"))
        first = time.perf_counter() - start
        runs: list[dict[str, float]] = []
        for r in range(rounds):
            seconds: dict[str, float] = {}
            out = Path(root) / f"run-{r}"
            with _timing(task, seconds), quiet:
                start = time.perf_counter()
                zoo(_argv(task, settings, out))
                wall = time.perf_counter() - start
            seconds["training"] = json.loads((out / "metrics.json").read_text())["train_seconds"]
            seconds["other"] = wall - sum(seconds.values())
            seconds["wall"] = wall
            runs.append(seconds)
    runs.sort(key=lambda run: (run["wall"] - run["training"]) / run["training"])
    median = runs[len(runs) // 2]  # the run of median fixed cost, whole, so that its parts add up
    training = median["training"]
    print(f"\nfixed cost of one run: {task} (its default variant), seed 0, {settings}; 1 thread; the median of "
          f"{rounds} run(s) after a first one ({first:.1f} s); load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| part | s | % of training |")
    print("|---|---|---|")
    fixed = [label for label, _, _ in PARTS] + ["other"]
    for label in ["training", *fixed]:
        print(f"| {label} | {median.get(label, 0.0):.3f} | {100 * median.get(label, 0.0) / training:.1f} % |")
    total = median["wall"] - training
    print(f"| **fixed cost (wall - training)** | **{total:.3f}** | **{100 * total / training:.1f} %** |")


def main() -> None:
    parser = bench_parser(__doc__, quick="1 epoch of 512 pairs per run instead of 2 epochs of the default corpus",
                          rounds="rounds per launcher (default 1)", clock=False)
    parser.add_argument("--seeds", type=int, default=2,
                        help="seeds a variant (default 2: 4 runs); a study's hundreds of runs: e.g. --seeds 8")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="runs at once (default: the cores)")
    parser.add_argument("--launchers", default="serial,local,ray", help="comma-separated, serial first")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per run (default 2; --quick 1; --study 3)")
    parser.add_argument("--study", action="store_true", help="a study's default run: 3 epochs of the default corpus")
    parser.add_argument("--breakdown", action="store_true",
                        help="instead of the sweep: one run's fixed cost, part by part (see breakdown())")
    parser.add_argument("--task", choices=sorted(STUDY_EPOCHS), default="translation",
                        help="--breakdown's task, at its study default run with --study (the sweep is translation's)")
    args = parser.parse_args()
    seeds = args.seeds
    if args.quick and args.study:
        parser.error("--quick and --study are two sizes of run: give one of them")
    logging.basicConfig(level=logging.WARNING)
    rounds = args.rounds or 1
    settings = {"preset": "tiny", "progress": False, **STUDY_SETTINGS["translation"],
                **({"epochs": 1, "n_train": 512} if args.quick else {"epochs": 3 if args.study else 2})}
    if args.epochs:
        settings["epochs"] = args.epochs
    if args.task != "translation" and not args.breakdown:
        parser.error(f"--task {args.task} is for --breakdown; the sweep is translation's")
    if args.breakdown:
        if args.task != "translation":  # beam_size is translation's; a study's other default runs
            study = STUDY_SETTINGS.get(args.task, {}) if args.study else {}
            settings = {"preset": "tiny", "progress": False, **study,
                        "epochs": args.epochs or (STUDY_EPOCHS[args.task] if args.study else 1)}
        breakdown(settings, rounds, args.task)
        return
    launchers = [name.strip() for name in args.launchers.split(",")]
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    if "ray" in launchers:
        import ray

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False,
                 object_store_memory=128 * 1024**2)
    times: dict[str, list[float]] = {name: [] for name in launchers}
    numbers: dict[str, list[dict]] = {}
    fixed: dict[str, list[float]] = {name: [] for name in launchers}
    with tempfile.TemporaryDirectory() as root:
        for r in range(rounds):
            order = launchers[r % len(launchers):] + launchers[: r % len(launchers)]
            for name in order:
                out = Path(root) / f"{name}-{r}"
                launch = Launch(name, 1 if name == "serial" else args.jobs)
                start = time.perf_counter()
                compare("translation", ["classic", "pre-ln"], out, seeds=seeds, launch=launch, **settings)
                times[name].append(time.perf_counter() - start)
                numbers[name] = _numbers(out)
                fixed[name] += _fixed_costs(out)
                print(f"round {r + 1}: {name:<8} {times[name][-1]:7.1f} s", flush=True)
        reference = None
        if any(name != "serial" for name in launchers):  # serial at the parallel runs' thread count
            out = Path(root) / "serial-threads"
            compare("translation", ["classic", "pre-ln"], out, seeds=seeds, **{**settings, "num_threads": threads})
            reference = _numbers(out)
    serial = statistics.median(times["serial"]) if "serial" in times else None
    print(f"\nsweep: translation classic,pre-ln x {seeds} seeds, tiny, {settings.get('epochs')} epoch(s); "
          f"{os.cpu_count()} cores, --jobs {args.jobs} ({threads} thread(s) per parallel run); {rounds} round(s); "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end\n")
    print("| launcher | median wall s | speed-up over serial | fixed cost per run, % of its training (median, max) "
          "| statistics equal to serial at the same threads |")
    print("|---|---|---|---|---|")
    for name in launchers:
        median = statistics.median(times[name])
        ratio = f"{serial / median:.2f}x" if serial else "-"
        same = "-" if name == "serial" else ("yes" if numbers[name] == reference else "NO")
        cost = f"{100 * statistics.median(fixed[name]):.0f} %, {100 * max(fixed[name]):.0f} %"
        print(f"| {name} | {median:.1f} | {ratio} | {cost} | {same} |")


if __name__ == "__main__":
    main()
