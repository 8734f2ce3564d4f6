"""The lm task end to end on a tiny model: batches from (seed, epoch), a short training run that `zoo evaluate`
re-scores to the same numbers and `zoo predict` continues reproducibly, bad input refused before anything is
written, and the `zoo predict` / `zoo evaluate` options the task adds through its add_arguments hook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tasks.cli.main import main
from tasks.engine.distributed import DistInfo
from tasks.engine.trainer import Trainer
from tasks.lm.corpus import embedded_corpus
from tasks.lm.task import LMConfig, LMTask
from tests.preemption import preempted_after

TINY = ["--preset", "tiny", "--num-threads", "1", "--progress", "false", "--sample-tokens", "20"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """30,000 characters of the embedded training plays, as one text file (split 0.9 / 0.05 / 0.05)."""
    path = tmp_path_factory.mktemp("lm") / "plays.txt"
    path.write_text(embedded_corpus()["train"][:30_000])
    return path


def _task(**fields) -> LMTask:
    task = LMTask(LMConfig(**fields), torch.device("cpu"), DistInfo())
    task.setup()
    return task


def test_batches_are_a_function_of_seed_and_epoch(corpus):
    """Another runner (a resumed process) cuts and orders every epoch exactly as the first did; epochs differ."""
    one, two = _task(data=str(corpus), seed=3), _task(data=str(corpus), seed=3)
    for epoch in range(3):
        assert one.train_batches(epoch) == two.train_batches(epoch)
        rows = one.train_batches(epoch)[0]
        assert torch.equal(one.windows(rows), two.windows(rows))
    assert one.train_batches(0) != one.train_batches(1)
    assert one.train_batches(0) != _task(data=str(corpus), seed=4).train_batches(0)
    # windows of context + 1 tokens from the epoch's offset, every one inside the text, none twice
    c, n = one.config.context, len(one.ids["train"])
    offsets = {one.window_offset(e) for e in range(8)}
    assert len(offsets) > 1 and all(0 <= o < c for o in offsets)
    rows = [row for batch in one.train_batches(1) for row in batch]
    assert len({i for i, _ in rows}) == len(rows) == (n - 1 - one.window_offset(1)) // c
    batch = one.windows(one.train_batches(1)[0])
    assert batch.shape == (one.config.batch_size, c + 1)


def test_resume_mid_epoch_equals_the_uninterrupted_run(tmp_path):
    """Pre-empted in the middle of epoch 2 and resumed, a run ends with the same weights and losses."""
    text = tmp_path / "short.txt"
    text.write_text(embedded_corpus()["train"][:12_000])  # 14 steps per epoch

    def run(name: str, **kw):
        config = LMConfig(data=str(text), out=str(tmp_path / name), preset="tiny", epochs=2, warmup=5,
                          progress=False, sample_tokens=0, **kw)
        trainer = Trainer(LMTask, config)
        return trainer, trainer.fit()

    full, _ = run("full")
    with preempted_after(full.history[0]["step"] + 5):
        run("split")
    resumed, _ = run("split", resume=True)
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    def measured(history):
        return [(r["train_loss"], r["loss"]) for r in history]

    assert measured(full.history) == measured(resumed.history)


def test_evaluation_scores_every_token_once(corpus):
    task = _task(data=str(corpus), context=16)
    windows = task.eval_windows("valid")
    assert sum(length for _, length in windows) == len(task.ids["valid"]) - 1
    assert all(s + length < len(task.ids["valid"]) for s, length in windows)


def test_train_evaluate_predict_a_tiny_run(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    assert main(["train", "lm", "--data", str(corpus), "--epochs", "1", "--out", str(run), *TINY]) == 0
    final = json.loads((run / "metrics.json").read_text())["final"]["test"]
    assert final["loss"] < 4.0 and final["bits_per_char"] == pytest.approx(final["loss"] / 0.6931471805599453,
                                                                          rel=0.01)
    assert (run / "tokenizer.json").is_file() and "### Generated sample" in (run / "report.md").read_text()

    assert main(["evaluate", str(run), "--out", str(tmp_path / "eval"), "--lengths", "16,32", "--stride", "8"]) == 0
    again = json.loads((tmp_path / "eval" / "metrics.json").read_text())["final"]["test"]
    assert again["loss"] == final["loss"] and again["bits_per_char"] == final["bits_per_char"]  # the run's numbers
    assert [row["length"] for row in again["extrapolation"]] == [16, 32]
    assert again["extrapolation"][0]["sliding"]["stride"] == 8
    assert "## Extrapolation (test, trained at 64)" in (tmp_path / "eval" / "report.md").read_text()
    assert main(["evaluate", str(run), "--out", str(tmp_path / "long"), "--lengths", "64,100000"]) == 2
    assert "fewer than the evaluation lengths [100000]" in capsys.readouterr().err
    assert not (tmp_path / "long").exists()  # refused before anything was written

    capsys.readouterr()
    texts = []
    for seed in (1, 1, 2):
        assert main(["predict", str(run), "--prompt", "HAMLET:", "--max-new-tokens", "30", "--temperature", "0.8",
                     "--top-k", "20", "--top-p", "0.95", "--seed", str(seed), "--quiet"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] != texts[2] and texts[0].startswith("HAMLET:")
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("HAMLET:")
    assert main(["predict", str(run), str(prompt), "--max-new-tokens", "30", "--temperature", "0.8", "--top-k", "20",
                 "--top-p", "0.95", "--seed", "1", "--quiet"]) == 0
    assert capsys.readouterr().out == texts[0]  # a prompt file is the same prompt


def test_bad_input_is_refused_before_anything_is_written(tmp_path, corpus, capsys):
    out = tmp_path / "run"
    short = tmp_path / "short.txt"
    short.write_text("To be, or not to be: that is the question.\n" * 3)  # valid/test: fewer than 65 characters
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Caf\xe9 society\n".encode("latin-1") * 200)
    cases = [
        (["--data", str(short)], "fewer than one window of context + 1 = 65"),
        (["--data", str(latin1)], "is not UTF-8 text (byte 0xe9 at offset 3)"),
        (["--data", str(tmp_path / "missing.txt")], "missing.txt not found"),
        (["--data", str(corpus), "--tokenizer", "word"], "unknown tokenizer 'word'"),
        (["--data", str(corpus), "--context", "128", "--variant", "learned-pos"],
         "learned position table has max_len=64"),
    ]
    for flags, words in cases:
        extra = ["--model-set", "max_len=64"] if "learned-pos" in flags else []
        assert main(["train", "lm", "--out", str(out), *flags, *extra, *TINY]) == 2, flags
        message = capsys.readouterr().err
        assert words in message, (flags, message)
        assert not out.exists(), flags


def test_predict_refuses_a_prompt_past_a_learned_table(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    assert main(["train", "lm", "--data", str(corpus), "--epochs", "1", "--out", str(run), "--variant", "learned-pos",
                 "--context", "32", *TINY]) == 0
    # the report's sample stays inside the table: windows of the training length, the last 16 to 31 tokens each
    assert "20 tokens, each seeing the last 16 to 31 tokens" in (run / "report.md").read_text()
    capsys.readouterr()
    assert main(["predict", str(run), "--prompt", "x" * 30, "--max-new-tokens", "10", "--quiet"]) == 2
    message = capsys.readouterr().err
    assert "a prompt of 30 tokens plus --max-new-tokens 10 needs 39 positions" in message
    assert "max_len=32" in message
    assert main(["predict", str(run), "--prompt", "x" * 30, "--max-new-tokens", "3", "--temperature", "0",
                 "--quiet"]) == 0
    assert len(capsys.readouterr().out) == 34  # 30 + 3 characters and a newline


def test_task_options_reach_zoo_predict_and_evaluate_once():
    """lm's own options come through LMTask.add_arguments: --prompt/--max-new-tokens/--seed on zoo predict (its
    --temperature, --top-k, --top-p are the flags translation already has, kept once), --lengths/--stride on zoo
    evaluate as the config fields eval_lengths/eval_stride."""
    from tasks.cli.main import build_parser

    parser = build_parser()
    args = parser.parse_args(["predict", "RUN", "--prompt", "a", "--max-new-tokens", "5", "--seed", "3",
                              "--temperature", "0.5"])
    assert (args.prompt, args.max_new_tokens, args.seed, args.temperature) == ("a", 5, 3, 0.5)
    assert {"prompt", "max_new_tokens", "seed"} <= set(args.task_options) and "temperature" not in args.task_options
    args = parser.parse_args(["evaluate", "RUN", "--lengths", "64,128", "--stride", "32"])
    assert (args.eval_lengths, args.eval_stride) == ("64,128", 32)
    assert args.task_options["eval_lengths"] == ["lm"] and args.option_flags["eval_lengths"] == "--lengths"


def test_an_lm_option_is_refused_for_another_tasks_run(tmp_path, monkeypatch):
    """zoo evaluate --lengths on a translation run: refused, naming the flag (not its dest) and the task taking it."""
    from types import SimpleNamespace

    import tasks.cli.runs as runs
    from tasks.cli.main import build_parser
    from tasks.translation.task import TranslationConfig

    config = TranslationConfig()
    run = SimpleNamespace(task=SimpleNamespace(config=config, name="translation", predict_options=()), config=config)
    monkeypatch.setattr(runs, "_load", lambda args: run)
    args = build_parser().parse_args(["evaluate", str(tmp_path), "--lengths", "64"])
    with pytest.raises(ValueError, match=r"^--lengths: not an option of translation runs \(they apply to lm runs\)$"):
        runs._load_members(args, tuple(args.task_options))
