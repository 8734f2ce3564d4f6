"""A run folder's files on disk, read and written safely: a worker's archive never writes outside the run folder
(not through a symbolic link already in it either), ``config.json`` is written whole or not at all, and the sweep's
reader treats a cut ``config.json`` as a clear state instead of crashing on it. No training: folders are made by
hand, as a crash or a worker would leave them."""

from __future__ import annotations

import builtins
import errno
import io
import json
import tarfile
from pathlib import Path

import pytest

from tasks.engine.config import TrainConfig
from tasks.sweeps.plan import RunSpec
from tasks.sweeps.process import pack_folder, unpack_folder
from tasks.sweeps.state import folder_state


def _archive(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    """A gzipped tar of files (name -> content) and symbolic links (name -> target), as a hostile worker sends."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buffer.getvalue()


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(params=["data filter", "no data filter"])
def python(request, monkeypatch):
    """Both ways of unpacking: with tarfile's "data" filter (Python 3.11.4+), and the checks alone without it."""
    if request.param == "no data filter":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    return request.param


def test_unpack_never_writes_through_a_symbolic_link_in_the_run_folder(tmp_path, python):
    """The run folder's ``checkpoints`` is a link to a folder outside it: the worker's ``checkpoints/last.pt`` and
    a file linked out by name are refused, and nothing is written anywhere."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept.json").write_text("{}")
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").symlink_to(outside, target_is_directory=True)
    (run / "metrics.json").symlink_to(outside / "kept.json")
    for name in ("checkpoints/last.pt", "metrics.json"):
        packed = _archive({"train.log": b"log", name: b"from the worker"})
        with pytest.raises(ValueError, match=f"{name!r} would be written to .*outside the run folder"):
            unpack_folder(packed, run)
        assert _files(outside) == ["kept.json"] and (outside / "kept.json").read_text() == "{}", name
        assert not (run / "train.log").exists(), name  # refused before anything was written


@pytest.mark.parametrize("members, links, message", [
    ({"/tmp/zoo-absolute.txt": b"x"}, {}, "would be written to"),
    ({"../escaped.txt": b"x"}, {}, "would be written to"),
    ({"a/../../escaped.txt": b"x"}, {}, "would be written to"),
    ({}, {"checkpoints": "/"}, "not a plain file"),
], ids=["absolute", "dot-dot", "dot-dot inside", "link member"])
def test_unpack_refuses_crafted_archives(tmp_path, python, members, links, message):
    run = tmp_path / "deep" / "run"
    with pytest.raises(ValueError, match=message):
        unpack_folder(_archive(members, links), run)
    assert _files(tmp_path) == ["deep", "deep/run"] and not Path("/tmp/zoo-absolute.txt").exists()


def test_unpack_writes_a_packed_folder_back_and_follows_links_that_stay_inside(tmp_path, python):
    source = tmp_path / "source"
    (source / "checkpoints").mkdir(parents=True)
    (source / "checkpoints" / "last.pt").write_bytes(b"weights")
    (source / "config.json").write_text('{"seed": 1}')
    run = tmp_path / "run"
    (run / "scratch").mkdir(parents=True)
    (run / "checkpoints").symlink_to(run / "scratch", target_is_directory=True)  # a link inside the folder: fine
    unpack_folder(pack_folder(source), run)
    assert (run / "scratch" / "last.pt").read_bytes() == b"weights"
    assert json.loads((run / "config.json").read_text()) == {"seed": 1}


def test_config_json_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """The disk fills up halfway through the next write of ``config.json``: the file still holds the last whole
    config (a sweep reading it then reuses or resumes the run correctly), and no temporary file is left behind."""
    path = tmp_path / "config.json"
    TrainConfig(task="translation", epochs=3).save(path)
    before = json.loads(path.read_text())

    class FullDisk:
        """A file whose first write stores half of its text, then fails as a full disk does."""

        def __init__(self, file) -> None:
            self.file = file

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.file.close()

        def write(self, text) -> int:
            self.file.write(text[: len(text) // 2])
            self.file.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    real_open = builtins.open

    def full_disk_open(file, mode="r", *args, **kwargs):
        opened = real_open(file, mode, *args, **kwargs)
        return FullDisk(opened) if "w" in mode else opened

    with monkeypatch.context() as patch:  # io.open is what pathlib calls, builtins.open what open() is
        patch.setattr(builtins, "open", full_disk_open)
        patch.setattr(io, "open", full_disk_open)
        with pytest.raises(OSError, match="No space left"):
            TrainConfig(task="translation", epochs=5).save(path)
    assert json.loads(path.read_text()) == before
    assert _files(tmp_path) == ["config.json"]


SPEC = RunSpec("translation", "classic", {"variant": "classic", "preset": "tiny", "epochs": 3, "seed": 0})


def _run_folder(tmp_path: Path, config: str | None, run_json: str | None = None, checkpoint: bool = False,
                done: bool = False) -> Path:
    """A sweep's run folder as a crash leaves it: ``config.json`` and ``run.json`` holding the given text."""
    folder = tmp_path / SPEC.name
    folder.mkdir(parents=True)
    if config is not None:
        (folder / "config.json").write_text(config)
    if run_json is not None:
        (folder / "run.json").write_text(run_json)
    if checkpoint:
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "last.pt").write_bytes(b"")
    if done:
        (folder / "metrics.json").write_text("{}")
    return folder


