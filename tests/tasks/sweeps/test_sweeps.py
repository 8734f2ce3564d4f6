"""Sweeps on real engines: serial, local processes, a real local Ray cluster and submitit's local executor train the
same comparison to the same numbers; a SIGTERM mid-training is resumed to the same numbers; reruns reuse what
finished and retrain what did not.

The sweep: translation, classic and pre-ln, seeds 0 and 1, preset tiny, 3 epochs of 256 generated pairs (4 steps
each), one thread per run — 4 runs of ~15 s in this process, ~25 s as a process of their own (importing torch).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from tasks.cli.main import main
from tasks.compare.sweep import MACHINE_COSTS, compare
from tasks.sweeps.driver import SweepFailedError, run_sweep
from tasks.sweeps.launchers import Launch
from tasks.sweeps.process import PID_FILE
from tasks.sweeps.state import SWEEP_FILE

pytestmark = pytest.mark.slow  # sweeps on real engines (local processes, Ray, submitit), each training runs

VARIANTS = ["classic", "pre-ln"]
SETTINGS = {"preset": "tiny", "n_train": 256, "eval_size": 10, "beam_size": 1, "num_threads": 1, "progress": False,
            "epochs": 3}
TIMING = MACHINE_COSTS  # what differs between any two trainings of the same runs


def _sweep(out: Path, launch: Launch | None = None) -> dict:
    return compare("translation", VARIANTS, out, seeds=2, launch=launch, **SETTINGS)


def _numbers(out: Path) -> list[dict]:
    """results.json's rows without the timings: every statistic, to the last digit."""
    rows = json.loads((out / "results.json").read_text())["rows"]
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def _runs(out: Path) -> dict:
    return json.loads((out / SWEEP_FILE).read_text())["runs"]


