"""The decoder-only language model: the classic decoder without the encoder and its cross-attention.

Liu et al. 2018 ("Generating Wikipedia by Summarizing Long Sequences") and GPT (Radford et al. 2018) keep the
decoder of Vaswani et al. 2017 and drop the encoder: each layer is causal self-attention then the FFN
(:class:`~core.layers.DecoderLayer` built with ``cross_attn=None``), the token embedding is tied to the
pre-softmax projection, and the model predicts token t + 1 from tokens ≤ t. Every core part is a config
field, named as in :class:`core.model.TransformerConfig` where it means the same, so a variant's ``revert``
overrides apply to both models.

Shape legend: B batch, N tokens, D model width, V vocabulary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torch import Tensor, nn

from core.attention import build_kernel
from core.decoding import KVCache
from core.embedding import TokenEmbedding, check_token_ids
from core.ffn import build_ffn
from core.init import init_weights
from core.layers import Decoder, DecoderLayer, norm_factory
from core.model import check_core_parts, preset_config
from core.multihead import MultiHeadAttention
from core.position import LearnedPosition, build_position
from plumbing.errors import check_bool, check_number, check_positive, check_probability


@dataclass
class LanguageModelConfig:
    """Configuration of the decoder-only model; the defaults are the paper's base decoder (Table 3), 6 layers."""

    vocab_size: int = 65  # nanoGPT's shakespeare_char characters; a task sets it from its tokenizer
    d_model: int = 512
    heads: int = 8
    layers: int = 6
    d_ff: int = 2048  # 4·d_model
    dropout: float = 0.1  # on each sublayer output and on embeddings + positions (P_drop)
    attention_dropout: float = 0.0  # on the attention weights
    activation: str = "relu"  # or "gelu"; "geglu", "swiglu", "reglu" build a gated FFN (core.ffn.GLUFFN)
    norm_first: bool = False  # False = Post-LN (the paper's); True = Pre-LN with a final norm (GPT-2)
    norm: str = "layernorm"  # or "rmsnorm" (core.layers.NORMS; LLaMA's), with eps layer_norm_eps
    position: str = "sinusoidal"
    max_len: int = 512  # only bounds the learned position table; the other schemes take any length
    scale_embeddings: bool = True  # multiply embeddings by √d_model (§3.4); GPT-2 does not
    tie_output: bool = True  # token embedding = pre-softmax projection (§3.4)
    kernel: str = "sdpa"  # "sdpa" (fused), "reference" (explicit math), or one a variant registered
    kernel_options: dict[str, Any] = field(default_factory=dict)
    ffn: str = "dense"  # "dense" (the paper's), or an FFN type a variant registered
    ffn_options: dict[str, Any] = field(default_factory=dict)
    init: str = "xavier"
    bias: bool = True  # biases of the attention and dense-FFN linear layers and of the norms (nanoGPT: False)
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "heads", "layers", "d_ff", "max_len"):
            check_positive(name, getattr(self, name))
        check_probability("dropout", self.dropout)
        check_probability("attention_dropout", self.attention_dropout)
        for name in ("norm_first", "scale_embeddings", "tie_output", "bias"):
            check_bool(name, getattr(self, name))
        check_number("layer_norm_eps", self.layer_norm_eps, 0, low_open=True)
        check_core_parts("LanguageModelConfig", self)

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, dict] = {
    "tiny": dict(d_model=32, heads=4, layers=2, d_ff=64, max_len=64, dropout=0.0),
    # nanoGPT's shakespeare_char CPU anchor: 4 layers, 4 heads, width 128, context 64, no dropout.
    "small": dict(d_model=128, heads=4, layers=4, d_ff=512, max_len=64, dropout=0.0),
    "base": dict(),
}


class LanguageModelCache:
    """The keys/values of every layer's self-attention while generating: one :class:`KVCache` per layer."""

    def __init__(self, layers: int) -> None:
        self.layers = [KVCache() for _ in range(layers)]

    @property
    def length(self) -> int:
        """How many positions have been fed so far."""
        return self.layers[0].length if self.layers else 0

    def reorder(self, index: Tensor) -> None:
        for cache in self.layers:
            cache.reorder(index)


