"""The position-wise feed-forward network (Vaswani et al. 2017, §3.3): FFN(x) = W₂·act(W₁·x + b₁) + b₂.

Applied to every position separately and identically: D -> d_ff (4·D in the paper) -> D.

The ``activation`` a config names picks the FFN's form (:data:`FFN_ACTIVATIONS`): an elementwise one
(:data:`ACTIVATIONS`: ``relu``, ``gelu``) sits between the two linear layers of :class:`PositionwiseFFN`; a gated
one (:data:`GLU_ACTIVATIONS`: ``geglu``, ``swiglu``, ``reglu``, Shazeer 2020) builds a :class:`GLUFFN`, whose
three matrices hold 1.5× the parameters of two at the same ``d_ff``, so a comparison at equal parameters gives
it ``round(2/3 · d_ff)`` (:func:`glu_width`).

An FFN is tensor in, tensor out. One side input is declared for FFNs that treat tokens *unequally*
(a mixture of experts routes them and gives each expert a capacity): an FFN whose class sets
``takes_token_mask = True`` accepts ``forward(x, token_mask=...)``, a bool ``(B, N)`` tensor, ``True`` =
a real token, ``False`` = padding. The layers pass it through :func:`apply_ffn`; every other FFN is
called as ``ffn(x)``.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from plumbing.errors import check_positive, check_probability, unknown_name

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}  # elementwise, between the two linear layers
# The gate's nonlinearity of each GLU variant (Shazeer 2020, §2): GELU (exact erf form), Swish_β=1 = SiLU, ReLU.
GLU_ACTIVATIONS = {"geglu": nn.GELU, "swiglu": nn.SiLU, "reglu": nn.ReLU}
FFN_ACTIVATIONS = (*ACTIVATIONS, *GLU_ACTIVATIONS)  # what a model config's ``activation`` field may name


class PositionwiseFFN(nn.Module):
    """Two linear layers with an activation (ReLU in the paper, GELU in BERT/ViT) and dropout between.

    Args:
        d_model: width D of the tokens.
        d_ff: hidden width (the paper uses 4·D = 2048 for D = 512).
        activation: ``"relu"`` or ``"gelu"``.
        dropout: dropout on the hidden activations.

    Shape: ``(..., D) -> (..., D)``.
    """

    zoo_part = "ffn"

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0) -> None:
        super().__init__()
        check_positive("d_model", d_model)
        check_positive("d_ff", d_ff)
        check_probability("dropout", dropout)
        if activation in GLU_ACTIVATIONS:
            raise ValueError(
                f"activation={activation!r} is a gated FFN with three matrices, which PositionwiseFFN (two) cannot "
                "build; build it with core.ffn.build_ffn('dense', ...) (a GLUFFN), or choose one of "
                f"{', '.join(ACTIVATIONS)} for an FFN made of PositionwiseFFNs (such as the experts of 'moe')"
            )
        if activation not in ACTIVATIONS:
            raise unknown_name("activation", activation, ACTIVATIONS)
        self.fc1 = nn.Linear(d_model, d_ff)  # W₁, b₁
        self.act = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(d_ff, d_model)  # W₂, b₂

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.dropout(self.act(self.fc1(x))))  # (..., D)


class GLUFFN(nn.Module):
    """The gated FFN of Shazeer (2020, "GLU Variants Improve Transformer", eq. 6):
    FFN_GLU(x) = (act(x·W) ⊙ x·V)·W₂, with act = GELU (GeGLU), Swish (SwiGLU) or ReLU (ReGLU).

    Bias-free, as the paper's GLU layers (and T5, PaLM, LLaMA after it); the dense :class:`PositionwiseFFN`
    keeps the classic paper's biases b₁, b₂. W and V are packed into one ``Linear(D, 2·d_ff)`` (``fc1``: the
    rows of W, then those of V), so the two projections are one matmul; ``fc2`` is W₂.

    Parameters: 3·D·d_ff, against 2·D·d_ff + d_ff + D for the dense FFN; the paper keeps them equal by
    shrinking d_ff to 2/3 (2048 -> 1365 at D = 512; :func:`glu_width`).

    Args:
        d_model: width D of the tokens.
        d_ff: width of the gate and of the value (the hidden width).
        activation: ``"geglu"``, ``"swiglu"`` or ``"reglu"`` (:data:`GLU_ACTIVATIONS`).
        dropout: dropout on the gated hidden activations (where the dense FFN drops its hidden ones).

    Shape: ``(..., D) -> (..., D)``.
    """

    zoo_part = "ffn"

    def __init__(self, d_model: int, d_ff: int, activation: str = "swiglu", dropout: float = 0.0) -> None:
        super().__init__()
        check_positive("d_model", d_model)
        check_positive("d_ff", d_ff)
        check_probability("dropout", dropout)
        if activation not in GLU_ACTIVATIONS:
            raise unknown_name("GLU activation", activation, GLU_ACTIVATIONS)
        self.fc1 = nn.Linear(d_model, 2 * d_ff, bias=False)  # [W; V]
        self.act = GLU_ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(d_ff, d_model, bias=False)  # W₂

    def forward(self, x: Tensor) -> Tensor:
        gate, value = self.fc1(x).chunk(2, dim=-1)  # (..., d_ff) each
        return self.fc2(self.dropout(self.act(gate) * value))  # (..., D)


def glu_width(d_ff: int) -> int:
    """The hidden width that gives a :class:`GLUFFN` the parameters of a dense FFN of width ``d_ff``:
    ``round(2/3 · d_ff)`` (Shazeer 2020, §2). Equal up to the dense FFN's biases and the rounding."""
    check_positive("d_ff", d_ff)
    return round(2 * d_ff / 3)


