"""Mixture of Experts: the FFN replaced by top-k routed expert FFNs (Switch Transformer, GShard).

Its one change, the ``ffn`` part, is declared once, in ``CHANGE``; ``zoo diff moe`` renders it with the
measured deltas. The price is an auxiliary load-balancing loss, a capacity that may drop tokens, and a
router to train.

The capacity policy (reasons in :mod:`zoo.moe.layer`): in training, each expert's capacity is counted
per sequence and served in position order, then choice order, and padding is never routed, so only
earlier tokens of the same sequence compete for a token's slot (causal, and no sentence takes another's
capacity); evaluation is dropless, so a token's output depends on that token alone (batch-invariant,
and the same with a KV cache as with full recomputation).

* :mod:`zoo.moe.router` — :class:`TopKRouter` (float32 logits, jitter, top-1/top-2 gates);
* :mod:`zoo.moe.layer` — :class:`MoEFFN` (capacity policy, side outputs) and the ``"moe"`` FFN type;
* :mod:`zoo.moe.dispatch` — which expert row each token→expert assignment takes;
* :mod:`zoo.moe.auxiliary` — :func:`auxiliary_loss`, :func:`routing_stats`, :func:`active_parameters`
  (the MoE's names for the collectors of :mod:`core.sidechannels`, which the trainer and delta use).

Importing this package registers the FFN type ``"moe"`` (``TransformerConfig(ffn="moe",
ffn_options={...})``, options in :data:`MOE_OPTIONS`) and the variant ``"moe"`` for translation,
images and language modelling.
"""

from core.ffn import register_ffn
from core.model import PRESETS, Transformer, TransformerConfig
from zoo.classic import token_inputs
from zoo.lm import on_lm
from zoo.moe.auxiliary import active_parameters, auxiliary_loss, moe_layers, routing_stats
from zoo.moe.layer import MOE_OPTIONS, MoEFFN, moe_ffn
from zoo.moe.router import Routing, TopKRouter
from zoo.registry import Change, Paper, Variant, register
from zoo.vit import on_vit

__all__ = ["MOE_OPTIONS", "MoEFFN", "Routing", "TopKRouter", "active_parameters", "auxiliary_loss", "moe_ffn",
           "moe_layers", "routing_stats"]

SWITCH = Paper(
    "Switch Transformers: Scaling to Trillion Parameter Models with Simple and Efficient Sparsity",
    2022,
    "https://arxiv.org/abs/2101.03961",
)

register_ffn("moe", moe_ffn)

CHANGE = Change(
    "ffn",
    "one dense FFN per layer: every token uses all parameters",
    "top-2 routed mixture of 8 expert FFNs (each as wide as the dense one) in every other layer; in training "
    "each expert takes at most 1.25× its balanced share of each sequence, earlier positions first, padding "
    "never routed; evaluation is dropless",
    "compute is tied to parameter count; with E experts, k per token, a layer's parameters grow E-fold while "
    "the compute per token grows only k-fold",
    scope="general",
    revert={"ffn": "dense", "ffn_options": {}},
)
SUMMARY = ("Every other FFN becomes 8 experts; a router sends each token to its top 2 (capacity per sequence, "
           "earlier tokens first, in training; dropless in evaluation).")

MOE = register(
    Variant(
        name="moe",
        paper=SWITCH,
        tasks=("translation",),
        config_class=TransformerConfig,
        presets=PRESETS,
        build=Transformer,
        changes=(CHANGE,),
        default_preset="mini",
        summary=SUMMARY,
        base_overrides={"ffn": "moe", "ffn_options": dict(MOE_OPTIONS)},
        builds_on="classic",
        example_input=token_inputs,
    )
)

# The same FFN in ViT, for the image task.
MOE_VIT = register(on_vit(MOE))

# The same FFN in the decoder-only language model.
MOE_LM = register(on_lm(MOE))
