"""Exercises: the untouched file holds the lesson's mistake and is not fixed, the one-line fix passes, broken files and
unknown lessons get one-line errors naming what is wrong, and the Chinese text uses the glossary's terms."""

import os
import runpy
import sys
from pathlib import Path

import pytest

from tasks.i18n.glossary import check_terms
from tasks.lab import LESSONS
from tasks.lab.exercise import (
    _WORDS,
    EXERCISES,
    NO_EXERCISE,
    check_exercise,
    exercise_markdown,
    get_exercise,
    write_exercise,
)


def _edit(folder: Path, old: str, new: str) -> None:
    """Replace the one line of ``folder/exercise.py`` that is ``old`` (indentation kept) by ``new``."""
    path = folder / "exercise.py"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == old]
    assert len(hits) == 1, f"{old!r} should be exactly one line of {path}, found {len(hits)}"
    line = lines[hits[0]]
    lines[hits[0]] = line[: len(line) - len(line.lstrip())] + new + "\n"
    path.write_text("".join(lines), encoding="utf-8")


def test_every_lesson_has_an_exercise_or_says_why_not():
    assert set(EXERCISES) | set(NO_EXERCISE) == set(LESSONS)
    assert not set(EXERCISES) & set(NO_EXERCISE)


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_mistake_is_clearly_away_from_the_correct_value_on_every_measure(name):
    # The check's verdict relies on it: a value within the tolerance of the correct one is then far from the mistake.
    exercise = get_exercise(name)
    correct, mistake = exercise.measure(exercise.correct, 0), exercise.measure(exercise.mistake, 0)
    for measure, c, w in zip(exercise.measures, correct, mistake, strict=True):
        assert abs(c - w) > 3 * measure.tolerance, (measure.en, c, w)


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_untouched_exercise_is_the_lessons_mistake_and_not_fixed(tmp_path, name):
    folder = write_exercise(name, tmp_path / name)
    check = check_exercise(folder)
    assert not check.fixed
    assert check.message.startswith("Not fixed yet")
    rows = check.message.split("\n\n", 1)[1].splitlines()
    assert len(rows) == 2 + len(check.evidence) and all(row.count("|") == 6 for row in rows)  # 5 columns each
    exercise = get_exercise(name)
    assert len(check.evidence) == len(exercise.measures)
    for (label, yours, correct, mistake), measure in zip(check.evidence, exercise.measures):
        assert label == measure.en
        assert abs(yours - mistake) <= measure.tolerance, label  # the file holds the lesson's own mistake
        assert abs(yours - correct) > measure.tolerance, label


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_exercise_runs_on_its_own_and_shows_the_symptom(tmp_path, capsys, name):
    folder = write_exercise(name, tmp_path)
    runpy.run_path(str(folder / "exercise.py"), run_name="__main__")  # as `python exercise.py` runs it
    assert capsys.readouterr().out.strip()


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_one_line_fix_is_reported_fixed(tmp_path, name):
    folder = write_exercise(name, tmp_path / name)
    _edit(folder, *get_exercise(name).fix)
    check = check_exercise(folder)
    assert check.fixed, check.message
    assert check.message.startswith("Fixed")
    for measure, (_, yours, correct, _) in zip(get_exercise(name).measures, check.evidence):
        assert abs(yours - correct) <= measure.tolerance


def test_an_edit_that_keeps_the_files_size_and_time_is_measured(tmp_path, monkeypatch):
    # Swapping sin and cos back keeps the file's size, and an edit can land within the second of the last check: an
    # import through a bytecode cache (keyed on both) would measure the old code again.
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    folder = write_exercise("position", tmp_path)
    path = folder / "exercise.py"
    before = path.stat()
    assert not check_exercise(folder).fixed
    _edit(folder, *get_exercise("position").fix)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    assert check_exercise(folder).fixed
    assert not (folder / "__pycache__").exists()  # the learner's folder holds only what was written and edited


