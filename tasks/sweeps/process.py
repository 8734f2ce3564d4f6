"""One run in a process of its own: the ``zoo train`` command line of a sweep's run, started, waited for, signalled.

This module imports nothing but the standard library (submitit lazily), so that a Ray worker or a submitit job that
only starts a run's process does not pay for importing torch itself: the run's own process does that.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

LOG_FILE = "train.log"  # each run's output, in its folder
PID_FILE = "worker.pid"  # the pid of a run's `zoo train` process while it runs (send it SIGTERM to pre-empt it)


def resumable(folder: Path) -> bool:
    """Whether the run folder holds a checkpoint to resume from (the trainer's ``checkpoints/last.pt``)."""
    return (Path(folder) / "checkpoints" / "last.pt").is_file()


@dataclass(frozen=True)
class Job:
    """One run as a launcher sees it: the task, its folder (holding ``config.json``), its threads, its plugins."""

    task: str
    folder: str
    threads: int = 0  # 0: the run's own num_threads
    env: dict[str, str] = field(default_factory=dict)
    budget: str | None = None  # --budget of zoo train (time=SECONDS, flops=X)

    def command(self) -> list[str]:
        """The ``zoo train`` command line of the run; ``--resume`` when it has a checkpoint to continue."""
        folder = Path(self.folder)
        command = [sys.executable, "-m", "tasks.cli.main", "train", self.task, "--config", str(folder / "config.json"),
                   "--out", str(folder), "--progress", "false"]
        if self.threads:
            command += ["--num-threads", str(self.threads)]
        if self.budget:
            command += ["--budget", self.budget]
        if resumable(folder):
            command.append("--resume")
        return command

    def environment(self) -> dict[str, str]:
        env = {**os.environ, **self.env}
        if self.threads:  # the other libraries' thread pools, sized like torch's
            env.update(OMP_NUM_THREADS=str(self.threads), MKL_NUM_THREADS=str(self.threads))
        return env


def start_process(job: Job) -> subprocess.Popen:
    """Start the run's ``zoo train`` process, its output appended to the run's ``train.log``."""
    folder = Path(job.folder)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOG_FILE, "ab") as log_file:
        process = subprocess.Popen(job.command(), stdout=log_file, stderr=subprocess.STDOUT, env=job.environment(),
                                   start_new_session=True)  # the sweep's Ctrl-C reaches it as our SIGTERM
    (folder / PID_FILE).write_text(f"{process.pid}\n")
    return process


def run_process(job: Job) -> int:
    """Run the job's process to its end (in a Ray worker or a submitit job); its exit status."""
    process = start_process(job)
    try:
        return process.wait()
    finally:
        Path(job.folder, PID_FILE).unlink(missing_ok=True)


def pack_folder(folder: Path) -> bytes:
    """The run folder as a gzipped tar (what a worker without the sweep's file system needs, or gives back)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        if folder.is_dir():
            for path in sorted(folder.rglob("*")):
                if path.is_file() and path.name != PID_FILE:
                    tar.add(path, arcname=str(path.relative_to(folder)))
    return buffer.getvalue()


def unpack_folder(data: bytes, folder: Path) -> None:
    """Write a :func:`pack_folder` archive into ``folder`` (files it holds are replaced).

    An archive comes from a worker, and ``folder`` may hold symbolic links that writing would follow: every member
    must be a plain file that lands inside ``folder`` once the links already there are followed, or nothing is
    written (a link to scratch space outside the folder is refused, named). Python's ``"data"`` extraction filter
    then checks each member again where the Python has it (3.12, and 3.8.17 / 3.9.17 / 3.10.12 / 3.11.4 on).

    Raises:
        ValueError: a member that is not a plain file, or that would be written outside ``folder``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    root = os.path.realpath(folder)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():  # all checked before anything is written
            if not member.isfile():
                raise ValueError(f"run folder archive holds {member.name!r}, which is not a plain file; a run folder "
                                 "archive (pack_folder) holds plain files only")
            target = os.path.realpath(os.path.join(root, member.name))  # through the links already in the folder
            if os.path.commonpath([root, target]) != root:
                raise ValueError(f"run folder archive member {member.name!r} would be written to {target}, outside "
                                 f"the run folder {folder} (an absolute name, '..', or a symbolic link in the folder); "
                                 "remove the link, or let the workers see the sweep's --out so nothing comes back "
                                 "packed")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(folder, filter="data")
        else:  # an older Python: the checks above are the whole filter
            tar.extractall(folder)


def run_anywhere(job: Job, packed: bytes) -> tuple[int, bytes | None]:
    """Run the job where its folder is (a Ray worker on the sweep's file system: in place, nothing comes back), or,
    on a worker that cannot see the folder, in a temporary copy made from ``packed`` (:func:`pack_folder` of the run
    folder: its config, and its checkpoint when it resumes), giving the folder back packed, logs included."""
    if Path(job.folder, "config.json").is_file():
        return run_process(job), None
    if not packed:
        raise FileNotFoundError(f"this worker cannot see the run folder {job.folder} and none was sent with the task: "
                                "put the sweep's --out on a file system the workers share")
    with tempfile.TemporaryDirectory(prefix="zoo-run-") as tmp:
        local = Path(tmp) / Path(job.folder).name
        unpack_folder(packed, local)
        code = run_process(replace(job, folder=str(local)))
        return code, pack_folder(local)


def signal_run(folder: Path, number: int) -> None:
    """Send signal ``number`` to the run's ``zoo train`` process, if it is running."""
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        os.kill(int((folder / PID_FILE).read_text()), number)


class SubmititRun:
    """What a submitit job calls: the run's process; on SLURM's time-out signal, submitit calls
    :meth:`checkpoint`, which makes the run save ``last.pt`` and requeues the job to resume it."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.process: subprocess.Popen | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"job": self.job, "process": None}  # a process handle does not travel with the pickled job

    def __call__(self) -> int:
        import submitit

        if int(os.environ.get("SLURM_NTASKS", "1")) > 1:  # one DDP rank per task: RANK, WORLD_SIZE, MASTER_ADDR
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        self.process = start_process(self.job)
        try:
            return self.process.wait()
        finally:
            Path(self.job.folder, PID_FILE).unlink(missing_ok=True)

    def checkpoint(self, *args, **kwargs):
        """Called by submitit (in its signal handler) before the job is stopped: the run saves ``last.pt`` after its
        current step and exits; the job is requeued, and the requeued job resumes it."""
        import submitit

        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # reaped here: the wait() this handler interrupted never resumes
                try:
                    if os.waitpid(self.process.pid, os.WNOHANG)[0]:
                        break
                except ChildProcessError:  # reaped already
                    break
                time.sleep(0.2)
        Path(self.job.folder, PID_FILE).unlink(missing_ok=True)
        return submitit.helpers.DelayedSubmission(SubmititRun(self.job))
