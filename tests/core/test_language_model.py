"""The decoder-only language model: GPT-2 equivalence, causality, the KV cache, bad input, parameter counts."""

import pytest
import torch

from core.generation import generate
from core.language_model import PRESETS, LanguageModel, LanguageModelConfig, build_language_model
from core.layers import DecoderLayer
from core.model import build_transformer
from core.parts import freeze_parts, parameters_by_part
from core.position import POSITIONAL_SCHEMES
from zoo.linear import LinearAttention  # noqa: F401  (registers the "linear" kernel)
from zoo.moe import MOE_OPTIONS

V = 65  # nanoGPT's shakespeare_char vocabulary


def tiny(dtype=torch.float64, **overrides) -> LanguageModel:
    torch.manual_seed(0)
    return build_language_model("tiny", vocab_size=V, **overrides).to(dtype).eval()


def ids(batch: int = 2, length: int = 10, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (batch, length), generator=torch.Generator().manual_seed(seed))


# Every position scheme, and linear attention's recurrent decoding with the schemes it supports (no score bias).
MODELS = [dict(position=p) for p in POSITIONAL_SCHEMES] + [
    dict(kernel="linear", position=p) for p in ("sinusoidal", "learned", "rope", "none")
] + [dict(ffn="moe", ffn_options=dict(MOE_OPTIONS))]
MODEL_IDS = [",".join(f"{k}={v}" for k, v in m.items() if k != "ffn_options") for m in MODELS]


def test_equals_gpt2_with_the_weights_copied_across():
    transformers = pytest.importorskip("transformers")
    d, heads, layers, d_ff, max_len = 32, 4, 2, 64, 16
    ours = build_language_model(
        vocab_size=V, d_model=d, heads=heads, layers=layers, d_ff=d_ff, max_len=max_len, dropout=0.0,
        position="learned", norm_first=True, activation="gelu", bias=True, tie_output=True,
        scale_embeddings=False, init="normal",
    ).double().eval()
    config = transformers.GPT2Config(
        vocab_size=V, n_positions=max_len, n_embd=d, n_layer=layers, n_head=heads, n_inner=d_ff,
        activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
    )
    gpt2 = transformers.GPT2LMHeadModel(config).double().eval()
    torch.manual_seed(0)
    with torch.no_grad():  # GPT-2's Conv1D stores (in, out): our nn.Linear holds the transpose
        for p in ours.parameters():  # biases and norms off their 0/1 starts, so a swapped pair shows
            p.add_(torch.randn_like(p) * 0.1)
        g = gpt2.transformer
        g.wte.weight.copy_(ours.embedding.weight)
        g.wpe.weight.copy_(ours.position.weight)
        for block, layer in zip(g.h, ours.decoder.layers):
            for theirs, mine in ((block.attn.c_attn, layer.self_attn.qkv), (block.attn.c_proj, layer.self_attn.out),
                                 (block.mlp.c_fc, layer.ffn.fc1), (block.mlp.c_proj, layer.ffn.fc2)):
                theirs.weight.copy_(mine.weight.T)
                theirs.bias.copy_(mine.bias)
            for theirs, mine in ((block.ln_1, layer.norm1), (block.ln_2, layer.norm3)):
                theirs.weight.copy_(mine.weight)
                theirs.bias.copy_(mine.bias)
        g.ln_f.weight.copy_(ours.decoder.norm.weight)
        g.ln_f.bias.copy_(ours.decoder.norm.bias)
        x = ids(3, max_len)
        expected = gpt2(x).logits
        got = ours(x)
    assert gpt2.lm_head.weight.data_ptr() == g.wte.weight.data_ptr()  # both tie the head to the embedding
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


def test_the_decoder_only_layer_has_no_cross_attention():
    model = tiny()
    layer = model.decoder.layers[0]
    assert isinstance(layer, DecoderLayer) and layer.cross_attn is None and layer.norm2 is None
    assert model.head.weight is model.embedding.weight
    with pytest.raises(ValueError, match="without cross-attention"):
        layer(torch.zeros(1, 3, 32, dtype=torch.float64), memory=torch.zeros(1, 3, 32, dtype=torch.float64))


@pytest.mark.parametrize("overrides", MODELS, ids=MODEL_IDS)
def test_is_causal(overrides):
    model = tiny(**overrides)
    x = ids(2, 12)
    t = 7
    changed = x.clone()
    changed[:, t] = (changed[:, t] + 1) % V
    with torch.no_grad():
        before, after = model(x), model(changed)
    torch.testing.assert_close(after[:, :t], before[:, :t], rtol=1e-12, atol=1e-12)
    assert (after[:, t:] - before[:, t:]).abs().amax() > 1e-6  # the change is seen from t on


