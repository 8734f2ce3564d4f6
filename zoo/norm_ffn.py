"""RMSNorm and the GLU FFNs: one-change variants of every model built on the core's layers.

Each is a core option (a config field, :data:`core.layers.NORMS` or :data:`core.ffn.GLU_ACTIVATIONS`), registered
like ``pre-ln`` or ``rope``: for translation (the encoder–decoder), for ``lm`` (the decoder-only model,
:func:`zoo.lm.on_lm`) and for ``cifar`` (ViT, :func:`zoo.vit.on_vit`), whose configs all name the fields alike.

* ``rmsnorm`` (Zhang & Sennrich 2019): every norm, the final ones too, is ``torch.nn.RMSNorm``.
* ``geglu``, ``reglu`` (Shazeer 2020): the FFN is :class:`core.ffn.GLUFFN` with the gate's GELU,
  Swish or ReLU. They keep the base's ``d_ff``, so the FFN has 1.5× the weights of the dense one (3·D·d_ff
  against 2·D·d_ff + d_ff + D): a preset is one width for every variant, and the delta analysis shows the
  extra parameters. The paper's comparison at equal parameters shrinks ``d_ff`` to
  :func:`core.ffn.glu_width` (2/3 of it), which a study sets on both sides' configs.

SwiGLU (``activation="swiglu"``) is a core option like the others but not registered under the name ``swiglu``
here: that is the name of the worked plugin example (``examples/swiglu``, a ``--user-dir`` plugin), which the
plugin loader would refuse once a built-in variant holds it.

The ViT registrations import no timm weights: timm's ViT has neither RMSNorm nor a packed GLU under our names.
"""

from __future__ import annotations

import dataclasses

from zoo.classic import CLASSIC
from zoo.lm import on_lm
from zoo.registry import Change, Paper, Variant, register
from zoo.vit import on_vit

ZHANG_SENNRICH = Paper("Root Mean Square Layer Normalization", 2019, "https://arxiv.org/abs/1910.07467")
SHAZEER = Paper("GLU Variants Improve Transformer", 2020, "https://arxiv.org/abs/2002.05202")

RMSNORM_CHANGE = Change(
    "norm",
    "LayerNorm: (x − mean(x)) / sqrt(var(x) + eps) · g + b, 2·D parameters",
    "RMSNorm: x / sqrt(mean(x²) + eps) · g (torch.nn.RMSNorm), D parameters, in every norm",
    "LayerNorm's re-centring and bias cost time and parameters; re-scaling invariance alone gives the "
    "stability, so RMSNorm drops them (7–64 % faster in the paper at the same quality)",
    revert={"norm": "layernorm"},
)

# name -> (the gate's nonlinearity as the paper writes it, its name in the change's text)
_GLU = {"geglu": ("GELU", "GeGLU"), "swiglu": ("Swish", "SwiGLU"), "reglu": ("ReLU", "ReGLU")}


def glu_change(activation: str) -> Change:
    """The ``ffn`` change of the GLU variant ``activation`` (``"geglu"``, ``"swiglu"``, ``"reglu"``)."""
    gate, label = _GLU[activation]
    return Change(
        "ffn",
        "ReLU between the two linear layers: W₂·ReLU(W₁x + b₁) + b₂",
        f"{label}: ({gate}(xW) ⊙ xV)·W₂, three bias-free matrices at the same d_ff (1.5× the FFN's weights; "
        "2/3 of d_ff at equal parameters)",
        "an elementwise activation passes a hidden unit by its own pre-activation alone; a multiplicative gate "
        "lets a second projection decide how much passes, which lowers perplexity at equal parameters",
        revert={"activation": "relu"},
    )


def _everywhere(variant: Variant) -> tuple[Variant, Variant, Variant]:
    """``variant`` (a translation registration) registered for translation, lm and cifar."""
    vit = dataclasses.replace(on_vit(variant), import_weights=None)
    return register(variant), register(on_lm(variant)), register(vit)


def _core_option(name: str, paper: Paper, summary: str, change: Change, **overrides: str) -> Variant:
    """A one-change variant of the classic encoder–decoder (as :mod:`zoo.classic` registers its core options)."""
    return dataclasses.replace(CLASSIC, name=name, paper=paper, summary=summary, changes=(change,),
                               base_overrides=overrides, builds_on=CLASSIC.name)


RMSNORM = _everywhere(_core_option(
    "rmsnorm", ZHANG_SENNRICH, "Every LayerNorm replaced by RMSNorm: no mean, no bias, a gain only.",
    RMSNORM_CHANGE, norm="rmsnorm"))
GLU_VARIANTS = {
    activation: _everywhere(_core_option(
        activation, SHAZEER,
        f"The FFN's hidden layer gated: ({gate}(xW) ⊙ xV)·W₂, bias-free ({label}).",
        glu_change(activation), activation=activation))
    for activation, (gate, label) in _GLU.items()
    if activation != "swiglu"  # the worked plugin example's name (see the module docstring)
}
