"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"): the kernel, and nothing else.

Softmax attention weighs value j for query i by exp(qᵢ·kⱼ/√d) / Σₗ exp(qᵢ·kₗ/√d), which needs the Nq×Nk
score matrix. Replacing the exponential by a product of feature maps, sim(q, k) = φ(q)·φ(k), lets the sum
over keys be taken first:

    outᵢ = Σⱼ φ(qᵢ)·φ(kⱼ) vⱼ / Σⱼ φ(qᵢ)·φ(kⱼ) = φ(qᵢ) S / φ(qᵢ)·z,   S = Σⱼ φ(kⱼ) vⱼᵀ (M×Dv),  z = Σⱼ φ(kⱼ),

so the cost is O(N·M·Dv) instead of O(N²·Dh). With a causal mask S and z become prefix sums: that is an
RNN whose state (S, z) has a fixed size, which the decoder uses for O(1)-per-token generation
(:meth:`LinearAttention.step`). The parallel causal form here is *chunked*: inside a chunk of C tokens a
masked C×C product, across chunks an exclusive cumulative sum of per-chunk summaries, all batched.

Shape legend: B batch, H heads, Nq queries, Nk keys, Dh head width, Dv value width, M features, G chunks,
C chunk length.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from core.attention import RecurrentKernel
from core.masks import causal_mask
from plumbing.errors import check_positive
from zoo.linear.feature_maps import build_feature_map

State = tuple[Tensor, Tensor]  # (S (B, H, M, Dv), z (B, H, M)): the sums over every key seen so far


def key_summary(phi_k: Tensor, v: Tensor) -> State:
    """(Σ φ(kⱼ)vⱼᵀ, Σ φ(kⱼ)) over the keys ``(B, H, Nk, M)`` and values ``(B, H, Nk, Dv)``: the RNN state."""
    return torch.einsum("bhnm,bhnd->bhmd", phi_k, v), phi_k.sum(-2)  # (B, H, M, Dv), (B, H, M)


def linear_attention(phi_q: Tensor, phi_k: Tensor, v: Tensor, eps: float = 1e-6) -> Tensor:
    """Non-causal φ(Q)(φ(K)ᵀV) / (φ(Q)·Σφ(K)).

    Shape: φ(q) ``(B, H, Nq, M)``, φ(k) ``(B, H, Nk, M)``, v ``(B, H, Nk, Dv)`` -> ``(B, H, Nq, Dv)``.
    """
    kv, z = key_summary(phi_k, v)  # every key in one summary
    numerator = phi_q @ kv  # (B, H, Nq, Dv)
    denominator = torch.einsum("bhnm,bhm->bhn", phi_q, z)  # (B, H, Nq)
    return numerator / denominator.clamp_min(eps).unsqueeze(-1)


