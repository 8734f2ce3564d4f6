"""Wall time of one sweep on each launcher: serial against ``local --jobs N`` and ``ray``, as ratios, in one run.

Run: ``.venv/bin/python benchmarks/bench_sweeps.py [--quick] [--epochs N] [--rounds R] [--jobs N] [--launchers L,...]``.

The sweep is ``zoo compare translation --variants classic,pre-ln --seeds 2`` at preset ``tiny`` (4 runs; ``--quick``:
1 epoch of 512 pairs, else 2 epochs of the default corpus; ``--epochs N`` to change), each launcher into a fresh
folder, ``R`` rounds with the launchers' order rotated each round. Serial runs in this process with torch's default
threads (this machine's cores); ``local`` and ``ray`` run ``--jobs`` runs at once, the cores divided between them (one
thread each on two cores). Reported: per launcher the median wall time of the whole sweep, its speed-up over serial,
and whether its ``results.json`` statistics equal serial's to the last digit (they need the same thread count to: a
run's float reductions follow torch's threads, so the parallel launchers are also checked against a serial sweep at
their thread count). A Ray cluster is started once, outside the timings (``ray.init``: seconds), and kept for the
rounds.

Every run of a parallel launcher is a process of its own and pays its start-up (importing torch, and the optimizer's
first use importing torch's compiler stack: seconds, more where ``PYTHONDONTWRITEBYTECODE`` keeps Python from caching
bytecode), which a serial sweep pays once: short runs gain less than long ones.

Measurements, not tests: nothing is asserted, exit code 0.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench_core import bench_parser

from tasks.compare.sweep import compare
from tasks.sweeps.launchers import Launch

TIMING = ("items/s", "wall s", "runs")


def _numbers(out: Path) -> list[dict]:
    rows = json.loads((out / "results.json").read_text())["rows"]
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def main() -> None:
    parser = bench_parser(__doc__, quick="1 epoch of 512 pairs per run instead of 2 epochs of the default corpus",
                          rounds="rounds per launcher (default 1)", clock=False)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="runs at once (default: the cores)")
    parser.add_argument("--launchers", default="serial,local,ray", help="comma-separated, serial first")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per run (default 2; --quick 1)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rounds = args.rounds or 1
    settings = {"preset": "tiny", "progress": False, "beam_size": 1,
                **({"epochs": 1, "n_train": 512} if args.quick else {"epochs": 2})}
    if args.epochs:
        settings["epochs"] = args.epochs
    launchers = [name.strip() for name in args.launchers.split(",")]
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    if "ray" in launchers:
        import ray

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False,
                 object_store_memory=128 * 1024**2)
    times: dict[str, list[float]] = {name: [] for name in launchers}
    numbers: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as root:
        for r in range(rounds):
            order = launchers[r % len(launchers):] + launchers[: r % len(launchers)]
            for name in order:
                out = Path(root) / f"{name}-{r}"
                launch = Launch(name, 1 if name == "serial" else args.jobs)
                start = time.perf_counter()
                compare("translation", ["classic", "pre-ln"], out, seeds=2, launch=launch, **settings)
                times[name].append(time.perf_counter() - start)
                numbers[name] = _numbers(out)
                print(f"round {r + 1}: {name:<8} {times[name][-1]:7.1f} s", flush=True)
        reference = None
        if any(name != "serial" for name in launchers):  # serial at the parallel runs' thread count
            out = Path(root) / "serial-threads"
            compare("translation", ["classic", "pre-ln"], out, seeds=2, **{**settings, "num_threads": threads})
            reference = _numbers(out)
    serial = statistics.median(times["serial"]) if "serial" in times else None
    print(f"\nsweep: translation classic,pre-ln x 2 seeds, tiny, {settings.get('epochs')} epoch(s); "
          f"{os.cpu_count()} cores, --jobs {args.jobs} ({threads} thread(s) per parallel run); {rounds} round(s)\n")
    print("| launcher | median wall s | speed-up over serial | statistics equal to serial at the same threads |")
    print("|---|---|---|---|")
    for name in launchers:
        median = statistics.median(times[name])
        ratio = f"{serial / median:.2f}x" if serial else "-"
        same = "-" if name == "serial" else ("yes" if numbers[name] == reference else "NO")
        print(f"| {name} | {median:.1f} | {ratio} | {same} |")


if __name__ == "__main__":
    main()
