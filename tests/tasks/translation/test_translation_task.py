"""The translation runner end to end on a tiny generated corpus, and its metrics."""

import json

import pytest
import torch

from tasks.cli.main import main
from tasks.engine.trainer import Trainer
from tasks.runs.training import callbacks_for
from tasks.translation.metrics import bleu_by_length, translation_metrics
from tasks.translation.task import TranslationConfig, TranslationTask
from tests.preemption import preempted_after

TINY = dict(preset="tiny", n_train=300, eval_size=40, batch_size=32, warmup=20, progress=False, beam_size=2)


def tiny_run(tmp_path, name="run", **kw):
    config = TranslationConfig(out=str(tmp_path / name), **{**TINY, **kw})
    trainer = Trainer(TranslationTask, config, callbacks=callbacks_for(config))
    return trainer, trainer.fit()


def test_bleu_on_known_strings():
    refs = ["der Hund sieht den Ball .", "die Katze schläft ."]
    perfect = translation_metrics(refs, refs)
    assert perfect["bleu"] == pytest.approx(100.0)
    assert perfect["exact_match"] == 1.0
    assert perfect["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    partial = translation_metrics(["der Hund sieht den Ball .", "die Katze"], refs)
    assert 0 < partial["bleu"] < 100 and partial["exact_match"] == 0.5
    assert translation_metrics(["x y z"], ["a b c"])["bleu"] == pytest.approx(0.0)
    rows = bleu_by_length(["a b c", "a b c d e f g"], refs, refs)
    assert [r["source tokens"] for r in rows] == ["1-5", "6-10"]


def test_training_reduces_loss_and_writes_a_report(tmp_path):
    trainer, summary = tiny_run(tmp_path, epochs=3, lr=3e-3)
    losses = [row["train_loss"] for row in summary["history"]]
    assert losses[-1] < losses[0]
    out = tmp_path / "run"
    report = (out / "report.md").read_text()
    for heading in ("## Setup", "## Validation per epoch", "## Test results", "BLEU by source length", "Samples"):
        assert heading in report
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"test", "test_long", "bleu_signature"} <= set(metrics["final"])
    assert {"greedy_bleu", "beam_bleu", "greedy_exact_match"} <= set(metrics["final"]["test_long"])
    assert (out / "tokenizer.json").exists()


def test_resume_equals_uninterrupted_translation_run(tmp_path):
    full, _ = tiny_run(tmp_path, "full", epochs=2)
    with preempted_after(full.history[0]["step"]):  # the end of epoch 1 (a resume keeps its epochs: same_run)
        tiny_run(tmp_path, "split", epochs=2)
    resumed, _ = tiny_run(tmp_path, "split", epochs=2, resume=True)
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    def measured(history):
        return [(r["train_loss"], r["bleu"], r["exact_match"]) for r in history]

    assert measured(full.history) == measured(resumed.history)


def test_variant_must_run_on_translation(tmp_path, monkeypatch):
    import zoo
    from zoo.registry import Variant

    classic = zoo.get_variant("classic")
    image_only = Variant(**{**classic.__dict__, "name": "image-only", "tasks": ("cifar",)})
    monkeypatch.setitem(zoo.registry._REGISTRY, "image-only", [image_only])
    with pytest.raises(ValueError, match="does not run on the translation task"):
        tiny_run(tmp_path, variant="image-only", epochs=1)


def test_cli_errors_are_clear(tmp_path, capsys):
    assert main(["train", "translation", "--variant", "clasic", "--out", str(tmp_path / "x"),
                 "--n-train", "50", "--progress", "false"]) == 2
    assert "Did you mean 'classic'" in capsys.readouterr().err
    assert main(["train", "translation", "--difficulty", "eazy", "--out", str(tmp_path / "y")]) == 2
    assert "Did you mean 'easy'" in capsys.readouterr().err
    assert main(["train", "translation", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "z")]) == 2
    assert "missing" in capsys.readouterr().err
