"""Configuration of the Vision Transformer (Dosovitskiy et al. 2021) and its named presets.

Besides the sizes, the config holds one *choice field* per part that ViT changed, so that every declared
change can be reverted alone to the classic Transformer's choice: its default is ViT's choice, and the
change's ``revert`` sets the classic one. What ViT changes from the classic model is declared once, in
``CHANGES`` (:mod:`zoo.vit`); ``zoo diff vit`` renders it with the measured deltas.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from core.attention import KERNELS
from core.ffn import ACTIVATIONS, FFN_ACTIVATIONS, FFN_TYPES
from core.layers import NORMS
from plumbing.errors import check_choices, check_positive, check_probability
from zoo.vision import READOUTS, check_image_geometry

TOKENIZERS = ("patch", "vocabulary")
POSITIONS = ("learned", "sinusoidal")


@dataclass
class ViTConfig:
    """Sizes and choices of a :class:`~zoo.vit.model.VisionTransformer`; validated on construction."""

    image_size: int = 32  # the side the learned position table is built for; other sizes are interpolated
    patch_size: int = 4  # P: each P×P patch is one token, N = (image_size / P)² tokens
    in_channels: int = 3
    num_classes: int = 10
    d_model: int = 192
    depth: int = 12  # encoder layers
    heads: int = 3
    mlp_ratio: float = 4.0  # d_ff = int(d_model · mlp_ratio), as in timm
    dropout: float = 0.0  # on embeddings + positions and on each sublayer output
    attention_dropout: float = 0.0  # on the attention weights
    drop_path: float = 0.0  # stochastic depth of the last layer; rates grow linearly from 0 (timm's rule)
    norm_eps: float = 1e-6  # ViT's LayerNorm epsilon (the classic core uses 1e-5)
    kernel: str = "sdpa"  # "sdpa" (fused), "reference" (explicit math), or one a variant registered
    kernel_options: dict[str, Any] = field(default_factory=dict)  # passed to the kernel's constructor
    ffn: str = "dense"  # the position-wise FFN, or an FFN type a variant registered (core.ffn.register_ffn)
    ffn_options: dict[str, Any] = field(default_factory=dict)  # passed to the FFN factory
    # Choice fields: the classic choice of each is what the declared change's ``revert`` sets.
    tokens: str = "patch"
    position: str = "learned"
    norm_first: bool = True
    norm: str = "layernorm"  # or "rmsnorm" (core.layers.NORMS), with eps norm_eps; not a change of ViT's
    activation: str = "gelu"  # "geglu", "swiglu", "reglu" build a gated FFN (core.ffn.GLUFFN)
    readout: str = "cls"  # or "mean" (the patch tokens' average); the classic choice is "decoder"
    decoder_layers: int = 1  # only used by readout="decoder"

    def __post_init__(self) -> None:
        for name in ("image_size", "patch_size", "in_channels", "num_classes", "d_model", "depth", "heads",
                     "decoder_layers"):
            check_positive(name, getattr(self, name))
        check_image_geometry(self.image_size, self.patch_size, self.in_channels)
        if self.d_model % self.heads:
            divisors = [h for h in range(1, min(self.d_model, 16) + 1) if self.d_model % h == 0]
            raise ValueError(
                f"d_model={self.d_model} is not divisible by heads={self.heads}; pick heads among {divisors} "
                "or change d_model"
            )
        for name in ("mlp_ratio", "norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a positive float, got {type(value).__name__} {value!r}")
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if self.d_ff < 1:
            raise ValueError(
                f"mlp_ratio={self.mlp_ratio} gives d_ff = int({self.d_model} · {self.mlp_ratio}) = {self.d_ff}; "
                "raise mlp_ratio (ViT uses 4.0)"
            )
        for name in ("dropout", "attention_dropout", "drop_path"):
            check_probability(name, getattr(self, name))
        if not isinstance(self.norm_first, bool):
            raise TypeError(
                f"norm_first must be a bool (True = Pre-LN, False = Post-LN), got "
                f"{type(self.norm_first).__name__} {self.norm_first!r}"
            )
        for name in ("kernel_options", "ffn_options"):
            if not isinstance(getattr(self, name), dict):
                raise TypeError(f"{name} must be a dict of keyword arguments, got {getattr(self, name)!r}")
        check_choices("ViTConfig", (
            ("attention kernel", self.kernel, KERNELS),
            ("ffn type", self.ffn, FFN_TYPES),
            ("tokens", self.tokens, TOKENIZERS),
            ("position", self.position, POSITIONS),
            ("activation", self.activation, FFN_ACTIVATIONS),
            ("norm", self.norm, NORMS),
            ("readout", self.readout, READOUTS),
        ))
        if self.readout == "decoder" and (self.norm != "layernorm" or self.activation not in ACTIVATIONS):
            raise ValueError(
                f"readout='decoder' builds its decoder layers with LayerNorm and a two-matrix FFN "
                f"(zoo.vision.DecoderReadout), so it cannot honour norm={self.norm!r} with "
                f"activation={self.activation!r}; use norm='layernorm' and an activation among "
                f"{', '.join(ACTIVATIONS)} with it, or readout='cls' or 'mean'"
            )

    @property
    def d_ff(self) -> int:
        """Hidden width of the FFN."""
        return int(self.d_model * self.mlp_ratio)

    @property
    def grid(self) -> int:
        """Patches per image side at ``image_size``."""
        return self.image_size // self.patch_size

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, dict] = {
    "tiny": dict(d_model=32, depth=2, heads=2, patch_size=8, mlp_ratio=2.0),  # tests: a few ms per batch
    # 0.54M parameters, ~4x DATA.md's 140k ViT (which plateaus below 80 %): 80.5 % test in 20 epochs, 8 CPU min
    "cpu": dict(d_model=128, depth=4, heads=4, patch_size=4, mlp_ratio=2.0),
    "vit-tiny": dict(d_model=192, depth=12, heads=3, patch_size=4),  # timm's vit_tiny width at patch 4
    "vit-small": dict(d_model=384, depth=12, heads=6, patch_size=4),
}
DEFAULT_PRESET = "cpu"
