"""The lab's frame: the lesson index, the command line, what a lesson run writes, the shared toolkit."""

import json
import sys
import types

import pytest
import torch

from tasks.cli.main import main
from tasks.lab import LESSONS, LabSettings, Lesson, LessonResult, get_lesson, run_lesson
from tasks.lab.toolkit import bleu, entropy, noam, saturation, small_transformer, train, translation_data

EXPECTED = ("scale", "mask", "norm", "warmup", "position", "temperature", "init", "params", "small-data",
            "swin-windows", "moe-routing", "exposure-bias", "extrapolation", "sampling", "causal-mask")


def test_index_lists_the_lessons(capsys):
    assert tuple(LESSONS) == EXPECTED
    assert main(["lab", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in EXPECTED)


def test_unknown_lesson_gets_a_suggestion(capsys):
    with pytest.raises(ValueError, match="Did you mean 'scale'"):
        get_lesson("scael")
    assert main(["lab", "scael", "--quick"]) == 2
    assert "scale" in capsys.readouterr().err


def test_run_lesson_writes_markdown_and_json(tmp_path, monkeypatch):
    module = types.ModuleType("tasks.lab._fake")

    def run(settings: LabSettings) -> LessonResult:
        (settings.out / "plot.png").write_bytes(b"png")
        return LessonResult(("the mistake did X", "do Y"), True, {"ratio": 2.5}, "## Table\n\n| a |\n|---|\n| 1 |",
                            ["plot.png"])

    module.run = run
    monkeypatch.setitem(sys.modules, "tasks.lab._fake", module)
    monkeypatch.setitem(LESSONS, "fake", Lesson("fake", "A fake", "attention", "Does it write?", "tasks.lab._fake"))
    result = run_lesson("fake", LabSettings(out=tmp_path / "out", quick=True))
    text = (tmp_path / "out" / "lesson.md").read_text()
    assert "> the mistake did X" in text and "![plot.png](plot.png)" in text and "zoo lab fake --quick" in text
    record = json.loads((tmp_path / "out" / "result.json").read_text())
    assert record["findings"] == {"ratio": 2.5} and record["holds"] is True and result.holds


def test_budget_shrinks_with_quick_and_scale(tmp_path):
    assert LabSettings(tmp_path).steps(1000, 100) == 1000
    assert LabSettings(tmp_path, quick=True).steps(1000, 100) == 100
    assert LabSettings(tmp_path, quick=True, scale=0.1).steps(1000, 100) == 10


def test_noam_peaks_at_the_end_of_warmup():
    rate = noam(64, 10, 1e-3)
    values = [rate(s) for s in range(40)]
    assert max(values) == pytest.approx(1e-3) and values.index(max(values)) == 9
    assert values[0] == pytest.approx(1e-4)


def test_toolkit_training_lowers_the_loss_and_decodes():
    data = translation_data(300)
    model = small_transformer(data)
    log = train(model, data, 30, lr=3e-3, batch_size=16, progress=False)
    assert len(log.loss) == 30 and not log.diverged
    assert log.final(5) < log.loss[0]
    scores = bleu(model, data, "test", limit=8)
    assert 0.0 <= scores["bleu"] <= 100.0


def test_train_lm_runs_the_tasks_schedule_across_epochs():
    from core.language_model import build_language_model
    from tasks.lab.sampling import lm_task
    from tasks.lab.toolkit import train_lm

    task = lm_task(64, 0, batch_size=8)
    task.ids["train"] = task.ids["train"][:2_000]  # 30 or 31 windows: 4 batches an epoch, 6 steps start a second
    assert len(task.train_batches(0)) == 4
    torch.manual_seed(0)
    model = build_language_model("tiny", vocab_size=task.tokenizer.vocab_size, max_len=64, dropout=0.0)
    epochs, batches = [], task.train_batches
    task.train_batches = lambda epoch: epochs.append(epoch) or batches(epoch)
    before = model.head.weight.detach().clone()
    log = train_lm(model, task, 6, progress=False)
    assert epochs == [0, 1]  # the second epoch's batches (another offset, another order) after the first's four
    assert len(log.loss) == len(log.lr) == 6 and not log.diverged and not model.training
    assert log.lr[:3] == pytest.approx([3e-3 * s / 30 for s in (1, 2, 3)])  # the task's warm-up (30 steps)
    assert not torch.equal(model.head.weight, before)


def test_attention_statistics_on_known_rows():
    uniform = torch.full((1, 1, 2, 4), 0.25)
    onehot = torch.zeros(1, 1, 2, 4)
    onehot[..., 0] = 1.0
    assert entropy(uniform) == pytest.approx(torch.log(torch.tensor(4.0)).item())
    assert entropy(onehot) == pytest.approx(0.0, abs=1e-6)
    assert saturation(onehot) == 1.0 and saturation(uniform) == 0.0
    valid = torch.tensor([True, False]).view(1, 1, 2)
    mixed = torch.cat([onehot[..., :1, :], uniform[..., :1, :]], dim=2)
    assert saturation(mixed, valid=valid) == 1.0
