"""A tiny regression task for testing the shared training loop (importable by torchrun workers)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tasks.engine.config import TrainConfig
from tasks.engine.task import Task


@dataclass
class ToyConfig(TrainConfig):
    task: str = "toy"
    epochs: int = 3
    batch_size: int = 8
    lr: float = 1e-2
    dropout: float = 0.2
    n_examples: int = 64
    dtype: str = "float32"  # float64 where a test compares two ways of computing the same run


class ToyTask(Task):
    name = "toy"
    config_class = ToyConfig
    main_metric = "mse"
    higher_is_better = False

    def setup(self) -> None:
        gen = torch.Generator().manual_seed(123)
        x = torch.randn(self.config.n_examples, 4, generator=gen)
        y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(self.config.n_examples, generator=gen)
        dtype = getattr(torch, self.config.dtype)
        self.x, self.y = x.to(dtype), y.to(dtype)
        self.calls = 0

    def build_model(self) -> nn.Module:
        model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(self.config.dropout), nn.Linear(16, 1))
        return model.to(getattr(torch, self.config.dtype))

    def make_scheduler(self, optimizer, total_steps):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 4))

    def train_batches(self, epoch: int):
        order = torch.randperm(len(self.x), generator=torch.Generator().manual_seed(self.config.seed + epoch)).tolist()
        size = self.config.batch_size
        return [order[i : i + size] for i in range(0, len(order), size)]

    def loss(self, model, rows):
        self.calls += 1
        idx = torch.tensor(rows, dtype=torch.long)
        pred = model(self.x[idx]).squeeze(-1)
        return ((pred - self.y[idx]) ** 2).sum(), float(len(rows))

    def evaluate(self, model, split):
        return [((model(self.x).squeeze(-1) - self.y) ** 2).mean().item()]

    def score(self, records, split):
        return {"mse": sum(records) / len(records)}
