"""Linear attention: chunked causal form = recurrent form = direct O(N²) math, FAVOR+, masks, errors, the variant."""

import math

import pytest
import torch
from torch.testing import assert_close

import zoo
import zoo.linear
from core.attention import build_kernel, reference_attention
from core.decoding import KVCache, beam_search, greedy_decode
from core.masks import causal_mask
from core.multihead import MultiHeadAttention
from tasks.engine.registry import task_shape
from tests.numerics import assert_close_fp64, float64
from zoo.analysis.delta import measure, module_flops
from zoo.linear import FavorFeatures, LinearAttention, orthogonal_gaussian

B, H, D = 2, 3, 8


def qkv(n_q=13, n_k=None, d=D, dtype=torch.float64):
    n_k = n_q if n_k is None else n_k
    return torch.randn(B, H, n_q, d, dtype=dtype), torch.randn(B, H, n_k, d, dtype=dtype), torch.randn(
        B, H, n_k, d, dtype=dtype
    )


def direct(kernel, q, k, v, mask=None, is_causal=False):
    """The same kernel the slow way: the full Nq×Nk matrix φ(Q)φ(K)ᵀ, masked, normalised by its row sums."""
    phi_q, phi_k, _ = kernel.feature_map(q, k)
    scores = phi_q @ phi_k.transpose(-2, -1)  # (B, H, Nq, Nk)
    if mask is not None:
        scores = scores * mask
    if is_causal:
        scores = scores * causal_mask(q.shape[-2], k.shape[-2])
    return scores @ v / scores.sum(-1, keepdim=True).clamp_min(kernel.eps)


def recurrent(kernel, q, k, v, sizes):
    """Run ``kernel.step`` over consecutive pieces of the sequence, as incremental decoding does."""
    cache, outs, start = KVCache(), [], 0
    for size in sizes:
        piece = slice(start, start + size)
        outs.append(kernel.step(q[:, :, piece], k[:, :, piece], v[:, :, piece], cache))
        start += size
    return torch.cat(outs, dim=-2), cache


@pytest.mark.parametrize("chunk_size", [1, 4, 5, 13, 64])
def test_causal_chunked_equals_direct_and_recurrent(chunk_size):
    kernel = LinearAttention(chunk_size=chunk_size)
    q, k, v = qkv(13)
    out, _ = kernel(q, k, v, is_causal=True)
    assert_close(out, direct(kernel, q, k, v, is_causal=True))
    assert_close(recurrent(kernel, q, k, v, [1] * 13)[0], out)  # token by token
    assert_close(recurrent(kernel, q, k, v, [5, 1, 7])[0], out)  # several positions per step


def test_recurrent_state_has_a_fixed_size():
    kernel = LinearAttention()
    q, k, v = qkv(9)
    _, cache = recurrent(kernel, q, k, v, [1] * 9)
    assert cache.k is None and [tuple(t.shape) for t in cache.state] == [(B, H, D, D), (B, H, D)]


def test_non_causal_equals_direct():
    kernel = LinearAttention()
    q, k, v = qkv(7, 11)
    assert_close(kernel(q, k, v)[0], direct(kernel, q, k, v))


@pytest.mark.parametrize("n_q", [4, 11, 15])
def test_causal_is_aligned_bottom_right(n_q):
    kernel = LinearAttention(chunk_size=3)
    q, k, v = qkv(n_q, 11)
    out, _ = kernel(q, k, v, is_causal=True)
    assert_close(out, direct(kernel, q, k, v, is_causal=True))
    if n_q > 11:
        assert out[:, :, : n_q - 11].abs().max() == 0  # queries before every key attend nothing


@pytest.mark.parametrize("is_causal", [False, True])
def test_padded_keys_change_nothing(is_causal):
    kernel = LinearAttention(chunk_size=4)
    q, k, v = qkv(10)
    mask = torch.ones(B, 1, 1, 10, dtype=torch.bool)
    mask[0, ..., 6:] = False
    out, _ = kernel(q, k, v, mask, is_causal=is_causal)
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 6:], v2[0, :, 6:] = 100.0, -100.0
    assert_close(kernel(q, k2, v2, mask, is_causal=is_causal)[0], out)
    assert_close(out, direct(kernel, q, k, v, mask, is_causal))


def test_query_that_may_attend_nothing_gives_zeros():
    kernel = LinearAttention(feature_map="favor")
    q, k, v = qkv(5)
    out, _ = kernel(q, k, v, torch.zeros(B, 1, 1, 5, dtype=torch.bool))
    assert torch.isfinite(out).all() and out.abs().max() == 0


def test_a_key_mask_repeated_over_queries_is_accepted():
    kernel = LinearAttention()
    q, k, v = qkv(6)
    key_mask = torch.rand(B, 1, 1, 6) > 0.3
    assert_close(kernel(q, k, v, key_mask.expand(B, 1, 6, 6))[0], kernel(q, k, v, key_mask)[0])


