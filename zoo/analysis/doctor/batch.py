"""The batch a model is examined on, and how the doctor runs the model on it.

Four kinds of model are understood, by what their forward takes and what their loss is:

* ``seq2seq``: ``model(src, tgt_in)`` -> logits ``(B, T, V)``; ``tgt_in`` is the target shifted right (BOS first),
  ``labels`` the target shifted left; the loss is the cross-entropy over non-pad labels (translation);
* ``causal_lm``: ``model(ids)`` -> next-token logits ``(B, N, V)``; ``labels`` are the ids shifted left by one, every
  position a real token (a decoder-only language model, the lm task);
* ``classification``: ``model(images)`` -> ``(B, C)``; labels ``(B,)`` (cifar);
* ``segmentation``: ``model(images)`` -> ``(B, C, H, W)``; labels ``(B, H, W)`` (medseg).

Shape legend: B batch, S source tokens, T target tokens, V vocabulary, C classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

KINDS = ("seq2seq", "causal_lm", "classification", "segmentation")


@dataclass
class Batch:
    """Inputs the model takes (``model(*inputs)``), the labels its loss compares with, and its kind.

    For ``seq2seq``: ``inputs = (src (B, S), tgt_in (B, T))`` and ``labels (B, T)``; ``pad_id`` marks padding.
    """

    inputs: tuple[Tensor, ...]
    labels: Tensor
    kind: str
    pad_id: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"batch kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "seq2seq":
            if len(self.inputs) != 2 or self.pad_id is None:
                raise ValueError("a seq2seq batch needs inputs (src, tgt_in) and a pad_id")
            if self.inputs[1].shape != self.labels.shape:
                raise ValueError(f"seq2seq labels {tuple(self.labels.shape)} must have the shape of the decoder "
                                 f"inputs {tuple(self.inputs[1].shape)} (the target shifted by one)")
        if self.kind == "causal_lm" and (len(self.inputs) != 1 or self.inputs[0].shape != self.labels.shape):
            raise ValueError(f"a causal_lm batch needs inputs (ids,) (B, N) and labels of their shape (the ids shifted "
                             f"left by one); got inputs {[tuple(t.shape) for t in self.inputs]}, labels "
                             f"{tuple(self.labels.shape)}")

    @property
    def src(self) -> Tensor:
        return self.inputs[0]

    @property
    def tgt_in(self) -> Tensor:
        return self.inputs[1]

    @property
    def size(self) -> int:
        return self.inputs[0].shape[0]

    def to(self, device: torch.device) -> Batch:
        return Batch(tuple(t.to(device) for t in self.inputs), self.labels.to(device), self.kind, self.pad_id)

    def describe(self) -> str:
        shapes = ", ".join(str(tuple(t.shape)) for t in self.inputs)
        return f"{self.kind} batch of {self.size} ({shapes})"


def seq2seq_batch(src: Tensor, tgt: Tensor, pad_id: int) -> Batch:
    """A seq2seq batch from sources ``(B, S)`` and whole targets ``(B, T + 1)`` (BOS … EOS, right-padded)."""
    if src.dim() != 2 or tgt.dim() != 2 or tgt.shape[1] < 3:
        raise ValueError(f"src must be (B, S) and tgt (B, T+1) with BOS, a token and EOS; got {tuple(src.shape)}, "
                         f"{tuple(tgt.shape)}")
    return Batch((src, tgt[:, :-1]), tgt[:, 1:], "seq2seq", pad_id)


def as_batch(model: nn.Module, batch: Batch | tuple | list, kind: str | None = None) -> Batch:
    """``batch`` as a :class:`Batch`: given as one, or as ``(src, tgt)`` (whole targets, for models with a
    ``config.pad_id``) or ``(images, labels)``; ``kind`` (one of :data:`KINDS`) says what it is, else it is the
    kind the model's protocol implies (an encoder–decoder with ``encode``/``decode`` is seq2seq)."""
    if isinstance(batch, Batch):
        return batch
    if not isinstance(batch, (tuple, list)) or len(batch) != 2 or not all(isinstance(t, Tensor) for t in batch):
        raise TypeError("batch must be a zoo.analysis.doctor.Batch, (src, tgt) token ids or (images, labels) tensors, "
                        "got "
                        f"{type(batch).__name__}")
    if kind is not None and kind not in KINDS:
        from plumbing.errors import unknown_name

        raise unknown_name("batch kind", kind, KINDS)
    if kind is None:
        kind = "seq2seq" if hasattr(model, "encode") and hasattr(model, "decode") else (
            "segmentation" if batch[1].dim() == 3 else "classification")
    if kind == "seq2seq":
        pad_id = getattr(getattr(model, "config", None), "pad_id", None)
        if pad_id is None:
            raise ValueError("a (src, tgt) batch needs the model's config.pad_id; pass a "
                             "zoo.analysis.doctor.Batch instead")
        return seq2seq_batch(batch[0], batch[1], pad_id)
    return Batch((batch[0],), batch[1], kind)


def logits(model: nn.Module, batch: Batch) -> Tensor:
    """The model's output on the batch, in float32."""
    return model(*batch.inputs).float()


def loss(model: nn.Module, batch: Batch, out: Tensor | None = None) -> Tensor:
    """Mean cross-entropy of the model on the batch (no label smoothing), over real labels."""
    out = logits(model, batch) if out is None else out
    if batch.kind == "seq2seq":
        return F.cross_entropy(out.flatten(0, 1), batch.labels.flatten(), ignore_index=batch.pad_id)
    if batch.kind == "causal_lm":
        return F.cross_entropy(out.flatten(0, 1), batch.labels.flatten())
    return F.cross_entropy(out, batch.labels)


def query_mask(batch: Batch, module_name: str, n_q: int) -> Tensor | None:
    """Which query rows ``(B, Nq)`` of an attention layer are real tokens (``None``: all of them).

    For a seq2seq batch, a module under ``encoder`` attends from the source, one under ``decoder`` from the
    decoder inputs; otherwise the sequence of the matching length is used.
    """
    if batch.kind != "seq2seq":
        return None
    src, tgt = batch.src, batch.tgt_in
    if module_name.startswith("encoder") and src.shape[1] == n_q:
        return src != batch.pad_id
    if module_name.startswith("decoder") and tgt.shape[1] == n_q:
        return tgt != batch.pad_id
    for ids in (src, tgt):
        if ids.shape[1] == n_q:
            return ids != batch.pad_id
    return None