WHOLE = json.dumps(SPEC.config, indent=2)
CUT = WHOLE[: len(WHOLE) // 2]  # a write stopped halfway


def test_a_cut_config_json_of_an_unfinished_run_starts_or_resumes_it(tmp_path):
    """Nothing finished is lost: the sweep writes ``config.json`` anew and starts the run, or resumes its checkpoint
    (whose own settings ``--resume`` checks)."""
    assert folder_state(SPEC, _run_folder(tmp_path / "a", CUT)) == "new"
    assert folder_state(SPEC, _run_folder(tmp_path / "b", "\x00\x00", checkpoint=True)) == "partial"
    assert folder_state(SPEC, _run_folder(tmp_path / "c", "[1, 2]", checkpoint=True)) == "partial"


def test_a_cut_config_json_of_a_finished_run_is_checked_through_run_json(tmp_path):
    """A finished run's settings come from ``run.json`` beside it: reused when they are this sweep's, refused when
    they are not, and refused with the file's name and the fix when neither file can be read."""
    from tasks.sweeps.state import recorded_config

    run_json = json.dumps({"format": 1, "config": SPEC.config})
    folder = _run_folder(tmp_path / "same", CUT, run_json, done=True)
    assert recorded_config(folder) == SPEC.config and folder_state(SPEC, folder) == "done"
    other = json.dumps({"config": {**SPEC.config, "epochs": 4}})
    with pytest.raises(ValueError, match="holds a run with other settings"):
        folder_state(SPEC, _run_folder(tmp_path / "other", CUT, other, done=True))
    with pytest.raises(ValueError, match=r"finished run whose settings cannot be read: .*config\.json "
                                         r"\(JSONDecodeError.*run\.json.*move the folder away"):
        folder_state(SPEC, _run_folder(tmp_path / "lost", CUT, run_json[:10], done=True))


@pytest.mark.parametrize("content", [b'{"format": 1, "runs": {"classic-se', b"\xff\xfe\x00garbage", b"[1]",
                                     b'{"runs": [1]}', b'{"runs": {"classic": 3}}'])
def test_a_damaged_sweep_json_is_rebuilt_from_the_run_folders(tmp_path, content):
    from tasks.sweeps.state import SWEEP_FILE, SweepState

    (tmp_path / SWEEP_FILE).write_bytes(content)
    state = SweepState(tmp_path, {}, {}, [SPEC])
    assert state.runs[SPEC.name]["attempts"] == 0 and state.runs[SPEC.name]["state"] == "pending"
