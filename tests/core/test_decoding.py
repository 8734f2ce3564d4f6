"""Decoding: the KV cache changes no token, beam 1 is greedy, sampling filters are right.

Two decoding paths are compared token for token, so their models run in float64: a float32 near-tie between
the two best tokens could be broken differently by two kernels (cached vs full, one query vs many).
"""

import pytest
import torch

from core.decoding import beam_search, filter_logits, greedy_decode, sample_decode, strip_special
from core.model import build_transformer
from tests.numerics import float64


def _model():
    torch.manual_seed(1)
    m = build_transformer("tiny", position="rope").eval()
    with torch.no_grad():  # make EOS likely enough that some hypotheses finish early
        m.generator.weight[2] *= 6.0
    return m


@pytest.fixture
def model():
    with float64():
        return _model()


SRC = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0], [20, 21, 22, 23, 0, 0]])


@pytest.mark.parametrize("position", ["sinusoidal", "learned", "rope", "alibi"])
@float64()
def test_greedy_with_cache_equals_full_recomputation(position):
    model = build_transformer("tiny", position=position).eval()
    cached = greedy_decode(model, SRC, max_len=12)
    full = greedy_decode(model, SRC, max_len=12, use_cache=False)
    assert torch.equal(cached, full)


@float64()
def test_beam_with_cache_equals_full_recomputation(model):
    cached = beam_search(model, SRC, beam_size=3, max_len=10)
    full = beam_search(model, SRC, beam_size=3, max_len=10, use_cache=False)
    assert torch.equal(cached, full)


@float64()
def test_beam_size_one_is_greedy(model):
    assert torch.equal(beam_search(model, SRC, beam_size=1, max_len=12), greedy_decode(model, SRC, max_len=12))


@float64()
def test_sampling_with_cache_equals_full(model):
    a = sample_decode(model, SRC, temperature=1.3, top_k=10, max_len=8, generator=torch.Generator().manual_seed(3))
    b = sample_decode(
        model, SRC, temperature=1.3, top_k=10, max_len=8, generator=torch.Generator().manual_seed(3), use_cache=False
    )
    assert torch.equal(a, b)


@pytest.mark.parametrize("decode", ["greedy", "beam"])
def test_trained_model_outputs_are_valid_and_eos_terminated(copy_model, decode):
    src = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 0, 0, 0], [12, 0, 0, 0, 0, 0], [13, 14, 15, 3, 0, 0]])
    if decode == "greedy":
        out = greedy_decode(copy_model, src, max_len=10)
    else:
        out = beam_search(copy_model, src, beam_size=3, max_len=10)
    for row in out.tolist():
        assert 2 in row, f"no EOS in {row}"
        eos = row.index(2)
        assert all(t == 0 for t in row[eos + 1 :])  # padding after EOS
        assert all(3 <= t < 16 for t in row[:eos])  # only real tokens before it
    assert strip_special(out, 2, 0) == [[t for t in s if t] for s in src.tolist()]  # it learned to copy


def test_filter_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, top_k=2)[0, 2:]).all()
    assert torch.isfinite(filter_logits(logits, top_k=2)[0, :2]).all()
    kept = torch.isfinite(filter_logits(logits, top_p=0.75)[0]).tolist()
    assert kept == [True, True, False, False]  # 0.5 < 0.75, 0.5 + 0.3 >= 0.75
    assert torch.isfinite(filter_logits(logits, top_p=0.4)[0]).tolist() == [True, False, False, False]


@float64()
def test_low_temperature_sampling_is_greedy(model):
    sampled = sample_decode(model, SRC, temperature=1e-4, max_len=8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sampled, greedy_decode(model, SRC, max_len=8))


def test_bad_decoding_arguments(model):
    with pytest.raises(ValueError, match="temperature"):
        sample_decode(model, SRC, temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        sample_decode(model, SRC, top_p=1.5)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, SRC, beam_size=0)


def test_strip_special():
    ids = torch.tensor([[5, 6, 2, 0], [7, 2, 0, 0], [8, 9, 10, 11]])
    assert strip_special(ids, eos_id=2, pad_id=0) == [[5, 6], [7], [8, 9, 10, 11]]