@pytest.fixture(scope="module")
def serial(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweeps") / "serial"
    _sweep(out)
    return out


def test_serial_sweep_writes_its_state_and_names_runs_by_config(serial):
    runs = _runs(serial)
    assert len(runs) == 4 and all(r["state"] == "done" and r["attempts"] == 1 for r in runs.values())
    assert sorted({(r["label"], r["seed"]) for r in runs.values()}) == [("classic", 0), ("classic", 1),
                                                                        ("pre-ln", 0), ("pre-ln", 1)]
    for name, run in runs.items():
        assert name == f"{run['label']}-seed{run['seed']}-{run['hash']}"
        assert (serial / name / "metrics.json").is_file()
    sweep = json.loads((serial / SWEEP_FILE).read_text())["sweep"]
    assert sweep["kind"] == "compare" and sweep["variants"] == VARIANTS and sweep["seeds"] == 2
    assert "one after another in one process" in (serial / "report.md").read_text()


@pytest.mark.parametrize("launcher", ["local", "ray"])
def test_parallel_launchers_give_the_serial_numbers(serial, tmp_path, launcher):
    out = tmp_path / launcher
    _sweep(out, Launch(launcher, jobs=2))
    assert _numbers(out) == _numbers(serial)
    runs = _runs(out)
    assert set(runs) == set(_runs(serial)) and all(r["state"] == "done" for r in runs.values())
    for name in runs:  # each run is `zoo train --config RUN/config.json`, logged in its folder
        assert "outputs in" in (out / name / "train.log").read_text()
    assert f"--launcher {launcher}" in (out / "report.md").read_text()


def _stop_one_run_mid_training(out: Path, deadline: float) -> str:
    """Freeze the first run that finished its first epoch, check it has epochs left, send it SIGTERM, let it go."""
    while time.monotonic() < deadline:
        for folder in sorted(p for p in out.glob("*-seed*") if p.is_dir()):
            rows, pid_file = folder / "metrics.jsonl", folder / PID_FILE
            if rows.is_file() and rows.read_text().count("\n") >= 1 and pid_file.is_file():
                pid = int(pid_file.read_text())
                os.kill(pid, signal.SIGSTOP)  # wherever it is: in epoch 2, with epoch 3's steps still ahead
                assert rows.read_text().count("\n") == 1, "the run got past its second epoch before it was stopped"
                os.kill(pid, signal.SIGTERM)  # delivered when it continues: checkpoint after the step, exit 75
                os.kill(pid, signal.SIGCONT)
                return folder.name
        time.sleep(0.02)
    raise AssertionError("no run finished an epoch in time")


def test_sigterm_to_the_sweep_stops_its_runs_and_the_same_command_resumes(serial, tmp_path):
    """A scheduler stopping the sweep's own process: every running run checkpoints, the sweep exits 75 (requeue),
    and running the same command again ends with the uninterrupted numbers."""
    import subprocess
    import sys

    out = tmp_path / "stopped"
    flags = [item for key, value in SETTINGS.items() if key != "epochs"
             for item in ("--set", f"{key}={json.dumps(value)}")]
    command = [sys.executable, "-m", "tasks.cli.main", "compare", "translation", "--variants", ",".join(VARIANTS),
               "--seeds", "2", "--epochs", str(SETTINGS["epochs"]), *flags, "--out", str(out), "--launcher", "local",
               "--jobs", "2"]
    sweep = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not any(p.stat().st_size for p in out.glob("*/metrics.jsonl")):
        time.sleep(0.05)
    sweep.send_signal(signal.SIGTERM)
    printed = sweep.communicate(timeout=300)[0]
    assert sweep.returncode == 75, printed
    assert "SIGTERM received: the running runs saved their checkpoints and stopped" in printed
    states = [run["state"] for run in _runs(out).values()]
    assert "preempted" in states and set(states) <= {"preempted", "done", "pending"}
    _sweep(out, Launch("local", jobs=2))
    assert _numbers(out) == _numbers(serial)


def test_submitit_sweep_survives_a_sigterm_mid_training(serial, tmp_path):
    import threading

    out = tmp_path / "submitit"
    stopped: list = []

    def watch() -> None:
        try:
            stopped.append(_stop_one_run_mid_training(out, time.monotonic() + 300))
        except AssertionError as error:
            stopped.append(error)

    watcher = threading.Thread(target=watch)
    watcher.start()
    _sweep(out, Launch("submitit", jobs=2, cluster="local"))
    watcher.join()
    if isinstance(stopped[0], AssertionError):
        raise stopped[0]
    runs = _runs(out)
    assert runs[stopped[0]]["preemptions"] == 1 and runs[stopped[0]]["attempts"] == 2
    log = (out / stopped[0] / "train.log").read_text()
    assert "SIGTERM received: checkpoint saved at optimizer step" in log and "resumed from" in log
    assert _numbers(out) == _numbers(serial)


def test_submitits_checkpoint_hook_saves_the_run_and_the_requeued_job_resumes_it(serial, tmp_path):
    """What SLURM's time-out signal does through submitit: checkpoint() makes the run save and stop, and the job it
    returns for the requeue finishes the run with the uninterrupted numbers."""
    import submitit

    from tasks.compare.sweep import Entry, run_specs
    from tasks.sweeps.driver import _prepare
    from tasks.sweeps.process import Job, SubmititRun, start_process

    spec = run_specs("translation", [Entry("classic", "classic")], 1, "epochs=3", **SETTINGS)[0]
    folder = tmp_path / spec.name
    _prepare(spec, folder)
    run = SubmititRun(Job("translation", str(folder), threads=1, budget=spec.budget))
    run.process = start_process(run.job)  # as __call__ starts it
    rows = folder / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (rows.is_file() and rows.read_text().count("\n") >= 1) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(run.process.pid, signal.SIGSTOP)
    assert rows.read_text().count("\n") == 1, "the run got past its second epoch before it was stopped"
    os.kill(run.process.pid, signal.SIGCONT)
    requeued = run.checkpoint()
    assert isinstance(requeued, submitit.helpers.DelayedSubmission) and requeued.function.job == run.job
    assert "SIGUSR1 received: checkpoint saved at optimizer step" in (folder / "train.log").read_text()
    assert requeued.function() == 0  # the requeued job: zoo train --resume
    assert "resumed from" in (folder / "train.log").read_text()
    done = json.loads((folder / "metrics.json").read_text())
    uninterrupted = json.loads((serial / spec.name / "metrics.json").read_text())
    assert done["final"] == uninterrupted["final"]
    assert [r["bleu"] for r in done["history"]] == [r["bleu"] for r in uninterrupted["history"]]


def test_a_worker_without_the_sweeps_file_system_trains_a_copy_and_sends_the_folder_back(serial, tmp_path):
    """What a Ray task on a node that cannot see --out does (tasks.sweeps.process.run_anywhere)."""
    from tasks.compare.sweep import Entry, run_specs
    from tasks.sweeps.driver import _prepare
    from tasks.sweeps.process import Job, pack_folder, run_anywhere, unpack_folder

    spec = run_specs("translation", [Entry("pre-ln", "pre-ln")], 1, "epochs=3", **SETTINGS)[0]
    here = tmp_path / "sweep" / spec.name
    _prepare(spec, here)
    elsewhere = Job("translation", str(tmp_path / "not-on-this-worker" / spec.name), threads=1, budget=spec.budget)
    code, packed = run_anywhere(elsewhere, pack_folder(here))
    assert code == 0 and not (tmp_path / "not-on-this-worker").exists()
    unpack_folder(packed, here)
    assert "outputs in" in (here / "train.log").read_text()
    done = json.loads((here / "metrics.json").read_text())
    assert done["final"] == json.loads((serial / spec.name / "metrics.json").read_text())["final"]
    with pytest.raises(FileNotFoundError, match="cannot see the run folder"):
        run_anywhere(elsewhere, b"")


def test_rerun_reuses_finished_runs_and_finishes_the_others(serial, tmp_path):
    out = tmp_path / "again"
    shutil.copytree(serial, out)
    names = sorted(_runs(out))
    lost, cut = out / names[0], out / names[1]  # one never started, one stopped after its last checkpoint
    shutil.rmtree(lost)
    (cut / "metrics.json").unlink()
    kept = {n: (out / n / "metrics.json").stat().st_mtime_ns for n in names[2:]}
    _sweep(out)
    assert {n: (out / n / "metrics.json").stat().st_mtime_ns for n in names[2:]} == kept  # reused, not retrained
    assert (lost / "metrics.json").is_file() and (cut / "metrics.json").is_file()
    assert _numbers(out) == _numbers(serial)


def test_a_changed_config_is_a_new_run_never_a_reuse(serial):
    from tasks.compare.sweep import Entry, run_specs

    before = {s.name for s in run_specs("translation", [Entry(v, v) for v in VARIANTS], 2, "epochs=3", **SETTINGS)}
    assert before == set(_runs(serial))
    changed = run_specs("translation", [Entry("classic", "classic")], 1, "epochs=3",
                        **{**SETTINGS, "lr": 1e-3})
    assert changed[0].name.startswith("classic-seed0-") and changed[0].name not in before
    same_but_threads = run_specs("translation", [Entry("classic", "classic")], 1, "epochs=3",
                                 **{**SETTINGS, "num_threads": 2, "progress": True})
    assert same_but_threads[0].name in before  # threads and progress bars do not change what a run computes


def test_a_failing_run_is_retried_then_reported(tmp_path):
    from tasks.compare.sweep import Entry, run_specs

    specs = run_specs("translation", [Entry("classic", "classic")], 1, "epochs=1",
                      **{**SETTINGS, "epochs": 1, "data": str(tmp_path / "no-such-data")})
    expected = r"(?s)1 of 1 run\(s\) failed.*exit 2, 2 attempt.*no-such-data does not exist"
    with pytest.raises(SweepFailedError, match=expected):
        run_sweep(specs, tmp_path / "out", Launch("local", jobs=1, retry=1))
    run = _runs(tmp_path / "out")[specs[0].name]
    assert run["state"] == "failed" and run["attempts"] == 2 and "no-such-data" in run["log_tail"]


def test_sweep_file_and_launch_errors(tmp_path, capsys, monkeypatch):
    import sys

    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "compare"\ntask = "translation"\nvariantz = ["classic"]\n')
    assert main(["sweep", str(bad)]) == 2
    assert "unknown key of sweep file" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path / "missing.toml")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["compare", "translation", "--jobs", "2", "--out", str(tmp_path / "c")]) == 2
    assert "--jobs 2 needs a parallel launcher" in capsys.readouterr().err
    assert main(["compare", "translation", "--launcher", "local", "--resources", "cpu=2",
                 "--out", str(tmp_path / "c")]) == 2
    assert "--resources is for the ray and submitit launchers" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    assert main(["compare", "translation", "--variants", "classic", "--launcher", "ray",
                 "--out", str(tmp_path / "c")]) == 2
    assert "pip install -e '.[ray]'" in capsys.readouterr().err


