"""The local launcher's reused workers (tasks.sweeps.worker): N runs train in fewer processes than runs, to the
serial numbers; a run that kills its worker fails alone, and a fresh worker trains the next runs.

Three runs of translation's classic model (seeds 0, 1, 2), preset tiny, 1 epoch of 64 generated pairs, one thread:
~3 s each in a process, plus one import of torch per worker.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from tasks.compare.sweep import Entry, run_specs
from tasks.sweeps.driver import SweepFailedError, run_sweep
from tasks.sweeps.launchers import Launch
from tasks.sweeps.process import LOG_FILE, PID_FILE

pytestmark = pytest.mark.slow  # worker processes train

SETTINGS = {"preset": "tiny", "n_train": 64, "eval_size": 8, "beam_size": 1, "num_threads": 1, "progress": False,
            "epochs": 1}


def _specs(seeds: int = 3) -> list:
    return run_specs("translation", [Entry("classic", "classic")], seeds, "epochs=1", **SETTINGS)


def _worker_pids(folder: Path) -> list[int]:
    """The worker processes that trained the run, as its log names them (one line per start)."""
    return [int(pid) for pid in re.findall(r"zoo worker (\d+):", (folder / LOG_FILE).read_text())]


def _final(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())["final"]


def test_local_workers_train_several_runs_each_to_the_serial_numbers(tmp_path):
    specs = _specs()
    serial = run_sweep(specs, tmp_path / "serial")
    local = run_sweep(specs, tmp_path / "local", Launch("local", jobs=2))
    pids = {name: _worker_pids(folder) for name, folder in local.items()}
    assert all(len(p) == 1 for p in pids.values()), pids
    assert len({p[0] for p in pids.values()}) <= 2 < len(specs)  # 3 runs, at most 2 processes
    for name in serial:
        assert _final(local[name]) == _final(serial[name]), name


def test_a_run_that_kills_its_worker_fails_alone_and_a_fresh_worker_trains_the_rest(tmp_path):
    specs = _specs()
    out = tmp_path / "out"
    first = specs[0].folder(out)

    def kill_the_first_run() -> None:  # SIGKILL: no handler, no checkpoint, the process is gone mid-run
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                os.kill(int((first / PID_FILE).read_text()), signal.SIGKILL)
                return
            except (FileNotFoundError, ValueError):
                time.sleep(0.05)

    killer = threading.Thread(target=kill_the_first_run)
    killer.start()
    expected = rf"(?s)1 of 3 run\(s\) failed.*{specs[0].name} \(exit -9.*worker process \d+ died"
    with pytest.raises(SweepFailedError, match=expected):
        run_sweep(specs, out, Launch("local", jobs=1))
    killer.join()
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    assert [runs[s.name]["state"] for s in specs] == ["failed", "done", "done"]
    rest = [_worker_pids(s.folder(out)) for s in specs[1:]]
    assert rest[0] == rest[1] and len(rest[0]) == 1  # the fresh worker trained both
