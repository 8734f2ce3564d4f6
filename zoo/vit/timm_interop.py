"""Our ViT next to timm's ``VisionTransformer``: the matching timm arguments, and weights copied across.

timm is the reference implementation the tests compare against (and a source of trained weights for users
who have them). Only the configurations both can express are accepted: patch tokens, a learned position
table with a row for the [CLS] token, Pre-LN, and a ``"cls"`` or ``"mean"`` read-out with the final norm
*before* pooling (timm ``fc_norm=False``).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import torch
from torch import nn

from core.ffn import ACTIVATIONS
from zoo.vit.config import ViTConfig
from zoo.vit.model import VisionTransformer

# timm state-dict names -> ours
_RENAMES = (
    (r"^patch_embed\.proj\.", "tokens.proj."),
    (r"^cls_token$", "readout.cls_token"),
    (r"^pos_embed$", "position.weight"),
    (r"^blocks\.(\d+)\.norm([12])\.", r"encoder.layers.\1.norm\2."),
    (r"^blocks\.(\d+)\.attn\.qkv\.", r"encoder.layers.\1.self_attn.qkv."),
    (r"^blocks\.(\d+)\.attn\.proj\.", r"encoder.layers.\1.self_attn.out."),
    (r"^blocks\.(\d+)\.mlp\.fc([12])\.", r"encoder.layers.\1.ffn.fc\2."),
    (r"^norm\.", "encoder.norm."),
    (r"^head\.", "head."),
)


def _check_timm_compatible(config: ViTConfig) -> None:
    needs = {"tokens": "patch", "position": "learned", "norm_first": True, "norm": "layernorm", "ffn": "dense"}
    if config.kernel not in ("sdpa", "reference"):
        needs["kernel"] = "sdpa"
    for name, value in needs.items():
        if getattr(config, name) != value:
            raise ValueError(
                f"timm's VisionTransformer has no counterpart of {name}={getattr(config, name)!r}; "
                f"use {name}={value!r}"
            )
    if config.activation not in ACTIVATIONS:
        raise ValueError(f"timm's VisionTransformer (its Mlp) has no counterpart of activation={config.activation!r}; "
                         f"use one of {', '.join(ACTIVATIONS)}")
    if config.readout not in ("cls", "mean"):
        raise ValueError(
            f"timm's VisionTransformer has no counterpart of readout={config.readout!r}; use 'cls' or 'mean'"
        )


def timm_kwargs(config: ViTConfig) -> dict[str, Any]:
    """Arguments of ``timm.models.vision_transformer.VisionTransformer`` that build the same model as ours."""
    _check_timm_compatible(config)
    cls = config.readout == "cls"
    return dict(
        img_size=config.image_size, patch_size=config.patch_size, in_chans=config.in_channels,
        num_classes=config.num_classes, embed_dim=config.d_model, depth=config.depth, num_heads=config.heads,
        mlp_ratio=config.mlp_ratio, qkv_bias=True, class_token=cls, global_pool="token" if cls else "avg",
        fc_norm=False,  # ours normalises the tokens, then pools
        norm_layer=functools.partial(nn.LayerNorm, eps=config.norm_eps), act_layer=ACTIVATIONS[config.activation],
        pos_drop_rate=config.dropout, proj_drop_rate=config.dropout, attn_drop_rate=config.attention_dropout,
        drop_path_rate=config.drop_path,
    )


def timm_state_to_ours(state: dict[str, torch.Tensor], ours: nn.Module | None = None,
                       renames: tuple[tuple[str, str], ...] = _RENAMES) -> dict[str, torch.Tensor]:
    """A timm ``VisionTransformer`` state dict under our names; a name with no counterpart keeps timm's.

    The ``import_weights`` of ViT (and, with DeiT's ``renames``, of DeiT): ``--init-from`` a timm checkpoint.
    ``ours`` is not needed (ViT's names do not depend on its sizes); it is there for ``import_weights``' signature.
    Raises ValueError for a timm model that normalises after pooling (``fc_norm``), which ours does not have.
    """
    if any(name.startswith("fc_norm.") for name in state):
        raise ValueError("the timm checkpoint normalises after pooling (fc_norm, timm's global_pool='avg' "
                         "default); our ViT normalises the tokens before pooling, so its weights would compute "
                         "another function")
    mapped = {}
    for name, tensor in state.items():
        target = next((re.sub(p, r, name) for p, r in renames if re.search(p, name)), name)
        mapped[target] = tensor.squeeze(0) if target == "position.weight" and tensor.dim() == 3 else tensor
    return mapped  # position: timm's (1, T, D) -> our (T, D)


@torch.no_grad()
def load_timm_weights(ours: VisionTransformer, timm_model: nn.Module,
                      renames: tuple[tuple[str, str], ...] = _RENAMES) -> VisionTransformer:
    """Copy every weight of a timm ``VisionTransformer`` into ``ours`` (same sizes); returns ``ours``.

    ``renames`` maps timm's state-dict names to ours (a variant on ViT with more weights extends it: DeiT).

    Raises ValueError when the two are not the same architecture (a timm part we do not have, a part of
    ours timm does not fill, or different shapes), naming the parameters concerned.
    """
    _check_timm_compatible(ours.config)
    if not isinstance(getattr(timm_model, "fc_norm", nn.Identity()), nn.Identity):
        raise ValueError("the timm model normalises after pooling (fc_norm); build it with fc_norm=False")
    timm_state = timm_model.state_dict()
    foreign = [name for name in timm_state if not any(re.search(p, name) for p, _ in renames)]
    if foreign:
        raise ValueError(f"the timm model has weights our ViT has no place for: {', '.join(foreign)}")
    mapped = timm_state_to_ours(timm_state, ours, renames)
    own = ours.state_dict()
    missing = sorted(set(own) - set(mapped))
    unexpected = sorted(set(mapped) - set(own))
    wrong = sorted(k for k in set(own) & set(mapped) if own[k].shape != mapped[k].shape)
    if missing or unexpected or wrong:
        shapes = ", ".join(f"{k} ours {tuple(own[k].shape)} timm {tuple(mapped[k].shape)}" for k in wrong)
        raise ValueError(
            "the timm model and ours differ: "
            f"missing in timm: {missing or '-'}; absent from ours: {unexpected or '-'}; shapes: {shapes or '-'}. "
            "Build timm's model with zoo.vit.timm_kwargs(ours.config)"
        )
    ours.load_state_dict(mapped)
    return ours
