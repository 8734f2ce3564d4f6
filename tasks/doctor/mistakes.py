"""Mistakes a user can inject into a model for the doctor to find: ``zoo doctor ... --lab-mistake NAME``.

Most are the lab's own switches (:mod:`tasks.lab`: each lesson builds its mistake on a model made from core
parts), reused as they are; three are the doctor's own patients, which the lab does not build: a kernel that
ignores its mask, Q/K weights multiplied by a constant (after training: ``zoo doctor RUN --lab-mistake
qk-scaled``), and a decoder whose position signal is zero. None of them is an option of the core.

Each names the lesson (or check) that explains it, the config fields it sets before the model is built, the
switch it applies to the built model, and the warm-up it assumes the model trains with.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from core.attention import AttentionKernel, reference_attention
from core.multihead import MultiHeadAttention
from core.position import PositionalScheme
from plumbing.errors import unknown_name

QK_FACTOR = 4.0  # qk-scaled: every score ×16, far outside what training converged to


class IgnoreMaskAttention(AttentionKernel):
    """The doctor's patient: softmax(Q Kᵀ/√d_k) V that drops its ``mask`` and ``is_causal`` (it sees padding and
    the future). Shape: as :class:`core.attention.AttentionKernel`."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        out, weights = reference_attention(q, k, v, None, bias, False)  # the bug: mask and is_causal unused
        return out, (weights if need_weights else None)


def _every_attention(model: nn.Module, make: Callable[[], AttentionKernel]) -> nn.Module:
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.kernel = make()
    return model


def ignore_mask(model: nn.Module) -> nn.Module:
    """Every attention layer gets :class:`IgnoreMaskAttention`."""
    return _every_attention(model, IgnoreMaskAttention)


@torch.no_grad()
def scale_qk(model: nn.Module, factor: float = QK_FACTOR) -> nn.Module:
    """Multiply the W^Q and W^K rows (and biases) of every packed ``qkv`` projection by ``factor``: scores ×factor²."""
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            rows = 2 * module.d_model
            module.qkv.weight[:rows].mul_(factor)
            if module.qkv.bias is not None:
                module.qkv.bias[:rows].mul_(factor)
    return model


def zero_decoder_positions(model: nn.Module) -> nn.Module:
    """The decoder's position signal set to zero (the encoder keeps its own): ``decode`` runs under
    :func:`zoo.analysis.doctor.position.decoder_without_positions`. Needs an encoder–decoder with a ``position``
    scheme."""
    if not (hasattr(model, "decode") and isinstance(getattr(model, "position", None), PositionalScheme)):
        raise ValueError("zero-decoder-positions needs an encoder-decoder model with a positional scheme "
                         f"(model.position), got {type(model).__name__}")
    from zoo.analysis.doctor.position import decoder_without_positions

    decode = model.decode

    def decode_without_positions(self, *args, **kwargs):
        with decoder_without_positions(self):
            return decode(*args, **kwargs)

    model.decode = types.MethodType(decode_without_positions, model)
    return model


def _lab(module: str, name: str) -> Callable[..., Any]:
    import importlib

    return getattr(importlib.import_module(f"tasks.lab.{module}"), name)


def _unscaled(model: nn.Module) -> nn.Module:
    return _lab("scale", "use_kernel")(model, _lab("scale", "UnscaledAttention"))


def _zero_mask(model: nn.Module) -> nn.Module:
    return _lab("mask", "use_zero_fill")(model)


def _no_positions(model: nn.Module) -> nn.Module:
    return _lab("position", "remove_positions")(model)


def _swapped(model: nn.Module) -> nn.Module:
    return _lab("position", "use_swapped_sinusoids")(model)


def _qkv_std_1(model: nn.Module) -> nn.Module:
    return _lab("init", "reinit_qkv")(model, 1.0)


@dataclass(frozen=True)
class Mistake:
    """One injectable mistake: ``overrides`` (variant config fields set before building), ``apply`` (the switch
    on the built model), ``warmup`` (the learning-rate warm-up the examination assumes; None: the task's)."""

    name: str
    lesson: str  # `zoo lab LESSON` that explains it, or the doctor's check for its own patients
    what: str
    apply: Callable[[nn.Module], nn.Module] | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    warmup: int | None = None


MISTAKES: dict[str, Mistake] = {m.name: m for m in (
    Mistake("unscaled", "scale", "attention without the 1/√d_k scale (the lab's UnscaledAttention)", _unscaled),
    Mistake("zero-mask", "mask", "decoder self-attention masked with 0 instead of -inf (the lab's kernel)",
            _zero_mask),
    Mistake("no-positions", "position", "no positional scheme anywhere (the lab's remove_positions)", _no_positions),
    Mistake("swapped-positions", "position", "sinusoid table with sin and cos swapped (the lab's table)", _swapped),
    Mistake("unscaled-embeddings", "position", "embeddings not multiplied by √d_model",
            overrides={"scale_embeddings": False}),
    Mistake("qkv-std-1", "init", "Q/K/V weights redrawn from N(0, 1) (the lab's reinit_qkv)", _qkv_std_1),
    Mistake("post-ln-deep", "norm", "Post-LN at depth 24 + 24 with no warm-up",
            overrides={"encoder_layers": 24, "decoder_layers": 24, "norm_first": False}, warmup=0),
    Mistake("ignore-mask", "doctor: mask", "a kernel that ignores its mask and is_causal entirely", ignore_mask),
    Mistake("qk-scaled", "doctor: score_scale", f"W^Q and W^K multiplied by {QK_FACTOR:g} (use it on a trained run)",
            scale_qk),
    Mistake("zero-decoder-positions", "doctor: position", "the decoder's position signal set to zeros",
            zero_decoder_positions),
)}


def get_mistake(name: str) -> Mistake:
    if name not in MISTAKES:
        raise unknown_name("mistake (see zoo doctor --list-mistakes)", name, MISTAKES)
    return MISTAKES[name]
