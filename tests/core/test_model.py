"""The encoder-decoder model: equals torch.nn.Transformer, causality, padding, gradients, validation."""

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import zoo
from core.masks import padding_mask
from core.model import Transformer, TransformerConfig, build_transformer
from tests.numerics import assert_close_fp64, float64


def copy_attention(ours, ref: nn.MultiheadAttention) -> None:
    ours.qkv.weight.copy_(ref.in_proj_weight)
    ours.qkv.bias.copy_(ref.in_proj_bias)
    ours.out.weight.copy_(ref.out_proj.weight)
    ours.out.bias.copy_(ref.out_proj.bias)


def copy_linear(ours: nn.Module, ref: nn.Module) -> None:
    ours.load_state_dict(ref.state_dict())


@torch.no_grad()
def copy_from_torch_transformer(ours: Transformer, ref: nn.Transformer) -> None:
    for layer, ref_layer in zip(ours.encoder.layers, ref.encoder.layers):
        copy_attention(layer.self_attn, ref_layer.self_attn)
        copy_linear(layer.ffn.fc1, ref_layer.linear1)
        copy_linear(layer.ffn.fc2, ref_layer.linear2)
        copy_linear(layer.norm1, ref_layer.norm1)
        copy_linear(layer.norm2, ref_layer.norm2)
    for layer, ref_layer in zip(ours.decoder.layers, ref.decoder.layers):
        copy_attention(layer.self_attn, ref_layer.self_attn)
        copy_attention(layer.cross_attn, ref_layer.multihead_attn)
        copy_linear(layer.ffn.fc1, ref_layer.linear1)
        copy_linear(layer.ffn.fc2, ref_layer.linear2)
        for i in (1, 2, 3):
            copy_linear(getattr(layer, f"norm{i}"), getattr(ref_layer, f"norm{i}"))
    if ours.config.norm_first:
        copy_linear(ours.encoder.norm, ref.encoder.norm)
        copy_linear(ours.decoder.norm, ref.decoder.norm)


@pytest.mark.parametrize("norm_first", [False, True])
@float64()
def test_equals_torch_transformer(norm_first):
    cfg = TransformerConfig(
        src_vocab=40, d_model=32, heads=4, encoder_layers=2, decoder_layers=2, d_ff=48, dropout=0.0,
        norm_first=norm_first,
    )
    ours = Transformer(cfg).eval()
    ref = nn.Transformer(32, 4, 2, 2, 48, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    if not norm_first:
        # nn.Transformer always ends each stack with a LayerNorm; the paper's Post-LN model has none.
        ref.encoder.norm, ref.decoder.norm = nn.Identity(), nn.Identity()
    copy_from_torch_transformer(ours, ref)
    src = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])
    tgt = torch.tensor([[1, 10, 11, 12], [1, 13, 14, 0]])
    src_x = ours.position.embed(ours.src_embed(src))
    tgt_x = ours.position.embed(ours.tgt_embed(tgt))
    expected = ref(
        src_x, tgt_x,
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(4),
        src_key_padding_mask=src == 0, tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0,
    )
    memory, src_mask = ours.encode(src)
    hidden = ours.decoder(tgt_x, memory, padding_mask(tgt, 0), src_mask)
    hidden = hidden.masked_fill((tgt == 0)[..., None], 0.0)  # pad positions are unused outputs
    assert_close_fp64(hidden, expected.masked_fill((tgt == 0)[..., None], 0.0))
    logits = ours(src, tgt)
    assert_close_fp64(logits[0], ours.generator(expected)[0])


@pytest.mark.parametrize("position", ["sinusoidal", "learned", "rope", "alibi"])
def test_causality(position):
    model = build_transformer("tiny", position=position).eval()
    src = torch.randint(3, 64, (2, 6))
    tgt = torch.randint(3, 64, (2, 7))
    out = model(src, tgt)
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(3, 64, (2, 3))
    out2 = model(src, changed)
    assert_close(out[:, :4], out2[:, :4])
    assert not torch.allclose(out[:, 4:], out2[:, 4:])


