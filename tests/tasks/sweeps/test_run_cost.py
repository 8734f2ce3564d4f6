"""What a run costs besides its training, in a process that trains many (a serial sweep, a reused worker): the
delta analysis of ``report.md`` is computed once per model, and says the same as when computed afresh."""

from __future__ import annotations

from types import SimpleNamespace

import zoo.analysis.delta
from tasks.runs import training
from tasks.translation.task import TranslationTask


def _trainer(seed: int, model: dict) -> SimpleNamespace:
    """What delta_section reads of a finished translation run of ``classic`` at preset tiny."""
    task = SimpleNamespace(reference_models=(), delta_shape=TranslationTask.delta_shape, variant=None,
                           delta_overrides=lambda: {**model, "src_vocab": 40, "tgt_vocab": None})
    return SimpleNamespace(config=SimpleNamespace(variant="classic", preset="tiny", seed=seed), task=task)


def test_the_delta_analysis_is_measured_once_per_model_in_a_process(monkeypatch):
    calls = []
    real = zoo.analysis.delta.measure

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(zoo.analysis.delta, "measure", counted)
    monkeypatch.setattr(training, "_DELTA_SECTIONS", {}, raising=False)
    first = training.delta_section(_trainer(0, {}))
    assert training.delta_section(_trainer(1, {})) == first  # another seed: the same model, measured once
    assert len(calls) == 1
    wider = training.delta_section(_trainer(0, {"d_ff": 96}))  # other overrides: another model, measured
    assert len(calls) == 2 and wider != first
    monkeypatch.setattr(training, "_DELTA_SECTIONS", {}, raising=False)
    assert training.delta_section(_trainer(2, {})) == first  # afresh: the same text
