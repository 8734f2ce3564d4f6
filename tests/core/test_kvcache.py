"""KVCache: appends into a buffer that doubles when full, reorders rows, and decodes as full recomputation does.

Copies are compared with ``torch.equal`` (the same numbers moved, not recomputed); two computations of a model
(cached vs full decoding, gradients through a cached decode vs a full pass) run in float64 (tests/README.md).
"""

import math
from types import SimpleNamespace

import pytest
import torch

from core.decoding import KVCache, beam_search, greedy_decode
from core.model import build_transformer
from core.multihead import MultiHeadAttention
from tests.numerics import assert_close_fp64, float64


def _pieces(sizes, batch=3, heads=2, d_head=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, heads, n, d_head, generator=gen), torch.randn(batch, heads, n, d_head, generator=gen))
            for n in sizes]


def test_appends_past_the_capacity_equal_concatenation():
    pieces = _pieces([1, 3, 1, 2, 5])
    cache = KVCache(capacity=2)
    for i, (k, v) in enumerate(pieces):
        got_k, got_v = cache.update(k, v)
        assert torch.equal(got_k, torch.cat([p[0] for p in pieces[: i + 1]], dim=-2))
        assert torch.equal(got_v, torch.cat([p[1] for p in pieces[: i + 1]], dim=-2))
    assert cache.length == 12 and cache.k.shape == (3, 2, 12, 4)


def test_the_buffer_grows_geometrically_not_at_every_step():
    cache, moves = KVCache(capacity=4), 0
    previous = None
    for k, v in _pieces([1] * 1000, batch=1, heads=1):
        cache.update(k, v)
        if cache.k.data_ptr() != previous:
            moves, previous = moves + 1, cache.k.data_ptr()
    # the first buffer and one per doubling: 4 -> 8 -> ... -> 1024
    assert moves == 1 + math.ceil(math.log2(1000 / 4))


def test_reorder_keeps_the_rows_of_the_index():
    pieces = _pieces([2, 3])
    cache = KVCache(capacity=2)
    for k, v in pieces:
        cache.update(k, v)
    full_k = torch.cat([p[0] for p in pieces], dim=-2)
    cache.reorder(torch.tensor([2, 0, 0]))  # as many rows: rewritten in place
    assert torch.equal(cache.k, full_k[[2, 0, 0]])
    more = _pieces([1], seed=1)[0]
    cache.update(*more)  # appending after a reorder continues the reordered rows
    assert torch.equal(cache.k, torch.cat((full_k[[2, 0, 0]], more[0]), dim=-2))
    cache.reorder(torch.tensor([1]))  # fewer rows
    assert cache.k.shape == (1, 2, 6, 4) and torch.equal(cache.v[:, :, -1:], more[1][[1]])


def test_static_cache_keeps_what_it_was_given():
    (k, v), = _pieces([5])
    cache = KVCache(static=True)
    cache.update(k, v)
    assert cache.k is k and cache.length == 5
    cache.reorder(torch.tensor([1, 1, 0]))
    assert torch.equal(cache.v, v[[1, 1, 0]])


@float64()
def test_gradients_through_a_cached_decode_equal_the_full_pass():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16, requires_grad=True)
    full_grad = torch.autograd.grad(attn(x, is_causal=True).square().sum(), x)[0]
    cache = KVCache(capacity=2)  # autograd needs each step's keys unchanged: the cache concatenates then
    steps = torch.cat([attn(x[:, t : t + 1], cache=cache) for t in range(5)], dim=1)
    assert_close_fp64(torch.autograd.grad(steps.square().sum(), x)[0], full_grad)


class _NoEOS:
    """A model whose EOS never matches, so that every row decodes max_len tokens (past the initial capacity)."""

    def __init__(self, model):
        self.model = model
        self.config = SimpleNamespace(bos_id=model.config.bos_id, eos_id=-1, pad_id=model.config.pad_id)
        self.encode, self.decode, self.new_cache = model.encode, model.decode, model.new_cache


@float64()
def test_long_greedy_and_beam_decodes_with_the_cache_equal_full_recomputation():
    torch.manual_seed(3)
    model = _NoEOS(build_transformer("tiny", position="rope").eval())
    src = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]])
    cached = greedy_decode(model, src, max_len=140)  # crosses the 64- and 128-position buffers
    assert cached.shape == (2, 140)
    assert torch.equal(cached, greedy_decode(model, src, max_len=140, use_cache=False))
    beams = beam_search(model, src, beam_size=3, max_len=70)  # reorders a grown buffer at every step
    assert torch.equal(beams, beam_search(model, src, beam_size=3, max_len=70, use_cache=False))


def test_bad_capacity():
    with pytest.raises(ValueError, match="capacity"):
        KVCache(capacity=0)
