"""The local launcher's pool of worker processes, each training one run after another, so a sweep pays torch's
import once per worker, not per run.

A worker is ``python -m tasks.cli.worker`` (:mod:`tasks.cli.worker`: it sits with the command line, whose ``zoo
train`` it runs; this pool names it as a module to start, never imports it, as :mod:`tasks.sweeps.process` names
``tasks.cli.main``). It reads jobs from its standard input, one JSON line each: ``{"argv": [...],
"log": PATH}``, where ``argv`` is a run's ``zoo train`` command line without the interpreter
(:meth:`~tasks.sweeps.process.Job.command`). For each it sends its output (file descriptors 1 and 2) to the run's
``train.log``, calls :func:`tasks.cli.main.main` with ``argv`` in this process — the very code ``zoo train`` runs,
so the run computes what its own process would, exits with what it would return (0 done,
:data:`~tasks.engine.trainer.REQUEUE_EXIT` pre-empted, 1 or 2 failed) — and answers the exit status on a line of
the standard output it started with. It ends when its input ends.

What a process of its own per run guaranteed still holds: SIGTERM during a run makes it checkpoint and answer
:data:`~tasks.engine.trainer.REQUEUE_EXIT` (the trainer's stop signals); a run that kills its process (a crash in
native code, ``os._exit``) costs that run, whose status is the process's, and the launcher starts a fresh worker for
the next one (:class:`WorkerPool`). Each run seeds every random stream itself and sets its thread count, so what a
run before it did in the same process does not change its numbers (tests/tasks/sweeps: identical to serial).

The Ray launcher's tasks use the same workers: each Ray worker keeps a pool of one (:func:`run_in_kept_worker`).
"""

from __future__ import annotations

import contextlib
import json
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tasks.sweeps.process import LOG_FILE, PID_FILE, Job, run_anywhere

WORKER_MODULE = "tasks.cli.worker"  # started with python -m; see its docstring


@dataclass
class Worker:
    """A started worker process, and the job it is training (None: idle)."""

    process: subprocess.Popen
    key: tuple
    job: Job | None = None
    runs: int = 0  # how many it was handed

    def alive(self) -> bool:
        return self.process.poll() is None


class WorkerPool:
    """At most ``size`` worker processes; a job goes to an idle worker started with the same environment, else to
    a new one (an idle worker of another environment is retired first when the pool is full)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.workers: list[Worker] = []

    def submit(self, job: Job) -> Worker:
        """Hand ``job`` to a worker (starting one if needed); its folder's ``worker.pid`` names the process, so
        :func:`~tasks.sweeps.process.signal_run` reaches the run."""
        key = (job.threads, tuple(sorted(job.env.items())))
        self.workers = [w for w in self.workers if w.alive() or w.job is not None]
        worker = next((w for w in self.workers if w.job is None and w.key == key and w.alive()), None)
        if worker is None:
            idle = [w for w in self.workers if w.job is None]
            if len(self.workers) >= self.size and idle:
                self._retire(idle[0])
            worker = self._start(job, key)
        folder = Path(job.folder)
        folder.mkdir(parents=True, exist_ok=True)
        worker.job, worker.runs = job, worker.runs + 1
        (folder / PID_FILE).write_text(f"{worker.process.pid}\n")
        message = json.dumps({"argv": job.command()[3:], "log": str(folder / LOG_FILE)})  # after `python -m MODULE`
        try:
            worker.process.stdin.write(message + "\n")
            worker.process.stdin.flush()
        except (BrokenPipeError, OSError):  # it died idle: the next poll reports the run with its status
            pass
        return worker

    def _start(self, job: Job, key: tuple) -> Worker:
        process = subprocess.Popen([sys.executable, "-m", WORKER_MODULE], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=job.environment(),
                                   text=True, bufsize=1, start_new_session=True)  # Ctrl-C reaches it as our SIGTERM
        worker = Worker(process, key)
        self.workers.append(worker)
        return worker

    def _retire(self, worker: Worker) -> None:
        self.workers.remove(worker)
        worker.process.stdin.close()
        try:
            worker.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()

    def ended(self, timeout: float) -> list[tuple[Job, int]]:
        """The jobs that ended within ``timeout`` s (waiting for the first), each with its exit status: the
        worker's answer, or the status of a worker that died during the run (it is dropped)."""
        busy = [w for w in self.workers if w.job is not None]
        if not busy:
            return []
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([w.process.stdout for w in busy], [], [], max(0.0, min(
                0.2, deadline - time.monotonic())))
            done = []
            for worker in busy:
                if worker.process.stdout in ready:
                    answer = worker.process.stdout.readline()
                    if answer.strip():
                        done.append((worker, int(answer)))
                        continue
                    worker.process.wait()  # end of its output: the process died during the run
                    done.append((worker, worker.process.returncode))
                elif not worker.alive():
                    done.append((worker, worker.process.returncode))
            if done or time.monotonic() >= deadline:
                break
        ended = []
        for worker, code in done:
            ended.append((worker.job, code))
            folder = Path(worker.job.folder)
            folder.joinpath(PID_FILE).unlink(missing_ok=True)
            worker.job = None
            if not worker.alive():  # said in the run's log, which the sweep's failure report quotes
                self.workers.remove(worker)
                with open(folder / LOG_FILE, "a") as log:
                    log.write(f"zoo sweep: the worker process {worker.process.pid} died during this run "
                              f"(exit status {code}; negative: the signal that ended it)\n")
        return ended

    def signal(self, number: int) -> None:
        """Send signal ``number`` to every worker training a run."""
        for worker in self.workers:
            if worker.job is not None and worker.alive():
                worker.process.send_signal(number)

    def close(self) -> None:
        """End every worker: an idle one when its input ends; one still training gets SIGTERM first (its run saves
        a checkpoint), and is killed if it has not ended within 120 s."""
        for worker in self.workers:
            if worker.job is not None and worker.alive():
                worker.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(OSError):
                worker.process.stdin.close()
        for worker in self.workers:
            try:
                worker.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
        self.workers = []



# The pool of the process that calls run_in_kept_worker: a Ray worker keeps its zoo worker from one task to the next.
_KEPT: WorkerPool | None = None


def run_in_kept_worker(job: Job, packed: bytes) -> tuple[int, bytes | None]:
    """What a Ray task calls: the run in a worker process that the calling process keeps for its next runs, so a Ray
    worker (which Ray itself reuses from task to task) pays torch's import once, not once per run, as the local
    launcher's workers do; returns (the run's exit status, None). Where the run folder is not visible (a node
    without the sweep's file system), it trains as :func:`~tasks.sweeps.process.run_anywhere` trains it, in a
    process of its own on a copy made from ``packed``, and the folder comes back packed."""
    global _KEPT
    if not Path(job.folder, "config.json").is_file():
        return run_anywhere(job, packed)
    if _KEPT is None:
        _KEPT = WorkerPool(1)
    _KEPT.submit(job)
    while not (ended := _KEPT.ended(60.0)):
        pass
    return ended[0][1], None
