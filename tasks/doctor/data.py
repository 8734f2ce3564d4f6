"""A batch of a task's own data for the doctor (:class:`zoo.analysis.doctor.Batch`), after ``task.setup()``.

* translation: the first ``n`` pairs of a split, encoded with the task's tokenizer (sources cut at the run's
  ``max_len`` as training cut them, EOS appended; targets BOS … EOS), right-padded;
* cifar: the first ``n`` images of a split, normalised as the model saw them, and their labels.

Shape legend: B batch, S source tokens, T target tokens, C channels.
"""

from __future__ import annotations

import math
from collections import Counter

from tasks.engine.task import Task
from tasks.translation.task import pad_batch
from zoo.analysis.doctor import Batch, seq2seq_batch

SUPPORTED = ("translation", "cifar")


def _check(task: Task, split: str, available: list[str]) -> None:
    if task.name not in SUPPORTED:
        raise ValueError(f"zoo doctor examines {', '.join(SUPPORTED)} models; {task.name} is not supported yet "
                         "(use zoo.analysis.doctor.examine(model, (images, labels), task=...) from Python)")
    if split not in available:
        raise ValueError(f"the {task.name} data has no {split!r} split (it has: {', '.join(available)})")


def task_batch(task: Task, split: str = "valid", n: int = 64) -> Batch:
    """The first ``n`` examples of ``split`` of the task's data, as the model takes them."""
    if task.name == "translation":
        _check(task, split, list(task.splits))
        tok, limit = task.tokenizer, task.config.max_len
        pairs = task.splits[split][:n]
        src_ids = [ids[:limit] + [tok.eos_id] for ids in tok.encode_batch([s for s, _ in pairs])]
        tgt_ids = [[tok.bos_id] + ids[: limit] + [tok.eos_id] for ids in tok.encode_batch([t for _, t in pairs])]
        return seq2seq_batch(pad_batch(src_ids, tok.pad_id, task.device), pad_batch(tgt_ids, tok.pad_id, task.device),
                             tok.pad_id)
    _check(task, split, list(getattr(task, "labels", {})))
    images = task.images.get(split)
    if images is None:  # a restored run keeps its training images on the CPU side only
        import torch

        images = torch.from_numpy(task.arrays[split][0]).to(task.device)
    return Batch((task.inputs(images[:n]),), task.labels[split][:n], "classification")


def unigram_plateau(task: Task, n: int = 5000) -> float | None:
    """Entropy (nats) of the training targets' token frequencies (EOS included; for cifar, of the class
    frequencies): the loss of a model that reads nothing, where a stuck run sits. None for other tasks."""
    if task.name == "translation":
        tok = task.tokenizer
        targets = tok.encode_batch([t for _, t in task.splits["train"][:n]])
        counts = Counter(t for ids in targets for t in [*ids, tok.eos_id])
    elif task.name == "cifar":
        counts = Counter(task.labels["train"].tolist())
    else:
        return None
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values())
