"""benchmarks/bench_lm.py at a tiny size: it measures what it says (the trainer's own loop and a plain loop on one
model, the cache against recomputation, the fused kernel's memory against the explicit softmax's) and prints its
table. Timings are never asserted: they are the benchmark's to report, not a test's to judge."""

from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench_lm(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import their shared helpers as `bench_core`
    import bench_lm

    return bench_lm


def weights(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_both_training_loops_step_the_same_model(bench_lm, tmp_path):
    trainer = bench_lm.lm_trainer("tiny", 1, tmp_path / "run")
    plain, peer = bench_lm.plain_block(trainer, 2)
    ours = bench_lm.trainer_block(trainer, 2)
    start = weights(trainer.model)
    torch.testing.assert_close(weights(plain), start, rtol=0, atol=0)  # same model, same initial weights
    assert plain is not trainer.model and trainer.config.batch_size == 12 and trainer.config.context == 64
    ours()
    peer()
    assert trainer.session.steps == 2 and trainer.optimizer_steps_done() == 2  # the trainer's loop did the steps
    assert not torch.equal(weights(trainer.model), start) and not torch.equal(weights(plain), start)
    ours()  # the next block: the task's next batches, the step count going on
    assert trainer.session.steps == 4 and trainer.flop_counter.flops > 0


def test_the_table_at_a_tiny_size(bench_lm, capsys):
    assert bench_lm.main(["--preset", "tiny", "--steps", "1", "--rounds", "1", "--new-tokens", "4", "--quick",
                          "--threads", "1", "--only", "training,generation"]) == 0
    out = capsys.readouterr().out
    assert "lm tiny train step B12 L64: trainer vs plain" in out and "tok/s" in out and "MFU ours" in out
    assert "lm tiny sinusoidal: generate 4 tok, cache vs full" in out and "target >= 3x" in out
    assert "of 2 targets missed" in out


@pytest.mark.slow  # two fresh worker processes (~10 s)
def test_memory_worker_sees_the_explicit_softmax(bench_lm):
    # fresh subprocesses, as the benchmark runs them: ReferenceAttention's forward holds (1, 4, 1024, 1024)
    # float32 scores, 16 MB, where SDPA holds its (1, 4, 1024, 32) output, 0.5 MB
    sdpa = bench_lm.measure_peak("sdpa", "forward", 1, 1024, 1, 1)
    reference = bench_lm.measure_peak("reference", "forward", 1, 1024, 1, 1)
    assert reference > sdpa + 12, (reference, sdpa)


@pytest.mark.slow  # three fresh worker processes (~12 s)
def test_memory_peak_is_the_same_every_run(bench_lm):
    # glibc's adaptive mmap threshold made this very call peak at 36, 39 or 43 MB from run to run (freed tensors
    # kept in the heap or not); with the threshold fixed, each run measures the bytes alive at once
    peaks = [bench_lm.measure_peak("module", "train", 4, 2048, 1, 1) for _ in range(3)]
    assert max(peaks) - min(peaks) < 0.5, peaks


def test_an_unknown_section_is_named(bench_lm, capsys):
    with pytest.raises(SystemExit):
        bench_lm.parse_args(["--only", "training,memroy"])
    assert "unknown section(s) memroy; choose among training, generation, memory" in capsys.readouterr().err
