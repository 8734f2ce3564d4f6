"""Ray's tasks train in kept worker processes (tasks.sweeps.worker.run_in_kept_worker): a Ray worker pays torch's
import once, not once per run, and the runs give the serial numbers."""

from __future__ import annotations

import pytest

from tasks.sweeps.driver import run_sweep
from tasks.sweeps.launchers import Launch
from tests.tasks.sweeps.test_worker import _final, _specs, _worker_pids

pytestmark = pytest.mark.slow  # a local Ray cluster, and worker processes that train


def test_ray_tasks_reuse_their_workers_and_give_the_serial_numbers(tmp_path):
    pytest.importorskip("ray")
    specs = _specs()
    serial = run_sweep(specs, tmp_path / "serial")
    ray = run_sweep(specs, tmp_path / "ray", Launch("ray", jobs=1))
    pids = {name: _worker_pids(folder) for name, folder in ray.items()}
    assert all(len(p) == 1 for p in pids.values()), pids  # each run trained in a kept worker, once
    assert len({p[0] for p in pids.values()}) < len(specs)  # 3 runs one after another: fewer processes than runs
    for name in serial:
        assert _final(ray[name]) == _final(serial[name]), name


def test_a_task_that_cannot_see_the_run_folder_trains_a_copy_in_a_process_of_its_own(tmp_path, monkeypatch):
    from tasks.sweeps import worker
    from tasks.sweeps.process import Job

    calls = []
    monkeypatch.setattr(worker, "_KEPT", None)
    monkeypatch.setattr(worker, "run_anywhere", lambda job, packed: calls.append((job, packed)) or (0, b"folder"))
    job = Job("translation", str(tmp_path / "elsewhere"))
    assert worker.run_in_kept_worker(job, b"packed") == (0, b"folder")
    assert calls == [(job, b"packed")] and worker._KEPT is None  # no worker started for it
