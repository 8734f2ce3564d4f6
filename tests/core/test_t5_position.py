"""T5's relative position bias and NoPE, against transformers' T5 and a per-element reference."""

import pytest
import torch

from core.model import build_transformer
from core.position import (
    POSITIONAL_SCHEMES,
    NoPosition,
    T5RelativeBias,
    build_position,
    relative_position_bucket,
)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (16, 40)])
def test_buckets_equal_transformers_t5(bidirectional, num_buckets, max_distance):
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    relative = torch.arange(-300, 301)[None, :] - torch.zeros(3, 1, dtype=torch.long)  # (3, 601), every distance
    expected = t5.T5Attention._relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    got = relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    assert torch.equal(got, expected)
    assert int(got.max()) == num_buckets - 1


def test_bias_equals_a_per_element_lookup_with_queries_last():
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    heads, n_q, n_k = 3, 4, 200  # queries are the last 4 of 200 positions (decoding with a cache)
    scheme = T5RelativeBias(heads, bidirectional=False)
    torch.nn.init.normal_(scheme.relative_attention_bias.weight)
    bias = scheme.score_bias(n_q, n_k, torch.device("cpu"))
    assert bias.shape == (heads, n_q, n_k)
    table = scheme.relative_attention_bias.weight  # (buckets, H)
    for i in range(n_q):
        query = n_k - n_q + i
        for j in range(n_k):
            bucket = t5.T5Attention._relative_position_bucket(torch.tensor(j - query), False, 32, 128)
            for h in range(heads):
                assert bias[h, i, j] == table[bucket, h]


def test_build_position_knows_t5_and_none():
    assert {"t5", "none"} <= set(POSITIONAL_SCHEMES)
    assert build_position("t5", 32, 4, causal=True).bidirectional is False
    assert build_position("t5", 32, 4).bidirectional is True  # the encoder–decoder's encoder looks both ways
    nope = build_position("none", 32, 4)
    x = torch.randn(2, 5, 32)
    assert isinstance(nope, NoPosition) and nope.embed(x, 3) is x and not list(nope.parameters())
    assert nope.score_bias(5, 5, x.device) is None


def test_the_encoder_decoder_takes_the_new_schemes_and_keeps_its_learned_table_error():
    src, tgt = torch.randint(3, 64, (2, 7)), torch.randint(3, 64, (2, 5))
    for position in ("t5", "none"):
        assert build_transformer("tiny", position=position)(src, tgt).shape == (2, 5, 64)
    with pytest.raises(ValueError, match=r"reaches position 7 but the learned position table has max_len=6"):
        build_transformer("tiny", position="learned", max_len=6)(src, tgt)
