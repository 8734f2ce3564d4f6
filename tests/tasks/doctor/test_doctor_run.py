"""zoo doctor on runs and variants through the command line, and zoo train --doctor.

One tiny healthy run (600 generated pairs, 4 epochs, ~150 steps) trained with --doctor is the trained patient of
"a healthy run gives no findings"; a second, shorter pair of runs shows that --doctor leaves training unchanged,
bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tasks.cli.main import main
from tasks.runs.training import train
from tasks.translation.corpus import generate_corpus
from tasks.translation.task import TranslationConfig, TranslationTask


def write_parallel(folder: Path, n_train: int = 600) -> Path:
    corpus = generate_corpus(seed=0, n_train=n_train, n_valid=32, n_test=16, n_long=4)
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        (folder / f"{split}.en").write_text("".join(en + "\n" for en, _ in corpus[split]))
        (folder / f"{split}.de").write_text("".join(de + "\n" for _, de in corpus[split]))
    return folder


def tiny_run(out: Path, data: Path, doctor: bool, epochs: int = 4) -> Path:
    config = TranslationConfig(out=str(out), data=str(data), preset="tiny", epochs=epochs, lr=5e-3, batch_size=16,
                               warmup=20, eval_size=16, beam_size=2, progress=False, doctor=doctor, tokenizer="word")
    train(TranslationTask, config)
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_parallel(tmp_path_factory.mktemp("doctor_data"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, data) -> Path:
    return tiny_run(tmp_path_factory.mktemp("doctor_run") / "run", data, doctor=True)


def test_train_with_doctor_examines_before_training_and_reports(run_dir):
    report = (run_dir / "report.md").read_text()
    assert "## Doctor" in report and "Nothing found" in report
    init = json.loads((run_dir / "doctor" / "init" / "doctor.json").read_text())
    assert init["healthy"] and not init["context"]["trained"]
    steps = [json.loads(line) for line in (run_dir / "doctor" / "steps.jsonl").read_text().splitlines()]
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps] == list(range(1, history[-1]["step"] + 1))
    assert all(r["loss"] > 0 and r["lr"] > 0 for r in steps)


def test_a_trained_healthy_run_gets_nothing_found(run_dir, capsys):
    assert main(["doctor", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "nothing found: 7 checks ran" in out
    record = json.loads((run_dir / "doctor" / "doctor.json").read_text())
    assert record["healthy"] and record["context"]["trained"]
    curve = next(c for c in record["checks"] if c["name"] == "curve")
    assert curve["status"] == "ok" and curve["measured"]["steps"] == len(curve["measured"]["step_curve"]) > 50
    assert curve["measured"]["plateau"] > curve["measured"]["final_loss"]
    assert (run_dir / "doctor" / "doctor_curve.png").is_file()


def test_a_mistake_injected_into_a_trained_run_is_found(run_dir, tmp_path, capsys):
    out = tmp_path / "scaled"
    assert main(["doctor", str(run_dir), "--lab-mistake", "qk-scaled", "--out", str(out), "--no-figures"]) == 1
    first = json.loads((out / "doctor.json").read_text())["findings"][0]
    assert first["check"] == "score_scale" and "too large" in first["problem"] and first["severity"] == "error"
    printed = capsys.readouterr().out
    assert "qk-scaled" in printed and "exit status 1: " in printed.splitlines()[-1]


def test_a_mistake_that_changes_the_build_is_refused_for_a_run(run_dir, capsys):
    assert main(["doctor", str(run_dir), "--lab-mistake", "post-ln-deep"]) == 2
    assert "applies to a fresh model" in capsys.readouterr().err


def test_doctor_a_variant_with_a_lab_mistake(tmp_path, capsys):
    out = tmp_path / "unscaled"
    argv = ["doctor", "--variant", "classic", "--preset", "tiny", "--lab-mistake", "unscaled", "--batch-size", "16",
            "--out", str(out), "--no-figures"]
    assert main(argv) == 1  # an error-level finding fails a CI job (--fail-on error, the default)
    printed = capsys.readouterr().out
    assert "attention kernel scales the scores wrongly" in printed.splitlines()[2]
    findings = json.loads((out / "doctor.json").read_text())["findings"]
    assert findings[0]["check"] == "score_scale" and findings[0]["severity"] == "error"
    assert not any(f["severity"] == "critical" for f in findings)
    assert printed.splitlines()[-1] == (f"exit status 1: {len(findings)} finding(s) at error or worse, first: "
                                        f"{findings[0]['problem']} (--fail-on error; --fail-on never exits 0 "
                                        "whatever is found)")
    assert main([*argv, "--fail-on", "critical"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "exit status 0: no finding at critical or worse (--fail-on critical)"
    assert main([*argv, "--fail-on", "never"]) == 0
    assert "exit status" not in capsys.readouterr().out
    assert main([*argv, "--fail-on", "fatal"]) == 2
    assert "invalid choice: 'fatal'" in capsys.readouterr().err


def test_a_healthy_variant_exits_0(tmp_path, capsys):
    argv = ["doctor", "--variant", "classic", "--preset", "tiny", "--batch-size", "16", "--out", str(tmp_path),
            "--no-figures", "--fail-on", "note"]
    assert main(argv) == 0
    assert "nothing found" in capsys.readouterr().out


def test_the_doctor_does_not_change_training(tmp_path, data):
    with_doctor = tiny_run(tmp_path / "with", data, doctor=True, epochs=1)
    without = tiny_run(tmp_path / "without", data, doctor=False, epochs=1)
    a, b = (torch.load(r / "checkpoints" / "last.pt", weights_only=True)["model"] for r in (with_doctor, without))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert "## Doctor" not in (without / "report.md").read_text()
