"""Encoder and decoder layers: sublayers wrapped in residual connections and layer normalisation.

Each sublayer (self-attention, cross-attention, FFN) is an *injected* module, so a variant replaces one
sublayer — window attention, a mixture of experts — without copying the layer. Where the norm sits is
the one switch (``norm_first``), exactly as in ``nn.Transformer``:

* Post-LN (the paper's, §3.1): ``x = LayerNorm(x + Dropout(Sublayer(x)))``;
* Pre-LN (Xiong et al. 2020; GPT-2, ViT): ``x = x + Dropout(Sublayer(LayerNorm(x)))``, and the stack
  ends with one more LayerNorm.

Which norm is the other switch, a factory the layers receive (:func:`norm_factory`, from a config's ``norm``
field): LayerNorm (Ba et al. 2016, the paper's) or RMSNorm (Zhang & Sennrich 2019), which drops the mean and
the bias and rescales by the root mean square alone: ``x / sqrt(mean(x²) + eps) · g`` (:data:`NORMS`).

The FFN may be told which tokens are padding (``token_mask``, ``True`` = real token, see
:func:`core.ffn.apply_ffn`); attention learns it from its mask.

Shape legend: B batch, N source tokens, T target tokens, D model width.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from torch import Tensor, nn

from core.decoding import KVCache
from core.ffn import apply_ffn
from plumbing.errors import check_number, check_probability, unknown_name

NormFactory = Callable[[int], nn.Module]
# torch's own modules: RMSNorm *is* torch.nn.RMSNorm (torch >= 2.4), so it equals it by construction.
NORMS: dict[str, type[nn.Module]] = {"layernorm": nn.LayerNorm, "rmsnorm": nn.RMSNorm}


def build_norm(name: str, d_model: int, eps: float = 1e-5) -> nn.Module:
    """The normalisation ``name`` (:data:`NORMS`) over the last axis of width ``d_model``, tagged with its part.

    ``"layernorm"``: gain and bias, 2·D parameters; ``"rmsnorm"``: a gain only, D parameters.
    """
    if name not in NORMS:
        raise unknown_name("norm", name, NORMS)
    check_number("norm eps", eps, 0, low_open=True)
    norm = NORMS[name](d_model, eps=eps)
    norm.zoo_part = "norm"
    return norm


def layer_norm(d_model: int, eps: float = 1e-5) -> nn.Module:
    """The paper's normalisation, tagged with its part."""
    return build_norm("layernorm", d_model, eps)


def norm_factory(name: str, eps: float = 1e-5) -> NormFactory:
    """``d_model -> norm``: the factory of :func:`build_norm` that a model passes to its layers and final norms."""
    return functools.partial(build_norm, name, eps=eps)


