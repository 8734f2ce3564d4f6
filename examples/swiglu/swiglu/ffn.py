"""SwigluFFN: the FFN of swiglu, a gated linear unit (Shazeer 2020, "GLU Variants Improve Transformer").

The classic FFN passes each hidden unit through a fixed nonlinearity, W₂·ReLU(W₁·x); a GLU multiplies it by a
second, linear projection of the same input, W₂·(act(W₁·x) ⊙ V·x), so that the input decides how much of each
unit passes. With act = Swish (SiLU) this is SwiGLU; the ``gate`` option gives the paper's other variants
(GLU: sigmoid, ReGLU: ReLU, GEGLU: GELU, Bilinear: none). A third matrix costs parameters, so, as in the
paper, the hidden width is 2/3 of d_ff: three matrices then hold what two held.

Written with ``zoo new-variant swiglu --on classic --part ffn``, then edited where it marked EDIT HERE: it
subclasses the core's ``PositionwiseFFN`` (``fc1`` is W₁, ``fc2`` is W₂, both with biases, as in the rest of the
package; the paper has none), adds V and replaces the activation.

Shape: ``(..., D) -> (..., D)``.
"""

from torch import Tensor, nn

from core.ffn import PositionwiseFFN
from plumbing.errors import check_bool, unknown_name

GATES: dict[str, type[nn.Module]] = {"silu": nn.SiLU, "sigmoid": nn.Sigmoid, "relu": nn.ReLU, "gelu": nn.GELU,
                                     "identity": nn.Identity}


class SwigluFFN(PositionwiseFFN):
    """FFN(x) = W₂·(act(W₁·x + b₁) ⊙ (V·x + c)) + b₂ with act = Swish: SwiGLU (Shazeer 2020).

    Args:
        d_model: width D of the tokens.
        d_ff: the classic hidden width; the GLU's is ``2·d_ff/3`` when ``match_params`` (the paper's choice).
        activation: the config's activation, unused: the gate's nonlinearity is ``gate``.
        dropout: dropout on the gated hidden units.
        gate: ``"silu"`` (SwiGLU), ``"gelu"`` (GEGLU), ``"relu"`` (ReGLU), ``"sigmoid"`` (GLU), ``"identity"``
            (Bilinear).
        match_params: shrink the hidden width to 2/3 so that the parameters match the classic FFN's.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0, gate: str = "silu",
                 match_params: bool = True) -> None:
        if gate not in GATES:
            raise unknown_name("GLU gate (ffn_options gate=)", gate, GATES)
        check_bool("match_params", match_params)
        hidden = max(1, 2 * d_ff // 3) if match_params else d_ff  # three matrices, the size of two
        super().__init__(d_model, hidden, activation, dropout)
        self.act = GATES[gate]()  # the gate's nonlinearity replaces the classic activation
        self.value = nn.Linear(d_model, hidden)  # V, c: the linear half of the unit

    def forward(self, x: Tensor) -> Tensor:
        # the classic computation was fc2(dropout(act(fc1(x)))); the GLU gates it by a linear projection
        return self.fc2(self.dropout(self.act(self.fc1(x)) * self.value(x)))  # (..., D)


def build_swiglu(
    d_model: int, d_ff: int, activation: str, dropout: float, layer: int, **options
) -> SwigluFFN:
    """The FFN type of this variant (``core.ffn.register_ffn``): called for each layer (``layer`` counts
    from 0 in each stack) with the config's sizes, activation and dropout, and its ``ffn_options``."""
    return SwigluFFN(d_model, d_ff, activation, dropout, **options)
