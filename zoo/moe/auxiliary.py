"""Collectors of the side outputs of a model's MoE layers: auxiliary losses, routing statistics, and the
parameters a token really uses.

The layers keep these on themselves after each forward (see :class:`~zoo.moe.layer.MoEFFN`), so the
model's signature never changes; a training loop adds :func:`auxiliary_loss` to its task loss:

    logits = model(src, tgt_in)
    loss = task_loss(logits, labels) + auxiliary_loss(model)  # 0 for a model without MoE layers

Every helper works on any model (a model without MoE layers has no auxiliary loss and all its
parameters active), also when wrapped in ``DistributedDataParallel``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.moe.layer import MoEFFN


def moe_layers(model: nn.Module) -> dict[str, MoEFFN]:
    """Every :class:`MoEFFN` in ``model``, keyed by module name (in ``named_modules`` order)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, MoEFFN)}


def _ran(layers: dict[str, MoEFFN]) -> dict[str, MoEFFN]:
    idle = [name for name, layer in layers.items() if layer.balance_loss is None]
    if idle:
        raise ValueError(f"MoE layers {idle} have not run a forward yet; call the model before collecting")
    return layers


def auxiliary_loss(model: nn.Module, balance_weight: float = 1e-2, z_weight: float = 1e-3) -> Tensor:
    """Σ over MoE layers of ``balance_weight · balance_loss + z_weight · z_loss`` of their last forward.

    Differentiable (the router gets its gradient through the mean probabilities and the logits). The
    defaults are the Switch Transformer's α = 1e-2 and ST-MoE's router z-loss weight 1e-3. A model
    without MoE layers gives a zero scalar.
    """
    layers = _ran(moe_layers(model))
    terms = [balance_weight * m.balance_loss + z_weight * m.z_loss for m in layers.values()]
    if not terms:
        device = next((p.device for p in model.parameters()), None)
        return torch.zeros((), device=device)
    return torch.stack(terms).sum()


def routing_stats(model: nn.Module) -> dict[str, dict[str, float | list[float]]]:
    """Per MoE layer, of its last forward: ``load`` (fraction of the token→expert assignments routed to
    each expert, before capacity; sums to 1), ``dropped`` (fraction of assignments over capacity),
    ``entropy`` (mean router entropy, nats; ln E is uniform), ``balance_loss`` and ``z_loss``."""
    return {
        name: {
            "load": list(m.stats["load"]),
            "dropped": m.stats["dropped"],
            "entropy": m.stats["entropy"].item(),
            "balance_loss": m.balance_loss.detach().item(),
            "z_loss": m.z_loss.detach().item(),
        }
        for name, m in _ran(moe_layers(model)).items()
    }


def active_parameters(model: nn.Module) -> int:
    """Parameters one token uses: all of them, except that each MoE layer counts its router and ``k``
    experts instead of all ``E`` (shared parameters are counted once, as in ``model.parameters()``)."""
    total = sum(p.numel() for p in model.parameters())
    for layer in moe_layers(model).values():
        total -= sum(p.numel() for p in layer.parameters()) - layer.active_parameters()
    return total
