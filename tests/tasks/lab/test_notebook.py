"""Every lesson as a Jupyter notebook: generated from the lesson's own code, valid, in both languages, and, executed
headless in a fresh kernel of this interpreter, printing the same findings as ``zoo lab NAME --quick`` at one scale.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tasks.i18n.glossary import check_terms
from tasks.lab.lesson import LESSONS
from tasks.lab.notebook import MISTAKE_CODE, execute_notebook, findings_table, mistake_source, write_notebook

ROOT = Path(__file__).resolve().parents[3]
CJK = re.compile(r"[\u4e00-\u9fff]")
# --quick times this: every lesson's notebook and `zoo lab` run at 1 % of --quick's budgets (at least 2 steps), so
# the fifteen lessons run twice in a few minutes on 2 cores; the lessons' own tests check their outcomes at larger
# scales, this one that the notebook and the command line compute the same numbers. ZOO_NOTEBOOK_SCALE=1 runs them
# at the full --quick budgets: `ZOO_NOTEBOOK_SCALE=1 pytest tests/tasks/lab/test_notebook.py`.
SCALE = float(os.environ.get("ZOO_NOTEBOOK_SCALE", "0.01"))


def _cells(path: Path, kind: str) -> list[str]:
    return [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == kind]


def test_every_lesson_names_its_mistake_code():
    assert set(MISTAKE_CODE) == set(LESSONS)
    for name in LESSONS:
        source = mistake_source(name)
        assert re.search(r"^(def|class) ", source, re.M), name


def test_notebook_is_valid_and_written_from_the_lessons_code(tmp_path):
    from tasks.lab.mask import ZeroFilledMaskAttention, use_zero_fill

    path = write_notebook("mask", tmp_path / "mask.ipynb", quick=True, seed=3, scale=0.5)
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata.kernelspec.name == "python3"
    text = "\n".join(cell.source for cell in notebook.cells)
    assert LESSONS["mask"].title in text and LESSONS["mask"].question in text
    # the mistake is the module's source as it is now, not a copy that could drift
    assert inspect.getsource(ZeroFilledMaskAttention).strip() in text
    assert inspect.getsource(use_zero_fill).strip() in text
    assert "`tasks/lab/mask.py`" in text and (ROOT / "tasks" / "lab" / "mask.py").is_file()
    parameters = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1
    assert {"quick = True", "seed = 3", "scale = 0.5", "threads = 1", "lang = 'en'"} <= set(
        parameters[0].source.splitlines())
    assert "run_lesson('mask', settings)" in text
    assert notebook.cells[-1].cell_type == "code" and "json.dumps(result.findings" in notebook.cells[-1].source


def test_both_languages_share_their_code_and_name_the_article_sections(tmp_path):
    from tasks.i18n.article import section

    for name, lesson in LESSONS.items():
        en = write_notebook(name, tmp_path / "en" / f"{name}.ipynb", "en")
        zh = write_notebook(name, tmp_path / "zh" / f"{name}.ipynb", "zh")
        code_en, code_zh = _cells(en, "code"), _cells(zh, "code")
        assert [c.replace("lang = 'en'", "lang = 'zh'") for c in code_en] == code_zh, name
        head_en, head_zh = _cells(en, "markdown")[0], _cells(zh, "markdown")[0]
        assert lesson.sections, name
        for number in lesson.sections:
            assert f"§{number} {section(number).en}" in head_en and f"§{number} {section(number).zh}" in head_zh


def test_chinese_notebooks_are_chinese_and_use_the_glossary(tmp_path):
    for name, lesson in LESSONS.items():
        path = write_notebook(name, tmp_path / f"{name}.ipynb", "zh")
        markdown = _cells(path, "markdown")
        assert lesson.title_zh in markdown[0] and lesson.question_zh in markdown[0]
        # every markdown cell carries Chinese prose (the mistake's cell: its note; its code stays as written)
        assert all(CJK.search(cell) for cell in markdown), name
        assert check_terms("\n".join(markdown)) == [], name


def test_findings_table_flattens_and_labels_in_both_languages():
    findings = {"steps": 4, "arm": {"loss": 1.25, "curve": [1.0, 0.5, 0.25]}}
    assert findings_table(findings).splitlines() == [
        "| finding | value |", "|---|---|", "| steps | 4 |", "| arm.loss | 1.25 |", "| arm.curve | [3 values] |"]
    assert findings_table(findings, "zh").splitlines()[0] == "| 测量项 | 数值 |"


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"name": "scael"}, ValueError, "Did you mean 'scale'"),
    ({"lang": "fr"}, ValueError, "unknown language 'fr'.*en, zh"),
    ({"out": "mask.txt"}, ValueError, r"ends in \.ipynb.*mask\.ipynb"),
    ({"scale": 0.0}, ValueError, "scale must be > 0"),
    ({"seed": -1}, ValueError, "seed must be >= 0"),
    ({"quick": "yes"}, TypeError, "quick must be a bool"),
])
def test_bad_arguments_are_named(tmp_path, kwargs, error, match):
    args = {"name": "mask", "out": "mask.ipynb", **kwargs}
    args["out"] = tmp_path / args["out"]
    with pytest.raises(error, match=match):
        write_notebook(**args)
    assert not list(tmp_path.iterdir())  # nothing half-written


# --- executed, against the command line ----------------------------------------------------------------------------

def _without_timings(value):
    """``value`` without its wall-clock measurements (swin-windows times its attention layers: ``seconds``), the
    one part of a lesson's findings that differs between two processes by design."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _canonical(findings) -> str:
    # JSON text compares NaN (a diverged run's loss) equal to itself, and tuples equal to lists
    return json.dumps(_without_timings(findings), sort_keys=True)


