"""Side channels: layers report auxiliary losses, statistics and active parameters through declared
protocols, and the generic collectors (used by the trainer and the delta) find any layer that offers them."""

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import zoo
from core import sidechannels
from core.ffn import PositionwiseFFN
from tasks.engine.config import TrainConfig
from tasks.engine.trainer import auxiliary_weights
from zoo.moe import MoEFFN, auxiliary_loss, routing_stats


class ToySparseLayer(nn.Module):
    """A toy layer that is not a mixture of experts: it offers all three protocols."""

    def __init__(self) -> None:
        super().__init__()
        self.ffn = PositionwiseFFN(4, 8)
        self.penalty: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.penalty = x.square().mean()
        return self.ffn(x)

    def auxiliary_losses(self):
        return None if self.penalty is None else {"balance": self.penalty}

    def statistics(self):
        return None if self.penalty is None else {"penalty": self.penalty.item()}

    def active_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters()) // 2


def test_a_new_layer_type_plugs_in_without_naming_it():
    model = nn.Sequential(nn.Linear(4, 4), ToySparseLayer())
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match=r"layers \['1'\] have not run a forward yet"):
        sidechannels.auxiliary_loss(model, {"balance": 1.0})
    model(x)
    weights = auxiliary_weights(TrainConfig(balance_weight=0.5))
    assert weights == {"balance": 0.5, "z": 1e-3}  # every <term>_weight field of the config
    assert_close(sidechannels.auxiliary_loss(model, weights), 0.5 * model[1].penalty)
    assert sidechannels.layer_statistics(model) == {"1": {"penalty": model[1].penalty.item()}}
    total = sum(p.numel() for p in model.parameters())
    assert sidechannels.active_parameters(model) == total - sum(p.numel() for p in model[1].parameters()) // 2
    with pytest.raises(ValueError, match=r"layer '1' reports the auxiliary loss term 'balance' but no weight"):
        sidechannels.auxiliary_loss(model, {"z": 1.0})


def test_the_moe_helpers_are_the_generic_collectors():
    model = zoo.create("moe", preset="tiny")
    src, tgt = torch.randint(3, 64, (2, 5)), torch.randint(3, 64, (2, 6))
    model(src, tgt)
    layers = [m for m in model.modules() if isinstance(m, MoEFFN)]
    protocols = (sidechannels.AuxiliaryLosses, sidechannels.LayerStatistics, sidechannels.SparseParameters)
    assert layers and all(isinstance(m, p) for m in layers for p in protocols)
    assert_close(sidechannels.auxiliary_loss(model, {"balance": 0.5, "z": 2.0}), auxiliary_loss(model, 0.5, 2.0))
    assert sidechannels.layer_statistics(model) == routing_stats(model)
    classic = zoo.create("classic", preset="tiny")
    classic(src, tgt)
    assert sidechannels.auxiliary_loss(classic, {}).item() == 0.0 and sidechannels.layer_statistics(classic) == {}
