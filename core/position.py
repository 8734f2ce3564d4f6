"""Positional schemes: how a Transformer, which is otherwise permutation-equivariant, learns order.

Each scheme says *where* it injects position (``injection``):

* ``"embedding"``: added to the token embeddings once, before the first layer
  (sinusoidal — Vaswani et al. 2017, §3.5; learned absolute — BERT, ViT);
* ``"qk"``: rotates queries and keys inside every self-attention (RoPE — Su et al. 2021), so the
  score q_m·k_n depends on positions only through m − n;
* ``"scores"``: adds a bias to every self-attention score: a per-head linear penalty −m_h·|i − j|
  (ALiBi — Press et al. 2022), which extrapolates to longer sequences, or a learned scalar per head and
  log-spaced distance bucket (T5's relative bias — Raffel et al. 2020);
* ``"none"``: nothing at all (NoPE — Haviv et al. 2022, Kazemnejad et al. 2023): a causal model still
  learns order, since a token sees only its prefix.

Every scheme implements all three hooks; the ones it does not use are the identity, so multi-head
attention can call them unconditionally. Positions are counted from ``offset`` so that incremental
decoding with a key/value cache sees the same positions as a full pass.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from plumbing.errors import check_positive, unknown_name


class PositionalScheme(nn.Module):
    """Interface; subclasses override the hook that matches their ``injection``."""

    zoo_part = "position"
    injection: ClassVar[str] = "none"

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """``(B, N, D)`` embeddings -> ``(B, N, D)`` with position added (``"embedding"`` schemes)."""
        return x

    def rotate(self, x: Tensor, offset: int = 0) -> Tensor:
        """``(B, H, N, Dh)`` queries or keys -> rotated by their positions (``"qk"`` schemes)."""
        return x

    def score_bias(self, n_q: int, n_k: int, device: torch.device) -> Tensor | None:
        """``(H, Nq, Nk)`` additive score bias, queries being the last ``Nq`` positions (``"scores"``)."""
        return None


def sinusoid_table(length: int, d_model: int, base: float = 10000.0, device=None) -> Tensor:
    """PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(pos / base^(2i/d)); shape ``(length, d)``."""
    pos = torch.arange(length, dtype=torch.float32, device=device)[:, None]  # (N, 1)
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32, device=device) / d_model)
    angles = pos * inv_freq  # (N, ceil(D/2))
    table = torch.zeros(length, d_model, device=device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table


class SinusoidalPosition(PositionalScheme):
    """Fixed sinusoids added to the embeddings; the table grows on demand, so any length works."""

    injection = "embedding"

    def __init__(self, d_model: int, base: float = 10000.0, initial_length: int = 512) -> None:
        super().__init__()
        self.d_model, self.base = d_model, base
        self.register_buffer("table", sinusoid_table(initial_length, d_model, base), persistent=False)

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.shape[1]
        if end > self.table.shape[0]:  # extend past the longest length seen so far
            self.table = sinusoid_table(max(end, 2 * self.table.shape[0]), self.d_model, self.base, x.device)
        return x + self.table[offset:end].to(x.dtype)  # (B, N, D)


class LearnedPosition(PositionalScheme):
    """A learned vector per absolute position (BERT, ViT); it cannot go past ``max_len``."""

    injection = "embedding"

    def __init__(self, d_model: int, max_len: int = 512) -> None:
        super().__init__()
        check_positive("max_len", max_len)
        self.max_len = max_len
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.shape[1]
        if end > self.max_len:
            raise ValueError(
                f"sequence reaches position {end} but the learned position table has max_len={self.max_len}; "
                "build the model with a larger max_len, or use a scheme with no table (sinusoidal, rope, alibi, "
                "t5, none)"
            )
        return x + self.weight[offset:end]  # (B, N, D)


class RotaryPosition(PositionalScheme):
    """RoPE: rotate each pair (x₂ᵢ, x₂ᵢ₊₁) of a head by angle pos·base^(−2i/Dh) (RoFormer, §3.4)."""

    injection = "qk"

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE rotates pairs of dimensions: head_dim must be even, got {head_dim}")
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (Dh/2,)

    def rotate(self, x: Tensor, offset: int = 0) -> Tensor:
        pos = torch.arange(offset, offset + x.shape[-2], device=x.device, dtype=torch.float32)
        angles = pos[:, None] * self.inv_freq  # (N, Dh/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        even, odd = x.unflatten(-1, (-1, 2)).unbind(-1)  # each (B, H, N, Dh/2)
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
        return rotated.flatten(-2)  # (B, H, N, Dh)


def alibi_slopes(heads: int) -> Tensor:
    """The geometric sequence of ALiBi slopes: 2^(−8/n), 2^(−16/n), ... for n a power of two.

    For other head counts the paper takes the slopes of the nearest lower power of two and fills up
    with every other slope of the next power of two.
    """

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** int(math.floor(math.log2(heads)))
    slopes = power_of_two(closest)
    if closest != heads:
        slopes += power_of_two(2 * closest)[0::2][: heads - closest]
    return torch.tensor(slopes)


class ALiBiPosition(PositionalScheme):
    """ALiBi: no position in the embeddings; score(i, j) gets −m_h·|i − j| in every self-attention."""

    injection = "scores"

    def __init__(self, heads: int) -> None:
        super().__init__()
        check_positive("heads", heads)
        self.register_buffer("slopes", alibi_slopes(heads), persistent=False)  # (H,)

    def score_bias(self, n_q: int, n_k: int, device: torch.device) -> Tensor:
        q_pos = torch.arange(n_k - n_q, n_k, device=device)[:, None]  # (Nq, 1)
        k_pos = torch.arange(n_k, device=device)[None, :]  # (1, Nk)
        distance = (q_pos - k_pos).abs().float()  # (Nq, Nk)
        return -self.slopes.to(device)[:, None, None] * distance  # (H, Nq, Nk)


def relative_position_bucket(
    relative_position: Tensor, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """T5's bucket of each relative position ``key − query``: exact for small distances, log-spaced beyond.

    Half the buckets (of each direction, when ``bidirectional``) hold the distances 0 … n/2 − 1 one by one;
    the rest cover n/2 … ``max_distance`` logarithmically, and every longer distance shares the last bucket,
    which is why the bias is defined at any length. Unidirectional (a causal model): keys after the query
    all fall in bucket 0, where the mask removes them anyway.
    """
    if bidirectional:
        num_buckets //= 2
        buckets = (relative_position > 0).long() * num_buckets  # keys after the query: the upper half
        distance = relative_position.abs()
    else:
        buckets = torch.zeros_like(relative_position)
        distance = (-relative_position).clamp(min=0)  # how far back the key is
    max_exact = num_buckets // 2
    # log(distance / max_exact) / log(max_distance / max_exact) spreads the long distances over the rest;
    # clamp(min=1) only keeps log() finite for the short distances that torch.where discards.
    log_ratio = torch.log(distance.clamp(min=1).float() / max_exact) / math.log(max_distance / max_exact)
    far = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, far)


class T5RelativeBias(PositionalScheme):
    """T5's relative position bias: one learned scalar per head and distance bucket, added to the scores.

    Raffel et al. 2020 ("Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer",
    §2.1): no position in the embeddings; the bias of score(i, j) is looked up by the bucket of j − i
    (:func:`relative_position_bucket`) and shared by every layer, as the one module all attentions hold. It is
    added after the kernel's 1/√d_k scale (T5 has no scale, folding it into its initialisation instead).

    Args:
        heads: number of heads H (one bias per head and bucket).
        bidirectional: ``False`` for a causal model (only distances into the past are told apart).
        num_buckets, max_distance: T5's 32 and 128.
    """

    injection = "scores"

    def __init__(self, heads: int, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        check_positive("heads", heads)
        check_positive("num_buckets", num_buckets)
        check_positive("max_distance", max_distance)
        self.bidirectional, self.num_buckets, self.max_distance = bidirectional, num_buckets, max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, heads)  # T5's name for the (buckets, H) table

    def score_bias(self, n_q: int, n_k: int, device: torch.device) -> Tensor:
        q_pos = torch.arange(n_k - n_q, n_k, device=device)[:, None]  # (Nq, 1)
        k_pos = torch.arange(n_k, device=device)[None, :]  # (1, Nk)
        buckets = relative_position_bucket(k_pos - q_pos, self.bidirectional, self.num_buckets, self.max_distance)
        return self.relative_attention_bias(buckets).permute(2, 0, 1)  # (Nq, Nk, H) -> (H, Nq, Nk)


class NoPosition(PositionalScheme):
    """NoPE: no positional information at all; every hook is the identity (the interface's defaults).

    In a causal model order is still implicit, since each token attends only its prefix.
    """

    injection = "none"


POSITIONAL_SCHEMES = ("sinusoidal", "learned", "rope", "alibi", "t5", "none")


def build_position(name: str, d_model: int, heads: int, max_len: int = 512, causal: bool = False) -> PositionalScheme:
    """Build a positional scheme by name (one of :data:`POSITIONAL_SCHEMES`).

    ``causal``: the model attends only backwards (a decoder-only language model), so T5's bias tells apart
    distances into the past only; schemes without a direction ignore it.
    """
    if name == "sinusoidal":
        return SinusoidalPosition(d_model)
    if name == "learned":
        return LearnedPosition(d_model, max_len)
    if name == "rope":
        return RotaryPosition(d_model // heads)
    if name == "alibi":
        return ALiBiPosition(heads)
    if name == "t5":
        return T5RelativeBias(heads, bidirectional=not causal)
    if name == "none":
        return NoPosition()
    raise unknown_name("positional scheme", name, POSITIONAL_SCHEMES)