class ResidualLayer(nn.Module):
    """Base of the encoder and decoder layers: the residual + norm wrapper around a sublayer.

    Args:
        d_model: width D.
        dropout: dropout on each sublayer's output before the residual addition (the paper's P_drop).
        norm_first: Pre-LN when ``True``, Post-LN (the paper's) when ``False``.
        drop_path: stochastic depth rate: drop the whole residual branch per sample (ViT/Swin training).
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool, drop_path: float = 0.0) -> None:
        super().__init__()
        check_probability("dropout", dropout)
        check_probability("drop_path", drop_path)
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.drop_path = nn.Identity()
        if drop_path > 0:
            from torchvision.ops import StochasticDepth  # imported only when used: torchvision is slow to import

            self.drop_path = StochasticDepth(drop_path, mode="row")

    def residual(self, x: Tensor, norm: nn.Module, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.norm_first:
            return x + self.drop_path(self.dropout(sublayer(norm(x))))
        return norm(x + self.drop_path(self.dropout(sublayer(x))))


class EncoderLayer(ResidualLayer):
    """Self-attention then FFN, each in a residual + norm (§3.1, left half of Figure 1).

    Args:
        self_attn: ``(B, N, D) -> (B, N, D)``, called as ``self_attn(x, mask=mask)``.
        ffn: ``(B, N, D) -> (B, N, D)``, called through :func:`~core.ffn.apply_ffn` with ``token_mask``.
        norm: factory of the normalisation layer (LayerNorm by default).
    """

    def __init__(
        self,
        d_model: int,
        self_attn: nn.Module,
        ffn: nn.Module,
        dropout: float = 0.1,
        norm_first: bool = False,
        norm: NormFactory = layer_norm,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__(d_model, dropout, norm_first, drop_path)
        self.norm1, self.self_attn = norm(d_model), self_attn
        self.norm2, self.ffn = norm(d_model), ffn

    def forward(self, x: Tensor, mask: Tensor | None = None, token_mask: Tensor | None = None) -> Tensor:
        x = self.residual(x, self.norm1, lambda h: self.self_attn(h, mask=mask))  # (B, N, D)
        return self.residual(x, self.norm2, lambda h: apply_ffn(self.ffn, h, token_mask))  # (B, N, D)


class DecoderLayer(ResidualLayer):
    """Masked self-attention, cross-attention over the encoder memory, then FFN (right half of Figure 1).

    ``forward(x, memory, self_mask, memory_mask, is_causal, cache, token_mask)``: ``cache`` is a pair of
    :class:`KVCache` (self, cross) for incremental decoding; ``token_mask`` ``(B, T)`` goes to the FFN.

    ``cross_attn=None`` drops the middle sublayer and its norm: the decoder-only layer of a language model
    (Liu et al. 2018; GPT), which then takes no ``memory`` and, as ``cache``, its self-attention's
    :class:`KVCache` alone.
    """

    def __init__(
        self,
        d_model: int,
        self_attn: nn.Module,
        cross_attn: nn.Module | None,
        ffn: nn.Module,
        dropout: float = 0.1,
        norm_first: bool = False,
        norm: NormFactory = layer_norm,
    ) -> None:
        super().__init__(d_model, dropout, norm_first)
        self.norm1, self.self_attn = norm(d_model), self_attn
        self.norm2, self.cross_attn = (None, None) if cross_attn is None else (norm(d_model), cross_attn)
        self.norm3, self.ffn = norm(d_model), ffn

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        is_causal: bool = True,
        cache: tuple[KVCache, KVCache] | KVCache | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        if (memory is None) != (self.cross_attn is None):
            raise ValueError(
                "this decoder layer was built without cross-attention (cross_attn=None), so it takes no encoder "
                "memory; pass memory=None" if self.cross_attn is None else
                "this decoder layer attends to an encoder memory and got memory=None; pass the encoder's output, or "
                "build the layer with cross_attn=None for a decoder-only model"
            )
        self_cache, cross_cache = cache if isinstance(cache, tuple) else (cache, None)
        x = self.residual(
            x, self.norm1, lambda h: self.self_attn(h, mask=self_mask, is_causal=is_causal, cache=self_cache)
        )  # (B, T, D)
        if self.cross_attn is not None:
            x = self.residual(
                x, self.norm2, lambda h: self.cross_attn(h, memory=memory, mask=memory_mask, cache=cross_cache)
            )  # (B, T, D)
        return self.residual(x, self.norm3, lambda h: apply_ffn(self.ffn, h, token_mask))  # (B, T, D)


class LayerStack(nn.Module):
    """Layers applied in turn; Pre-LN stacks end with a final norm (``final_norm``)."""

    def __init__(self, layers: list[nn.Module], final_norm: nn.Module | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = final_norm


class Encoder(LayerStack):
    """A stack of encoder layers."""

    def forward(self, x: Tensor, mask: Tensor | None = None, token_mask: Tensor | None = None) -> Tensor:
        extra = {} if token_mask is None else {"token_mask": token_mask}  # stacks of other layers need not take it
        for layer in self.layers:
            x = layer(x, mask=mask, **extra)  # (B, N, D)
        return x if self.norm is None else self.norm(x)


class Decoder(LayerStack):
    """A stack of decoder layers (without ``memory``: of decoder-only layers, ``cross_attn=None``)."""

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        is_causal: bool = True,
        cache: list[tuple[KVCache, KVCache]] | list[KVCache] | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, self_mask, memory_mask, is_causal, None if cache is None else cache[i], token_mask)
        return x if self.norm is None else self.norm(x)  # (B, T, D)
