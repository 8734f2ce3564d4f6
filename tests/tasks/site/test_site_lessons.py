"""``zoo site`` and the lessons: a default build trains nothing and writes only under ``--out``; ``--run-lessons``
runs the missing lessons into the site's folder (or ``--lesson-runs``), never into the working directory."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from tasks.cli.main import main
from tasks.lab.lesson import LESSONS, LabSettings, Lesson, LessonResult, run_lesson

pytestmark = pytest.mark.slow  # builds sites and runs a lesson

REAL_LOAD = Lesson.load


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root``: its size and modification time (a rewrite changes the time)."""
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def stub(settings: LabSettings) -> LessonResult:
    return LessonResult(("the mistake did this", "the right choice is that"), True, {"measured": 1.0},
                        verdict_zh=("错误做法造成了这个结果", "正确的做法是那样"))


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A working directory holding one lesson's result where ``zoo lab`` writes it (runs/lab/mask)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Lesson, "load", lambda self: stub)
    run_lesson("mask", LabSettings(out=Path("runs/lab/mask"), quick=True, progress=False))
    return tmp_path


def test_a_default_build_trains_nothing_and_writes_only_under_out(workdir, monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(Lesson, "load", lambda self: ran.append(self.name) or stub)
    before = tree(workdir)
    assert main(["site", "--out", "s", "--variants", "classic", "--no-check", "--quiet"]) == 0
    assert ran == []  # no lesson ran
    after = tree(workdir)
    outside = {k: v for k, v in after.items() if k != "s" and not k.startswith("s/")}
    assert outside == before  # nothing written, changed or removed outside --out
    index = (workdir / "s" / "index.html").read_text()
    assert "<a href='lessons/mask/index.html'>" in index  # read from runs/lab, where zoo lab wrote it
    assert "not run yet: <code>zoo lab scale --quick</code>" in index  # with the command that runs it
    out = capsys.readouterr().out
    assert f"{len(LESSONS) - 1} lessons not run (scale, norm," in out and "--run-lessons runs them" in out


def test_a_lesson_not_read_from_the_default_folder_shows_the_command_that_writes_it_there(workdir, monkeypatch):
    monkeypatch.setattr(Lesson, "load", lambda self: pytest.fail(f"lesson {self.name} ran"))
    main(["site", "--out", "s", "--lessons", "my lab", "--variants", "classic", "--no-check", "--quiet"])
    index = (workdir / "s" / "index.html").read_text()
    assert "not run yet: <code>zoo lab mask --quick --out &#x27;my lab/mask&#x27;</code>" in index


def test_run_lessons_runs_the_missing_lessons_under_out(workdir, monkeypatch, capsys):
    """The params lesson runs for real (at a tenth of its budget: the point is where it writes), the others are
    stubbed; a second build reads them back from the site's folder and runs nothing."""
    def body(lesson: Lesson):
        if lesson.name != "params":
            return stub
        return lambda settings: REAL_LOAD(lesson)(dataclasses.replace(settings, scale=0.1))

    monkeypatch.setattr(Lesson, "load", body)
    before = tree(workdir)
    assert main(["site", "--out", "s", "--variants", "classic", "--no-check", "--quiet", "--run-lessons"]) == 0
    after = tree(workdir)
    assert {k: v for k, v in after.items() if k != "s" and not k.startswith("s/")} == before
    ran = sorted(p.parent.name for p in (workdir / "s" / "lab").glob("*/result.json"))
    assert ran == sorted(n for n in LESSONS if n != "mask")  # mask was found in runs/lab
    assert (workdir / "s" / "lab" / "params" / "params.png").is_file()  # the real lesson's plot
    assert (workdir / "s" / "lessons" / "params" / "params.png").is_file()  # and its page's copy
    index = (workdir / "s" / "index.html").read_text()
    assert "not run yet" not in index and "<a href='lessons/params/index.html'>" in index
    assert "lessons not run" not in capsys.readouterr().out

    monkeypatch.setattr(Lesson, "load", lambda self: pytest.fail(f"lesson {self.name} ran again"))
    main(["site", "--out", "s", "--variants", "classic", "--no-check", "--quiet", "--run-lessons"])
    assert "not run yet" not in (workdir / "s" / "index.html").read_text()


def test_lesson_runs_go_to_the_folder_the_user_names(workdir, monkeypatch):
    monkeypatch.setattr(Lesson, "load", lambda self: stub)
    elsewhere = workdir.parent / f"{workdir.name}-lab"
    main(["site", "--out", "s", "--variants", "classic", "--no-check", "--quiet", "--run-lessons",
          "--lesson-runs", os.fspath(elsewhere)])
    assert sorted(p.name for p in elsewhere.iterdir()) == sorted(n for n in LESSONS if n != "mask")
    assert not (workdir / "s" / "lab").exists()
