"""``zoo lab``'s flags for learners: ``--notebook OUT.ipynb``, ``--lang``, the hidden ``--scale``, ``--exercise`` and
``--check DIR``: what each writes or runs, and the one-line errors of bad input."""

from __future__ import annotations

import nbformat
import pytest

import tasks.cli.lab as lab_cli
from tasks.cli.main import main
from tasks.lab.exercise import ExerciseCheck
from tasks.lab.lesson import LESSONS, LessonResult


def _one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert all(needle in err for needle in needles), err
    return err


def test_notebook_flag_writes_the_notebook_and_runs_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "nb" / "mask.ipynb"
    args = ["lab", "mask", "--notebook", str(out), "--lang", "zh", "--quick", "--seed", "2", "--scale", "0.3"]
    assert main(args) == 0
    notebook = nbformat.read(out, as_version=4)
    assert LESSONS["mask"].title_zh in notebook.cells[0].source
    parameters = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    assert {"quick = True", "seed = 2", "scale = 0.3", "lang = 'zh'"} <= set(parameters.source.splitlines())
    assert str(out) in capsys.readouterr().out
    assert not (tmp_path / "runs").exists()  # writing a notebook runs no lesson


def test_all_writes_one_notebook_per_lesson_into_a_folder(tmp_path, capsys):
    assert main(["lab", "all", "--notebook", str(tmp_path / "notebooks")]) == 0
    assert sorted(p.name for p in (tmp_path / "notebooks").iterdir()) == sorted(f"{n}.ipynb" for n in LESSONS)
    assert main(["lab", "all", "--notebook", str(tmp_path / "one.ipynb")]) == 2
    _one_line_error(capsys, "one notebook per lesson into a folder", "--notebook notebooks/")


@pytest.mark.parametrize(("args", "needles"), [
    (["lab", "scael", "--notebook", "x.ipynb"], ("unknown lesson 'scael'", "Did you mean 'scale'")),
    (["lab", "mask", "--notebook", "x.ipynb", "--lang", "fr"], ("unknown language 'fr'", "en, zh")),
    (["lab", "mask", "--lang", "de", "--quick"], ("unknown language 'de'",)),
    (["lab", "mask", "--notebook", "x.txt"], ("ends in .ipynb", "mask.ipynb")),
    (["lab", "mask", "--quick", "--scale", "0"], ("--scale must be > 0", "got 0.0")),
    (["lab", "mask", "--notebook", "x.ipynb", "--exercise"], ("give one of them",)),
    (["lab", "--check", "no-such-folder"], ("no-such-folder", "does not exist", "zoo lab NAME --exercise")),
])
def test_bad_input_gets_one_line(tmp_path, monkeypatch, capsys, args, needles):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    _one_line_error(capsys, *needles)
    assert not list(tmp_path.iterdir())


def _fake_run(seen: list):
    def run_lesson(name, settings):
        seen.append((name, settings))
        return LessonResult(("the mistake did X", "do Y"), True, {"x": 1.0}, verdict_zh=("错误导致了 X", "应该做 Y"))

    return run_lesson


def test_scale_reaches_the_lessons_settings_and_lang_picks_the_verdict(tmp_path, monkeypatch, capsys):
    seen: list = []
    monkeypatch.setattr(lab_cli, "run_lesson", _fake_run(seen))
    assert main(["lab", "mask", "--quick", "--scale", "0.2", "--seed", "4", "--quiet", "--out", str(tmp_path),
                 "--lang", "zh"]) == 0
    (name, settings), = seen
    assert (name, settings.scale, settings.quick, settings.seed, settings.progress) == ("mask", 0.2, True, 4, False)
    out = capsys.readouterr().out
    assert LESSONS["mask"].title_zh in out and "错误导致了 X" in out and "the mistake did X" not in out
    assert f"已写入 {tmp_path}/lesson.zh.md" in out and "written to" not in out
    assert main(["lab", "mask", "--quiet", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert seen[-1][1].scale == 1.0 and "the mistake did X" in out and f"written to {tmp_path}/lesson.md" in out


def test_scale_is_hidden_from_the_help_and_list_speaks_chinese(capsys):
    assert main(["lab", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "--notebook" in help_text and "--exercise" in help_text and "--check" in help_text
    assert "--scale" not in help_text
    assert main(["lab", "--list", "--lang", "zh"]) == 0
    assert all(lesson.title_zh in capsys.readouterr().out for lesson in [LESSONS["scale"]])


def test_exercise_and_check_are_wired_to_the_exercises(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "ex"
    assert main(["lab", "mask", "--exercise", "--out", str(folder), "--lang", "zh"]) == 0
    assert (folder / "exercise.py").is_file() and f"zoo lab --check {folder}" in capsys.readouterr().out
    assert main(["lab", "--check", str(folder)]) == 1  # the mistake is still there: not fixed, and measured
    assert capsys.readouterr().out.strip()
    monkeypatch.setattr("tasks.lab.exercise.check_exercise",
                        lambda path: ExerciseCheck(True, [("m", 1.0, 1.0, 2.0)], f"fixed: {path}"))
    assert main(["lab", "--check", str(folder)]) == 0
    assert f"fixed: {folder}" in capsys.readouterr().out
