"""Where the parameters of the classic Transformer go, derived by hand and checked against the model.

Per layer, with D = d_model and F = d_ff (biases included):

* multi-head attention: 4·D² + 4·D (W^Q, W^K, W^V, W^O and their biases);
* FFN: 2·D·F + F + D (a gated, GLU FFN: 3·D·F, no biases);
* LayerNorm: 2·D (gain and bias); RMSNorm: D (gain);
* an encoder layer has 1 attention, 1 FFN, 2 norms; a decoder layer 2 attentions (self and cross), 1 FFN,
  3 norms; Pre-LN adds one final norm per stack.

A popular estimate (the source article of this package) counts 3.15 M per layer for 12 layers at
D = 512 — 37.8 M — which is the *encoder* layer count, so it forgets each decoder layer's
cross-attention and third norm, and leaves out the embeddings.
"""

from __future__ import annotations

from collections import OrderedDict

from core.ffn import GLU_ACTIVATIONS
from core.model import TransformerConfig
from core.parts import PARTS


def attention_parameters(d_model: int) -> int:
    return 4 * d_model * d_model + 4 * d_model


def ffn_parameters(d_model: int, d_ff: int, activation: str = "relu") -> int:
    """2·D·F + F + D for the dense FFN; 3·D·F for a gated one (bias-free W, V, W₂: core.ffn.GLUFFN)."""
    return 3 * d_model * d_ff if activation in GLU_ACTIVATIONS else 2 * d_model * d_ff + d_ff + d_model


def classic_parameters(config: TransformerConfig) -> OrderedDict[str, int]:
    """Exact parameter count per part of :class:`core.model.Transformer` for ``config``, by formula."""
    c = config
    D, L_enc, L_dec = c.d_model, c.encoder_layers, c.decoder_layers
    counts: OrderedDict[str, int] = OrderedDict((p, 0) for p in PARTS)
    counts["embedding"] = c.src_vocab * D + (0 if c.share_embeddings else c.tgt_vocab * D)
    counts["position"] = c.max_len * D if c.position == "learned" else 0
    counts["attention"] = (L_enc + 2 * L_dec) * attention_parameters(D)
    counts["ffn"] = (L_enc + L_dec) * ffn_parameters(D, c.d_ff, c.activation)
    per_norm = 2 * D if c.norm == "layernorm" else D  # RMSNorm has a gain and no bias
    final_norms = per_norm * ((L_enc > 0) + (L_dec > 0)) if c.norm_first else 0
    counts["norm"] = (2 * L_enc + 3 * L_dec) * per_norm + final_norms
    counts["head"] = 0 if c.tie_output else c.tgt_vocab * D
    return counts


def article_estimate(config: TransformerConfig) -> dict[str, int]:
    """The article's method (every layer costs as an encoder layer, no embeddings) vs the exact count."""
    layers = config.encoder_layers + config.decoder_layers
    per_layer = attention_parameters(config.d_model) + ffn_parameters(config.d_model, config.d_ff)
    exact = classic_parameters(config)
    layers_exact = exact["attention"] + exact["ffn"] + exact["norm"]
    return {
        "article_per_layer": per_layer,
        "article_total": layers * per_layer,
        "exact_encoder_layer": per_layer + 4 * config.d_model,
        "exact_decoder_layer": 2 * attention_parameters(config.d_model)
        + ffn_parameters(config.d_model, config.d_ff)
        + 6 * config.d_model,
        "exact_layers": layers_exact,
        "missed_cross_attention": config.decoder_layers * attention_parameters(config.d_model),
        "exact_embeddings_and_head": exact["embedding"] + exact["head"] + exact["position"],
        "exact_total": sum(exact.values()),
    }