# The kernels and command lines of these tests may cache bytecode even where PYTHONDONTWRITEBYTECODE is set (CI sets
# it, and installs with --no-compile): each of the 30 processes would otherwise compile torch's modules again, ~10 s.
# An empty value turns the variable off; what the processes compute is the same.
WRITE_BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}


def start_command_line(name: str, out: Path) -> subprocess.Popen:
    """`zoo lab NAME --quick --scale SCALE --seed 0` in a subprocess, run beside the notebook (one thread each:
    together they fill two cores)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tasks.cli.main", "lab", name, "--quick", "--scale", str(SCALE), "--seed", "0",
         "--quiet", "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **WRITE_BYTECODE})


def execute(path: Path) -> nbformat.NotebookNode:
    """``path`` run in a fresh kernel of this interpreter, as ``zoo lab --notebook --execute`` runs it."""
    return execute_notebook(path, timeout=600, env=WRITE_BYTECODE)


def _printed(cell) -> str:
    return "".join(output.text for output in cell.outputs if output.output_type == "stream" and output.name == "stdout")


def _images(notebook) -> int:
    return sum("image/png" in output.get("data", {}) for cell in notebook.cells for output in cell.get("outputs", []))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LESSONS))
def test_notebook_prints_the_findings_of_zoo_lab(tmp_path, name):
    path = write_notebook(name, tmp_path / f"{name}.ipynb", "en", quick=True, seed=0, scale=SCALE)
    command_line = start_command_line(name, tmp_path / "cli")
    try:
        notebook = execute(path)
        log, _ = command_line.communicate(timeout=600)
    finally:
        if command_line.poll() is None:
            command_line.kill()
            command_line.communicate()
    assert command_line.returncode == 0, log[-3000:]
    printed = json.loads(_printed(notebook.cells[-1]))
    record = json.loads((tmp_path / "cli" / "result.json").read_text())
    assert _canonical(printed) == _canonical(record["findings"])  # exact: one thread each, same seed and budgets
    assert _images(notebook) == len(record["figures"]) >= 1  # the plots shown are the plots the lesson saved
    assert (tmp_path / "runs" / "lab" / name / "result.json").is_file()


@pytest.mark.slow
def test_chinese_notebook_runs_and_shows_the_chinese_verdict(tmp_path):
    path = write_notebook("params", tmp_path / "params.ipynb", "zh", scale=SCALE)
    notebook = execute(path)
    record = json.loads((tmp_path / "runs" / "lab" / "params" / "result.json").read_text())
    shown = "".join(output.get("data", {}).get("text/markdown", "") for cell in notebook.cells
                    for output in cell.get("outputs", []))
    assert record["verdict_zh"][0] in shown and record["verdict"][0] not in shown
    assert "| 测量项 | 数值 |" in shown


@pytest.mark.slow
def test_execute_runs_a_kernel_of_this_interpreter_and_saves_the_outputs(tmp_path):
    """The kernelspec on Jupyter's path may be another Python's: execute_notebook starts this one, in the notebook's
    folder, and writes the outputs into the file; a missing notebook is named."""
    path = tmp_path / "probe.ipynb"
    path.write_text(nbformat.writes(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import os, sys\nprint(sys.executable)\nprint(os.getcwd())")])))
    execute(path)
    printed = _printed(nbformat.read(path, as_version=4).cells[0]).split("\n")
    assert printed[:2] == [sys.executable, str(tmp_path.resolve())]
    with pytest.raises(FileNotFoundError, match="no notebook at .*missing.ipynb: write one first"):
        execute_notebook(tmp_path / "missing.ipynb")


@pytest.mark.slow
def test_zoo_lab_notebook_execute_writes_the_run_beside_the_notebook(tmp_path, capsys):
    from tasks.cli.main import main

    path = tmp_path / "nb" / "params.ipynb"
    assert main(["lab", "params", "--notebook", str(path), "--execute", "--quick", "--scale", str(SCALE)]) == 0
    record = json.loads((tmp_path / "nb" / "runs" / "lab" / "params" / "result.json").read_text())
    assert json.loads(_printed(nbformat.read(path, as_version=4).cells[-1])) == record["findings"]
    assert main(["lab", "params", "--execute"]) == 2
    assert "--execute runs the notebook --notebook writes" in capsys.readouterr().err