def apply_ffn(ffn: nn.Module, x: Tensor, token_mask: Tensor | None = None) -> Tensor:
    """``ffn(x)``, passing ``token_mask`` ``(B, N)`` (``True`` = real token) to an FFN that declares
    ``takes_token_mask = True``."""
    if token_mask is not None and getattr(ffn, "takes_token_mask", False):
        return ffn(x, token_mask=token_mask)
    return ffn(x)


FFNFactory = Callable[..., nn.Module]
FFN_TYPES: dict[str, FFNFactory] = {}


def register_ffn(name: str, factory: FFNFactory) -> None:
    """Make an FFN type available by name to every config with an ``ffn`` field (``ffn="name"``).

    Part of the public registration API, with :func:`zoo.registry.register` and
    :func:`core.attention.register_kernel`: variants (``zoo/moe``) and plugins (:mod:`tasks.plugins.loader`) call it
    when their module is imported.

    Args:
        name: the name configs select it by; registering a name again replaces the earlier type (plugins
            are refused that: ``tasks.plugins.loader`` keeps the existing one and names the plugin file).
        factory: ``factory(d_model, d_ff, activation, dropout, layer, **options)`` returns the module for the
            ``layer``-th layer of a stack (counted from 0 in each stack), so a type can differ by depth (e.g.
            a mixture of experts in every other layer); ``options`` are the config's ``ffn_options``. The
            module maps ``(..., D) -> (..., D)``, is tagged ``zoo_part = "ffn"`` (subclassing
            :class:`PositionwiseFFN` inherits it), and may declare ``takes_token_mask`` (see the module).
    """
    FFN_TYPES[name] = factory


def build_ffn(name: str, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0,
              layer: int = 0, **options) -> nn.Module:
    if name not in FFN_TYPES:
        raise unknown_name("ffn type", name, FFN_TYPES)
    return FFN_TYPES[name](d_model, d_ff, activation, dropout, layer, **options)


def _dense(d_model: int, d_ff: int, activation: str, dropout: float, layer: int) -> nn.Module:
    """The ``"dense"`` FFN type: the gated :class:`GLUFFN` for a GLU activation, else the classic two layers."""
    if activation in GLU_ACTIVATIONS:
        return GLUFFN(d_model, d_ff, activation, dropout)
    return PositionwiseFFN(d_model, d_ff, activation, dropout)


register_ffn("dense", _dense)
