"""The rmsnorm, geglu and reglu registrations: one for each model built on the core's layers, each one declared
change whose revert brings the classic modules back, and no undeclared difference from its counterpart."""

import pytest
import torch
from torch import nn

import zoo
from core.ffn import GLUFFN, PositionwiseFFN
from zoo.analysis.counterpart import undeclared_differences

TASKS = ("translation", "lm", "cifar")
# name -> (the changed part, the module type of that part in the variant, in the reverted model)
EXPECTED = {"rmsnorm": ("norm", nn.RMSNorm, nn.LayerNorm), "geglu": ("ffn", GLUFFN, PositionwiseFFN),
            "reglu": ("ffn", GLUFFN, PositionwiseFFN)}
CASES = [(name, task) for name in EXPECTED for task in TASKS]


def _types(model: nn.Module, part: str) -> set[type]:
    return {type(m) for m in model.modules() if getattr(m, "zoo_part", None) == part}


@pytest.mark.parametrize("name, task", CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_registered_with_one_revertible_change(name, task):
    variant = zoo.get_variant(name, task)
    part, new, classic = EXPECTED[name]
    assert variant.tasks == (task,) and [c.part for c in variant.changes] == [part]
    assert variant.builds_on == ("vit" if task == "cifar" else "classic")
    assert undeclared_differences(variant, task, "tiny") == []
    model = variant.build(variant.config("tiny"))
    reverted = variant.build(variant.config("tiny", **variant.changes[0].revert))
    assert _types(model, part) == {new} and _types(reverted, part) == {classic}
    inputs = variant.example_input(variant.config("tiny"), {"batch": 2, "src_len": 5, "tgt_len": 4, "max_len": 6,
                                                           "image_size": 32, "in_channels": 3})
    assert torch.isfinite(model(*inputs)).all()


def test_vit_registrations_import_no_timm_weights():
    assert all(zoo.get_variant(name, "cifar").import_weights is None for name in EXPECTED)
    assert zoo.get_variant("vit", "cifar").import_weights is not None
