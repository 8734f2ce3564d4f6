"""The lab's frame: the lesson index, the command line, what a lesson run writes, the shared toolkit."""

import json
import sys
import types

import pytest
import torch

from tasks.cli.main import main
from tasks.i18n.article import SECTIONS, section
from tasks.i18n.glossary import check_terms
from tasks.lab import LESSONS, LabSettings, Lesson, LessonResult, get_lesson, run_lesson
from tasks.lab.lesson import lesson_markdown
from tasks.lab.toolkit import bleu, entropy, noam, saturation, small_transformer, train, translated, translation_data
from tests.tasks.lab.zh_checks import CJK

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


def _fake_lesson(monkeypatch, verdict_zh: tuple[str, ...] = ("错误导致了 X", "应当做 Y")) -> None:
    """Register lesson "fake", whose run plants a result (and a plot) without training anything."""
    module = types.ModuleType("tasks.lab._fake")

    def run(settings: LabSettings) -> LessonResult:
        (settings.out / "plot.png").write_bytes(b"png")
        return LessonResult(("the mistake did X", "do Y"), True, {"ratio": 2.5}, "## Table\n\n| a |\n|---|\n| 1 |",
                            ["plot.png"], verdict_zh, "## 表\n\n| a |\n|---|\n| 1 |")

    module.run = run
    monkeypatch.setitem(sys.modules, "tasks.lab._fake", module)
    monkeypatch.setitem(LESSONS, "fake", Lesson("fake", "A fake", "attention", "Does it write?", "tasks.lab._fake",
                                                ("5.2", "7.2"), "假的实验课", "它会写文件吗？"))


def test_run_lesson_writes_markdown_and_json(tmp_path, monkeypatch):
    _fake_lesson(monkeypatch)
    result = run_lesson("fake", LabSettings(out=tmp_path / "out", quick=True))
    text = (tmp_path / "out" / "lesson.md").read_text()
    assert "> the mistake did X" in text and "![plot.png](plot.png)" in text and "zoo lab fake --quick" in text
    record = json.loads((tmp_path / "out" / "result.json").read_text())
    assert record["findings"] == {"ratio": 2.5} and record["holds"] is True and result.holds
    assert record["verdict_zh"] == ["错误导致了 X", "应当做 Y"] and "body_zh" not in record and "body" not in record
    zh = (tmp_path / "out" / "lesson.zh.md").read_text()
    assert zh.startswith("# 实验课：假的实验课\n") and "> 应当做 Y  " in zh and "## 表" in zh and "## Table" not in zh
    assert "![plot.png](plot.png)" in zh and "`zoo lab fake --quick --seed 0`" in zh
    # the article's sections by number and title, from the outline
    assert f"§5.2 {section('5.2').zh}" in zh and f"§7.2 {section('7.2').zh}" in zh
    run_lesson("fake", LabSettings(out=tmp_path / "scaled", quick=True, scale=0.05))  # as the tests and notebooks run
    assert "`zoo lab fake --quick --scale 0.05 --seed 0`" in (tmp_path / "scaled" / "lesson.md").read_text()


def test_lesson_markdown_in_english_is_the_old_writers_byte_for_byte():
    """The English page is what run_lesson wrote before the Chinese one existed (this text is its output on the
    same planted result, seed 3, 0 s), so existing lesson.md files and links do not change."""
    lesson = Lesson("fake", "A fake", "attention", "Does it write?", "tasks.lab._fake", ("5.2",), "假的", "写吗？")
    result = LessonResult(("the mistake did X", "do Y"), False, {"ratio": 2.5}, "## Table\n\n| a |\n|---|\n| 1 |",
                          ["plot.png", "b.png"], ("甲", "乙"), "## 表")
    old = ("# Lesson: A fake\n\n*Part of the architecture:* `attention`. Does it write?\n\n## Verdict\n\n"
           "> the mistake did X  \n> do Y  \n\nExpected direction **does not hold** in this run.\n\n## Table\n\n"
           "| a |\n|---|\n| 1 |\n\n![plot.png](plot.png)\n![b.png](b.png)\n\n"
           "Reproduce: `zoo lab fake --quick --seed 3` (0 s here).\n")
    assert lesson_markdown(lesson, result, "en", "zoo lab fake --quick --seed 3", 0.2) == old
    zh = lesson_markdown(lesson, result, "zh", "zoo lab fake --quick --seed 3", 0.2)
    assert "**不成立**" in zh and "> 甲  \n> 乙  " in zh and "## 表" in zh and "（本机用时 0 秒）" in zh
    with pytest.raises(ValueError, match="'fr'"):
        lesson_markdown(lesson, result, "fr", "zoo lab fake", 0.2)


def test_a_lesson_without_its_chinese_verdict_is_refused(tmp_path, monkeypatch):
    _fake_lesson(monkeypatch, verdict_zh=())
    with pytest.raises(ValueError, match="'fake' must give a two-line verdict_zh, got 0 lines"):
        run_lesson("fake", LabSettings(out=tmp_path / "out", quick=True))


def test_every_lesson_names_article_sections_and_has_chinese_title_and_question():
    numbers = {s.number for s in SECTIONS}
    for lesson in LESSONS.values():
        assert lesson.sections and set(lesson.sections) <= numbers, (lesson.name, lesson.sections)
        assert CJK.search(lesson.title_zh) and CJK.search(lesson.question_zh), lesson.name
        assert check_terms(lesson.title_zh + lesson.question_zh) == [], lesson.name
    assert LESSONS["scale"].sections == ("2.3",) and LESSONS["causal-mask"].sections == ("4.2", "7.2")


def test_translated_renames_headings_and_text_cells_and_keeps_numbers():
    rows = [{"mask fill": "0", "loss": 1.5, "note": "stuck"}]
    assert translated(rows, {"mask fill": "掩码填充值", "stuck": "停滞"}) == [
        {"掩码填充值": "0", "loss": 1.5, "note": "停滞"}]


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
