"""Loading a state dict of the official MISSFormer code (github.com/ZhifangDeng/MISSFormer) into ours.

The official module names map onto ours one to one, except that the official attention keeps separate
``q`` and ``kv`` projections where the core multi-head attention packs them into one ``qkv`` (concatenated
here, in the same head layout). The official checkpoint also holds parameters its forward pass never
uses — the deepest decoder stage's ``concat_linear`` and ``layer_former_1/2``, and ``norm2``/``norm3`` of
every ReMix-FFN — which our model does not build; they are returned, not loaded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import Tensor

from zoo.missformer.config import MISSFormerConfig

# our sub-module -> the official one, inside a Transformer block
_BLOCK = {
    "norm1": "norm1", "norm2": "norm2", "self_attn.attention.out": "attn.proj", "self_attn.reduction.conv": "attn.sr",
    "self_attn.reduction.norm": "attn.norm",
}
_FFN = {"fc1": "fc1", "dwconv": "dwconv.dwconv", "norm": "norm1", "fc2": "fc2"}
_UNUSED = re.compile(r"^decoder_3\.(concat_linear|layer_former_\d)\.|\.(mlp|mixffn\d)\.norm[23]\.(weight|bias)$")


def official_module_map(config: MISSFormerConfig) -> dict[str, str]:
    """Our module name -> the official module name, for the paper's layout (4 stages, bridge, ReMix-FFN).

    The packed attention projections map to the official ``q`` (see :func:`load_official_weights` for ``kv``).
    """
    c = config
    if (len(c.stages()) != 4 or not c.bridge_depth or c.tokens != "overlap" or c.ffn != "remix"
            or c.position != "none" or not c.norm_first or not c.spatial_reduction):
        raise ValueError(
            "the official code has MISSFormer's own choices only: 4 stages (hierarchy=True), bridge_depth > 0, "
            "tokens='overlap', ffn='remix', position='none', norm_first=True, spatial_reduction=True"
        )
    pairs = {"tokens": "backbone.patch_embed1", "head.expand": "decoder_0.layer_up",
             "head.classifier": "decoder_0.last_layer", "decoder.bottom": "decoder_3.layer_up"}

    def block(ours: str, theirs: str) -> None:
        pairs.update({f"{ours}.{a}": f"{theirs}.{b}" for a, b in _BLOCK.items()})
        pairs.update({f"{ours}.ffn.{a}": f"{theirs}.mlp.{b}" for a, b in _FFN.items()})
        pairs[f"{ours}.self_attn.attention.qkv"] = f"{theirs}.attn.q"

    for i, stage in enumerate(c.stages()):
        if i:
            pairs[f"encoder.downsamples.{i - 1}"] = f"backbone.patch_embed{i + 1}"
        pairs[f"encoder.stages.{i}.norm"] = f"backbone.norm{i + 1}"
        for j in range(stage.depth):
            block(f"encoder.stages.{i}.layers.{j}", f"backbone.block{i + 1}.{j}")
    reduced = sum(stage.sr > 1 for stage in c.stages())  # the official sr0, sr1, ... of the bridge
    for j in range(c.bridge_depth):
        ours, theirs = f"bridge.layers.{j}", f"bridge.bridge_layer{j + 1}"
        pairs.update({f"{ours}.norm1": f"{theirs}.norm1", f"{ours}.norm2": f"{theirs}.norm2",
                      f"{ours}.self_attn.attention.qkv": f"{theirs}.attn.q",
                      f"{ours}.self_attn.attention.out": f"{theirs}.attn.proj",
                      f"{ours}.self_attn.norm": f"{theirs}.attn.scale_reduce.norm"})
        pairs.update({f"{ours}.self_attn.reductions.{r}": f"{theirs}.attn.scale_reduce.sr{r}"
                      for r in range(reduced)})
        for i in range(len(c.stages())):
            pairs.update({f"{ours}.ffn.ffns.{i}.{a}": f"{theirs}.mixffn{i + 1}.{b}" for a, b in _FFN.items()})
    for k, level in enumerate((2, 1, 0)):  # our decoder stages run deepest first: official decoder_2, _1, _0
        ours, theirs = f"decoder.stages.{k}", f"decoder_{level}"
        pairs[f"{ours}.concat"] = f"{theirs}.concat_linear"
        if level:
            pairs[f"{ours}.expand"] = f"{theirs}.layer_up"
        for j in range(c.decoder_depth):
            block(f"{ours}.blocks.layers.{j}", f"{theirs}.layer_former_{j + 1}")
    return pairs


def _prefixes(key: str) -> list[str]:
    """``"a.b.c"`` -> ``["a.b", "a"]``: the modules a parameter name sits in, innermost first."""
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def load_official_weights(model: torch.nn.Module, state_dict: Mapping[str, Tensor]) -> list[str]:
    """Copy an official MISSFormer ``state_dict`` into ``model`` (a :class:`~zoo.missformer.model.MISSFormer`).

    A ``module.`` prefix (a ``DataParallel`` checkpoint) is stripped. Raises ValueError naming the missing or
    unexpected keys. Returns the official keys that were not loaded because the official forward never uses
    them (our model does not build those modules).
    """
    theirs = {k.removeprefix("module."): v for k, v in state_dict.items()}
    modules = official_module_map(model.config)
    ours: dict[str, Tensor] = {}
    used: set[str] = set()
    for key in model.state_dict():
        prefix = next((p for p in _prefixes(key) if p in modules), None)
        if prefix is None:
            raise ValueError(f"no official counterpart for our parameter {key!r}")
        source = [modules[prefix] + key.removeprefix(prefix)]
        if prefix.endswith("attention.qkv"):  # packed [W^Q; W^K; W^V] = official q, then kv
            source.append(source[0].replace(".attn.q.", ".attn.kv."))
        missing = [s for s in source if s not in theirs]
        if missing:
            raise ValueError(f"the official state dict lacks {missing} (needed for our {key!r})")
        ours[key] = torch.cat([theirs[s] for s in source]) if len(source) > 1 else theirs[source[0]]
        used.update(source)
    unexpected = [k for k in theirs if k not in used and not _UNUSED.search(k)]
    if unexpected:
        raise ValueError(f"official keys with no counterpart in this model: {unexpected[:8]}")
    model.load_state_dict(ours)
    return [k for k in theirs if k not in used]
