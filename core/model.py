"""The encoder–decoder Transformer of Vaswani et al. 2017, "Attention Is All You Need".

One builder, :func:`build_transformer`, wires the whole model from its parts, so a variant that changes
one part passes one different argument. The defaults are the paper's base model.

Shape legend: B batch, S source tokens, T target tokens, D model width, V vocabulary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torch import Tensor, nn

from core.attention import KERNELS, build_kernel
from core.decoding import KVCache
from core.embedding import TokenEmbedding, check_token_ids
from core.ffn import FFN_ACTIVATIONS, FFN_TYPES, build_ffn
from core.init import INIT_SCHEMES, init_weights
from core.layers import NORMS, Decoder, DecoderLayer, Encoder, EncoderLayer, norm_factory
from core.masks import padding_mask
from core.multihead import MultiHeadAttention
from core.position import POSITIONAL_SCHEMES, build_position
from plumbing.errors import check_choices, check_positive, check_probability, unknown_name


def check_core_parts(owner: str, config: Any) -> None:
    """What every config built from the core's parts checks (``TransformerConfig``, ``LanguageModelConfig``): the
    heads divide ``d_model``, and each part's choice (activation, norm, positions, kernel, FFN, init) is one the core
    or a variant registered."""
    if config.d_model % config.heads:
        raise ValueError(
            f"d_model={config.d_model} is not divisible by heads={config.heads}; choose heads that divide d_model"
        )
    check_choices(owner, (
        ("activation", config.activation, FFN_ACTIVATIONS),
        ("norm", config.norm, NORMS),
        ("positional scheme", config.position, POSITIONAL_SCHEMES),
        ("attention kernel", config.kernel, KERNELS),
        ("ffn type", config.ffn, FFN_TYPES),
        ("init scheme", config.init, INIT_SCHEMES),
    ))


@dataclass
class TransformerConfig:
    """Configuration of the classic Transformer; the defaults are the paper's base model (Table 3)."""

    src_vocab: int = 37000  # the paper's shared BPE vocabulary for EN-DE
    tgt_vocab: int | None = None  # None: same as src_vocab (needed for three-way tying)
    d_model: int = 512
    heads: int = 8
    encoder_layers: int = 6
    decoder_layers: int = 6
    d_ff: int = 2048  # 4·d_model
    dropout: float = 0.1  # on each sublayer output and on embeddings + positions (P_drop)
    attention_dropout: float = 0.0  # on the attention weights (not in the paper; used by later code)
    activation: str = "relu"  # or "gelu"; "geglu", "swiglu", "reglu" build a gated FFN (core.ffn.GLUFFN)
    norm_first: bool = False  # False = Post-LN (the paper's); True = Pre-LN with a final norm
    norm: str = "layernorm"  # or "rmsnorm" (core.layers.NORMS): every norm of the model, the final ones too
    position: str = "sinusoidal"
    max_len: int = 512  # only bounds the learned position table
    scale_embeddings: bool = True  # multiply embeddings by √d_model (§3.4)
    share_embeddings: bool = True  # source embedding = target embedding (needs one vocabulary)
    tie_output: bool = True  # target embedding = pre-softmax projection (§3.4)
    kernel: str = "sdpa"  # "sdpa" (fused), "reference" (explicit math), or one a variant registered
    kernel_options: dict[str, Any] = field(default_factory=dict)  # passed to the kernel's constructor
    ffn: str = "dense"  # "dense" (the paper's), or an FFN type a variant registered
    ffn_options: dict[str, Any] = field(default_factory=dict)  # passed to the FFN factory
    init: str = "xavier"
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self) -> None:
        if self.tgt_vocab is None:
            self.tgt_vocab = self.src_vocab
        for name in ("src_vocab", "tgt_vocab", "d_model", "heads", "encoder_layers", "decoder_layers", "d_ff"):
            check_positive(name, getattr(self, name), allow_zero=name.endswith("_layers"))
        check_probability("dropout", self.dropout)
        check_probability("attention_dropout", self.attention_dropout)
        check_core_parts("TransformerConfig", self)
        if self.share_embeddings and self.src_vocab != self.tgt_vocab:
            raise ValueError(
                f"share_embeddings=True needs one vocabulary, got src_vocab={self.src_vocab} and "
                f"tgt_vocab={self.tgt_vocab}; set share_embeddings=False or use a joint vocabulary"
            )
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if not 0 <= value < min(self.src_vocab, self.tgt_vocab):
                raise ValueError(f"{name}={value} is outside the vocabulary [0, {min(self.src_vocab, self.tgt_vocab)})")

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, dict] = {
    "tiny": dict(src_vocab=64, d_model=32, heads=4, encoder_layers=2, decoder_layers=2, d_ff=64, dropout=0.0),
    "mini": dict(src_vocab=8000, d_model=128, heads=4, encoder_layers=2, decoder_layers=2, d_ff=512),
    "small": dict(src_vocab=8000, d_model=256, heads=4, encoder_layers=3, decoder_layers=3, d_ff=1024),
    "base": dict(),
    "big": dict(d_model=1024, heads=16, d_ff=4096, dropout=0.3),
}