def causal_linear_attention(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, chunk_size: int = 64, eps: float = 1e-6, state: State | None = None
) -> tuple[Tensor, State]:
    """Causal linear attention by chunked prefix sums; query i sees keys j <= i (and ``state``, the earlier keys).

    Returns ``(out (B, H, N, Dv), state)`` where the new state sums every key, ready for the next call.
    """
    n = phi_q.shape[-2]
    c = min(chunk_size, n)
    pad = -n % c  # padded keys come after every real query (never seen) and padded queries are dropped
    phi_q, phi_k, v = (rearrange(F.pad(t, (0, 0, 0, pad)), "b h (g c) x -> b h g c x", c=c) for t in (phi_q, phi_k, v))
    kv = torch.einsum("bhgcm,bhgcd->bhgmd", phi_k, v)  # (B, H, G, M, Dv): one summary per chunk
    z = phi_k.sum(-2)  # (B, H, G, M)
    # Exclusive prefix sums over chunks: chunk g sees the summaries of chunks < g (plus the earlier state).
    kv_before = F.pad(kv[:, :, :-1], (0, 0, 0, 0, 1, 0)).cumsum(2)  # (B, H, G, M, Dv)
    z_before = F.pad(z[:, :, :-1], (0, 0, 1, 0)).cumsum(2)  # (B, H, G, M)
    if state is not None:
        kv_before = kv_before + state[0].unsqueeze(2)
        z_before = z_before + state[1].unsqueeze(2)
    scores = torch.einsum("bhgcm,bhgem->bhgce", phi_q, phi_k)  # (B, H, G, C, C): within each chunk
    scores = scores.masked_fill(~causal_mask(c, device=scores.device), 0.0)
    numerator = torch.einsum("bhgcm,bhgmd->bhgcd", phi_q, kv_before) + scores @ v  # (B, H, G, C, Dv)
    denominator = torch.einsum("bhgcm,bhgm->bhgc", phi_q, z_before) + scores.sum(-1)  # (B, H, G, C)
    out = numerator / denominator.clamp_min(eps).unsqueeze(-1)
    out = rearrange(out, "b h g c d -> b h (g c) d")[:, :, :n]  # (B, H, N, Dv)
    return out, (kv_before[:, :, -1] + kv[:, :, -1], z_before[:, :, -1] + z[:, :, -1])


def implied_weights(phi_q: Tensor, phi_k: Tensor, is_causal: bool, eps: float = 1e-6) -> Tensor:
    """The ``(B, H, Nq, Nk)`` weights linear attention implies, φ(qᵢ)·φ(kⱼ) / Σₗ φ(qᵢ)·φ(kₗ) (O(N²): to look at)."""
    scores = phi_q @ phi_k.transpose(-2, -1)  # (B, H, Nq, Nk); masked keys have zero features
    if is_causal:
        scores = scores.masked_fill(~causal_mask(phi_q.shape[-2], phi_k.shape[-2], phi_q.device), 0.0)
    return scores / scores.sum(-1, keepdim=True).clamp_min(eps)


def key_mask_of(mask: Tensor | None) -> Tensor | None:
    """A bool mask broadcastable to ``(B, H, Nq, Nk)`` as a key mask ``(B|1, H|1, Nk, 1)``; ValueError otherwise."""
    if mask is None:
        return None
    if mask.shape[-2] != 1:
        if not bool((mask == mask[..., :1, :]).all()):
            raise ValueError(
                f"linear attention supports key-padding masks (B, 1, 1, Nk) and is_causal=True only, got a mask of "
                f"shape {tuple(mask.shape)} that differs between queries: it never forms the Nq×Nk scores such a "
                "mask would select from. Pass a causal mask as is_causal=True and padding as a key mask."
            )
        mask = mask[..., :1, :]
    return mask.transpose(-2, -1)


