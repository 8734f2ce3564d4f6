"""Where a sweep's runs execute: ``serial``, ``local``, ``ray`` or ``submitit``.

Every launcher runs the same thing: ``zoo train TASK --config RUN/config.json --out RUN [--resume]`` — the run's
recorded config, so a worker anywhere computes what this process would — except ``serial``, which calls the trainer
in this process (today's behaviour, progress bars included). A run's exit status says how it ended: 0 done,
:data:`~tasks.engine.trainer.REQUEUE_EXIT` pre-empted after saving ``last.pt``, anything else failed (its
``train.log`` says why). No scheduler of our own: ``local`` is processes on this machine, ``ray`` is Ray's tasks
and resources, ``submitit`` is SLURM (job arrays, requeue on time-out) or submitit's local executor without SLURM.

* ``local --jobs N``: N runs at once, the machine's cores divided between them (``num_threads`` of each run, unless
  the sweep sets it; ``OMP_NUM_THREADS`` likewise). Its N worker processes are kept from one run to the next
  (:mod:`tasks.sweeps.worker`): each runs ``zoo train``'s own code in process, so a run pays torch's import once
  per worker; a run that kills its worker fails alone, and a fresh worker takes the next run.
* ``ray``: each run a Ray task with ``--resources cpu=C,gpu=G`` (default cpu=1), on the cluster ``RAY_ADDRESS``
  names (``ray start --head`` first), else on a local one started for the sweep and stopped after it. A worker that
  sees the sweep's folder (a shared file system) trains in it, in a worker process of the local launcher's kind that
  the Ray worker keeps for its next tasks (:func:`~tasks.sweeps.worker.run_in_kept_worker`: torch's import once per
  Ray worker); one that does not gets the run folder (its config, and its checkpoint when it resumes) with the task,
  trains in a temporary copy and sends the folder back through Ray, logs included
  (:func:`~tasks.sweeps.process.run_anywhere`).
* ``submitit``: one job per run, submitted as a SLURM job array when SLURM is there (``--slurm-partition``,
  ``--slurm-time`` minutes, ``--slurm-gpus-per-node``; ``--resources cpu=C`` per task); SLURM's time-out signal
  makes the run checkpoint and the job requeue itself (submitit's checkpointing). With ``gpu=G > 1`` a job runs G
  tasks, one DDP rank each, from submitit's distributed environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``).
  Without SLURM, submitit's local executor runs the jobs as processes here (at most ``--jobs`` at once).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plumbing.errors import check_positive, import_extra, unknown_name
from tasks.engine.budget import parse_budget
from tasks.engine.config import config_from_dict
from tasks.engine.registry import task_class
from tasks.engine.trainer import PreemptedError
from tasks.runs.training import train
from tasks.sweeps.plan import RunSpec
from tasks.sweeps.process import Job, SubmititRun, pack_folder, resumable, signal_run, unpack_folder
from tasks.sweeps.worker import WorkerPool, run_in_kept_worker

LAUNCHERS = ("serial", "local", "ray", "submitit")
EXTRAS = {"ray": ("ray", "ray"), "submitit": ("submitit", "slurm")}  # launcher: (module, the extra to install)


def run_in_process(spec: RunSpec, folder: Path) -> int:
    """Train the run in this process (the serial launcher); a stop signal propagates as
    :class:`~tasks.engine.trainer.PreemptedError` (the whole sweep stops), other errors are the run's failure."""
    cls = task_class(spec.task)
    config = config_from_dict(cls.config_class, {**spec.config, "out": str(folder), "resume": resumable(folder)})
    train(cls, config, parse_budget(spec.budget) if spec.budget else None)
    return 0


@dataclass
class Handle:
    """A run handed to a launcher: its spec, and what the launcher tracks it by."""

    spec: RunSpec
    job: Job
    ref: Any = None
    exit_code: int | None = None
    error: str = ""


