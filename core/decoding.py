"""Generating a target sequence from an encoder–decoder model: greedy, sampling and beam search, and the
key/value cache that makes each step cheap.

All three run the decoder one position at a time. With ``use_cache=True`` (the default) each step feeds
only the newest token and reuses the keys/values of earlier positions (:class:`KVCache`: each attention layer
keeps one); with ``use_cache=False`` each step recomputes the whole prefix, which is slower and gives the same tokens.

The model must provide ``encode(src) -> (memory, src_mask)``, ``decode(tgt, memory, src_mask, cache)``,
``new_cache()`` and a ``config`` with ``bos_id``, ``eos_id`` and ``pad_id``.
Every function returns ``(B, L)`` generated ids (no BOS), EOS-terminated where EOS was produced and
padded with ``pad_id`` after it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from plumbing.errors import check_positive


class KVCache:
    """Keys and values already computed by one attention layer during incremental decoding.

    For self-attention each step appends the new positions; for cross-attention (``static=True``) the
    encoder memory's keys and values are computed at the first step and reused afterwards. A
    :class:`~core.attention.RecurrentKernel` (e.g. linear attention) stores no keys/values: it keeps a fixed-size
    summary of the past in ``state`` (a tuple of batch-first tensors) and ``state_length`` counts its positions.

    The appended keys/values are written into a preallocated buffer that doubles when full, so a decode of
    L tokens copies O(L) key/value rows in all (appending by concatenation copies the whole cache at every
    step: O(L²)). ``k`` and ``v`` are views of the buffer's filled part.

    Args:
        static: store the first keys/values and return them at every later step (cross-attention).
        capacity: positions to allocate at the first append (at least as many as it brings); the buffer
            doubles whenever an append would overflow it.

    Shape: ``k``, ``v`` ``(B, H, N, Dh)`` with N = :attr:`length` positions cached so far.
    """

    def __init__(self, static: bool = False, capacity: int = 64) -> None:
        check_positive("capacity", capacity)
        self.static, self.capacity = static, capacity
        self._k: Tensor | None = None  # (B, H, C, Dh) buffer, C >= length; static: exactly the stored keys
        self._v: Tensor | None = None
        self._length = 0
        self.state: tuple[Tensor, ...] | None = None
        self.state_length = 0

    @property
    def k(self) -> Tensor | None:
        return self._k if self._k is None or self.static else self._k[..., : self._length, :]

    @property
    def v(self) -> Tensor | None:
        return self._v if self._v is None or self.static else self._v[..., : self._length, :]

    @property
    def length(self) -> int:
        return self.state_length if self._k is None else self._length

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store (static) or append (self-attention) the new keys/values ``(B, H, n, Dh)``; return all cached."""
        n = k.shape[-2]
        if self.static:
            self._k, self._v, self._length = k, v, n
            return k, v
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            return self._concatenate(k, v)
        if self._k is None:
            self._k, self._v = self._allocate(k, n), self._allocate(v, n)
        elif self._length + n > self._k.shape[-2]:
            self._k, self._v = self._grow(self._k, self._length + n), self._grow(self._v, self._length + n)
        end = self._length + n
        self._k[..., self._length : end, :], self._v[..., self._length : end, :] = k, v
        self._length = end
        return self.k, self.v

    def _concatenate(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append by concatenation, for a decode that autograd records: its backward needs the keys/values
        each step attended unchanged, and a write into the shared buffer would modify them in place."""
        self._k, self._v = (k, v) if self._k is None else (torch.cat((self.k, k), -2), torch.cat((self.v, v), -2))
        self._length = self._k.shape[-2]
        return self._k, self._v

    def _allocate(self, like: Tensor, n: int) -> Tensor:
        return like.new_empty(*like.shape[:-2], max(n, self.capacity), like.shape[-1])  # (B, H, C, Dh)

    def _grow(self, buffer: Tensor, needed: int) -> Tensor:
        """A buffer of max(needed, twice the old size) positions holding the filled part of ``buffer``."""
        bigger = buffer.new_empty(*buffer.shape[:-2], max(needed, 2 * buffer.shape[-2]), buffer.shape[-1])
        bigger[..., : self._length, :] = buffer[..., : self._length, :]
        return bigger

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows in ``index`` (beam search reorders hypotheses every step).

        Only the filled part is copied; with as many rows as before, the buffer is rewritten in place.
        """
        if self._k is not None:
            if self.static or self._k.requires_grad or index.numel() != self._k.shape[0]:
                self._k, self._v = self._k.index_select(0, index), self._v.index_select(0, index)
            else:
                for buffer in (self._k, self._v):
                    buffer[..., : self._length, :] = buffer[..., : self._length, :].index_select(0, index)
        if self.state is not None:
            self.state = tuple(t.index_select(0, index) for t in self.state)



def _default_max_len(src: Tensor, max_len: int | None) -> int:
    max_len = src.shape[1] + 50 if max_len is None else max_len
    check_positive("max_len", max_len)
    return max_len


def _next_logits(model: nn.Module, tokens: Tensor, memory: Tensor, src_mask: Tensor, cache) -> Tensor:
    """Logits ``(B, V)`` for the position after ``tokens`` ``(B, t)``."""
    new = tokens[:, -1:] if cache is not None else tokens
    return model.decode(new, memory, src_mask, cache)[:, -1].float()


@torch.no_grad()
def _decode_loop(
    model: nn.Module, src: Tensor, pick: Callable[[Tensor], Tensor], max_len: int | None, use_cache: bool
) -> Tensor:
    cfg = model.config
    max_len = _default_max_len(src, max_len)
    memory, src_mask = model.encode(src)
    tokens = torch.full((src.shape[0], 1), cfg.bos_id, dtype=torch.long, device=src.device)
    finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    cache = model.new_cache() if use_cache else None
    for _ in range(max_len):
        next_ids = pick(_next_logits(model, tokens, memory, src_mask, cache))  # (B,)
        next_ids = next_ids.masked_fill(finished, cfg.pad_id)
        tokens = torch.cat((tokens, next_ids[:, None]), dim=1)  # (B, t + 1)
        finished |= next_ids == cfg.eos_id
        if finished.all():
            break
    return tokens[:, 1:]


def greedy_decode(model: nn.Module, src: Tensor, max_len: int | None = None, use_cache: bool = True) -> Tensor:
    """Pick the most probable token at every step."""
    return _decode_loop(model, src, lambda logits: logits.argmax(-1), max_len, use_cache)


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set to ``-inf`` every logit outside the ``top_k`` largest and outside the nucleus of mass ``top_p``."""
    if top_k is not None:
        check_positive("top_k", top_k)
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the mass *before* it already reaches top_p: the most probable always stays.
        drop_sorted = probs.cumsum(-1) - probs >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_decode(
    model: nn.Module,
    src: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_len: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Sample each token from softmax(logits / temperature), optionally restricted to top-k / top-p."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (use greedy_decode for temperature 0), got {temperature}")
    return _decode_loop(model, src, lambda logits: pick_next(logits, temperature, top_k, top_p, generator),
                        max_len, use_cache)


def pick_next(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """The next token of each row of ``logits`` ``(B, V)``: a sample from softmax(logits / temperature) restricted
    to the ``top_k`` / ``top_p`` nucleus (:func:`filter_logits`), or the argmax at ``temperature=0`` (greedy).
    Returns ``(B,)`` ids."""
    if temperature == 0:
        return logits.argmax(-1)
    probs = filter_logits(logits / temperature, top_k, top_p).softmax(-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@torch.no_grad()
def beam_search(
    model: nn.Module,
    src: Tensor,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_len: int | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Batched beam search; the best hypothesis by score / lp, lp = ((5 + length) / 6)^α (Wu et al. 2016).

    Finished hypotheses stay in the beam with a frozen score (they can only be extended by padding at
    no cost), so ``beam_size=1`` is exactly greedy decoding.
    """
    check_positive("beam_size", beam_size)
    cfg, K = model.config, beam_size
    B, device = src.shape[0], src.device
    max_len = _default_max_len(src, max_len)
    memory, src_mask = model.encode(src)
    memory, src_mask = memory.repeat_interleave(K, 0), src_mask.repeat_interleave(K, 0)  # (B·K, S, D)
    tokens = torch.full((B * K, 1), cfg.bos_id, dtype=torch.long, device=device)
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # at the start all beams are the same: keep one alive so they do not repeat
    finished = torch.zeros(B * K, dtype=torch.bool, device=device)
    lengths = torch.zeros(B * K, device=device)
    cache = model.new_cache() if use_cache else None
    for _ in range(max_len):
        logp = _next_logits(model, tokens, memory, src_mask, cache).log_softmax(-1)  # (B·K, V)
        V = logp.shape[-1]
        logp[finished] = float("-inf")
        logp[finished, cfg.pad_id] = 0.0
        candidates = (scores.view(-1, 1) + logp).view(B, K * V)  # (B, K·V)
        scores, flat_idx = candidates.topk(K, dim=1)  # (B, K)
        rows = (torch.arange(B, device=device)[:, None] * K + flat_idx // V).view(-1)  # (B·K,)
        next_ids = (flat_idx % V).view(-1)
        tokens = torch.cat((tokens[rows], next_ids[:, None]), dim=1)
        finished, lengths = finished[rows], lengths[rows]
        lengths = lengths + (~finished).float()
        finished = finished | (next_ids == cfg.eos_id)
        if cache is not None:
            cache.reorder(rows)
        if finished.all():
            break
    penalty = ((5.0 + lengths) / 6.0) ** length_penalty
    best = (scores.view(-1) / penalty).view(B, K).argmax(dim=1)  # (B,)
    return tokens[torch.arange(B, device=device) * K + best, 1:]


def strip_special(ids: Tensor, eos_id: int, pad_id: int) -> list[list[int]]:
    """Turn ``(B, L)`` generated ids into lists cut at the first EOS (EOS and padding removed)."""
    out = []
    for row in ids.tolist():
        seq = []
        for token in row:
            if token in (eos_id, pad_id):
                break
            seq.append(token)
        out.append(seq)
    return out
