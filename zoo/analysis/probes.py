"""Perturbation probes: change something a model must not see, and measure how far its outputs move.

Each probe takes a built encoder–decoder model that follows the decoding protocol of
:mod:`core.decoding` (``encode``, ``decode``, ``new_cache`` and a ``config`` with ``pad_id``, ``bos_id``,
``eos_id`` and ``tgt_vocab``), runs it in whatever mode it is in (train or eval; under ``no_grad``),
and returns a measurement — 0 means no leak:

* :func:`causal_leak` — replace the target after position t: do the outputs at <= t move?
* :func:`padding_leak` — append padding to every sequence: do the outputs at the real positions move?
* :func:`batch_leak` — decode one sequence alone and inside a batch: does it move?
* :func:`cache_drift` and :func:`decoding_mismatch` — incremental (KV-cache) decoding against full
  recomputation of the prefix: logits and generated token ids.

The tests (``tests/core/test_decoder_causality.py``) run them over every registered variant that has an
autoregressive decoder (:func:`autoregressive_variants`); a conformance check can reuse them as they are.

Shape legend: B batch, S source tokens, T target tokens, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor, nn

from core.decoding import beam_search, greedy_decode
from zoo.registry import Variant, get_variant, list_variants, registrations

PROTOCOL = ("encode", "decode", "new_cache", "config")


@dataclass(frozen=True)
class Drift:
    """How far outputs moved: ``max_abs`` the largest absolute change, ``magnitude`` the largest absolute
    reference output (for a tolerance scaled to it), ``relative`` their ratio."""

    max_abs: float
    magnitude: float

    @property
    def relative(self) -> float:
        return self.max_abs / self.magnitude if self.magnitude else self.max_abs


def is_autoregressive(model: nn.Module) -> bool:
    """Whether ``model`` follows the decoding protocol of :mod:`core.decoding` (it has a causal decoder)."""
    return all(hasattr(model, name) for name in PROTOCOL)


def quiet_overrides(variant: Variant) -> dict[str, float]:
    """Config overrides that turn off every dropout-like rate of the registration ``variant``'s config (fields named
    ``*dropout*`` or ``drop_path*``), so that a model in training mode is deterministic."""
    return {f.name: 0.0 for f in fields(variant.config_class) if "dropout" in f.name or f.name.startswith("drop_path")}


def build_for_probes(name: str, task: str, training: bool = False, seed: int = 0) -> nn.Module:
    """The registration of ``name`` for ``task`` (looked up once) at :func:`probe_preset` with
    :func:`quiet_overrides`, in train or eval mode."""
    variant = get_variant(name, task)
    torch.manual_seed(seed)
    return variant.build(variant.config(probe_preset(variant), **quiet_overrides(variant))).train(training)


def probe_preset(variant: Variant) -> str:
    """The smallest preset of the registration ``variant`` (``tiny`` where it has one, else its default)."""
    return "tiny" if "tiny" in variant.presets else variant.default_preset


def autoregressive_variants() -> list[tuple[str, str]]:
    """``(name, task)`` of every registration whose model (built at :func:`probe_preset`) has a decoder."""
    found = []
    for name in list_variants():
        for variant in registrations(name):
            task = variant.tasks[0]
            if is_autoregressive(variant.build(variant.config(probe_preset(variant)))):
                found.append((name, task))
    return found


# Attribute names under which a module states a block length of its own: the chunk of a chunked kernel, a
# window, a block of rows. A plugin's module declares any other block as ``probe_blocks = (n, ...)``.
BLOCK_ATTRIBUTES = ("probe_blocks", "chunk_size", "block_size", "window_size")
SHORT = 12  # the short probe length
PAD_EXTRA = 5  # pads the padding probe appends: the longest probe leaves room for them within max_len


def block_sizes(model: nn.Module) -> list[int]:
    """Every block length the model works in, ascending: the ints (or tuples of ints) its modules hold under
    :data:`BLOCK_ATTRIBUTES` (linear attention's chunk, a plugin's window), and the capacity of the KV cache's
    first buffer (it grows past it while decoding)."""
    found: set[int] = set()

    def add(value: object) -> None:
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, int) and not isinstance(v, bool) and v > 1:
                found.add(v)

    for module in model.modules():
        for name in BLOCK_ATTRIBUTES:
            add(getattr(module, name, None))
    for entry in getattr(model.new_cache(), "layers", ()):
        for cache in entry if isinstance(entry, (tuple, list)) else (entry,):
            add(getattr(cache, "capacity", None))
    return sorted(found)


def probe_lengths(model: nn.Module) -> list[int]:
    """Target lengths to probe at: short, just past every block boundary (:func:`block_sizes`), and the longest
    the model accepts (``config.max_len``, less the padding probe's :data:`PAD_EXTRA`)."""
    longest = getattr(model.config, "max_len", 64) - PAD_EXTRA
    wanted = {SHORT, longest, *(b + 2 for b in block_sizes(model))}
    return sorted(n for n in wanted if 3 <= n <= longest)


def perturbation_points(length: int, blocks: list[int]) -> list[int]:
    """Positions t after which a causal probe changes the target: the start, the quarters, the end, and just
    before and at the first and the last boundary of every block inside the sequence."""
    points = {0, length // 4, length // 2, 3 * length // 4, length - 2}
    for b in blocks:
        boundaries = list(range(b, length - 1, b))
        for edge in boundaries[:1] + boundaries[-1:]:
            points |= {edge - 1, edge}
    return sorted(t for t in points if 0 <= t <= length - 2)


def _drift(reference: Tensor, other: Tensor, where: Tensor | None = None) -> Drift:
    """Drift of ``other`` from ``reference`` (same shape ``(B, T, V)``), over the rows ``where`` ``(B, T)``."""
    if where is not None:
        reference, other = reference[where], other[where]
    if reference.numel() == 0:
        return Drift(0.0, 0.0)
    return Drift((other - reference).abs().max().item(), reference.abs().max().item())


def _logits(model: nn.Module, src: Tensor, tgt: Tensor) -> Tensor:
    memory, src_mask = model.encode(src)
    return model.decode(tgt, memory, src_mask).float()  # (B, T, V)


def real_tokens(model: nn.Module, shape: tuple[int, ...], generator: torch.Generator, source: bool = False) -> Tensor:
    """Random target (or ``source``) ids of ``shape`` that are none of the special tokens (pad, BOS, EOS)."""
    c = model.config
    vocab = c.src_vocab if source else c.tgt_vocab
    return torch.randint(max(c.pad_id, c.bos_id, c.eos_id) + 1, vocab, shape, generator=generator)


def probe_batch(model: nn.Module, rows: int = 3, src_len: int = 9, tgt_len: int = 12,
                seed: int = 0) -> tuple[Tensor, Tensor]:
    """A batch to probe with: ``(rows, src_len)`` sources and ``(rows, tgt_len)`` BOS-first targets of real
    tokens; every row but the first is right-padded to a random length (the first is full, so that every
    position is probed)."""
    gen = torch.Generator().manual_seed(seed)
    c = model.config
    src = real_tokens(model, (rows, src_len), gen)
    tgt = real_tokens(model, (rows, tgt_len), gen)
    tgt[:, 0] = c.bos_id
    for i in range(1, rows):
        src[i, torch.randint(2, src_len, (1,), generator=gen).item():] = c.pad_id
        tgt[i, torch.randint(2, tgt_len, (1,), generator=gen).item():] = c.pad_id
    return src, tgt


@torch.no_grad()
def causal_leak(model: nn.Module, src: Tensor, tgt: Tensor, t: int, replacement: int | None = None,
                seed: int = 0) -> Drift:
    """Drift of the decoder outputs at positions ``<= t`` when every target token after ``t`` changes.

    The later tokens become other random real tokens, or all ``replacement`` (e.g. ``pad_id``: the same
    shape, the sequence now ending at ``t``). A causal decoder gives exactly 0.
    """
    if not 0 <= t < tgt.shape[1] - 1:
        raise ValueError(f"t must be in [0, {tgt.shape[1] - 2}] (a position with a later one to change), got {t}")
    perturbed = tgt.clone()
    tail = perturbed[:, t + 1 :]
    if replacement is None:
        c = model.config
        low = max(c.pad_id, c.bos_id, c.eos_id) + 1
        fresh = real_tokens(model, tail.shape, torch.Generator().manual_seed(seed)).to(tgt.device)
        shifted = low + (fresh - low + 1) % (c.tgt_vocab - low)
        tail.copy_(torch.where(fresh == tail, shifted, fresh))  # every later token differs from before
    else:
        tail.fill_(replacement)
    return _drift(_logits(model, src, tgt)[:, : t + 1], _logits(model, src, perturbed)[:, : t + 1])


@torch.no_grad()
def padding_leak(model: nn.Module, src: Tensor, tgt: Tensor, extra: int = 3) -> Drift:
    """Drift of the outputs at the original positions when ``extra`` pad tokens are appended to every
    source and target (right-padding, as the task runners pad). Only the non-pad target rows count."""
    pad = model.config.pad_id
    longer_src = nn.functional.pad(src, (0, extra), value=pad)
    longer_tgt = nn.functional.pad(tgt, (0, extra), value=pad)
    reference = _logits(model, src, tgt)
    return _drift(reference, _logits(model, longer_src, longer_tgt)[:, : tgt.shape[1]], tgt != pad)


@torch.no_grad()
def batch_leak(model: nn.Module, src: Tensor, tgt: Tensor, other_src: Tensor, other_tgt: Tensor) -> Drift:
    """Drift of the outputs of sequence 0 of the batch ``src``/``tgt`` when the rest of its batch is replaced
    by the ``other`` sequences (sequence 0 padded to their length where they are longer). Give a batch of
    one to compare a sequence alone with it in company; give others of the batch's own shape to compare
    two batches of the same shape. Only the non-pad target rows of sequence 0 count."""
    pad = model.config.pad_id
    reference = _logits(model, src, tgt)[:1]  # (1, T, V)
    S, T = max(src.shape[1], other_src.shape[1]), max(tgt.shape[1], other_tgt.shape[1])

    def padded(ids: Tensor, n: int) -> Tensor:
        return nn.functional.pad(ids, (0, n - ids.shape[1]), value=pad)

    mixed_src = torch.cat((padded(src[:1], S), padded(other_src, S)))
    mixed_tgt = torch.cat((padded(tgt[:1], T), padded(other_tgt, T)))
    mixed = _logits(model, mixed_src, mixed_tgt)[:1, : tgt.shape[1]]
    return _drift(reference, mixed, tgt[:1] != pad)


@torch.no_grad()
def cache_drift(model: nn.Module, src: Tensor, tgt: Tensor) -> Drift:
    """Drift of teacher-forced logits computed one position per call with a KV cache (as decoding runs)
    from those of one full call. Only rows before a row's first pad count (the cached path does not mask
    pads: while decoding, a hypothesis only gets pads after its EOS)."""
    memory, src_mask = model.encode(src)
    full = model.decode(tgt, memory, src_mask).float()  # (B, T, V)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, i : i + 1], memory, src_mask, cache).float() for i in range(tgt.shape[1])]
    before_pad = (tgt != model.config.pad_id).long().cumprod(dim=1).bool()  # (B, T)
    return _drift(full, torch.cat(steps, dim=1), before_pad)


def decoding_mismatch(model: nn.Module, src: Tensor, beam_size: int | None = None, max_len: int = 12) -> int:
    """Generated token ids that differ between cached and full-recomputation decoding (greedy, or beam
    search with ``beam_size``); a length difference counts as that many mismatches. 0 means equal."""
    def decode(use_cache: bool) -> Tensor:
        if beam_size is None:
            return greedy_decode(model, src, max_len=max_len, use_cache=use_cache)
        return beam_search(model, src, beam_size=beam_size, max_len=max_len, use_cache=use_cache)

    cached, full = decode(True), decode(False)
    common = min(cached.shape[1], full.shape[1])
    differ = (cached[:, :common] != full[:, :common]).sum().item()
    return int(differ + abs(cached.shape[1] - full.shape[1]) * cached.shape[0])
