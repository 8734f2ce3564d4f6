"""Record what every multi-head attention of a model computed on one forward pass: its queries and keys (after
RoPE), its score bias (ALiBi), the mask it was given (padding and causal, merged) and the attention weights
its kernel returned.

The queries and keys are recomputed from the layer's own projections in a forward pre-hook, so the record
does not depend on the kernel: whatever a kernel does with them (scale, mask, fill), the doctor can compare
the weights it returned with the scores q·k/√d_k the projections imply (:mod:`zoo.analysis.doctor.attention`).
Incremental calls (with a key/value cache) are not recorded.

Shape legend: B batch, H heads, Nq queries, Nk keys, Dh head width.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from core.masks import causal_mask, check_mask, merge_masks
from core.multihead import MultiHeadAttention, record_attention


@dataclass
class AttentionCall:
    """One attention layer's call: ``q``/``k`` ``(B, H, Nq|Nk, Dh)``; ``bias`` broadcastable to
    ``(B, H, Nq, Nk)`` or ``None``; ``allowed`` bool ``(B, H, Nq, Nk)`` (what the mask lets a query attend);
    ``weights`` ``(B, H, Nq, Nk)`` as the kernel returned them (``None`` for kernels that do not return any,
    e.g. linear attention); ``cross``: cross-attention."""

    q: Tensor
    k: Tensor
    bias: Tensor | None
    allowed: Tensor
    weights: Tensor | None
    cross: bool

    @property
    def d_k(self) -> int:
        return self.q.shape[-1]

    def scores(self) -> Tensor:
        """q·k/√d_k plus the bias, in float64: what a correct softmax kernel turns into weights."""
        s = (self.q.double() @ self.k.double().transpose(-2, -1)) / self.d_k**0.5  # (B, H, Nq, Nk)
        return s if self.bias is None else s + self.bias.double()


def attention_modules(model: nn.Module) -> dict[str, MultiHeadAttention]:
    return {name: m for name, m in model.named_modules() if isinstance(m, MultiHeadAttention)}


@contextmanager
def capture_attention(model: nn.Module) -> Iterator[dict[str, AttentionCall]]:
    """Within the block, every forward of ``model`` records each attention layer's last full call."""
    calls: dict[str, AttentionCall] = {}
    pending: dict[str, dict] = {}
    handles = []
    modules = attention_modules(model)

    def before(name: str, module: MultiHeadAttention, args: tuple, kwargs: dict) -> None:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        pending.pop(name, None)
        if a.get("cache") is not None or not isinstance(a.get("x"), torch.Tensor):
            return  # an incremental decoding step, or a subclass with another signature: not recorded
        x, memory, mask, is_causal = a["x"], a.get("memory"), a.get("mask"), a.get("is_causal", False)
        with torch.no_grad():
            q, k, _ = module.project(x, memory, None)  # (B, H, N, Dh)
            self_attention = memory is None
            if self_attention and module.position is not None:
                q, k = module.position.rotate(q, 0), module.position.rotate(k, 0)
            batch, heads, n_q, _ = q.shape
            n_k = k.shape[-2]
            bias = module.position.score_bias(n_q, n_k, x.device) if self_attention and module.position else None
            mask = check_mask(mask, batch, heads, n_q, n_k)
            if is_causal and n_q > 1:
                mask = merge_masks(mask, causal_mask(n_q, n_k, device=x.device))
            allowed = torch.ones(batch, heads, n_q, n_k, dtype=torch.bool, device=x.device)
            if mask is not None:
                allowed = allowed & mask
        pending[name] = dict(q=q.detach(), k=k.detach(), bias=None if bias is None else bias.detach(),
                             allowed=allowed, cross=not self_attention)

    with record_attention(model) as maps:
        for name, module in modules.items():
            handles.append(module.register_forward_pre_hook(
                lambda m, args, kwargs, name=name: before(name, m, args, kwargs), with_kwargs=True))
            handles.append(module.register_forward_hook(
                lambda m, args, out, name=name: name in pending and calls.__setitem__(
                    name, AttentionCall(weights=None if maps.get(name) is None else maps[name].detach(),
                                        **pending.pop(name)))))
        try:
            yield calls
        finally:
            for handle in handles:
                handle.remove()
