"""Feature maps φ of linear attention: the similarity exp(q·k/√d) of softmax attention becomes φ(q)·φ(k).

* ``"elu"``: φ(x) = elu(x) + 1 (Katharopoulos et al. 2020, "Transformers are RNNs"): positive, cheap, d
  features; a different kernel, not an approximation of softmax.
* ``"favor"``: FAVOR+ positive orthogonal random features (Choromanski et al. 2021, "Rethinking Attention
  with Performers"): φ(x) = exp(ωᵢᵀx − |x|²/2) / √m for m random ωᵢ, so that E[φ(q)·φ(k)] = exp(qᵀk);
  with q and k scaled by d^-1/4 each this estimates softmax attention's exp(qᵀk/√d) without bias.

A feature map is called on queries and keys together, ``phi(q, k, key_mask) -> (φ(q), φ(k), log_scale)``,
because FAVOR+ divides a constant out of the keys' features for numerical range (see :class:`FavorFeatures`);
``log_scale`` is the log of that constant, or ``None`` when nothing was divided out. Masked keys get
all-zero features, so they contribute to no sum.

Shape legend: B batch, H heads, N tokens, Dh head width, M features.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plumbing.errors import check_positive, unknown_name


def _apply_key_mask(phi_k: Tensor, key_mask: Tensor | None) -> Tensor:
    """Zero the features of masked keys; ``key_mask`` is bool ``(B|1, H|1, Nk, 1)``, True = may be attended."""
    return phi_k if key_mask is None else phi_k * key_mask


class EluFeatures(nn.Module):
    """φ(x) = elu(x) + 1 > 0 (Katharopoulos et al. 2020); M = Dh."""

    def forward(self, q: Tensor, k: Tensor, key_mask: Tensor | None = None) -> tuple[Tensor, Tensor, None]:
        return F.elu(q) + 1, _apply_key_mask(F.elu(k) + 1, key_mask), None


def orthogonal_gaussian(n_features: int, dim: int, generator: torch.Generator | None = None) -> Tensor:
    """``(M, Dh)`` rows ωᵢ ~ N(0, I), orthogonal within each block of Dh rows (Performer's ORF).

    Each block is the Haar-random orthogonal Q of a Gaussian matrix's QR (signs fixed by diag R); each row
    is then given the length of an independent Gaussian vector, so rows are marginally N(0, I) and
    exactly orthogonal within a block, which lowers the variance of the estimate.
    """
    blocks = math.ceil(n_features / dim)
    gaussian = torch.randn(blocks, dim, dim, generator=generator)
    q, r = torch.linalg.qr(gaussian)  # (blocks, Dh, Dh)
    q = q * torch.diagonal(r, dim1=-2, dim2=-1).sign().unsqueeze(-2)  # Haar, not biased by the QR convention
    rows = q.transpose(-2, -1).reshape(blocks * dim, dim)[:n_features]  # orthonormal rows
    lengths = torch.randn(n_features, dim, generator=generator).norm(dim=-1, keepdim=True)  # chi(Dh)
    return rows * lengths


class FavorFeatures(nn.Module):
    """FAVOR+ positive orthogonal random features for the softmax kernel (Choromanski et al. 2021).

    Args:
        n_features: number of random features M; ``None`` = round(Dh·ln Dh) (at least Dh), the paper's
            Θ(d log d).
        redraw_interval: draw new features every this many training forward passes (0 = never); Performer
            redraws during training so the model does not fit one particular draw.

    The random matrix ``projection`` ``(M, Dh)`` is drawn at the first call, when the head width is known
    (the kernel is built without it), and saved in the state dict as a buffer. Numerical range: the
    exponent is stabilised by subtracting a per-query maximum from the queries' (it cancels in the
    normalised attention) and one maximum per (batch, head) over every unmasked key (the same constant for
    every key, so it cancels too; it is returned as ``log_scale`` for the recurrent form to rescale its
    state when a later key raises it).
    """

    def __init__(self, n_features: int | None = None, redraw_interval: int = 0) -> None:
        super().__init__()
        if n_features is not None:
            check_positive("n_features", n_features)
        check_positive("redraw_interval", redraw_interval, allow_zero=True)
        self.n_features, self.redraw_interval = n_features, redraw_interval
        self.calls_since_redraw = 0
        self.register_buffer("projection", None)  # (M, Dh), drawn at the first call

    def redraw(self, dim: int | None = None) -> None:
        """Resample the random features (for head width ``dim``; default: the current one)."""
        if dim is None:
            if self.projection is None:
                return  # not drawn yet: the first call draws
            dim = self.projection.shape[-1]
        m = self.n_features or max(dim, round(dim * math.log(dim)))
        device = "cpu" if self.projection is None else self.projection.device
        with torch.inference_mode(False):  # a first call under inference_mode must not make it an inference tensor
            self.projection = orthogonal_gaussian(m, dim).to(device)  # drawn on the CPU: same features anywhere
        self.calls_since_redraw = 0

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        key = prefix + "projection"
        if self.projection is None and key in state_dict:  # not drawn yet: take the saved features' shape
            self.projection = torch.empty_like(state_dict[key])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _logits(self, x: Tensor) -> Tensor:
        """ωᵀx − |x|²/2 with x scaled by Dh^-1/4 (so that qᵀk is scaled by 1/√Dh, as in softmax)."""
        x = x * x.shape[-1] ** -0.25
        return x @ self.projection.to(x.dtype).t() - 0.5 * (x * x).sum(-1, keepdim=True)  # (B, H, N, M)

    def forward(self, q: Tensor, k: Tensor, key_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        dim = q.shape[-1]
        if self.projection is None or self.projection.shape[-1] != dim:
            self.redraw(dim)
        if self.projection.device != q.device:
            self.projection = self.projection.to(q.device)
        if self.training and self.redraw_interval:
            if self.calls_since_redraw >= self.redraw_interval:
                self.redraw()
            self.calls_since_redraw += 1
        norm = self.projection.shape[0] ** -0.5  # 1/√M
        logits_q, logits_k = self._logits(q), self._logits(k)
        phi_q = torch.exp(logits_q - logits_q.amax(-1, keepdim=True).detach()) * norm
        valid = logits_k if key_mask is None else logits_k.masked_fill(~key_mask, float("-inf"))
        log_scale = valid.amax(dim=(-2, -1), keepdim=True).detach()  # (B, H, 1, 1)
        log_scale = log_scale.masked_fill(log_scale.isinf(), 0.0)  # every key masked: any constant will do
        phi_k = torch.exp(valid - log_scale) * norm  # masked keys: exp(-inf) = 0
        return phi_q, phi_k, log_scale


FEATURE_MAPS = {"elu": EluFeatures, "favor": FavorFeatures}


def build_feature_map(name: str, n_features: int | None = None, redraw_interval: int = 0) -> nn.Module:
    """The feature map called ``name`` (``"elu"`` or ``"favor"``); random-feature options only apply to favor."""
    if name not in FEATURE_MAPS:
        raise unknown_name("linear-attention feature map", name, FEATURE_MAPS)
    if name == "favor":
        return FavorFeatures(n_features, redraw_interval)
    for option, value, default in (("n_features", n_features, None), ("redraw_interval", redraw_interval, 0)):
        if value != default:
            raise ValueError(
                f"{option}={value!r} only applies to feature_map='favor' (random features); "
                f"feature_map={name!r} is deterministic with Dh features: leave {option} at {default!r}"
            )
    return FEATURE_MAPS[name]()