class LinearAttention(RecurrentKernel):
    """Linear attention φ(Q)(φ(K)ᵀV) / (φ(Q)·Σφ(K)), a drop-in :class:`~core.attention.AttentionKernel`.

    Args:
        dropout: must be 0: there are no attention weights to drop (the kernel interface passes it).
        feature_map: ``"elu"`` (elu + 1, the paper's) or ``"favor"`` (Performer's FAVOR+ random features,
            an unbiased estimate of softmax attention); see :mod:`zoo.linear.feature_maps`.
        n_features: number of random features M (favor only; default round(Dh·ln Dh)).
        redraw_interval: resample the random features every this many training calls (favor only; 0 = never).
        chunk_size: chunk length C of the causal form: intra-chunk work is O(N·C·M), so C ≈ Dh balances it
            with the O(N·M·Dv) across chunks.
        eps: lower bound of the normaliser φ(q)·Σφ(k), so a query with nothing to attend yields 0, not NaN.
            A bound rather than the paper's "+ eps": it leaves every normaliser above eps exact, so the result
            does not depend on the constant FAVOR+ divides out of its features (parallel = recurrent form).

    Masks: key-padding masks and ``is_causal`` (bottom-right aligned when Nq != Nk) only; no score ``bias``.
    With ``need_weights`` it also returns the implied ``(B, H, Nq, Nk)`` weights (built for visualisation).
    A :class:`~core.attention.RecurrentKernel`: during incremental decoding multi-head attention calls
    :meth:`step` instead.

    Shape: q ``(B, H, Nq, Dh)``, k ``(B, H, Nk, Dh)``, v ``(B, H, Nk, Dv)`` -> ``(B, H, Nq, Dv)``.
    """

    def __init__(
        self,
        dropout: float = 0.0,
        feature_map: str = "elu",
        n_features: int | None = None,
        redraw_interval: int = 0,
        chunk_size: int = 64,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        if dropout:
            raise ValueError(
                f"linear attention got dropout={dropout}: it never forms attention weights, so there is nothing "
                "to drop; set attention_dropout=0.0 (the sublayer dropout still applies)"
            )
        check_positive("chunk_size", chunk_size)
        if not eps > 0:
            raise ValueError(f"eps must be > 0 (the normaliser's lower bound), got {eps}")
        self.feature_map = build_feature_map(feature_map, n_features, redraw_interval)
        self.chunk_size, self.eps = chunk_size, eps

    def redraw(self) -> None:
        """Resample the random features (FAVOR+); a no-op for a deterministic feature map."""
        if hasattr(self.feature_map, "redraw"):
            self.feature_map.redraw()

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        if bias is not None:
            raise ValueError(
                "linear attention cannot add a score bias (ALiBi, relative position bias): it never forms the "
                "Nq×Nk scores; use a position scheme that acts on the embeddings or on q and k (sinusoidal, "
                "learned, rope)"
            )
        phi_q, phi_k, _ = self.feature_map(q, k, key_mask_of(mask))  # (B, H, N, M)
        out = self._causal(phi_q, phi_k, v) if is_causal else linear_attention(phi_q, phi_k, v, self.eps)
        weights = implied_weights(phi_q, phi_k, is_causal, self.eps) if need_weights else None
        return out, weights

    def _causal(self, phi_q: Tensor, phi_k: Tensor, v: Tensor) -> Tensor:
        """Bottom-right aligned causal form: the first Nk - Nq keys are everyone's past (a starting state)."""
        n_q, n_k = phi_q.shape[-2], phi_k.shape[-2]
        if n_q > n_k:  # the first Nq - Nk queries precede every key: they attend nothing
            head = phi_q.new_zeros(*phi_q.shape[:-2], n_q - n_k, v.shape[-1])
            return torch.cat((head, self._causal(phi_q[..., n_q - n_k :, :], phi_k, v)), dim=-2)
        past = n_k - n_q
        state = key_summary(phi_k[..., :past, :], v[..., :past, :]) if past else None
        phi_k, v = phi_k[..., past:, :], v[..., past:, :]
        return causal_linear_attention(phi_q, phi_k, v, self.chunk_size, self.eps, state)[0]

    def step(self, q: Tensor, k: Tensor, v: Tensor, cache) -> Tensor:
        """RNN mode: attend the new positions ``(B, H, n, Dh)`` causally, given and updating ``cache.state``.

        ``cache.state`` is ``(S, z)``, or ``(S, z, log_scale)`` when the feature map divides a constant out of
        the keys' features (FAVOR+): a new key that raises that constant rescales the old sums to match.
        """
        phi_q, phi_k, log_scale = self.feature_map(q, k)
        state = cache.state
        if state is not None and log_scale is not None:
            kv, z, old = state
            new = torch.maximum(old, log_scale)  # (B, H, 1, 1)
            state = (kv * (old - new).exp(), z * (old - new).squeeze(-1).exp())
            phi_k, log_scale = phi_k * (log_scale - new).exp(), new
        out, state = causal_linear_attention(phi_q, phi_k, v, self.chunk_size, self.eps, state)
        cache.state = state if log_scale is None else (*state, log_scale)
        return out