def test_implied_weights_reproduce_the_output():
    kernel = LinearAttention(chunk_size=4)
    q, k, v = qkv(9)
    out, weights = kernel(q, k, v, is_causal=True, need_weights=True)
    assert weights.shape == (B, H, 9, 9) and weights.triu(1).abs().max() == 0
    assert_close(weights.sum(-1), torch.ones(B, H, 9, dtype=q.dtype))
    assert_close(weights @ v, out)


def test_favor_approximates_softmax_attention():
    torch.manual_seed(0)
    q, k, v = (0.5 * t for t in qkv(32, d=16, dtype=torch.float32))  # |q|, |k| ~ 2: moderate estimator variance
    errors = {}
    for is_causal in (False, True):
        exact, _ = reference_attention(q, k, v, is_causal=is_causal)
        for m in (256, 4096):
            approx, _ = LinearAttention(feature_map="favor", n_features=m)(q, k, v, is_causal=is_causal)
            errors[is_causal, m] = ((approx - exact).norm() / exact.norm()).item()
    for is_causal in (False, True):  # small, and shrinking like 1/√m
        assert errors[is_causal, 256] < 0.2 and errors[is_causal, 4096] < 0.07, errors
        assert errors[is_causal, 4096] < errors[is_causal, 256] / 2, errors


def test_favor_features_are_unbiased_and_orthogonal():
    torch.manual_seed(0)
    d = 16
    w = orthogonal_gaussian(64 * d, d)  # 64 blocks of d orthogonal rows
    block = w[:d] / w[:d].norm(dim=-1, keepdim=True)
    assert_close(block @ block.t(), torch.eye(d), atol=1e-5, rtol=0)
    assert abs((w * w).sum(-1).mean() / d - 1) < 0.05  # rows have Gaussian lengths: E|ω|² = d
    x, y = 0.25 * torch.randn(2, 64, d)  # 64 pairs
    estimates = torch.exp((x + y) @ w.t() - ((x * x).sum(-1) + (y * y).sum(-1))[:, None] / 2).mean(-1)  # E[φ(x)·φ(y)]
    ratios = estimates / torch.exp((x * y).sum(-1))
    assert abs(ratios.mean() - 1) < 0.01, ratios  # each estimate is noisy (variance ~ e^|x+y|² / m), not biased


def test_favor_step_rescales_its_state_as_keys_grow():
    kernel = LinearAttention(feature_map="favor", chunk_size=4)
    q, k, v = qkv(10)
    k = k * torch.linspace(0.1, 3.0, 10, dtype=k.dtype)[:, None]  # later keys have larger features
    out, _ = kernel(q, k, v, is_causal=True)
    assert_close(recurrent(kernel, q, k, v, [1] * 10)[0], out)


def test_redraw_changes_the_features():
    features = FavorFeatures(n_features=12)
    q, k, _ = qkv(4)
    features(q, k)
    first = features.projection.clone()
    assert first.shape == (12, D)
    features.redraw()
    assert not torch.equal(first, features.projection)


def test_redraw_interval_counts_training_calls_only():
    features = FavorFeatures(redraw_interval=2)
    q, k, _ = qkv(4)
    draws = []
    for _ in range(5):
        features(q, k)
        draws.append(features.projection.clone())
    assert [torch.equal(a, b) for a, b in zip(draws, draws[1:])] == [True, False, True, False]
    features.eval()
    features(q, k)
    features(q, k)
    assert torch.equal(features.projection, draws[-1])


def test_lazily_drawn_features_load_from_a_state_dict():
    trained = LinearAttention(feature_map="favor")
    q, k, v = qkv(5, dtype=torch.float32)
    out, _ = trained(q, k, v)
    fresh = LinearAttention(feature_map="favor")
    fresh.load_state_dict(trained.state_dict())
    assert_close(fresh(q, k, v)[0], out)


@pytest.mark.parametrize(
    "options, error, match",
    [
        (dict(feature_map="eluu"), ValueError, "Did you mean 'elu'"),
        (dict(feature_map="favor", n_features=0), ValueError, "n_features must be > 0"),
        (dict(feature_map="favor", n_features=-3), ValueError, "n_features must be > 0"),
        (dict(feature_map="favor", redraw_interval=-1), ValueError, "redraw_interval must be >= 0"),
        (dict(n_features=16), ValueError, "only applies to feature_map='favor'"),
        (dict(redraw_interval=10), ValueError, "only applies to feature_map='favor'"),
        (dict(chunk_size=0), ValueError, "chunk_size must be > 0"),
        (dict(chunk_size=2.5), TypeError, "chunk_size must be an int"),
        (dict(eps=0.0), ValueError, "eps must be > 0"),
        (dict(dropout=0.1), ValueError, "nothing to drop"),
    ],
)
def test_bad_configs(options, error, match):
    with pytest.raises(error, match=match):
        LinearAttention(**options)