def test_another_correct_fix_passes_too(tmp_path):
    # The core's own initialisation (Xavier), not the FIX line's N(0, 0.02²): the tolerances admit both.
    folder = write_exercise("init", tmp_path)
    _edit(folder, get_exercise("init").fix[0], "nn.init.xavier_uniform_(module.qkv.weight)")
    assert check_exercise(folder).fixed


def test_a_half_fix_is_not_fixed(tmp_path):
    # The scale applied twice (1/d_k): the output is off the reference even though the softmax is no longer saturated.
    folder = write_exercise("scale", tmp_path)
    _edit(folder, get_exercise("scale").fix[0], "scores = q @ k.transpose(-2, -1) / q.shape[-1]")
    check = check_exercise(folder)
    assert not check.fixed
    assert "largest difference from the core reference's output" in check.message.splitlines()[0]


def test_a_syntax_error_names_the_file_and_the_line(tmp_path):
    folder = write_exercise("mask", tmp_path)
    _edit(folder, get_exercise("mask").fix[0], "scores = scores.masked_fill(~mask, float('-inf')")
    with pytest.raises(ValueError, match=r"exercise\.py, line \d+: syntax error") as error:
        check_exercise(folder)
    assert "\n" not in str(error.value)


def test_a_missing_class_names_the_file_and_the_class(tmp_path):
    folder = write_exercise("scale", tmp_path)
    path = folder / "exercise.py"
    path.write_text(path.read_text(encoding="utf-8").replace("class Attention(", "class MyAttention("),
                    encoding="utf-8")
    with pytest.raises(ValueError, match=r"exercise\.py defines no 'Attention'") as error:
        check_exercise(folder)
    assert "\n" not in str(error.value)


def test_code_that_fails_inside_the_measurement_names_the_file(tmp_path):
    folder = write_exercise("position", tmp_path)
    _edit(folder, get_exercise("position").fix[0], "table = table[:, :-1]")  # one column short
    with pytest.raises(ValueError, match=r"exercise\.py: Sinusoids failed in the measurement: RuntimeError") as error:
        check_exercise(folder)
    assert "\n" not in str(error.value)


def test_code_that_fails_at_import_names_the_file(tmp_path):
    folder = write_exercise("init", tmp_path)
    path = folder / "exercise.py"
    path.write_text("import torch\nraise RuntimeError('first line\\nsecond line')\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"exercise\.py failed to import: RuntimeError: first line$"):
        check_exercise(folder)


def test_unknown_lessons_and_lessons_without_an_exercise_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown lesson 'sclae'. Did you mean 'scale'"):
        write_exercise("sclae", tmp_path)
    with pytest.raises(ValueError, match="lesson 'params' has no exercise: .* Lessons with an exercise: causal-mask"):
        write_exercise("params", tmp_path)
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        write_exercise("scale", tmp_path, "fr")


def test_a_folder_that_is_not_an_exercise_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist; write one with zoo lab NAME --exercise"):
        check_exercise(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"exercise\.json is missing"):
        check_exercise(tmp_path)


def test_writing_again_keeps_the_learners_edits(tmp_path):
    folder = write_exercise("scale", tmp_path)
    assert write_exercise("scale", tmp_path) == folder  # the same file: written again
    _edit(folder, *get_exercise("scale").fix)
    with pytest.raises(ValueError, match="exists and holds other code"):
        write_exercise("scale", tmp_path)


def test_the_chinese_exercise_and_check_use_the_glossarys_terms(tmp_path):
    folder = write_exercise("causal-mask", tmp_path, "zh")
    markdown = (folder / "EXERCISE.md").read_text(encoding="utf-8")
    assert markdown.startswith("# 练习：因果掩码填 0") and "zoo lab --check" in markdown
    check = check_exercise(folder)
    assert check.message.startswith("还没修好")
    assert "语言模型在 t 及之前位置输出的相对变化" in check.message  # the measures named in Chinese too
    texts = [exercise_markdown(name, folder, "zh") for name in EXERCISES] + [*_WORDS["zh"].values(), check.message]
    for text in texts:
        assert check_terms(text) == [], text
