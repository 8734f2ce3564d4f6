"""Configuration of MISSFormer (Huang et al. 2021, arXiv 2109.07162), its stage geometry, and its presets.

Besides the sizes, the config holds one *choice field* per part that MISSFormer changed, so that every
declared change can be reverted alone to the classic Transformer's choice: its default is MISSFormer's
choice, and the change's ``revert`` sets the classic one. What MISSFormer changes from the classic model is
declared once, in ``CHANGES`` (:mod:`zoo.missformer`); ``zoo diff missformer`` renders it with the measured
deltas.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from core.attention import KERNELS
from core.ffn import ACTIVATIONS
from plumbing.errors import check_bool, check_choices, check_int_tuple, check_positive, check_probability
from zoo.vision import volume_patch

TOKENIZERS = ("overlap", "patch", "vocabulary")
POSITIONS = ("none", "sinusoidal")
FFNS = ("remix", "dense")
PATCH = 4  # the first embedding's stride: stage 1 works at 1/4 of the image, as in the paper


@dataclass(frozen=True)
class Stage:
    """One stage: ``depth`` blocks of width ``dim`` with ``heads`` heads and key/value reduction ``sr``."""

    index: int
    depth: int
    dim: int
    heads: int
    sr: int


@dataclass
class MISSFormerBase:
    """Sizes and choices of a :class:`~zoo.missformer.model.MISSFormer`, 2D or 3D; validated on construction.

    The defaults are the official model (``networks/MISSFormer.py``): 224×224, 3 channels, 9 Synapse classes.
    Two configs share these fields: :class:`MISSFormerConfig` (2D, the paper's) and :class:`MISSFormer3DConfig`;
    neither derives from the other, so each model is its own root (its own classic choices, see
    :mod:`zoo.analysis.counterpart`).
    """

    image_size: int = 224  # the size the model is built and measured at; must be divisible by 2^(stages+1)
    in_channels: int = 3  # a 1-channel input to a 3-channel model is repeated (as the official code does)
    num_classes: int = 9
    widths: tuple[int, ...] = (64, 128, 320, 512)  # channels per stage; even (the decoder halves them)
    depths: tuple[int, ...] = (2, 2, 2, 2)  # encoder blocks per stage
    heads: tuple[int, ...] = (1, 2, 5, 8)
    sr_ratios: tuple[int, ...] = (8, 4, 2, 1)  # R per stage: keys/values from an (h/R)×(w/R) map
    ffn_ratio: float = 4.0  # FFN hidden width = ffn_ratio · width
    bridge_depth: int = 4  # context-bridge layers (0: the skips go straight to the decoder)
    bridge_heads: int = 1  # heads of the bridge's attention over stage 1's width
    decoder_depth: int = 2  # Transformer blocks per decoder stage
    # False: the official fixed geometry: only image_size×image_size inputs (its token splits are constants).
    # True: the bridge's token splits and the decoder's maps follow each input, any size divisible by 32.
    resolution_agnostic: bool = True
    dropout: float = 0.0  # on each sublayer output (the official code has none)
    attention_dropout: float = 0.0
    drop_path: float = 0.0  # stochastic depth of the last encoder block, growing linearly from 0
    norm_eps: float = 1e-5  # torch's LayerNorm default, as in the official code
    kernel: str = "sdpa"  # core attention kernel: "sdpa" (fused) or "reference"
    # Choice fields: the classic choice of each is what the declared change's ``revert`` sets.
    spatial_reduction: bool = True
    ffn: str = "remix"
    activation: str = "gelu"
    hierarchy: bool = True  # False: one stage of sum(depths) blocks at stage 1's width, no decoder
    tokens: str = "overlap"
    position: str = "none"
    norm_first: bool = True
    spatial_dims = 2  # the 2D model; MISSFormer3DConfig builds the same parts in 3D

    def __post_init__(self) -> None:
        for name in ("in_channels", "num_classes", "decoder_depth", "bridge_heads"):
            check_positive(name, getattr(self, name))
        check_positive("bridge_depth", self.bridge_depth, allow_zero=True)
        for name in ("widths", "depths", "heads", "sr_ratios"):
            setattr(self, name, check_int_tuple(name, getattr(self, name)))
        for name in ("depths", "heads", "sr_ratios"):
            if len(getattr(self, name)) != len(self.widths):
                raise ValueError(
                    f"{name}={getattr(self, name)} must have one entry per stage, like widths={self.widths} "
                    f"({len(self.widths)} stages)"
                )
        for name in ("ffn_ratio", "norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        for name in ("dropout", "attention_dropout", "drop_path"):
            check_probability(name, getattr(self, name))
        for name in ("resolution_agnostic", "spatial_reduction", "hierarchy", "norm_first"):
            check_bool(name, getattr(self, name))
        check_choices("MISSFormerConfig", (
            ("kernel", self.kernel, KERNELS),
            ("tokens", self.tokens, TOKENIZERS),
            ("position", self.position, POSITIONS),
            ("ffn", self.ffn, FFNS),
            ("activation", self.activation, ACTIVATIONS),
        ))
        self._check_widths()
        self._check_input()

    def _check_input(self) -> None:
        check_positive("image_size", self.image_size)
        self.check_size((self.image_size, self.image_size), "image_size")

    @property
    def input_sides(self) -> tuple[int, ...]:
        """The spatial sides the model is built and measured at: (H, W), or (D, H, W) in 3D."""
        return self.image_size, self.image_size

    def _check_widths(self) -> None:
        for i, stage in enumerate(self.stages()):
            if stage.dim % stage.heads:
                divisors = [h for h in range(1, min(stage.dim, 16) + 1) if stage.dim % h == 0]
                raise ValueError(
                    f"widths[{i}]={stage.dim} is not divisible by heads[{i}]={stage.heads}; "
                    f"pick heads among {divisors} or change the width"
                )
            if self.hierarchy and stage.dim % 2:
                raise ValueError(f"widths[{i}]={stage.dim} must be even: patch expanding halves it in the decoder")
        if int(min(self.widths) * self.ffn_ratio) < 1:
            raise ValueError(f"ffn_ratio={self.ffn_ratio} gives an FFN of width 0 at width {min(self.widths)}")
        if not self.bridge_depth:
            return
        base = self.widths[0]
        if base % self.bridge_heads:
            raise ValueError(f"bridge_heads={self.bridge_heads} must divide stage 1's width widths[0]={base}")
        for i, dim in enumerate(self.widths[: len(self.stages())]):
            if dim % base:
                raise ValueError(
                    f"widths[{i}]={dim} is not a multiple of widths[0]={base}: the context bridge splits each "
                    f"stage's channels into tokens of stage 1's width; use multiples of {base} or bridge_depth=0"
                )

    def stages(self) -> list[Stage]:
        """The encoder stages; one stage of ``sum(depths)`` blocks at stage 1's sizes when ``hierarchy=False``."""
        if not self.hierarchy:
            return [Stage(0, sum(self.depths), self.widths[0], self.heads[0], self.sr_ratios[0])]
        return [Stage(i, *values) for i, values in enumerate(zip(self.depths, self.widths, self.heads, self.sr_ratios))]

    @property
    def multiple(self) -> int:
        """Image sides must be multiples of this: stride 4, then a halving per further stage."""
        return PATCH * 2 ** (len(self.stages()) - 1)

    def stage_sides(self, sides: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The token-map sides of every stage for an input of ``sides`` (H, W) or (D, H, W) (already validated)."""
        return [tuple(side // (PATCH * 2**i) for side in sides) for i in range(len(self.stages()))]

    def check_size(self, sides: tuple[int, ...], what: str = "image size") -> None:
        """ValueError unless every stage's map halves cleanly and is divisible by its reduction ratio."""
        text = "×".join(map(str, sides))
        bad = next((side for side in sides if side % self.multiple), None)
        if bad is not None:
            raise ValueError(
                f"{what} {text} is not divisible by {self.multiple} (stride {PATCH}, then "
                f"{len(self.stages()) - 1} halvings); resize or pad to a multiple of {self.multiple}, "
                f"e.g. {max(1, round(bad / self.multiple)) * self.multiple}"
            )
        if not self.spatial_reduction:
            return
        for stage, stage_sides in zip(self.stages(), self.stage_sides(sides)):
            if any(side % stage.sr for side in stage_sides):
                raise ValueError(
                    f"{what} {text} gives stage {stage.index + 1} a {'×'.join(map(str, stage_sides))} map, not "
                    f"divisible by its sr_ratios[{stage.index}]={stage.sr}; use a larger input or a smaller ratio"
                )

    def d_ff(self, dim: int) -> int:
        """Hidden width of the FFN at width ``dim``."""
        return int(dim * self.ffn_ratio)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class MISSFormerConfig(MISSFormerBase):
    """The 2D model's config: ``image_size``×``image_size`` images (see :class:`MISSFormerBase`)."""


@dataclass
class MISSFormer3DConfig(MISSFormerBase):
    """The same parts in 3D (``spatial_dims = 3``): 3D convolutions, d×h×w token maps, 2×2×2 patch expanding.

    The input is a ``patch_size`` (D, H, W) of voxels whose sides are multiples of 32. ``image_size``, when given
    (the delta analysis and ``zoo check`` give the task's side and grow it), replaces the in-plane sides: the patch
    becomes (D, image_size, image_size). Only the overlapping patch embedding exists in 3D (``tokens="overlap"``).
    """

    image_size: int | None = None  # in-plane side when given: patch (D, image_size, image_size)
    patch_size: tuple[int, ...] = (32, 64, 64)  # (D, H, W) voxels the model is built and measured at
    in_channels: int = 1
    sr_ratios: tuple[int, ...] = (4, 2, 1, 1)  # per side: in 3D a ratio R keeps 1/R³ of the keys
    spatial_dims = 3

    def _check_input(self) -> None:
        self.patch_size = volume_patch(self.patch_size, self.image_size)
        if self.tokens != "overlap":
            raise ValueError(f"tokens={self.tokens!r}: the 3D model has only the overlapping patch embedding "
                             "(tokens='overlap'); the patch and vocabulary tokenizers are 2D")
        self.check_size(self.patch_size, "patch_size")

    @property
    def input_sides(self) -> tuple[int, ...]:
        return self.patch_size


PRESETS: dict[str, dict] = {
    # tests: 32×32 and up, a few ms per batch
    "tiny": dict(image_size=32, in_channels=1, num_classes=3, widths=(8, 16, 24, 32), depths=(1, 1, 1, 1),
                 heads=(1, 2, 2, 4), bridge_depth=1, decoder_depth=1),
    # the medseg task's default: 96×96 single-channel slices on 2 CPU cores
    "cpu": dict(image_size=96, in_channels=1, num_classes=9, widths=(32, 64, 128, 160), heads=(1, 2, 4, 5),
                bridge_depth=2, decoder_depth=1),
    # the official model: 224×224, 3 channels (grayscale repeated), 9 classes, fixed token splits
    "paper": dict(image_size=224, in_channels=3, num_classes=9, resolution_agnostic=False),
}
PRESETS_3D: dict[str, dict] = {
    # tests: a 32³ patch
    "tiny": dict(patch_size=(32, 32, 32), num_classes=3, widths=(8, 16, 24, 32), depths=(1, 1, 1, 1),
                 heads=(1, 2, 2, 4), bridge_depth=1, decoder_depth=1),
    # 3D on a CPU: 32×64×64 patches of the phantom3d cases
    "cpu": dict(patch_size=(32, 64, 64), num_classes=9, widths=(16, 32, 64, 96), depths=(1, 1, 2, 1),
                heads=(1, 2, 4, 6), bridge_depth=1, decoder_depth=1),
}
DEFAULT_PRESET = "cpu"
