"""benchmarks/bench_medseg3d_loop.py at a tiny size: both loops train the same network from the same weights (ours
through the trainer's own loop, the plain one on MONAI's DynUNet built directly), and the script prints its row.
Timings are never asserted: they are the benchmark's to report, not a test's to judge."""

from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
PATCH = (16, 32, 32)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCHMARKS))  # the scripts import their shared helpers as `bench_core`
        import bench_medseg3d_loop

        yield bench_medseg3d_loop


def weights(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.slow  # reads the 3D phantom and trains a DynUNet for a few steps (~15 s)
def test_both_loops_train_the_same_network(bench, tmp_path):
    from monai.networks.nets import DynUNet

    trainer = bench.medseg_trainer(PATCH, 2, 1, tmp_path / "run")
    plain, peer = bench.plain_block(trainer, 2)
    ours = bench.trainer_block(trainer, 2)
    assert type(plain) is DynUNet and plain is not trainer.model.network
    assert trainer.task.patch_size == PATCH and trainer.config.batch_size == 2 and trainer.config.variant == "dynunet"
    torch.testing.assert_close(weights(plain), weights(trainer.model), rtol=0, atol=0)  # same network, same weights
    x = torch.randn(1, trainer.task.in_channels, *PATCH)
    with torch.no_grad():
        torch.testing.assert_close(plain.eval()(x), trainer.model.eval()(x), rtol=0, atol=0)
    plain.train()
    start = weights(trainer.model)
    ours()
    peer()
    assert trainer.session.steps == 2 and trainer.optimizer_steps_done() == 2  # the trainer's loop did the steps
    assert not torch.equal(weights(trainer.model), start) and not torch.equal(weights(plain), start)


@pytest.mark.slow  # the script end to end at one step (~15 s)
def test_the_row_at_a_tiny_size(bench, capsys):
    assert bench.main(["--steps", "1", "--rounds", "1", "--warmup", "0", "--threads", "1",
                       "--patch", ",".join(map(str, PATCH))]) == 0
    out = capsys.readouterr().out
    assert "medseg3d dynunet 16×32×32 B2, 1 steps: ours vs plain" in out and "patches/s" in out
    assert "target >= 0.95x" in out and "of 1 targets missed" in out