class Launcher:
    """Runs jobs: ``start`` hands one over, ``wait`` returns those that ended, ``stop`` asks running ones to
    checkpoint and stop. ``capacity`` is how many may run at once."""

    name = "serial"

    def __init__(self, jobs: int = 1) -> None:
        check_positive("jobs", jobs)
        self.jobs = jobs
        self.capacity = jobs

    def threads(self) -> int:
        """Torch threads for a run whose config leaves ``num_threads`` at 0 (0: torch's default)."""
        return 0

    def describe(self) -> dict[str, Any]:
        return {"launcher": self.name, "jobs": self.jobs, "threads_per_run": self.threads() or "torch's default"}

    def start(self, handle: Handle) -> None:
        raise NotImplementedError

    def wait(self, running: list[Handle], timeout: float) -> list[Handle]:
        raise NotImplementedError

    def stop(self, running: list[Handle]) -> None:
        pass

    def close(self) -> None:
        pass


def _first_ended(running: list[Handle], ended: Callable[[Handle], bool], timeout: float,
                 interval: float) -> list[Handle]:
    """The handles that ``ended`` says have ended, polled every ``interval`` s until there is one or ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        done = [h for h in running if ended(h)]
        if done or time.monotonic() >= deadline:
            return done
        time.sleep(interval)


class SerialLauncher(Launcher):
    """One run after another, in this process."""

    name = "serial"

    def __init__(self, jobs: int = 1) -> None:
        super().__init__(1)

    def start(self, handle: Handle) -> None:
        try:
            handle.exit_code = run_in_process(handle.spec, Path(handle.job.folder))
        except (PreemptedError, KeyboardInterrupt):
            raise  # the sweep's own process was asked to stop: the driver records it and stops
        except Exception as error:  # the run's failure, not the sweep's: recorded, retried, reported
            handle.exit_code, handle.error = 1, f"{type(error).__name__}: {error}"

    def wait(self, running: list[Handle], timeout: float) -> list[Handle]:
        return list(running)


class LocalLauncher(Launcher):
    """``jobs`` worker processes on this machine at once, each kept for the next run
    (:class:`~tasks.sweeps.worker.WorkerPool`): a sweep pays torch's import once per worker, not once per run."""

    name = "local"

    def __init__(self, jobs: int = 1) -> None:
        super().__init__(jobs)
        self.pool = WorkerPool(jobs)

    def threads(self) -> int:
        return max(1, (os.cpu_count() or 1) // self.jobs)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "workers": "reused: one process trains run after run"}

    def start(self, handle: Handle) -> None:
        handle.ref = self.pool.submit(handle.job)

    def wait(self, running: list[Handle], timeout: float) -> list[Handle]:
        by_job = {id(h.job): h for h in running}
        ended = []
        for job, code in self.pool.ended(timeout):
            handle = by_job[id(job)]
            handle.exit_code = code
            ended.append(handle)
        return ended

    def stop(self, running: list[Handle]) -> None:
        self.pool.signal(signal.SIGTERM)  # each run checkpoints after its step and answers REQUEUE_EXIT
        deadline = time.monotonic() + 120
        while any(h.exit_code is None for h in running) and time.monotonic() < deadline:
            self.wait([h for h in running if h.exit_code is None], 1.0)  # sets the exit codes of those that ended
        self.close()  # kills what did not stop in time

    def close(self) -> None:
        self.pool.close()


def parse_resources(text: str | dict | None) -> dict[str, float]:
    """``"cpu=2,gpu=1"`` (or a dict) as ``{"cpu": 2.0, "gpu": 1.0}``; cpu defaults to 1, gpu to 0."""
    if isinstance(text, dict):
        items = dict(text)
    else:
        items = {}
        for part in (text or "").split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            if not sep:
                raise ValueError(f"--resources expects KEY=VALUE pairs like cpu=2,gpu=1, got {part!r}")
            items[key.strip()] = value.strip()
    out = {"cpu": 1.0, "gpu": 0.0}
    for key, value in items.items():
        if key not in out:
            raise unknown_name("resource", key, tuple(out))
        try:
            out[key] = float(value)
        except ValueError:
            raise ValueError(f"--resources {key}={value!r}: expected a number") from None
        if out[key] < 0:
            raise ValueError(f"--resources {key}={value}: must be 0 or more")
    return out


def _import_extra(launcher: str):
    module, extra = EXTRAS[launcher]
    return import_extra(module, f"--launcher {launcher}", extra)


class RayLauncher(Launcher):
    """Each run a Ray task (see the module docstring)."""

    name = "ray"

    def __init__(self, jobs: int = 1, resources: dict[str, float] | None = None) -> None:
        super().__init__(jobs)
        ray = _import_extra("ray")
        self.resources = resources or {"cpu": 1.0, "gpu": 0.0}
        self.started = not ray.is_initialized()
        self.started_here = self.started and not os.environ.get("RAY_ADDRESS")  # a local cluster of this sweep
        if self.started:
            address = os.environ.get("RAY_ADDRESS")
            options = {"address": address} if address else {
                "num_cpus": os.cpu_count(), "include_dashboard": False, "object_store_memory": 128 * 1024**2}
            ray.init(log_to_driver=False, configure_logging=False, **options)
        self.ray = ray
        self.address = os.environ.get("RAY_ADDRESS") or "a local cluster started for this sweep"
        self.capacity = jobs  # Ray queues what its resources cannot hold yet; --jobs bounds what we hand it
        self.remote = ray.remote(num_cpus=self.resources["cpu"], num_gpus=self.resources["gpu"],
                                 max_retries=0)(run_in_kept_worker)

    def threads(self) -> int:
        return max(1, int(self.resources["cpu"]))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "resources": self.resources, "cluster": self.address}

    def start(self, handle: Handle) -> None:
        # a cluster of our own shares this file system; a running one (RAY_ADDRESS) may not: send the folder along
        packed = b"" if self.started_here else pack_folder(Path(handle.job.folder))
        handle.ref = self.remote.remote(handle.job, packed)

    def wait(self, running: list[Handle], timeout: float) -> list[Handle]:
        by_ref = {h.ref: h for h in running}
        ready, _ = self.ray.wait(list(by_ref), num_returns=1, timeout=timeout)
        if ready:  # and whatever else is ready by now
            ready, _ = self.ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
        ended = []
        for ref in ready:
            handle = by_ref[ref]
            try:
                handle.exit_code, packed = self.ray.get(ref)
                if packed is not None:  # the worker could not see the sweep's folder: its copy comes back
                    unpack_folder(packed, Path(handle.job.folder))
            except Exception as error:  # the task or its worker died
                handle.exit_code, handle.error = 1, f"{type(error).__name__}: {str(error)[:500]}"
            ended.append(handle)
        return ended

    def stop(self, running: list[Handle]) -> None:
        for handle in running:  # the run's own process gets SIGTERM (it checkpoints), its task then ends
            signal_run(Path(handle.job.folder), signal.SIGTERM)
        if running:
            self.ray.wait([h.ref for h in running], num_returns=len(running), timeout=120)

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