class LanguageModel(nn.Module):
    """Decoder-only Transformer: ``model(ids)`` -> next-token logits ``(B, N, V)``; position t sees ids ≤ t.

    Parameters: the tied embedding is one ``V × D`` matrix, counted once (``model.parameters()`` yields a shared
    parameter once), and a learned position table adds ``max_len × D``. The "small" preset with a 65-character
    vocabulary and learned positions has 809,600 parameters; with nanoGPT's choices (``bias=False``, Pre-LN,
    so one more norm) 804,096, exactly nanoGPT's count for its 4 × 128 model with its position table
    (nanoGPT prints 0.80M, which leaves the table out).

    Args:
        config: the :class:`LanguageModelConfig`.

    Shape:
        ids ``(B, N)`` long -> logits ``(B, N, V)``. With a ``cache`` (:meth:`new_cache`), ``ids`` are only the
        new positions, which continue the cached ones; attention layers whose kernel is a
        :class:`~core.attention.RecurrentKernel` (linear attention) then decode from a fixed-size state.
    """

    def __init__(self, config: LanguageModelConfig) -> None:
        super().__init__()
        c = self.config = config
        self.embedding = TokenEmbedding(c.vocab_size, c.d_model, None, c.scale_embeddings)
        self.position = build_position(c.position, c.d_model, c.heads, c.max_len, causal=True)
        self.embed_dropout = nn.Dropout(c.dropout)

        norm = norm_factory(c.norm, c.layer_norm_eps)

        def layer(i: int) -> DecoderLayer:
            kernel = build_kernel(c.kernel, c.attention_dropout, **c.kernel_options)
            attention = MultiHeadAttention(c.d_model, c.heads, kernel, self.position, bias=c.bias)
            ffn = build_ffn(c.ffn, c.d_model, c.d_ff, c.activation, c.dropout, i, **c.ffn_options)
            return DecoderLayer(c.d_model, attention, None, ffn, c.dropout, c.norm_first, norm)

        self.decoder = Decoder([layer(i) for i in range(c.layers)], norm(c.d_model) if c.norm_first else None)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)  # pre-softmax projection
        self.head.zoo_part = "head"
        init_weights(self, c.init)
        if not c.bias:
            _drop_biases(self.decoder)
        if c.tie_output:
            self.head.weight = self.embedding.weight

    @property
    def max_positions(self) -> int | None:
        """The longest sequence the model can read (a learned table's ``max_len``); ``None``: any length."""
        return self.position.max_len if isinstance(self.position, LearnedPosition) else None

    def check_length(self, length: int, what: str = "the sequence") -> None:
        """Raise a ValueError when ``length`` positions do not fit the learned position table."""
        limit = self.max_positions
        if limit is not None and length > limit:
            raise ValueError(
                f"{what} needs {length} positions but the learned position table has max_len={limit}; shorten it "
                "to at most max_len, build the model with a larger max_len, or use a scheme with no table "
                "(sinusoidal, rope, alibi, t5, none)"
            )

    def new_cache(self) -> LanguageModelCache:
        """An empty cache for incremental decoding (:func:`core.generation.generate`)."""
        return LanguageModelCache(len(self.decoder.layers))

    def forward(self, ids: Tensor, cache: LanguageModelCache | None = None) -> Tensor:
        check_token_ids("ids", ids, self.config.vocab_size)
        offset = 0 if cache is None else cache.length
        self.check_length(offset + ids.shape[1])
        x = self.embed_dropout(self.position.embed(self.embedding(ids), offset))  # (B, N, D)
        x = self.decoder(x, None, None, None, True, None if cache is None else cache.layers)  # (B, N, D)
        return self.head(x)  # (B, N, V)


def _drop_biases(module: nn.Module) -> None:
    """Remove the bias of every linear layer and LayerNorm inside ``module`` (nanoGPT's ``bias=False``)."""
    for sub in module.modules():
        if isinstance(sub, (nn.Linear, nn.LayerNorm)) and sub.bias is not None:
            sub.register_parameter("bias", None)


def build_language_model(preset: str | None = None, **overrides: Any) -> LanguageModel:
    """The decoder-only model of a named preset (``tiny``, ``small``, ``base``) with config ``overrides``."""
    return LanguageModel(preset_config(LanguageModelConfig, PRESETS, "the language model", preset, overrides))
