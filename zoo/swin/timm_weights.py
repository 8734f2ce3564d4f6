"""Copy the weights of a timm ``SwinTransformer`` into ours, to check both compute the same function.

Every parameter has a one-to-one counterpart; only the names differ (timm's stages hold their blocks, our
core :class:`~core.layers.Encoder` holds the blocks and the patch merges in one list):

| timm | ours |
|---|---|
| ``patch_embed.proj`` / ``patch_embed.norm`` | ``tokens.proj`` / ``patch_norm`` |
| ``layers.i.downsample.{norm,reduction}`` | ``encoder.layers.k.{norm,reduction}`` (a :class:`PatchMerging`) |
| ``layers.i.blocks.j.norm1`` / ``norm2`` | ``encoder.layers.k.norm1`` / ``norm2`` |
| ``layers.i.blocks.j.attn.qkv`` / ``proj`` | ``encoder.layers.k.self_attn.qkv`` / ``out`` |
| ``layers.i.blocks.j.attn.relative_position_bias_table`` | ``….self_attn.kernel.relative_position.table`` |
| ``layers.i.blocks.j.mlp.fc1`` / ``fc2`` | ``encoder.layers.k.ffn.fc1`` / ``fc2`` |
| ``norm`` / ``head.fc`` | ``encoder.norm`` / ``head`` |
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.swin.config import SwinConfig
from zoo.swin.merging import PatchMerging
from zoo.swin.model import SwinTransformer

_SWIN_CHOICES = dict(tokens="patch", position="relative", hierarchy=True, norm_first=True, readout="mean")


def timm_kwargs(config: SwinConfig) -> dict:
    """Arguments of ``timm.models.swin_transformer.SwinTransformer`` for a model of ``config``'s sizes."""
    return dict(img_size=config.image_size, patch_size=config.patch_size, in_chans=config.in_channels,
                num_classes=config.num_classes, embed_dim=config.embed_dim, depths=config.depths,
                num_heads=config.heads, window_size=config.window_size, mlp_ratio=config.mlp_ratio,
                drop_rate=config.dropout, attn_drop_rate=config.attention_dropout, drop_path_rate=config.drop_path)


def timm_names(ours: SwinTransformer) -> dict[str, str]:
    """Our parameter name -> the timm ``SwinTransformer`` parameter name holding the same weight."""
    names = {"tokens.proj": "patch_embed.proj", "patch_norm": "patch_embed.norm", "encoder.norm": "norm",
             "head": "head.fc"}
    stage, block = 0, 0
    for k, layer in enumerate(ours.encoder.layers):
        ours_prefix = f"encoder.layers.{k}"
        if isinstance(layer, PatchMerging):
            stage, block = stage + 1, 0
            for sub in ("norm", "reduction"):
                names[f"{ours_prefix}.{sub}"] = f"layers.{stage}.downsample.{sub}"
            continue
        theirs = f"layers.{stage}.blocks.{block}"
        names.update({
            f"{ours_prefix}.norm1": f"{theirs}.norm1",
            f"{ours_prefix}.norm2": f"{theirs}.norm2",
            f"{ours_prefix}.self_attn.qkv": f"{theirs}.attn.qkv",
            f"{ours_prefix}.self_attn.out": f"{theirs}.attn.proj",
            f"{ours_prefix}.ffn.fc1": f"{theirs}.mlp.fc1",
            f"{ours_prefix}.ffn.fc2": f"{theirs}.mlp.fc2",
            f"{ours_prefix}.self_attn.kernel.relative_position": f"{theirs}.attn",
        })
        block += 1
    out = {}
    for name, _ in ours.named_parameters():
        module, _, leaf = name.rpartition(".")
        if module not in names:
            raise ValueError(f"no timm counterpart for our parameter {name!r}")
        out[name] = f"{names[module]}.{'relative_position_bias_table' if leaf == 'table' else leaf}"
    return out


def timm_state_to_ours(state: dict[str, Tensor], ours: SwinTransformer) -> dict[str, Tensor]:
    """A timm ``SwinTransformer`` state dict under our names (Swin's ``import_weights``); a name with no
    counterpart in ``ours`` keeps timm's (the transfer reports it unused)."""
    ours_of = {theirs: name for name, theirs in timm_names(ours).items()}
    return {ours_of.get(name, name): tensor for name, tensor in state.items()}


@torch.no_grad()
def load_timm_weights(ours: SwinTransformer, timm_model: nn.Module) -> None:
    """Copy every weight of ``timm_model`` (a ``timm.models.swin_transformer.SwinTransformer``) into ``ours``.

    ``ours`` must be the Swin architecture itself (every choice field at Swin's value) with the same sizes;
    a mismatch raises ValueError naming the parameter, never copies half a model silently.
    """
    c = ours.config
    off = {k: getattr(c, k) for k, v in _SWIN_CHOICES.items() if getattr(c, k) != v}
    if off or c.window_size is None:
        differs = off or {"window_size": None}
        raise ValueError(f"timm's SwinTransformer is the Swin architecture; our config differs in {differs}")
    theirs = dict(timm_model.named_parameters())
    mapping = timm_names(ours)
    unused = set(theirs) - set(mapping.values())
    if unused:
        raise ValueError(f"timm parameters without a counterpart in ours (is it the same depth?): {sorted(unused)}")
    for name, param in ours.named_parameters():
        source = theirs.get(mapping[name])
        if source is None or source.shape != param.shape:
            got = None if source is None else tuple(source.shape)
            raise ValueError(f"{name} {tuple(param.shape)} has no timm counterpart {mapping[name]} of that shape "
                             f"(got {got}); build both models with the same sizes")
        param.copy_(source)
