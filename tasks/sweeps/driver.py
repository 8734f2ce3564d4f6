"""Run a sweep: every :class:`~tasks.sweeps.plan.RunSpec` to its end on a launcher, reusing what is finished.

:func:`run_sweep` looks at each run's folder first (:func:`~tasks.sweeps.state.folder_state`): a finished run is
reused, one with a checkpoint resumes, the others start. It keeps the launcher at its capacity, and when a run ends:
done; pre-empted (it saved ``last.pt`` on a stop signal, or a SIGTERM ended it before it could) — handed back to
the launcher to resume, up to :data:`MAX_REQUEUES` times; failed — tried again up to ``retry`` times, then reported
with the tail of its log. One log line per state change, with the overall count and an ETA. Ctrl-C, or SIGTERM /
SIGUSR1 to the sweep's own process, asks every running run to checkpoint and stop, records them as pre-empted and
stops: the same command resumes the sweep.
"""

from __future__ import annotations

import logging
import os
import signal
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from plumbing.atomic import write_json_atomic
from tasks.engine.config import check_folder
from tasks.engine.trainer import REQUEUE_EXIT, PreemptedError, stop_signals
from tasks.sweeps.launchers import Handle, Job, Launch, Launcher, SerialLauncher
from tasks.sweeps.plan import RunSpec
from tasks.sweeps.state import SWEEP_FILE, SweepState, folder_state, log_tail

log = logging.getLogger(__name__)

MAX_REQUEUES = 20  # pre-emptions of one run in one sweep before it counts as failed
# How a pre-empted run ends: it saved last.pt on a stop signal (REQUEUE_EXIT), or the signal came before its handler
# was installed (still starting up) and ended it: either way, the same run resumes (or starts again) from its folder.
PREEMPTED_EXITS = frozenset({REQUEUE_EXIT, -signal.SIGTERM, 128 + signal.SIGTERM, -signal.SIGUSR1,
                             128 + signal.SIGUSR1})
POLL_SECONDS = 2.0


class SweepFailedError(RuntimeError):
    """Runs of the sweep failed after their retries; the message lists them with the end of their logs."""


class SweepStoppedError(Exception):
    """The sweep's own process got a stop signal (SIGTERM, SIGUSR1): its running runs saved checkpoints and stopped;
    the same command resumes the sweep (``zoo`` exits with :data:`~tasks.engine.trainer.REQUEUE_EXIT`)."""

    def __init__(self, signal_name: str, out: Path) -> None:
        super().__init__(f"{signal_name} received: the running runs saved their checkpoints and stopped ({out}/"
                         f"{SWEEP_FILE} says which)")


def _raise_stop(out: Path):
    def stop(name: str) -> None:
        raise SweepStoppedError(name, out)

    return stop


