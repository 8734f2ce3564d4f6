"""The learning-rate schedule of the paper (§5.3), called "Noam" after its author's name in tensor2tensor."""

from __future__ import annotations

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from plumbing.errors import check_positive


def noam_rate(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """lrate = factor · d_model^−0.5 · min(step^−0.5, step · warmup^−1.5), for step ≥ 1."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


class NoamLR(LRScheduler):
    """Linear warm-up for ``warmup`` steps, then decay ∝ 1/√step. Call ``step()`` after every optimizer step.

    The rate is set absolutely (the optimizer's own ``lr`` is ignored); the peak, at ``step = warmup``,
    is ``factor · (d_model · warmup)^−0.5``.
    """

    def __init__(
        self, optimizer: Optimizer, d_model: int, warmup: int = 4000, factor: float = 1.0, last_epoch: int = -1
    ) -> None:
        check_positive("d_model", d_model)
        check_positive("warmup", warmup)
        self.d_model, self.warmup, self.factor = d_model, warmup, factor
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        rate = noam_rate(self.last_epoch + 1, self.d_model, self.warmup, self.factor)
        return [rate for _ in self.optimizer.param_groups]
