"""A fourth task, written in the tests (tests/tasks/reverse_task.py), runs every generic command: the commands ask
the task (Task.delta_shape, paired_metrics, doctor_batch, target_entropy, ...) and name none."""

from __future__ import annotations

import json

from tasks.cli.main import main
from tasks.engine.registry import TASKS
from tests.plugin_helpers import isolated_registry
from tests.tasks.reverse_task import register_task


def test_a_fourth_task_runs_diff_train_evaluate_compare_and_doctor(tmp_path, monkeypatch, capsys):
    with isolated_registry():
        register_task(TASKS, monkeypatch)
        assert main(["diff", "rope", "--task", "reverse"]) == 0
        diff = capsys.readouterr().out
        assert "position" in diff and "one sequence of 6 tokens" in diff

        runs = {}
        for variant in ("classic", "rope"):
            runs[variant] = tmp_path / variant
            assert main(["train", "reverse", "--variant", variant, "--epochs", "1", "--progress", "false",
                         "--out", str(runs[variant])]) == 0
            info = json.loads((runs[variant] / "run.json").read_text())
            assert info["task"] == "reverse" and (runs[variant] / "report.md").is_file()
        assert "## What changed" in (runs["rope"] / "report.md").read_text()  # the delta analysis at its shape

        assert main(["evaluate", str(runs["rope"]), "--out", str(tmp_path / "eval")]) == 0
        trained = json.loads((runs["rope"] / "metrics.json").read_text())["final"]
        assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["final"] == trained

        assert main(["compare", "reverse", "--runs", str(runs["classic"]), str(runs["rope"]),
                     "--out", str(tmp_path / "compare")]) == 0
        results = json.loads((tmp_path / "compare" / "results.json").read_text())
        assert "exact" in json.dumps(results) and (tmp_path / "compare" / "report.md").is_file()

        code = main(["doctor", str(runs["rope"]), "--out", str(tmp_path / "doctor"), "--no-figures"])
        assert code in (0, 1)  # 1: a finding at --fail-on error; either way the examination ran and was written
        assert (tmp_path / "doctor" / "doctor.md").is_file()
