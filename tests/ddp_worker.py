"""Run by the distributed test, under torchrun or alone: train the toy task, save the final state."""

import sys

import torch

from tasks.engine.trainer import Trainer
from tests.toy_task import ToyConfig, ToyTask

if __name__ == "__main__":
    out, result = sys.argv[1], sys.argv[2]
    trainer = Trainer(ToyTask, ToyConfig(out=out, epochs=2, dropout=0.0, dtype="float64", progress=False))
    trainer.fit()
    if trainer.main:
        torch.save({"model": trainer.model.state_dict(), "history": trainer.history}, result)
