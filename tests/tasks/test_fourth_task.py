"""A fourth task, written in the tests (tests/tasks/reverse_task.py) as a ``--user-dir`` plugin, registers itself and
runs every generic command: the commands ask the task (Task.delta_shape, paired_metrics, predict_inputs,
doctor_batch, target_entropy, ...) and name none, and no generic module lists the tasks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tasks.cli.main import main
from tasks.engine.registry import register_task, task_class, task_names, tasks_with
from tasks.engine.task import Task
from tests.plugin_helpers import REPO, isolated_registry

REVERSE = Path(__file__).with_name("reverse_task.py")


def _plugin_folder(tmp_path: Path) -> str:
    """A --user-dir folder holding a copy of the reverse task, as a user would keep their own task."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    shutil.copy(REVERSE, folder / "reverse_task.py")
    return str(folder)


def test_a_fourth_task_from_a_user_dir_runs_diff_train_evaluate_predict_compare_and_doctor(tmp_path, capsys):
    plugins = _plugin_folder(tmp_path)

    def zoo(*args: str) -> int:
        return main(["--user-dir", plugins, *args])

    with isolated_registry():
        assert zoo("diff", "rope", "--task", "reverse") == 0
        diff = capsys.readouterr().out
        assert "position" in diff and "one sequence of 6 tokens" in diff
        assert "reverse" in task_names() and task_class("reverse").__module__ == "reverse_task"

        runs = {}
        for variant in ("classic", "rope"):
            runs[variant] = tmp_path / variant
            assert zoo("train", "reverse", "--variant", variant, "--epochs", "1", "--progress", "false",
                       "--out", str(runs[variant])) == 0
            info = json.loads((runs[variant] / "run.json").read_text())
            assert info["task"] == "reverse" and (runs[variant] / "report.md").is_file()
        assert "## What changed" in (runs["rope"] / "report.md").read_text()  # the delta analysis at its shape

        assert zoo("evaluate", str(runs["rope"]), "--out", str(tmp_path / "eval")) == 0
        trained = json.loads((runs["rope"] / "metrics.json").read_text())["final"]
        assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["final"] == trained

        # zoo predict hands over to ReverseTask.predict_inputs: the sources of the evaluated test records (their
        # references reversed) come back as the records' predictions
        records = [json.loads(line) for line in (tmp_path / "eval" / "predictions" / "test.jsonl").read_text()
                   .splitlines()[:4]]
        inputs = tmp_path / "inputs.txt"
        inputs.write_text("".join(" ".join(map(str, r["reference"][::-1])) + "\n" for r in records))
        capsys.readouterr()
        assert zoo("predict", str(runs["rope"]), str(inputs), "--out", str(tmp_path / "reversed.txt"),
                   "--quiet") == 0
        assert f"reversed 4 sequences into {tmp_path / 'reversed.txt'}" in capsys.readouterr().out
        predicted = [[int(t) for t in line.split()] for line in (tmp_path / "reversed.txt").read_text().splitlines()]
        assert predicted == [r["prediction"] for r in records]
        assert zoo("predict", str(runs["rope"]), str(inputs), "--beam-size", "2") == 2  # a translation option
        assert "--beam-size is an option of translation runs; " in capsys.readouterr().err

        assert zoo("compare", "reverse", "--runs", str(runs["classic"]), str(runs["rope"]),
                   "--out", str(tmp_path / "compare")) == 0
        results = json.loads((tmp_path / "compare" / "results.json").read_text())
        assert "exact" in json.dumps(results) and (tmp_path / "compare" / "report.md").is_file()

        code = zoo("doctor", str(runs["rope"]), "--out", str(tmp_path / "doctor"), "--no-figures")
        assert code in (0, 1)  # 1: a finding at --fail-on error; either way the examination ran and was written
        assert (tmp_path / "doctor" / "doctor.md").is_file()

        capsys.readouterr()
        assert zoo("cv", "reverse") == 2  # no Task.cross_validate: zoo cv does not offer it
        assert "invalid choice: 'reverse' (choose from 'medseg')" in capsys.readouterr().err
    assert "reverse" not in task_names()  # the plugin's task left with it


def test_the_built_in_tasks_register_themselves_and_declare_their_hooks(tmp_path, capsys):
    assert set(task_names()) >= {"translation", "cifar", "medseg"}
    assert tasks_with("cross_validate") == ["medseg"]
    assert set(tasks_with("predict_inputs")) >= {"translation", "cifar", "medseg"}
    with pytest.raises(ValueError, match="task 'cifar' has no cross-validation: its runner does not override "
                                         r"Task.cross_validate \(`zoo cv --help` lists the tasks that do\)"):
        task_class("cifar").cross_validate(task_class("cifar").config_class())
    sweep = tmp_path / "cv.toml"
    sweep.write_text('kind = "cv"\ntask = "cifar"\n')
    assert main(["sweep", str(sweep)]) == 2
    assert capsys.readouterr().err.strip() == (f'zoo sweep: error: {sweep}: kind = "cv" needs a task with '
                                               "cross-validation; 'cifar' has none (the tasks that have it: medseg)")
    with pytest.raises(ValueError, match="unknown task 'medsge'.*medseg"):
        task_class("medsge")


def test_register_task_refuses_what_is_not_a_task_and_a_taken_name():
    with pytest.raises(TypeError, match="register_task takes a subclass of tasks.engine.task.Task, got <class 'int'>"):
        register_task(int)

    class Nameless(Task):
        pass

    with pytest.raises(ValueError, match="task class .*Nameless has name ''; set the class attribute `name`"):
        register_task(Nameless)

    class Impostor(Task):
        name = "cifar"

    with pytest.raises(ValueError, match=r"task 'cifar' is already registered \(by tasks.cifar.task.CifarTask\); "
                                         "give the task a new name"):
        register_task(Impostor)
    assert task_class("cifar").__name__ == "CifarTask"


def test_no_generic_module_names_the_tasks():
    # the registry is filled by the tasks; the commands find prediction and cross-validation through Task hooks
    import tasks.engine.registry as registry

    assert not hasattr(registry, "TASKS")
    for path in sorted((REPO / "tasks" / "cli").glob("*.py")) + [REPO / "tasks" / "engine" / "registry.py"]:
        text = path.read_text()
        assert 'import_module(f"tasks.' not in text, path
