"""The decoding side of ``zoo check``'s ``kv cache`` row: is cached decoding a decoding of the model?

Decoding twice, once with the KV cache and once recomputing every prefix, and comparing the tokens fails a
faithful model wherever two candidates are tied to rounding: the two paths round differently (float32
kernels of other shapes, AVX-512 against AVX2), a near-tie goes one way in one path and the other way in the
other, and every later token differs. The classic model's own copy failed that way at preset ``base`` (logits
8.3e-7 apart, 1 token of 68 beam steps).

So :func:`lockstep_drift` compares scores instead of tokens: it runs the decoding procedure itself (greedy or
beam search, :mod:`core.decoding`), steered by the cached logits exactly as cached decoding is, and at every
step also recomputes the whole prefix of every hypothesis. When the cached logits stay within the logits'
tolerance of the recomputed ones at every step, each token the cached decoding chose is one the recomputed
model would choose too, up to a tie within that tolerance; a real cache bug (a position dropped, noise added,
hypotheses reordered wrongly) moves the logits by far more.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from core.decoding import beam_search, greedy_decode
from zoo.analysis.probes import PROTOCOL, Drift, is_autoregressive


class _Lockstep:
    """A stand-in for ``model`` that :mod:`core.decoding` drives without a cache (each call gets every hypothesis's
    whole prefix ``(B, t)``): it answers with the logits of the newest token decoded with the model's own KV
    cache, and records how far they are from the logits of the whole prefix recomputed.

    Beam search reorders its hypotheses between steps; the stand-in finds, for each hypothesis, the one of the
    previous step it extends (the same source, the same prefix) and reorders the cache as beam search does.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model, self.config = model, model.config
        self.cache: Any = None
        self.prefix: Tensor | None = None  # (B, t - 1) the hypotheses of the previous step
        self.same_source: Tensor | None = None  # (B, B) whether two hypotheses decode the same source
        self.drift = Drift(0.0, 0.0)

    def encode(self, src: Tensor) -> tuple[Any, Any]:
        self.cache, self.prefix, self.same_source = self.model.new_cache(), None, None
        return self.model.encode(src)

    def new_cache(self) -> None:
        return None

    def _extended(self, tgt: Tensor, memory: Any) -> Tensor:
        """For each hypothesis of ``tgt`` ``(B, t)``, the row of the previous step it extends ``(B,)``."""
        if self.same_source is None:
            rows = memory.flatten(1) if isinstance(memory, Tensor) else None
            self.same_source = (torch.eye(len(tgt), dtype=torch.bool, device=tgt.device) if rows is None else
                                (rows[:, None] == rows[None]).all(-1))  # beam search repeats each source K times
        match = (tgt[:, None, :-1] == self.prefix[None]).all(-1) & self.same_source  # (B, B)
        if not match.any(1).all():
            raise RuntimeError("a hypothesis extends none of the previous step's: the decoding procedure changed")
        # a hypothesis stays in its own row where it can (greedy decoding never reorders)
        return torch.where(match.diagonal(), torch.arange(len(tgt), device=tgt.device), match.int().argmax(1))

    def decode(self, tgt: Tensor, memory: Any, src_mask: Any, cache: None = None) -> Tensor:
        full = self.model.decode(tgt, memory, src_mask, None)[:, -1:].float()  # (B, 1, V) the prefix recomputed
        if self.prefix is not None:
            rows = self._extended(tgt, memory)
            if not torch.equal(rows, torch.arange(len(tgt), device=tgt.device)):
                self.cache.reorder(rows)
        cached = self.model.decode(tgt[:, -1:], memory, src_mask, self.cache).float()  # (B, 1, V)
        self.prefix = tgt
        live = ~(tgt[:, 1:] == self.config.eos_id).any(1)  # a finished hypothesis's logits are discarded
        if not live.any():
            return cached
        step = Drift((cached[live] - full[live]).abs().max().item(), full[live].abs().max().item())
        self.drift = Drift(max(self.drift.max_abs, step.max_abs), max(self.drift.magnitude, step.magnitude))
        return cached


@torch.no_grad()
def lockstep_drift(model: nn.Module, src: Tensor, beam_size: int | None = None, max_len: int = 12) -> Drift:
    """How far the logits of cached decoding (greedy, or beam search with ``beam_size``) fall from those of
    the same hypotheses recomputed whole, at the worst step of ``max_len``: ``max_abs`` the largest difference,
    ``magnitude`` the largest recomputed logit (for a tolerance scaled to it).

    ``model`` follows the decoding protocol of :mod:`core.decoding`; ``src`` ``(B, S)`` source ids.
    """
    if not is_autoregressive(model):
        raise TypeError(f"lockstep_drift needs a model with {', '.join(PROTOCOL)} (the decoding protocol of "
                        f"core.decoding), got {type(model).__name__}")
    lockstep = _Lockstep(model)
    if beam_size is None:
        greedy_decode(lockstep, src, max_len=max_len, use_cache=False)
    else:
        beam_search(lockstep, src, beam_size=beam_size, max_len=max_len, use_cache=False)
    return lockstep.drift


def is_decoder_only(model: nn.Module) -> bool:
    """Whether ``model`` is a decoder-only language model as :func:`core.generation.generate` drives it:
    ``forward(ids, cache)``, ``new_cache()``, ``check_length()`` and ``config.vocab_size``, and no encoder."""
    return (all(hasattr(model, name) for name in ("new_cache", "check_length", "config"))
            and hasattr(model.config, "vocab_size") and not hasattr(model, "encode"))


@torch.no_grad()
def stepwise_drift(model: nn.Module, ids: Tensor) -> Drift:
    """How far a decoder-only model's logits, fed with its own cache as generation feeds it, fall from those of one
    full call on ``ids`` ``(B, N)``: once one position per call from the start, once the first half at once (a
    prompt) and then one position per call; ``magnitude`` the largest full-call logit."""
    full = model(ids).float()  # (B, N, V)
    worst = 0.0
    for prompt in (1, max(ids.shape[1] // 2, 1)):
        cache = model.new_cache()
        parts = [model(ids[:, :prompt], cache)] + [model(ids[:, i : i + 1], cache) for i in range(prompt, ids.shape[1])]
        worst = max(worst, (torch.cat(parts, dim=1).float() - full).abs().max().item())
    return Drift(worst, full.abs().max().item())
