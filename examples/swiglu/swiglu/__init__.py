"""swiglu: the classic FFN replaced by a gated linear unit with Swish (Shazeer 2020).

A patch on the classic Transformer at the ffn part, written by `zoo new-variant`. Importing this package
registers, through the zoo's public API, the variant and its module (ffn.py, as an FFN type)
with the declared change. Edit the places marked EDIT HERE once the module computes what the paper says;
then `zoo check NAME --user-dir DIR` says whether the variant is still a fair patch, and
`zoo diff NAME --user-dir DIR` measures what it changed.
"""

from core.ffn import register_ffn
from core.model import Transformer
from zoo.classic import token_inputs
from zoo.registry import Change, Paper, Variant, register

from .config import CONFIG_CLASS, DEFAULT_PRESET, PRESETS
from .ffn import build_swiglu

register_ffn("swiglu", build_swiglu)

PAPER = Paper("GLU Variants Improve Transformer", 2020, "https://arxiv.org/abs/2002.05202")

CHANGE = Change(
    "ffn",
    "position-wise FFN: W₂·ReLU(W₁·x + b₁) + b₂, hidden width 4·D",
    "SwiGLU: W₂·(Swish(W₁·x) ⊙ V·x), a gated linear unit of hidden width 2/3·d_ff (three matrices, the parameters "
    "of two)",
    "a fixed pointwise nonlinearity lets every hidden unit through by its own value alone; a multiplicative gate "
    "computed from the input chooses what passes, which trained to lower perplexity at the same parameters and "
    "compute in the paper",
    scope="general",
    # the config overrides that bring the classic choice back (zoo check, zoo diff, zoo ablate)
    revert={"ffn": "dense", "ffn_options": {}},
)

VARIANT = register(
    Variant(
        name="swiglu",
        paper=PAPER,
        tasks=("translation",),
        config_class=CONFIG_CLASS,
        presets=PRESETS,
        build=Transformer,
        changes=(CHANGE,),
        default_preset=DEFAULT_PRESET,
        builds_on="classic",  # the registered model it patches: its presets are the classic sizes
        summary="The FFN as a gated linear unit: Swish(W₁·x) ⊙ V·x, at the classic FFN's parameter count.",
        example_input=token_inputs,
    )
)
