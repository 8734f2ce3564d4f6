"""Distillation for the image task: a finished run as a frozen teacher, and the objective of a model's heads.

A variant that distills (DeiT) declares its loss through :class:`core.sidechannels.ObjectiveHeads`: which
head learns the label and which the teacher. :func:`objective_loss` computes those terms; without such a
declaration it is the plain cross-entropy of the model's output, as for every other variant.

The teacher is any finished cifar run (``--teacher RUN``, loaded with :func:`tasks.runs.run.load_run`), typically the
CNN reference. It sees the student's augmented (and mixed) images through *its own* normalisation, the one it
was trained with, and its arg-max is the hard target (Touvron et al. 2021, §5.2: hard distillation).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.sidechannels import objective_heads, objective_targets

log = logging.getLogger(__name__)


def needs_teacher(model: nn.Module) -> bool:
    """Whether ``model``'s declared objective trains a head towards a teacher."""
    return any(target == "teacher" for _, target, _ in objective_targets(model))


class Teacher:
    """A finished cifar run, frozen, predicting hard targets for a student on the student's images.

    Args:
        path: the run folder (``zoo train``'s ``--out`` or ``zoo export``'s).
        device: where it runs (the student's device).
        class_names, in_channels: the student's data; a teacher of other classes or channels is refused.
    """

    def __init__(self, path: str | Path, device: torch.device, class_names: list[str], in_channels: int) -> None:
        from tasks.runs.run import load_run, read_run_info

        where = f"--teacher {path}"
        try:
            info = read_run_info(path)
        except (FileNotFoundError, ValueError) as error:
            raise type(error)(f"{where}: {error}") from None
        if info["task"] != "cifar":
            raise ValueError(f"{where} is a {info['task']} run; a teacher must be a finished cifar run, e.g. the "
                             "--out folder of `zoo train cifar --variant resnet18`")
        run = load_run(path, device=str(device), task="cifar")
        names = run.task.class_names
        if len(names) != len(class_names) or run.task.in_channels != in_channels:
            raise ValueError(f"{where} classifies {len(names)} classes of {run.task.in_channels}-channel images "
                             f"({run.task.dataset_name}), the student {len(class_names)} of {in_channels}-channel "
                             "images; train the teacher on the same data")
        if list(names) != list(class_names):
            raise ValueError(f"{where} names its classes {names[:4]}..., the student's data {class_names[:4]}...; "
                             "train the teacher on the same data")
        self.run, self.path = run, Path(path)
        self.model = run.model.eval().requires_grad_(False)

    @torch.no_grad()
    def predict(self, images: Tensor) -> Tensor:
        """The teacher's class for each image, through the teacher's own normalisation.

        Shape:
            (B, C, H, W) uint8, or float on the [0, 1] scale (mixed images) -> (B,) long.
        """
        return self.model(self.run.task.inputs(images)).argmax(-1)  # (B,)

    def describe(self) -> dict[str, Any]:
        """What the run records about its teacher: folder, variant, its test top-1, its normalisation."""
        final = (self.run.metrics or {}).get("final", {})
        return {"path": str(self.path.resolve()), "variant": self.run.variant,
                "test_top1": final.get("test", {}).get("top1"), "mean": self.run.task.mean, "std": self.run.task.std}


def objective_loss(model: nn.Module, output: Tensor, targets: Tensor, teacher: Tensor | None,
                   label_smoothing: float = 0.0) -> Tensor:
    """The summed training loss of the last forward of ``model``.

    The terms the model declares (:class:`core.sidechannels.ObjectiveHeads`), each ``weight · CE(head, target)``
    with label smoothing on the label's terms and none on the teacher's (DeiT's hard distillation); or, when it
    declares none, ``CE(output, targets)``.

    Args:
        output: the model's output of that forward.
        targets: class indices, or soft targets (mixed images).
        teacher: the teacher's class per image; needed when a term trains towards it.

    Shape:
        output (B, K), targets (B,) long or (B, K) float, teacher (B,) long -> scalar.
    """
    heads = objective_heads(model)
    if heads is None:
        return F.cross_entropy(output.float(), targets, reduction="sum", label_smoothing=label_smoothing)
    terms, outputs = heads
    total = output.new_zeros((), dtype=torch.float32)
    for head, target, weight in terms:
        logits = outputs[head].float()  # (B, K)
        if target == "label":
            term = F.cross_entropy(logits, targets, reduction="sum", label_smoothing=label_smoothing)
        elif teacher is None:
            raise ValueError(f"the objective trains the {head} head towards a teacher, but no teacher was given; "
                             "pass --teacher RUN")
        else:
            term = F.cross_entropy(logits, teacher, reduction="sum")
        total = total + weight * term
    return total
