"""A fourth task, written outside the package: reverse a sequence of tokens with the encoder–decoder.

It exists to prove that a new task plugs into every generic command (`zoo train`, `zoo diff`, `zoo evaluate`,
`zoo predict`, `zoo compare --runs`, `zoo doctor`) by implementing :class:`tasks.engine.task.Task` alone: nothing
outside this file names it. It is a ``--user-dir`` plugin, as a user would write one: imported, it registers itself
(:func:`tasks.engine.registry.register_task`) and the classic model and RoPE for itself. The tests load it from a
copy in a plugin folder, never as ``tests.tasks.reverse_task``, so that it stays out of every other test's registry.

Shape legend: B batch, L sequence length, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.decoding import greedy_decode
from tasks.compare.paired import PairedMetric, first_column, mean_score
from tasks.engine.config import TrainConfig
from tasks.engine.registry import register_task
from tasks.engine.task import Task
from tasks.runs.records import split_hash, write_records
from zoo.analysis.delta import TaskShape
from zoo.analysis.doctor import Batch, entropy, seq2seq_batch
from zoo.registry import get_variant, register

NAME = "reverse"
VOCAB, LENGTH, SPECIALS = 16, 6, 3  # ids 0, 1, 2: pad, BOS, EOS


@dataclass
class ReverseConfig(TrainConfig):
    task: str = NAME
    preset: str | None = "tiny"
    epochs: int = 2
    batch_size: int = 16
    lr: float = 3e-3
    n_train: int = 128


@register_task
class ReverseTask(Task):
    name = NAME
    config_class = ReverseConfig
    main_metric = "exact"
    headline = ("test", "exact")
    eval_splits = ("test", "valid")
    delta_shape = TaskShape(NAME, "tiny", {"batch": 1, "src_len": LENGTH, "tgt_len": LENGTH + 1},
                            ("src_len", "tgt_len"),
                            f"one sequence of {LENGTH} tokens")

    @classmethod
    def paired_metrics(cls, info: dict[str, Any]) -> list[PairedMetric]:
        def right(records: list[dict], info: dict) -> Any:
            import numpy as np

            return np.array([[float(r["prediction"] == r["reference"]), 1.0] for r in records])

        return [PairedMetric("exact", "exact match", "test", True, "bootstrap", right, mean_score, first_column)]

    def setup(self) -> None:
        gen = torch.Generator().manual_seed(self.config.seed)
        sizes = {"train": self.config.n_train, "valid": 32, "test": 32}
        self.splits = {s: torch.randint(SPECIALS, VOCAB, (n, LENGTH), generator=gen) for s, n in sizes.items()}

    def _pair(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Source ``(B, L)`` + EOS, and the target BOS reversed EOS ``(B, L + 2)``."""
        b = src.shape[0]
        eos, bos = torch.full((b, 1), 2), torch.full((b, 1), 1)
        return torch.cat([src, eos], 1), torch.cat([bos, src.flip(1), eos], 1)

    def build_model(self) -> nn.Module:
        return self.build_variant(self.decided_overrides({"src_vocab": VOCAB}, "the reverse task"))

    def make_scheduler(self, optimizer, total_steps):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)

    def train_batches(self, epoch: int):
        return self.shuffled_batches(len(self.splits["train"]), epoch, min_last=1)

    def loss(self, model, rows):
        src, tgt = self._pair(self.splits["train"][[i for i, _ in rows]])
        logits = model(src.to(self.device), tgt[:, :-1].to(self.device))  # (B, L + 1, V)
        labels = tgt[:, 1:].to(self.device)
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="sum"), float(labels.numel())

    @torch.no_grad()
    def _predict(self, model, split: str) -> list[dict[str, Any]]:
        src, tgt = self._pair(self.splits[split])
        out = greedy_decode(model, src.to(self.device), max_len=LENGTH + 1).cpu()
        return [{"id": i, "prediction": out[i, :LENGTH].tolist(), "reference": tgt[i, 1 : LENGTH + 1].tolist()}
                for i in range(len(src))]

    @classmethod
    def predict_inputs(cls, run, inputs: list[str], out: str | None, progress: bool = True,
                       batch_size: int | None = None) -> str:
        """`zoo predict`: each line of the files ``inputs`` is one sequence of LENGTH token ids; the reversals, one
        line each, go to ``out`` (default ``reversed.txt``)."""
        rows = [[int(t) for t in line.split()] for name in inputs for line in Path(name).read_text().splitlines()
                if line.strip()]
        if not rows or any(len(r) != LENGTH or not all(SPECIALS <= t < VOCAB for t in r) for r in rows):
            raise ValueError(f"give lines of {LENGTH} token ids in [{SPECIALS}, {VOCAB}), separated by spaces")
        src, _ = run.task._pair(torch.tensor(rows))
        with torch.no_grad():
            decoded = greedy_decode(run.model, src.to(run.device), max_len=LENGTH + 1).cpu()  # (B, L + 1)
        path = Path(out or "reversed.txt")
        path.write_text("".join(" ".join(map(str, r[:LENGTH])) + "\n" for r in decoded.tolist()))
        return f"reversed {len(rows)} sequences into {path}"

    def evaluate(self, model, split):
        return self._predict(model, split)

    def score(self, records, split):
        return {"exact": sum(r["prediction"] == r["reference"] for r in records) / len(records)}

    def final_report(self, model, out_dir, splits=None):
        results = {}
        for split in splits or self.eval_splits[:1]:
            records = self._predict(model, split)
            results[split] = self.score(records, split)
            if self.dist.is_main:
                write_records(out_dir, split, records, split_hash([self.splits[split].numpy()]))
        return results, f"## Reversed\n\nexact match {results.get('test', {}).get('exact')}"

    def preprocessing(self) -> dict[str, Any]:
        return {"vocab": VOCAB, "length": LENGTH}

    def doctor_batch(self, split: str = "valid", n: int = 64) -> Batch:
        src, tgt = self._pair(self.splits[split][:n])
        return seq2seq_batch(src.to(self.device), tgt.to(self.device), 0)

    def target_entropy(self, n: int = 5000) -> float:
        _, tgt = self._pair(self.splits["train"][:n])
        return entropy(Counter(tgt[:, 1:].flatten().tolist()))


for _variant in ("classic", "rope"):  # the zoo's own variants, registered for this task too
    register(dataclasses.replace(get_variant(_variant, "translation"), tasks=(NAME,)))
