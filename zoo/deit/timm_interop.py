"""Our DeiT next to timm's ``VisionTransformerDistilled``: the matching timm arguments and weights copied across.

timm (like the official DeiT code) averages the two heads' *logits* at test time; the paper, and ours, average
their softmax outputs. The heads themselves are the same: the tests compare each head and the fused output.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from zoo.deit.config import DeiTConfig
from zoo.deit.model import DistilledVisionTransformer
from zoo.vit.timm_interop import _RENAMES as VIT_RENAMES
from zoo.vit.timm_interop import load_timm_weights as load_vit_weights
from zoo.vit.timm_interop import timm_kwargs as vit_kwargs
from zoo.vit.timm_interop import timm_state_to_ours as vit_state_to_ours

# timm's names -> ours: the [CLS] token sits in the read-out that the distillation read-out wraps
_RENAMES = (
    (r"^cls_token$", "readout.readout.cls_token"),
    (r"^dist_token$", "readout.dist_token"),
    (r"^head_dist\.", "head_dist."),
    *VIT_RENAMES,
)


def timm_kwargs(config: DeiTConfig) -> dict[str, Any]:
    """Arguments of ``timm.models.deit.VisionTransformerDistilled`` that build the same model as ours."""
    if not config.distillation_token or config.readout != "cls":
        raise ValueError("timm's VisionTransformerDistilled has a [CLS] and a distillation token; use "
                         "distillation_token=True and readout='cls'")
    return vit_kwargs(config)


def load_timm_weights(ours: DistilledVisionTransformer, timm_model: nn.Module) -> DistilledVisionTransformer:
    """Copy every weight of a timm ``VisionTransformerDistilled`` into ``ours`` (same sizes); returns ``ours``.

    ViT's loader with the distillation token and head added to its names, and its checks (a weight either side
    lacks, or of another shape, is named in a ValueError).
    """
    timm_kwargs(ours.config)
    return load_vit_weights(ours, timm_model, renames=_RENAMES)


def timm_state_to_ours(state: dict[str, Tensor], ours: nn.Module | None = None) -> dict[str, Tensor]:
    """A timm ``VisionTransformerDistilled`` state dict under our names (DeiT's ``import_weights``)."""
    return vit_state_to_ours(state, ours, renames=_RENAMES)
