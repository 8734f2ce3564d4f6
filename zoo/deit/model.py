"""DeiT (Touvron et al. 2021, "Training data-efficient image transformers & distillation through attention"),
built as a patch on our ViT.

DeiT keeps ViT's architecture and changes how it is trained: a distillation token joins the [CLS] token
(§4), passes through every layer like the others, and feeds a linear head of its own; at test time the two
heads' softmax outputs are averaged (:func:`late_fusion`). What each head is trained towards, and why, is
declared once, in ``CHANGES`` (:mod:`zoo.deit`); ``zoo diff deit`` renders it with the measured deltas.

The model's output is always that fused prediction, as log-probabilities (so ``softmax`` of it is the
average of the two softmaxes and ``cross_entropy`` on it is the fused model's): tensor in, tensor out, in
training as in evaluation. What the objective needs besides — each head's own logits and what each is
trained towards — the model offers through :class:`core.sidechannels.ObjectiveHeads`; the task asks for it
after the forward and supplies the teacher.

Shape legend: B batch, C channels, H×W image, N patches, e tokens the wrapped read-out prepends ([CLS]: 1),
T = e + 1 + N tokens, D width, K classes.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from core.init import init_weights
from zoo.deit.config import DeiTConfig
from zoo.vit.model import VisionTransformer


class DistillationReadout(nn.Module):
    """A distillation token placed right after the tokens of another read-out (after [CLS]: ``[CLS], [DIST],
    patches``, the order of the paper and timm).

    ``forward`` gives the wrapped read-out's summary of the sequence *without* the distillation token (the
    class head's input), :meth:`distillation` the distillation token's final state (the distillation head's).

    Shape:
        ``prepend``: (B, N, D) -> (B, e + 1 + N, D); ``forward`` and ``distillation``: (B, T, D) -> (B, D).
    """

    zoo_part = "head"  # the token exists for the second head; the wrapped read-out keeps its own part

    def __init__(self, readout: nn.Module, d_model: int) -> None:
        super().__init__()
        self.readout = readout
        self.index = readout.extra_tokens  # where the token sits: after the wrapped read-out's own tokens
        self.extra_tokens = readout.extra_tokens + 1
        self.dist_token = nn.Parameter(torch.zeros(1, 1, d_model))
        nn.init.trunc_normal_(self.dist_token, std=0.02)  # as DeiT and timm

    def prepend(self, x: Tensor) -> Tensor:
        x = self.readout.prepend(x)  # (B, e + N, D)
        token = self.dist_token.expand(x.shape[0], -1, -1)  # (B, 1, D)
        return torch.cat((x[:, : self.index], token, x[:, self.index :]), dim=1)  # (B, e + 1 + N, D)

    def forward(self, x: Tensor) -> Tensor:
        others = torch.cat((x[:, : self.index], x[:, self.index + 1 :]), dim=1)  # (B, e + N, D)
        return self.readout(others)  # (B, D)

    def distillation(self, x: Tensor) -> Tensor:
        return x[:, self.index]  # (B, D)


def late_fusion(*logits: Tensor) -> Tensor:
    """log of the mean of the heads' softmax outputs: logits whose softmax is the averaged prediction.

    Shape: each (B, K) -> (B, K) log-probabilities.
    """
    dtype = torch.promote_types(logits[0].dtype, torch.float32)  # bf16 logits: the softmaxes in float32
    stacked = torch.stack([z.to(dtype).log_softmax(-1) for z in logits])  # (heads, B, K)
    return (torch.logsumexp(stacked, dim=0) - math.log(len(logits))).to(logits[0].dtype)  # (B, K)


class DistilledVisionTransformer(VisionTransformer):
    """DeiT: ViT with a distillation token and head (``distillation_token=True``) and the distillation
    objective (``distillation="hard"``); each can be reverted alone.

    Args:
        config: a :class:`~zoo.deit.config.DeiTConfig`.

    Shape:
        ``(B, C, H, W)`` float images -> ``(B, K)``: the fused prediction's log-probabilities with the
        distillation token, the class head's logits without it (then the model is ViT).
    """

    def __init__(self, config: DeiTConfig) -> None:
        super().__init__(config)  # calls make_readout, which adds the token
        self.head_dist: nn.Linear | None = None
        if config.distillation_token:
            self.head_dist = nn.Linear(config.d_model, config.num_classes)
            self.head_dist.zoo_part = "head"
            init_weights(self.head_dist, "normal")
        self._outputs: dict[str, Tensor] | None = None

    def make_readout(self, c: DeiTConfig) -> nn.Module:
        readout = super().make_readout(c)
        return DistillationReadout(readout, c.d_model) if c.distillation_token else readout

    def forward(self, images: Tensor) -> Tensor:
        tokens = self.forward_features(images)  # (B, T, D)
        logits = self.head(self.readout(tokens))  # (B, K)
        if self.head_dist is None:
            self._outputs = {"class": logits}
            return logits
        distilled = self.head_dist(self.readout.distillation(tokens))  # (B, K)
        self._outputs = {"class": logits, "distillation": distilled}
        return late_fusion(logits, distilled)  # (B, K)

    # --- core.sidechannels.ObjectiveHeads -------------------------------------------------------------------
    def objective_terms(self) -> tuple[tuple[str, str, float], ...]:
        """DeiT's loss terms: ½ class head → label, ½ distillation head → teacher (the token's head learns the
        label too with ``distillation="none"``; without the token the class head takes both halves)."""
        c = self.config
        second = "distillation" if c.distillation_token else "class"
        if c.distillation == "hard":
            return (("class", "label", 0.5), (second, "teacher", 0.5))
        if c.distillation_token:
            return (("class", "label", 0.5), ("distillation", "label", 0.5))
        return (("class", "label", 1.0),)

    def head_outputs(self) -> dict[str, Tensor] | None:
        return self._outputs