@pytest.mark.parametrize("overrides", MODELS, ids=MODEL_IDS)
def test_generation_with_the_cache_gives_the_tokens_of_full_recomputation(overrides):
    model = tiny(**overrides)
    prompt = ids(2, 5)
    greedy = generate(model, prompt, 20, temperature=0)
    assert torch.equal(generate(model, prompt, 20, temperature=0, use_cache=False), greedy)
    assert torch.equal(greedy[:, :5], prompt) and greedy.shape == (2, 25)

    def sample(use_cache: bool) -> torch.Tensor:
        return generate(model, prompt, 20, temperature=1.3, top_k=20, top_p=0.95,
                        generator=torch.Generator().manual_seed(3), use_cache=use_cache)

    assert torch.equal(sample(True), sample(False))
    assert not torch.equal(sample(True), greedy)  # sampling did sample


def test_the_cache_gives_the_logits_of_one_full_pass():
    model = tiny(position="alibi")
    x = ids(2, 9)
    cache = model.new_cache()
    with torch.no_grad():
        stepped = torch.cat([model(x[:, :4], cache), *(model(x[:, i:i + 1], cache) for i in range(4, 9))], dim=1)
        torch.testing.assert_close(stepped, model(x), rtol=1e-10, atol=1e-10)
    assert cache.length == 9


def test_linear_attention_decodes_from_its_recurrent_state():
    model = tiny(kernel="linear")
    cache = model.new_cache()
    with torch.no_grad():
        model(ids(1, 6), cache)
    assert all(c.k is None and c.state is not None and c.length == 6 for c in cache.layers)


def test_sampling_is_reproducible_under_a_seed_and_works_in_float32():
    model = tiny(torch.float32)

    def run(seed: int) -> torch.Tensor:
        return generate(model, ids(1, 3), 30, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(run(5), run(5))
    assert not torch.equal(run(5), run(6))


def test_bad_input_gets_a_one_line_error_naming_the_value_and_the_fix():
    learned = tiny(position="learned")  # max_len 64
    cases = [
        (lambda: generate(learned, ids(1, 70), 5), r"70 tokens.*max_len=64.*larger max_len"),
        (lambda: generate(learned, ids(1, 60), 10), r"69 positions.*max_len=64"),  # refused before any step
        (lambda: learned(ids(1, 65)), r"65 positions.*max_len=64"),
        (lambda: learned(torch.tensor([[3, V]])), rf"\[3, {V}\].*vocabulary has {V}.*tokenizer"),
        (lambda: LanguageModelConfig(position="sinusodal"), r"'sinusodal'.*Did you mean 'sinusoidal'.*Known: "),
        (lambda: LanguageModelConfig(d_model=30, heads=4), r"d_model=30 is not divisible by heads=4; choose heads"),
        (lambda: generate(learned, ids(1, 3), 5, temperature=-1), r"temperature must be >= 0.*got -1"),
        (lambda: generate(learned, ids(1, 0), 5), r"\(B, 0\).*at least one token"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            make()
        assert "\n" not in str(error.value)
    assert generate(learned, ids(1, 60), 5).shape == (1, 65)  # position 64 is produced, never read


def test_any_length_for_the_schemes_without_a_table():
    for position in ("sinusoidal", "rope", "alibi", "t5", "none"):
        model = tiny(position=position)
        assert model.max_positions is None
        assert model(ids(1, 100)).shape == (1, 100, V)  # past the presets' max_len of 64
    assert tiny(position="learned").max_positions == 64


def test_parameter_count_of_the_small_preset():
    def count(**overrides) -> int:
        return sum(p.numel() for p in build_language_model("small", vocab_size=V, position="learned",
                                                           **overrides).parameters())

    d, d_ff, layers, max_len = 128, 512, 4, 64
    per_layer = 4 * d * d + 2 * d * d_ff  # q, k, v, out; the two FFN matrices
    # nanoGPT's 4 x 128 model: no biases, Pre-LN (a final norm), the tied V x D embedding counted once
    assert count(bias=False, norm_first=True) == layers * (per_layer + 2 * d) + d + V * d + max_len * d == 804_096
    assert count() == 809_600  # Post-LN with every bias
    assert PRESETS["small"] == dict(d_model=d, heads=4, layers=layers, d_ff=d_ff, max_len=max_len, dropout=0.0)


def test_a_decoder_layer_with_cross_attention_refuses_a_missing_memory():
    layer = build_transformer("tiny").decoder.layers[0]
    with pytest.raises(ValueError, match="got memory=None; pass the encoder's output"):
        layer(torch.zeros(1, 3, 32))


def test_every_parameter_belongs_to_its_part_so_delta_and_freeze_work():
    model = build_language_model("tiny", vocab_size=V, position="t5", norm_first=True)
    d, d_ff, layers = 32, 64, 2
    counts = parameters_by_part(model)
    assert counts["embedding"] == V * d and counts["head"] == 0  # the tied head is the embedding, counted once
    assert counts["position"] == 32 * 4  # T5: 32 buckets × 4 heads, one table for every layer
    assert counts["attention"] == layers * (4 * d * d + 4 * d) and counts["ffn"] == layers * (2 * d * d_ff + d_ff + d)
    assert counts["norm"] == (2 * layers + 1) * 2 * d and counts["stacking"] == 0
    assert freeze_parts(model, ["position"]) == 32 * 4
    assert not model.position.relative_attention_bias.weight.requires_grad