@pytest.mark.parametrize("position", ["sinusoidal", "rope", "alibi"])
@float64()
def test_padding_changes_no_real_output(position):
    model = build_transformer("tiny", position=position).eval()
    src = torch.randint(3, 64, (1, 5))
    tgt = torch.randint(3, 64, (1, 4))
    padded_src = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    padded_tgt = torch.cat([tgt, torch.zeros(1, 2, dtype=torch.long)], dim=1)
    assert_close_fp64(model(padded_src, padded_tgt)[:, :4], model(src, tgt))


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True, "position": "learned"}, {"share_embeddings": False,
                                       "tie_output": False, "position": "rope"}])
def test_every_parameter_gets_a_gradient(overrides):
    model = build_transformer("tiny", **overrides)
    src, tgt = torch.randint(3, 64, (2, 5)), torch.randint(3, 64, (2, 6))
    model(src, tgt).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_three_way_tying():
    model = build_transformer("tiny")
    assert model.src_embed.weight is model.tgt_embed.weight is model.generator.weight
    untied = build_transformer("tiny", share_embeddings=False, tie_output=False)
    assert untied.src_embed.weight is not untied.tgt_embed.weight
    assert untied.generator.weight is not untied.tgt_embed.weight


def test_embeddings_are_scaled():
    model = build_transformer("tiny")
    ids = torch.tensor([[5]])
    assert_close(model.src_embed(ids), model.src_embed.lookup(ids) * 32**0.5)
    assert build_transformer("tiny", scale_embeddings=False).src_embed.scale == 1.0


def test_create_entry_point():
    model = zoo.create("classic", preset="tiny")
    assert isinstance(model, Transformer)
    logits = model(torch.randint(0, 64, (2, 5)), torch.randint(0, 64, (2, 3)))
    assert logits.shape == (2, 3, 64)
    assert "classic" in zoo.list_variants()
    assert zoo.create("classic", preset="tiny", d_model=16, heads=2).config.d_model == 16


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(d_model=30, heads=4), ValueError, "not divisible by heads"),
        (dict(dropout=-0.1), ValueError, "dropout must be in"),
        (dict(dropout="0.1"), TypeError, "dropout must be a float"),
        (dict(position="sinusoid"), ValueError, "Did you mean 'sinusoidal'"),
        (dict(activation="relu6"), ValueError, "unknown activation"),
        (dict(src_vocab=10, tgt_vocab=12), ValueError, "share_embeddings"),
        (dict(d_model=0), ValueError, "d_model must be > 0"),
        (dict(pad_id=99), ValueError, "pad_id=99"),
    ],
)
def test_bad_config(kwargs, error, match):
    with pytest.raises(error, match=match):
        TransformerConfig(**{"src_vocab": 64, **kwargs})


def test_bad_inputs():
    model = build_transformer("tiny", position="learned", max_len=8)
    with pytest.raises(TypeError, match="integer token ids"):
        model(torch.rand(2, 5), torch.randint(0, 64, (2, 3)))
    with pytest.raises(ValueError, match="vocabulary has 64"):
        model(torch.full((2, 5), 64), torch.randint(0, 64, (2, 3)))
    with pytest.raises(ValueError, match=r"shape \(batch, length\)"):
        model(torch.randint(0, 64, (5,)), torch.randint(0, 64, (2, 3)))
    with pytest.raises(ValueError, match="max_len=8"):
        model(torch.randint(0, 64, (1, 9)), torch.randint(0, 64, (1, 3)))


def test_unknown_variant_and_preset():
    with pytest.raises(ValueError, match="Did you mean 'classic'"):
        zoo.create("clasic")
    with pytest.raises(ValueError, match="Did you mean 'tiny'"):
        zoo.create("classic", preset="tiyn")
    with pytest.raises(ValueError, match="unknown config field"):
        zoo.create("classic", preset="tiny", d_modle=8)
