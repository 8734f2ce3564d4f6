"""The MoE names for the side outputs of a model's MoE layers: auxiliary losses, routing statistics, and
the parameters a token really uses.

The layers keep these on themselves after each forward (see :class:`~zoo.moe.layer.MoEFFN`), so the
model's signature never changes, and offer them through the protocols of :mod:`core.sidechannels`,
whose generic collectors the training loop and the delta analysis use. These helpers are the same
collectors with the MoE's default weights, restricted to MoE layers; a training loop adds
:func:`auxiliary_loss` to its task loss:

    logits = model(src, tgt_in)
    loss = task_loss(logits, labels) + auxiliary_loss(model)  # 0 for a model without MoE layers

Every helper works on any model (a model without MoE layers has no auxiliary loss and all its
parameters active), also when wrapped in ``DistributedDataParallel``.
"""

from __future__ import annotations

from torch import Tensor, nn

from core import sidechannels
from zoo.moe.layer import MoEFFN


def moe_layers(model: nn.Module) -> dict[str, MoEFFN]:
    """Every :class:`MoEFFN` in ``model``, keyed by module name (in ``named_modules`` order)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, MoEFFN)}


def auxiliary_loss(model: nn.Module, balance_weight: float = 1e-2, z_weight: float = 1e-3) -> Tensor:
    """Σ over the layers of ``balance_weight · balance_loss + z_weight · z_loss`` of their last forward.

    Differentiable (the router gets its gradient through the mean probabilities and the logits). The
    defaults are the Switch Transformer's α = 1e-2 and ST-MoE's router z-loss weight 1e-3. A model
    without MoE layers gives a zero scalar.
    """
    return sidechannels.auxiliary_loss(model, {"balance": balance_weight, "z": z_weight})


def routing_stats(model: nn.Module) -> dict[str, dict[str, float | list[float]]]:
    """Per MoE layer, of its last forward, over its real (non-padding) tokens: ``load`` (fraction of the
    token→expert assignments routed to each expert, before capacity; sums to 1), ``dropped`` (fraction
    of assignments over capacity: 0 in evaluation, which is dropless), ``entropy`` (mean router entropy,
    nats; ln E is uniform), ``balance_loss`` and ``z_loss``."""
    stats = sidechannels.layer_statistics(model)
    return {name: stats[name] for name in moe_layers(model)}


def active_parameters(model: nn.Module) -> int:
    """Parameters one token uses: all of them, except that each MoE layer counts its router and ``k``
    experts instead of all ``E`` (shared parameters are counted once, as in ``model.parameters()``)."""
    return sidechannels.active_parameters(model)