def test_zoo_sweep_runs_a_file_and_resumes_from_its_sweep_json(serial, tmp_path, capsys):
    out = tmp_path / "from-file"
    shutil.copytree(serial, out)
    (out / "results.json").unlink()
    spec = tmp_path / "sweep.toml"
    settings = "\n".join(f"{k} = {json.dumps(v)}" for k, v in SETTINGS.items() if k != "epochs")
    spec.write_text(f'task = "translation"\nvariants = {json.dumps(VARIANTS)}\nseeds = 2\nbudget = "epochs=3"\n'
                    f'out = "{out}"\n[set]\n{settings}\n')
    assert main(["sweep", str(spec)]) == 0
    assert _numbers(out) == _numbers(serial)  # every run reused: nothing trained again
    assert all(r["attempts"] == 1 for r in _runs(out).values())
    assert main(["sweep", str(out / SWEEP_FILE)]) == 0  # the sweep.json an earlier sweep wrote
    assert "written to" in capsys.readouterr().out


def test_zoo_sweep_of_a_time_budgets_sweep_json_reruns_the_same_runs(tmp_path, monkeypatch, capsys):
    """Issue 35: sweep.json dropped the --epochs cap of a time budget, so `zoo sweep OUT/sweep.json` took the task's
    default (translation: 8), hashed other configs and trained every run again into new folders."""
    import tasks.sweeps.driver

    out = tmp_path / "capped"
    settings = [f"--set={k}={v}" for k, v in SETTINGS.items() if k not in ("epochs", "progress")]
    assert main(["compare", "translation", "--variants", "classic", "--budget", "time=600", "--epochs", "1",
                 "--quiet", "--out", str(out), *settings]) == 0
    before = sorted(p.name for p in out.iterdir())
    assert json.loads((out / SWEEP_FILE).read_text())["sweep"]["epochs"] == 1

    def no_training(spec, folder):
        raise AssertionError(f"zoo sweep would train {spec.name} again")

    monkeypatch.setattr(tasks.sweeps.driver, "_prepare", no_training)
    assert main(["sweep", str(out / SWEEP_FILE)]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before  # no new folder: every run reused
    assert all(r["state"] == "done" and r["attempts"] == 1 for r in _runs(out).values())