class SubmititLauncher(Launcher):
    """One submitit job per run (see the module docstring)."""

    name = "submitit"

    def __init__(self, jobs: int = 1, resources: dict[str, float] | None = None, folder: Path | None = None,
                 cluster: str | None = None, slurm: dict[str, Any] | None = None) -> None:
        super().__init__(jobs)
        submitit = _import_extra("submitit")
        self.resources = resources or {"cpu": 1.0, "gpu": 0.0}
        self.executor = submitit.AutoExecutor(folder=str(folder or Path("runs") / ".submitit"), cluster=cluster)
        self.cluster = self.executor.cluster
        slurm = dict(slurm or {})
        gpus = int(self.resources["gpu"])
        parameters: dict[str, Any] = {"timeout_min": int(slurm.pop("time", 60 * 24)), "gpus_per_node": gpus,
                                      "tasks_per_node": max(1, gpus), "cpus_per_task": int(self.resources["cpu"])}
        if self.cluster == "slurm":
            parameters["slurm_array_parallelism"] = jobs
            parameters.update({f"slurm_{k}": v for k, v in slurm.items()})
            self.capacity = 10**6  # the array holds every run; SLURM runs --jobs of them at once
        elif slurm:
            raise ValueError(f"--slurm-{next(iter(slurm))} given, but SLURM is not available here (submitit uses its "
                             f"{self.cluster} executor); drop the --slurm-* flags or run where sbatch is")
        self.executor.update_parameters(**{k: v for k, v in parameters.items()
                                           if self.cluster == "slurm" or k in ("timeout_min", "gpus_per_node",
                                                                               "tasks_per_node")})

    def threads(self) -> int:
        return max(1, int(self.resources["cpu"]))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "resources": self.resources, "cluster": self.cluster}

    def start(self, handle: Handle) -> None:
        handle.ref = self.executor.submit(SubmititRun(handle.job))

    def wait(self, running: list[Handle], timeout: float) -> list[Handle]:
        ended = _first_ended(running, lambda h: h.ref.done(), timeout, 0.5)
        for handle in ended:
            try:
                handle.exit_code = handle.ref.result()
            except Exception as error:  # the job failed outside the run, or was cancelled
                handle.exit_code, handle.error = 1, f"{type(error).__name__}: {str(error)[-500:]}"
        return ended

    def stop(self, running: list[Handle]) -> None:
        for handle in running:
            signal_run(Path(handle.job.folder), signal.SIGTERM)
        deadline = time.monotonic() + 120
        while any(not h.ref.done() for h in running) and time.monotonic() < deadline:
            time.sleep(0.5)


