"""(Shifted) window attention, W-MSA and SW-MSA (Swin §3.2), as an attention *kernel* of the core.

Global self-attention over N tokens costs O(N²). Swin attends only inside non-overlapping W×W windows:
O(N·W²), linear in the number of tokens. Every other block rolls the map by ⌊W/2⌋ first, so information
crosses window borders from one block to the next; the tokens that the roll brought round from the far
edge are masked out of each other's windows.

Only *where* attention looks changes. The projections, the head split and the output projection stay the
core :class:`~core.multihead.MultiHeadAttention`'s; this kernel receives its per-head ``q, k, v`` for the
whole token map. Rolling q, k and v is the same as rolling the tokens before projecting them, since the
projections act on each token alone. The roll and the window partition are one fixed permutation of the
tokens, computed once from :func:`~zoo.swin.windows.cyclic_shift` and :func:`~zoo.swin.windows.window_partition`
and applied as a single gather (one copy of each tensor instead of two); the reverse is the inverse
permutation. The softmax itself is delegated to a core kernel (:class:`~core.attention.ScaledDotProductAttention`
or :class:`~core.attention.ReferenceAttention`), which accepts the window axis as one more batch axis.

Shape legend: B batch, H heads, Hr×Wr token map, N = Hr·Wr, W window side, nW windows, Dh head width.
"""

from __future__ import annotations

from torch import Tensor

from core.attention import AttentionKernel, ScaledDotProductAttention
from plumbing.errors import check_positive
from zoo.swin.relative_position import RelativePositionBias
from zoo.swin.windows import shifted_window_mask, window_token_index


class WindowAttention(AttentionKernel):
    """Softmax attention inside W×W windows of an Hr×Wr token map, optionally shifted, with relative bias.

    Args:
        resolution: the token map ``(Hr, Wr)`` (an int: square) the kernel is built for.
        window: window side W; must divide Hr and Wr.
        shift: cyclic shift in tokens (Swin: 0 in even blocks, ⌊W/2⌋ in odd ones); ``0 <= shift < W``.
        relative_position: the learned :class:`RelativePositionBias` of this layer (``None``: no bias).
        kernel: the core kernel that computes the softmax attention per window (default: the fused
            :class:`~core.attention.ScaledDotProductAttention`); attention dropout is its ``dropout``.

    ``forward(q, k, v, need_weights=False)`` follows :class:`~core.attention.AttentionKernel`; it takes no
    extra ``mask``, ``bias`` or ``is_causal`` (the windows and the shift mask are its masking). With
    ``need_weights`` the weights come back as ``(B, H, N, N)`` over the whole map, zero between tokens
    that share no window.

    Shape: q, k, v ``(B, H, N, Dh)`` -> ``(B, H, N, Dh)``.
    """

    def __init__(
        self,
        resolution: int | tuple[int, int],
        window: int,
        shift: int = 0,
        relative_position: RelativePositionBias | None = None,
        kernel: AttentionKernel | None = None,
    ) -> None:
        super().__init__()
        self.resolution = (resolution, resolution) if isinstance(resolution, int) else tuple(resolution)
        check_positive("window", window)
        check_positive("shift", shift, allow_zero=True)
        for side in self.resolution:
            check_positive("resolution", side)
            if side % window:
                raise ValueError(
                    f"window={window} does not divide the {self.resolution[0]}×{self.resolution[1]} token map; "
                    f"use a window among {[w for w in range(1, side + 1) if side % w == 0]}"
                )
        if shift >= window:
            raise ValueError(f"shift={shift} must be smaller than window={window} (Swin uses window // 2)")
        if relative_position is not None and relative_position.window != window:
            raise ValueError(
                f"the relative position bias is built for {relative_position.window}×{relative_position.window} "
                f"windows but the kernel uses window={window}"
            )
        self.window, self.shift = window, shift
        self.relative_position = relative_position
        self.kernel = kernel if kernel is not None else ScaledDotProductAttention()
        mask = shifted_window_mask(self.resolution, window, shift)
        self.register_buffer("shift_mask", mask, persistent=False)  # (nW, W·W, W·W) bool, or None
        # token_index[w, i]: the map position of the token that the roll puts in slot i of window w
        token_index = window_token_index(self.resolution, window, shift)  # (nW, W·W)
        self.register_buffer("token_index", token_index, persistent=False)
        self.register_buffer("map_index", token_index.flatten().argsort(), persistent=False)  # (N,): the inverse

    @property
    def tokens(self) -> int:
        return self.resolution[0] * self.resolution[1]

    def window_bias(self, dtype) -> Tensor | None:
        """The additive score bias of every window: relative position bias, −inf where the shift masks.

        Shape: ``(H, nW, W·W, W·W)``, ``(H, 1, W·W, W·W)`` without a shift, ``(nW, W·W, W·W)`` without a
        relative bias; ``None`` with neither. Computed once per call, not per batch row.
        """
        bias = None if self.relative_position is None else self.relative_position()[:, None].to(dtype)
        if self.shift_mask is None:
            return bias
        if bias is None:
            bias = self.shift_mask.new_zeros(self.shift_mask.shape, dtype=dtype)
        return bias.masked_fill(~self.shift_mask, float("-inf"))  # −inf, never 0: see core.attention

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        if mask is not None or bias is not None or is_causal:
            raise ValueError(
                "WindowAttention takes no mask, bias or is_causal: it attends inside windows of an image map, "
                "masked by its own shift mask; use a core kernel for masked or causal attention"
            )
        if q.shape[-2] != self.tokens or k.shape[-2] != self.tokens:
            raise ValueError(
                f"WindowAttention is built for a {self.resolution[0]}×{self.resolution[1]} map of {self.tokens} "
                f"tokens, got {q.shape[-2]} queries and {k.shape[-2]} keys"
            )

        def windows(x: Tensor) -> Tensor:  # roll by −shift, then partition: (B, H, N, Dh) -> (B, H, nW, W·W, Dh)
            return x.index_select(-2, self.token_index.flatten()).unflatten(-2, self.token_index.shape)

        out, weights = self.kernel(windows(q), windows(k), windows(v), None, self.window_bias(q.dtype), False,
                                   need_weights)  # (B, H, nW, W·W, Dh)
        out = out.flatten(-3, -2).index_select(-2, self.map_index)  # reverse, roll back: (B, H, N, Dh)
        return out, (None if weights is None else self.full_map(weights))

    def full_map(self, weights: Tensor) -> Tensor:
        """Per-window weights ``(B, H, nW, W·W, W·W)`` -> ``(B, H, N, N)`` on the unshifted map."""
        rows = self.token_index[:, :, None].expand(-1, -1, self.token_index.shape[-1])  # (nW, W·W, W·W)
        full = weights.new_zeros(*weights.shape[:2], self.tokens, self.tokens)  # (B, H, N, N)
        full[:, :, rows, rows.transpose(-2, -1)] = weights
        return full

    def extra_repr(self) -> str:
        return f"resolution={self.resolution}, window={self.window}, shift={self.shift}"
