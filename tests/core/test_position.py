"""Positional schemes: formulas, extrapolation, RoPE's relative property, ALiBi's slopes."""

import math

import pytest
import torch
from torch.testing import assert_close

from core.position import (
    ALiBiPosition,
    LearnedPosition,
    RotaryPosition,
    SinusoidalPosition,
    alibi_slopes,
    build_position,
    sinusoid_table,
)


def test_sinusoid_matches_formula():
    table = sinusoid_table(50, 16)
    for pos in (0, 1, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_sinusoid_extends_past_longest_length():
    pe = SinusoidalPosition(8, initial_length=4)
    x = torch.zeros(1, 10, 8)
    assert_close(pe.embed(x), sinusoid_table(10, 8)[None])
    assert_close(pe.embed(torch.zeros(1, 2, 8), offset=8), sinusoid_table(10, 8)[None, 8:])


def test_learned_position_errors_past_max_len():
    pe = LearnedPosition(8, max_len=5)
    assert pe.embed(torch.zeros(2, 5, 8)).shape == (2, 5, 8)
    with pytest.raises(ValueError, match="max_len=5"):
        pe.embed(torch.zeros(2, 6, 8))


def test_rope_scores_depend_only_on_offset():
    rope = RotaryPosition(8)
    q, k = torch.randn(8), torch.randn(8)

    def score(m, n):
        qm = rope.rotate(q.expand(1, 1, m + 1, 8).contiguous())[0, 0, m]
        kn = rope.rotate(k.expand(1, 1, n + 1, 8).contiguous())[0, 0, n]
        return (qm @ kn).item()

    # RoPE's angles are float32 whatever the input: 3.6e-7 apart at |q||k| = 6.9 (AVX2 and AVX-512 alike)
    assert score(5, 3) == pytest.approx(score(12, 10), abs=1e-4)
    assert score(3, 3) == pytest.approx(score(0, 0), abs=1e-4)
    assert score(5, 3) != pytest.approx(score(5, 1), abs=1e-4)


def test_rope_preserves_norm_and_rejects_odd_dims():
    rope = RotaryPosition(6)
    x = torch.randn(2, 3, 9, 6)
    assert_close(rope.rotate(x).norm(dim=-1), x.norm(dim=-1))
    assert_close(rope.rotate(x)[:, :, 0], x[:, :, 0])  # position 0 is not rotated
    with pytest.raises(ValueError, match="even"):
        RotaryPosition(7)


def test_alibi_slopes_as_in_paper():
    # Press et al.: for 8 heads the slopes are 1/2, 1/4, ..., 1/256.
    assert_close(alibi_slopes(8), torch.tensor([2.0**-i for i in range(1, 9)]))
    # Non power of two: those of 4 heads, then every other one of 8 heads.
    assert_close(alibi_slopes(6), torch.tensor([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]))


def test_alibi_bias_is_linear_in_distance():
    bias = ALiBiPosition(2).score_bias(3, 3, torch.device("cpu"))
    assert bias.shape == (2, 3, 3)
    assert_close(bias[0], -(2**-4) * torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]]))
    last = ALiBiPosition(2).score_bias(1, 3, torch.device("cpu"))  # a cached step is the last query
    assert_close(last, bias[:, 2:])


def test_unknown_scheme_suggests():
    with pytest.raises(ValueError, match="Did you mean 'rope'"):
        build_position("rop", 16, 4)