def check_options(name: str, jobs: int, resources: str | dict | None, slurm: dict[str, Any] | None) -> None:
    """Refuse, before anything trains, options the launcher ``name`` does not take (naming the fix)."""
    if name not in LAUNCHERS:
        raise unknown_name("launcher", name, LAUNCHERS)
    check_positive("jobs", jobs)
    if name == "serial" and jobs != 1:
        raise ValueError(f"--jobs {jobs} needs a parallel launcher: --launcher local (this machine), ray or submitit")
    if name in ("serial", "local") and resources:
        raise ValueError(f"--resources is for the ray and submitit launchers; --launcher {name} uses this "
                         "machine's cores (--jobs divides them)")
    if resources:
        parse_resources(resources)
    if name != "submitit" and slurm:
        raise ValueError(f"--slurm-* options are for --launcher submitit, not {name}")


@dataclass
class Launch:
    """How a sweep runs: ``--launcher``, ``--jobs``, ``--resources``, ``--retry``, ``--slurm-*``, and the plugin
    folders (``--user-dir``) its runs' processes load; ``cluster`` picks submitit's executor (None: SLURM when
    there, else local)."""

    launcher: str = "serial"
    jobs: int = 1
    resources: str | dict | None = None
    retry: int = 0
    slurm: dict[str, Any] = field(default_factory=dict)
    user_dirs: tuple[str, ...] = ()
    cluster: str | None = None

    def __post_init__(self) -> None:
        check_options(self.launcher, self.jobs, self.resources, self.slurm)
        if isinstance(self.retry, bool) or not isinstance(self.retry, int) or self.retry < 0:
            raise ValueError(f"--retry must be a whole number 0 or more, got {self.retry!r}")

    def make(self, out: Path) -> Launcher:
        """The launcher these options describe (checked when they were given); submitit keeps its files in
        ``out/.submitit``.

        Raises:
            ValueError: the launcher's extra is not installed (naming what to install).
        """
        if self.launcher == "serial":
            return SerialLauncher()
        if self.launcher == "local":
            return LocalLauncher(self.jobs)
        resources = parse_resources(self.resources)
        if self.launcher == "ray":
            return RayLauncher(self.jobs, resources)
        return SubmititLauncher(self.jobs, resources, Path(out) / ".submitit", self.cluster, self.slurm)
