"""Files written atomically (plumbing.atomic) get an ordinary file's mode: a colleague can read a run.

``tempfile.mkstemp`` creates 0600 files (and safetensors 0.8 writes its own 0600 file): before plumbing.atomic a
run's run.json and checkpoints and an exported model.safetensors were readable by their owner alone. Each test
sets the umask it needs and puts the old one back.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch

from plumbing.atomic import atomic_open, atomic_path, temporary_folder, umask, write_json_atomic, write_text_atomic
from tasks.engine.checkpoint import save_checkpoint
from tasks.medseg.evaluation.nnunet_eval import write_summary_json
from tasks.medseg.preprocessing.folds import write_splits
from tasks.runs.export import export_run
from tasks.runs.training import train
from zoo.analysis.doctor.findings import CheckResult, Diagnosis
from zoo.analysis.doctor.render import write_diagnosis


@pytest.fixture
def set_umask():
    """``set_umask(mask)`` for the rest of the test; the umask found is restored afterwards."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.tmp"))


@pytest.mark.parametrize("mask, file_mode, folder_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)],
                         ids=["umask-022", "umask-077"])
def test_every_writer_follows_the_umask(tmp_path, set_umask, mask, file_mode, folder_mode):
    set_umask(mask)
    assert umask() == mask and os.umask(mask) == mask  # read without changing it
    write_json_atomic(tmp_path / "run.json", {"a": 1})
    save_checkpoint(tmp_path / "checkpoints" / "best.pt", {"model": {"w": torch.zeros(2)}, "config": {}})
    write_splits(tmp_path / "splits_final.json", [{"train": ["a"], "val": ["b"]}, {"train": ["b"], "val": ["a"]}])
    summary = {"metric_per_case": [], "mean": {1: {"Dice": 1.0}}, "foreground_mean": {"Dice": 1.0}}
    write_summary_json(summary, tmp_path / "summary.json")
    write_diagnosis(Diagnosis([CheckResult("mask").skip("no decoder")]), tmp_path / "doctor", figures=False)
    with atomic_open(tmp_path / "cache.npz", binary=True) as f:
        f.write(b"npz")
    files = ["run.json", "checkpoints/best.pt", "splits_final.json", "summary.json", "doctor/doctor.md",
             "doctor/doctor.json", "cache.npz"]
    assert {name: oct(mode(tmp_path / name)) for name in files} == {name: oct(file_mode) for name in files}
    assert mode(temporary_folder(tmp_path, ".phantom.tmp-")) == folder_mode  # the phantoms' folder swap
    assert leftovers(tmp_path) == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = write_text_atomic(tmp_path / "run.json", "old\n")
    with pytest.raises(RuntimeError, match="disk full"), atomic_open(target) as f:
        f.write("half of the new")
        raise RuntimeError("disk full")
    with pytest.raises(RuntimeError, match="writer failed"), atomic_path(tmp_path / "model.safetensors") as tmp:
        tmp.write_bytes(b"partial")
        raise RuntimeError("writer failed")
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_a_writer_with_its_own_private_file_gets_the_umask_mode(tmp_path, set_umask):
    with atomic_path(tmp_path / "model.safetensors") as tmp:  # as safetensors does: a 0600 file renamed over it
        private = tmp.with_name("private")
        private.write_bytes(b"weights")
        private.chmod(0o600)
        os.replace(private, tmp)
    assert mode(tmp_path / "model.safetensors") == 0o644


def test_a_trained_and_exported_run_is_readable_by_others(tmp_path, set_umask):
    from tasks.translation.task import TranslationConfig, TranslationTask
    from tests.tasks.doctor.test_doctor_run import write_parallel

    data = write_parallel(tmp_path / "data", n_train=64)
    run = tmp_path / "run"
    config = TranslationConfig(out=str(run), data=str(data), preset="tiny", epochs=1, batch_size=32, warmup=1,
                               eval_size=4, beam_size=1, progress=False, device="cpu", tokenizer="word")
    train(TranslationTask, config)
    export = export_run(run)
    files = [run / "run.json", run / "checkpoints" / "best.pt", run / "checkpoints" / "last.pt",
             export / "run.json", export / "model.safetensors"]
    assert {str(f): oct(mode(f)) for f in files} == {str(f): "0o644" for f in files}  # 0o600 before plumbing.atomic
    assert json.loads((export / "run.json").read_text())["weights"] == "model.safetensors"
    assert leftovers(tmp_path) == []


def test_the_phantom_folders_are_ordinary_folders(tmp_path, set_umask):
    from tasks.medseg.reading.phantom import write_phantom
    from tasks.medseg.reading.phantom_nifti import write_phantom_nifti

    nifti = write_phantom_nifti(tmp_path / "nifti", slices=4, size=(32, 32), train_cases=("case0005",),
                                test_cases=("case0001",))
    h5 = write_phantom(tmp_path / "h5", slices=4, size=(32, 32), train_cases=("case0005",), test_cases=("case0001",))
    assert oct(mode(nifti)) == oct(mode(h5)) == "0o755"  # from the umask (was a fixed chmod 0o755)
    assert {oct(mode(p)) for p in [*nifti.rglob("*"), *h5.rglob("*")] if p.is_file()} == {"0o644"}