class DecoderCache:
    """Key/value caches of every decoder layer: (self-attention, cross-attention) per layer."""

    def __init__(self, layers: int) -> None:
        self.layers = [(KVCache(), KVCache(static=True)) for _ in range(layers)]

    @property
    def length(self) -> int:
        """How many target positions have been decoded so far."""
        return self.layers[0][0].length if self.layers else 0

    def reorder(self, index: Tensor) -> None:
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            cross_cache.reorder(index)


class Transformer(nn.Module):
    """The encoder–decoder model: ``model(src_ids, tgt_ids)`` -> logits ``(B, T, V)``.

    ``tgt_ids`` are the decoder *inputs* (the target shifted right, starting with BOS); padding masks
    come from ``config.pad_id`` (for attention, and as the ``token_mask`` of FFNs that take one) and the
    decoder is causal.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = self.config = config
        self.src_embed = TokenEmbedding(c.src_vocab, c.d_model, c.pad_id, c.scale_embeddings)
        self.tgt_embed = (
            self.src_embed
            if c.share_embeddings
            else TokenEmbedding(c.tgt_vocab, c.d_model, c.pad_id, c.scale_embeddings)
        )
        self.position = build_position(c.position, c.d_model, c.heads, c.max_len)
        self.embed_dropout = nn.Dropout(c.dropout)

        def attention() -> MultiHeadAttention:
            kernel = build_kernel(c.kernel, c.attention_dropout, **c.kernel_options)
            return MultiHeadAttention(c.d_model, c.heads, kernel, self.position)

        def ffn(layer: int) -> nn.Module:
            return build_ffn(c.ffn, c.d_model, c.d_ff, c.activation, c.dropout, layer, **c.ffn_options)

        norm = norm_factory(c.norm)

        def final_norm() -> nn.Module | None:
            return norm(c.d_model) if c.norm_first else None

        self.encoder = Encoder(
            [EncoderLayer(c.d_model, attention(), ffn(i), c.dropout, c.norm_first, norm)
             for i in range(c.encoder_layers)],
            final_norm(),
        )
        self.decoder = Decoder(
            [
                DecoderLayer(c.d_model, attention(), attention(), ffn(i), c.dropout, c.norm_first, norm)
                for i in range(c.decoder_layers)
            ],
            final_norm(),
        )
        self.generator = nn.Linear(c.d_model, c.tgt_vocab, bias=False)  # pre-softmax projection
        self.generator.zoo_part = "head"
        init_weights(self, c.init)
        if c.tie_output:
            self.generator.weight = self.tgt_embed.weight

    def embed(self, embedding: TokenEmbedding, ids: Tensor, offset: int = 0) -> Tensor:
        return self.embed_dropout(self.position.embed(embedding(ids), offset))  # (B, N, D)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """``(B, S)`` ids -> memory ``(B, S, D)`` and its key mask ``(B, 1, 1, S)``."""
        check_token_ids("src_ids", src, self.config.src_vocab)
        src_mask = padding_mask(src, self.config.pad_id)
        return self.encoder(self.embed(self.src_embed, src), src_mask, src != self.config.pad_id), src_mask

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None = None) -> Tensor:
        """``(B, T)`` decoder inputs -> logits ``(B, T, V)``.

        With a ``cache``, ``tgt`` holds only the new positions and earlier keys/values are reused.
        """
        check_token_ids("tgt_ids", tgt, self.config.tgt_vocab)
        offset = 0 if cache is None else cache.length
        x = self.embed(self.tgt_embed, tgt, offset)  # (B, T, D)
        # Causal, and pads are never attended. While decoding with a cache, a hypothesis only gets pads
        # after its EOS, and what it computes after that is discarded.
        tgt_mask = padding_mask(tgt, self.config.pad_id) if cache is None else None
        layers = None if cache is None else cache.layers
        x = self.decoder(x, memory, tgt_mask, src_mask, True, layers, tgt != self.config.pad_id)  # FFNs skip pads
        return self.generator(x)  # (B, T, V)

    def new_cache(self) -> DecoderCache:
        return DecoderCache(len(self.decoder.layers))

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        memory, src_mask = self.encode(src_ids)
        return self.decode(tgt_ids, memory, src_mask)  # (B, T, V)


def build_transformer(preset: str | None = None, **overrides) -> Transformer:
    """Build the classic Transformer from a named preset (``tiny``, ``small``, ``base``, ``big``) and overrides."""
    return Transformer(preset_config(TransformerConfig, PRESETS, "'classic'", preset, overrides))


def preset_config(config_class: type, presets: dict[str, dict], model: str, preset: str | None,
                  overrides: dict[str, Any]) -> Any:
    """``config_class`` of the named preset (default ``base``) with ``overrides``; an unknown preset or field gets a
    "did you mean" error naming ``model``'s choices (the builders of the core's models share it)."""
    if preset is not None and preset not in presets:
        raise unknown_name(f"preset of {model}", preset, presets)
    fields = config_class.__dataclass_fields__
    for key in overrides:
        if key not in fields:
            raise unknown_name(f"{config_class.__name__} field", key, fields)
    return config_class(**{**presets.get(preset or "base", {}), **overrides})
