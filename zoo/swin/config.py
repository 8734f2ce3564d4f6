"""Configuration of the Swin Transformer (Liu et al. 2021), its stage geometry, and its named presets.

Besides the sizes, the config holds one *choice field* per part that Swin changed, so that every declared
change can be reverted alone to the classic Transformer's choice: its default is Swin's choice, and the
change's ``revert`` sets the classic one. What Swin changes from the classic model is declared once, in
``CHANGES`` (:mod:`zoo.swin`); ``zoo diff swin`` renders it with the measured deltas.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from core.attention import KERNELS
from core.ffn import ACTIVATIONS
from plumbing.errors import check_bool, check_choices, check_int_tuple, check_positive, check_probability
from zoo.vision import check_image_geometry

TOKENIZERS = ("patch", "vocabulary")
POSITIONS = ("relative", "sinusoidal")
READOUTS = ("mean", "decoder")


@dataclass(frozen=True)
class Stage:
    """The geometry of one stage: ``depth`` blocks on a ``resolution``² map of width ``dim``.

    ``window`` is the window side its blocks attend in (already shrunk to the map, as timm does when the
    map is no larger than one window), ``None`` for global attention; ``shift`` is the odd blocks' cyclic
    shift (0 when one window covers the map: there is nothing to shift across).
    """

    index: int
    depth: int
    resolution: int
    dim: int
    heads: int
    window: int | None
    shift: int

    def block_shift(self, block: int) -> int:
        """Swin alternates regular and shifted windows: W-MSA in even blocks, SW-MSA in odd ones."""
        return 0 if block % 2 == 0 else self.shift


@dataclass
class SwinConfig:
    """Sizes and choices of a :class:`~zoo.swin.model.SwinTransformer`; validated on construction.

    The defaults are the paper's Swin-T at 224×224 (Table 1 / §3.3).
    """

    image_size: int = 224
    patch_size: int = 4  # P: each P×P patch is one token of stage 1
    in_channels: int = 3
    num_classes: int = 1000
    embed_dim: int = 96  # C: width of stage 1; stage i has width C·2^(i−1)
    depths: tuple[int, ...] = (2, 2, 6, 2)  # blocks per stage
    heads: tuple[int, ...] = (3, 6, 12, 24)  # heads per stage (head width 32 throughout in Swin-T)
    window_size: int | None = 7  # W; None: one window covering the whole map = global attention, no shift
    mlp_ratio: float = 4.0  # d_ff = int(width · mlp_ratio), as in timm
    dropout: float = 0.0  # on embeddings and each sublayer output
    attention_dropout: float = 0.0  # on the attention weights
    drop_path: float = 0.2  # stochastic depth of the last block; rates grow linearly from 0 (Swin-T: 0.2)
    norm_eps: float = 1e-5
    kernel: str = "sdpa"  # core kernel doing the softmax per window: "sdpa" (fused) or "reference"
    # Choice fields: the classic choice of each is what the declared change's ``revert`` sets.
    tokens: str = "patch"
    position: str = "relative"
    hierarchy: bool = True  # False: sum(depths) blocks at stage 1's resolution, width and heads; no merging
    norm_first: bool = True
    activation: str = "gelu"
    readout: str = "mean"

    def __post_init__(self) -> None:
        for name in ("image_size", "patch_size", "in_channels", "num_classes", "embed_dim"):
            check_positive(name, getattr(self, name))
        check_image_geometry(self.image_size, self.patch_size, self.in_channels)
        self.depths, self.heads = check_int_tuple("depths", self.depths), check_int_tuple("heads", self.heads)
        if len(self.heads) != len(self.depths):
            raise ValueError(
                f"heads={self.heads} must give one head count per stage, like depths={self.depths} "
                f"({len(self.depths)} stages)"
            )
        if self.window_size is not None:
            check_positive("window_size", self.window_size)
        for name in ("mlp_ratio", "norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a positive float, got {type(value).__name__} {value!r}")
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if int(self.embed_dim * self.mlp_ratio) < 1:
            raise ValueError(f"mlp_ratio={self.mlp_ratio} gives an FFN of width 0 at embed_dim={self.embed_dim}")
        for name in ("dropout", "attention_dropout", "drop_path"):
            check_probability(name, getattr(self, name))
        for name in ("hierarchy", "norm_first"):
            check_bool(name, getattr(self, name))
        check_choices("SwinConfig", (
            ("kernel", self.kernel, KERNELS),
            ("tokens", self.tokens, TOKENIZERS),
            ("position", self.position, POSITIONS),
            ("activation", self.activation, ACTIVATIONS),
            ("readout", self.readout, READOUTS),
        ))
        self.stages()  # validates resolutions, windows and heads per stage

    @property
    def grid(self) -> int:
        """Patches per image side: the side of stage 1's token map."""
        return self.image_size // self.patch_size

    def sides(self) -> list[int]:
        """The token-map side of every stage; ValueError when patch merging cannot halve a map."""
        if not self.hierarchy:
            return [self.grid]
        sides = [self.grid]
        for stage in range(2, len(self.depths) + 1):
            if sides[-1] % 2:
                raise ValueError(
                    f"stage {stage - 1} ends on a {sides[-1]}×{sides[-1]} map, which patch merging cannot halve for "
                    f"stage {stage}; the patch grid image_size/patch_size = {self.grid} must be divisible by "
                    f"2^{len(self.depths) - 1} = {2 ** (len(self.depths) - 1)}, or use fewer stages"
                )
            sides.append(sides[-1] // 2)
        return sides

    def stages(self) -> list[Stage]:
        """The geometry of every stage (one stage of ``sum(depths)`` blocks when ``hierarchy=False``).

        Raises ValueError, naming the stage and what would work, when a map cannot be halved by patch
        merging, is not divisible by the window, or its width by its heads.
        """
        sides = self.sides()
        if not self.hierarchy:
            return [self._stage(0, sum(self.depths), sides[0], self.embed_dim, self.heads[0], sides)]
        return [self._stage(i, depth, side, self.embed_dim * 2**i, heads, sides)
                for i, (depth, side, heads) in enumerate(zip(self.depths, sides, self.heads))]

    def _stage(self, index: int, depth: int, side: int, dim: int, heads: int, sides: list[int]) -> Stage:
        if dim % heads:
            divisors = [h for h in range(1, min(dim, 32) + 1) if dim % h == 0]
            raise ValueError(
                f"stage {index + 1} has width {dim}, not divisible by heads[{index}]={heads}; "
                f"pick heads among {divisors} or change embed_dim"
            )
        if self.window_size is None:
            return Stage(index, depth, side, dim, heads, None, 0)
        window = min(self.window_size, side)  # a map no larger than one window is one window (timm's rule)
        if side % window:
            fits = [w for w in range(2, self.grid + 1) if all(s % min(w, s) == 0 for s in sides)]
            raise ValueError(
                f"stage {index + 1} works on a {side}×{side} token map, which window_size={self.window_size} "
                f"does not divide; window sizes that fit every stage: {fits}, or change image_size / patch_size"
            )
        return Stage(index, depth, side, dim, heads, window, window // 2 if window < side else 0)

    def d_ff(self, dim: int) -> int:
        """Hidden width of the FFN of a stage of width ``dim``."""
        return int(dim * self.mlp_ratio)

    def to_dict(self) -> dict:
        return asdict(self)


SWIN_T = dict(embed_dim=96, depths=(2, 2, 6, 2), heads=(3, 6, 12, 24), drop_path=0.2)
PRESETS: dict[str, dict] = {
    "tiny": dict(image_size=32, patch_size=2, window_size=4, num_classes=10, embed_dim=16, depths=(2, 2),
                 heads=(2, 4), drop_path=0.0),  # tests: a few ms per batch
    # windows, shifts and merges all at work (16², 8², 4² maps) at 1/12 of Swin-T's size, to train in CPU minutes
    "cpu": dict(image_size=32, patch_size=2, window_size=4, num_classes=10, embed_dim=64, depths=(2, 2, 2),
                heads=(2, 4, 8), drop_path=0.0),
    "swin-t-32": dict(image_size=32, patch_size=2, window_size=4, num_classes=10, **SWIN_T),
    "swin-t-224": dict(image_size=224, patch_size=4, window_size=7, num_classes=1000, **SWIN_T),  # the paper's
}
DEFAULT_PRESET = "cpu"
