"""The position-wise feed-forward network (Vaswani et al. 2017, §3.3): FFN(x) = W₂·act(W₁·x + b₁) + b₂.

Applied to every position separately and identically: D -> d_ff (4·D in the paper) -> D.

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

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


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
        if activation not in ACTIVATIONS:
            raise unknown_name("activation", activation, ACTIVATIONS)
        self.fc1 = nn.Linear(d_model, d_ff)  # W₁, b₁
        self.act = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(d_ff, d_model)  # W₂, b₂

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.dropout(self.act(self.fc1(x))))  # (..., D)


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
    return PositionwiseFFN(d_model, d_ff, activation, dropout)


register_ffn("dense", _dense)
