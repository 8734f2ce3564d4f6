import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from torch import nn

# Tests use tiny models: one thread is faster, and immune to OpenMP spin-waiting when the machine is busy.
# ZOO_TEST_THREADS=2 runs them on two: no test may depend on it (tests/README.md: numerics across machines).
_THREADS = os.environ.get("ZOO_TEST_THREADS", "1")
if not _THREADS.isdigit() or int(_THREADS) < 1:
    raise pytest.UsageError(f"ZOO_TEST_THREADS={_THREADS!r}: give a positive number of threads, e.g. 2")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    torch.set_num_threads(int(_THREADS))  # before each test's fixtures: a training run may have set its own count


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def copy_batch(generator: torch.Generator, batch: int = 32, vocab: int = 16):
    """Random sequences of 1-6 tokens from [3, vocab); the target is the source itself (copy task)."""
    lengths = torch.randint(1, 7, (batch,), generator=generator)
    src = torch.zeros(batch, 6, dtype=torch.long)
    tgt = torch.zeros(batch, 8, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        seq = torch.randint(3, vocab, (n,), generator=generator)
        src[i, :n] = seq
        tgt[i, 0] = 1  # BOS
        tgt[i, 1 : n + 1] = seq
        tgt[i, n + 1] = 2  # EOS
    return src, tgt


@pytest.fixture(scope="session")
def copy_model():
    """A tiny classic Transformer trained for a few hundred steps to copy its input (about 10 s).

    The rate decays linearly to 0: at a constant 3e-3 the final model's exact copies of 256 held-out sources
    wandered between 88 % and 100 % with the CPU's kernels; decayed, it copied 100 % under each.
    """
    from core.loss import LabelSmoothedCrossEntropy
    from core.model import build_transformer

    torch.manual_seed(0)
    model = build_transformer("tiny", src_vocab=16, d_model=32, heads=4, d_ff=64)
    steps = 400
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 - step / steps)
    loss_fn = LabelSmoothedCrossEntropy(0.0)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        src, tgt = copy_batch(gen)
        loss = loss_fn(model(src, tgt[:, :-1]), tgt[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
    return model.eval()


@contextmanager
def weight_dtypes(model: nn.Module) -> Iterator[set[torch.dtype]]:
    """The dtypes of the weights ``model``'s linear and convolution layers computed with inside the block
    (bf16 under a bf16 run's precision context, which swaps in bfloat16 copies of the parameters)."""
    seen: set[torch.dtype] = set()
    layers = [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d, nn.Conv3d))]
    handles = [m.register_forward_pre_hook(lambda module, args: seen.add(module.weight.dtype)) for m in layers]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()