def run_sweep(specs: Sequence[RunSpec], out: Path, launch: Launch | None = None,
              sweep: dict[str, Any] | None = None,
              reuse: Callable[[RunSpec, Path], str] = folder_state) -> dict[str, Path]:
    """Run every spec into ``out/<spec.name>`` as ``launch`` says (default: serial, in this process).

    Args:
        specs: the runs; their names must differ.
        out: the sweep folder (``sweep.json`` and one folder per run).
        launch: the launcher, its parallelism and resources, ``retry`` (how many more times a failed run is
            started before the sweep gives up on it) and the plugin folders the runs' processes load.
        sweep: the sweep as a file would describe it, recorded in ``sweep.json`` for ``zoo sweep`` to resume.
        reuse: what a run's folder holds: ``"done"``, ``"partial"`` or ``"new"`` (default
            :func:`~tasks.sweeps.state.folder_state`; ``zoo cv`` checks its folds' settings itself).

    Returns:
        Each spec's name → its run folder, every run done.

    Raises:
        SweepFailedError: runs that still failed after ``retry`` retries (listed with their logs' tails).
        PreemptedError, KeyboardInterrupt: the sweep was asked to stop; running runs saved checkpoints.
    """
    launch = launch or Launch()
    out = Path(out)
    check_folder("--out", out, "a folder for the sweep's runs")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"two runs of the sweep share a folder name: {sorted(n for n in names if names.count(n) > 1)}")
    launcher, retry = launch.make(out), launch.retry
    state = SweepState(out, sweep or {}, launcher.describe(), list(specs))
    folders = {s.name: s.folder(out) for s in specs}
    env = _plugin_env(launch.user_dirs)
    pending: deque[RunSpec] = deque()
    for spec in specs:
        found = reuse(spec, folders[spec.name])
        if found == "done":
            state.runs[spec.name].update(state="done", exit_code=0)
            log.info("%s: finished earlier, reused", spec.name)
        else:
            _prepare(spec, folders[spec.name])
            pending.append(spec)
            if found == "partial":
                log.info("%s: has a checkpoint, resumes", spec.name)
    state.write()
    failures: dict[str, int] = {}
    requeues: dict[str, int] = {}
    durations: list[float] = []
    running: list[Handle] = []
    sweep_start = time.monotonic()
    try:
        with stop_signals(_raise_stop(out)):  # a scheduler stopping the sweep's own process
            while pending or running:
                while pending and len(running) < launcher.capacity:
                    spec = pending.popleft()
                    threads = int(spec.config.get("num_threads") or 0) or launcher.threads()
                    job = Job(spec.task, str(folders[spec.name]), threads, env, spec.budget)
                    handle = Handle(spec, job)
                    state.set(spec.name, "running")
                    _progress(state, spec.name, "started", durations, launcher, len(pending))
                    running.append(handle)
                    launcher.start(handle)
                for handle in launcher.wait(running, POLL_SECONDS):
                    running.remove(handle)
                    name = handle.spec.name
                    if handle.exit_code == 0:
                        state.set(name, "done", exit_code=0, log_tail="")  # it times the run
                        durations.append(state.runs[name]["seconds"])
                        _progress(state, name, f"done in {durations[-1]:.0f} s", durations, launcher, len(pending))
                    elif handle.exit_code in PREEMPTED_EXITS and requeues.get(name, 0) < MAX_REQUEUES:
                        requeues[name] = requeues.get(name, 0) + 1
                        state.runs[name]["preemptions"] += 1
                        state.set(name, "preempted", exit_code=handle.exit_code)
                        _progress(state, name, "pre-empted after saving its checkpoint; requeued to resume", durations,
                                  launcher, len(pending))
                        pending.append(handle.spec)
                    else:
                        failures[name] = failures.get(name, 0) + 1
                        tail = "\n".join(filter(None, [handle.error, log_tail(folders[name])]))
                        state.set(name, "failed", exit_code=handle.exit_code, log_tail=tail)
                        again = failures[name] <= retry
                        _progress(state, name, f"failed (exit {handle.exit_code})" +
                                  (f"; retry {failures[name]} of {retry}" if again else ""), durations, launcher,
                                  len(pending))
                        if again:
                            pending.append(handle.spec)
    except (KeyboardInterrupt, PreemptedError, SweepStoppedError):
        if isinstance(launcher, SerialLauncher):
            running = [h for h in running if h.exit_code is None]
        launcher.stop(running)
        for handle in running:
            state.set(handle.spec.name, "preempted", exit_code=REQUEUE_EXIT)
        log.warning("sweep stopped: %d run(s) saved checkpoints; run the same command again to resume",
                    len(running))
        raise
    finally:
        launcher.close()
    total = time.monotonic() - sweep_start
    failed = state.failures()
    log.info("sweep: %d run(s) done, %d failed, %d reused, %.0f s", state.count("done") - len(failed),
             len(failed), len(specs) - len(durations) - len(failed), total)
    if failed:
        listed = "\n".join(f"- {name} (exit {run['exit_code']}, {run['attempts']} attempt(s)):\n    " +
                           "\n    ".join((run["log_tail"] or "(no log)").splitlines()[-8:])
                           for name, run in failed.items())
        raise SweepFailedError(f"{len(failed)} of {len(specs)} run(s) failed; sweep.json in {out} has each log's "
                               f"tail, run the same command again to retrain them:\n{listed}")
    return folders


def _prepare(spec: RunSpec, folder: Path) -> None:
    """The run's folder with its ``config.json``: what every launcher's ``zoo train --config`` reads."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {**spec.config, "out": str(folder), "resume": False}
    write_json_atomic(folder / "config.json", config)


def _plugin_env(user_dirs: Sequence[str]) -> dict[str, str]:
    if not user_dirs:
        return {}
    known = [d for d in os.environ.get("ZOO_USER_DIR", "").split(os.pathsep) if d]
    return {"ZOO_USER_DIR": os.pathsep.join([*known, *(str(Path(d).resolve()) for d in user_dirs)])}


def _progress(state: SweepState, name: str, what: str, durations: list[float], launcher: Launcher,
              waiting: int) -> None:
    total, done = len(state.runs), state.count("done")
    running, failed = state.count("running"), state.count("failed")
    eta = ""
    left = total - done - failed
    if durations and left:
        per_run = statistics.median(durations)
        eta = f", ETA {_duration(per_run * left / max(1, min(launcher.capacity, left)))}"
    log.info("[%d/%d done, %d running, %d waiting, %d failed%s] %s: %s", done, total, running, waiting, failed, eta,
             name, what)


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