def test_unsupported_bias_and_masks():
    kernel = LinearAttention()
    q, k, v = qkv(6)
    with pytest.raises(ValueError, match="cannot add a score bias"):
        kernel(q, k, v, bias=torch.zeros(1, H, 6, 6))
    with pytest.raises(ValueError, match="key-padding masks .* and is_causal=True only"):
        kernel(q, k, v, causal_mask(6)[None, None])
    with pytest.raises(ValueError, match="unknown attention kernel 'linaer'. Did you mean 'linear'"):
        build_kernel("linaer")
    with pytest.raises(ValueError, match="cannot add a score bias"):
        zoo.create("linear", preset="tiny", position="alibi")(torch.full((1, 4), 5), torch.full((1, 3), 5))


@float64()
def test_recurrent_hook_counts_positions_and_rejects_masks():
    mha = MultiHeadAttention(16, 2, LinearAttention()).eval()
    x = torch.randn(B, 5, 16)
    cache = KVCache()
    steps = torch.cat([mha(x[:, i : i + 1], is_causal=True, cache=cache) for i in range(5)], dim=1)
    assert cache.length == 5 and cache.k is None
    assert_close_fp64(steps, mha(x, is_causal=True))
    with pytest.raises(ValueError, match="without masks"):
        mha(x[:, :1], mask=torch.ones(B, 1, 1, 6, dtype=torch.bool), cache=cache)


def test_every_parameter_gets_a_gradient():
    model = zoo.create("linear", preset="tiny")
    src, tgt = torch.randint(3, 64, (2, 9)), torch.randint(3, 64, (2, 7))
    src[1, 6:] = 0  # padding
    model(src, tgt).sum().backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


@pytest.mark.parametrize("position, options", [("sinusoidal", {}), ("rope", {"feature_map": "favor"})])
@float64()  # token equality needs no argmax near-tie that float32 rounding could flip
def test_cached_recurrent_decoding_equals_full_recomputation(position, options):
    torch.manual_seed(0)
    model = zoo.create("linear", preset="tiny", position=position, kernel_options=options).eval()
    src = torch.randint(3, 64, (3, 8))
    src[2, 5:] = 0
    with torch.no_grad():
        model.decoder.layers[0].self_attn.qkv.weight.mul_(3.0)  # sharper attention: differences would show
    cached = greedy_decode(model, src, max_len=12, use_cache=True)
    assert torch.equal(cached, greedy_decode(model, src, max_len=12, use_cache=False))
    assert torch.equal(beam_search(model, src, 3, max_len=8), beam_search(model, src, 3, max_len=8, use_cache=False))


def test_variant_registration():
    variant = zoo.get_variant("linear", "translation")
    model = zoo.create("linear", preset="tiny")
    assert model.config.kernel == "linear" and isinstance(model.encoder.layers[0].self_attn.kernel, LinearAttention)
    assert variant.parts_changed == ("attention",) and "lite" in variant.presets
    lite = variant.config("lite")
    assert (lite.d_model, lite.heads, lite.encoder_layers, lite.decoder_layers, lite.d_ff) == (128, 2, 2, 2, 256)
    assert variant.config("tiny", **variant.classic_overrides()).kernel == "sdpa"
    assert "2N²d" in variant.summary and "2Nd²" in variant.summary


def test_kernel_flops_are_counted_and_linear_in_n():
    model = zoo.create("linear", preset="tiny", encoder_layers=1, decoder_layers=0)
    n, d, heads = 40, 8, 4
    per_module, _ = module_flops(model.encoder, (torch.randn(1, n, 32), None))
    # φ(K)ᵀV and φ(Q)·S: 2·N·d² each per head, plus the normaliser φ(Q)·z: 2·N·d
    assert per_module["layers.0.self_attn.kernel"] == heads * (2 * 2 * n * d * d + 2 * n * d)


def test_delta_report_shows_linear_growth():
    report = measure("linear", task_shape("translation"), preset="tiny", memory=False)
    (part,) = report["parts"]
    assert part["part"] == "attention" and part["removed"] == {"ScaledDotProductAttention": 6}
    assert report["attention_growth"]["classic"]["kernel_exponent"] == pytest.approx(2.0)
    # The default chunk (64) is longer than these sequences (32-128 tokens), so the decoder's causal kernel
    # still does its in-chunk C×C work; with chunks no longer than the head width the kernel is exactly linear.
    assert 1.0 <= report["attention_growth"]["variant"]["kernel_exponent"] < 1.4
    short_chunks = measure("linear", task_shape("translation"), preset="tiny", memory=False,
                           overrides={"kernel_options": {"chunk_size": 8}})
    assert short_chunks["attention_growth"]["variant"]["kernel_exponent"] == pytest.approx(1.0)
    assert math.isclose(report["attention_growth"]["variant"]["attention_exponent"], 1.0, abs_tol=0.1)
