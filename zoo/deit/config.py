"""Configuration of DeiT (Touvron et al. 2021): the ViT config plus DeiT's two choice fields.

What DeiT changes from the classic model (and from ViT) is declared once, in ``CHANGES`` (:mod:`zoo.deit`);
``zoo diff deit`` renders it with the measured deltas. Each choice field's default is DeiT's choice, and a
change's ``revert`` sets the classic one.

The presets are ViT's (DeiT-Ti and DeiT-S are ViT-Ti and ViT-S trained DeiT's way).
"""

from __future__ import annotations

from dataclasses import dataclass

from plumbing.errors import check_bool, check_choices
from zoo.vit.config import ViTConfig

DISTILLATIONS = ("hard", "none")


@dataclass
class DeiTConfig(ViTConfig):
    """A :class:`~zoo.vit.config.ViTConfig` with DeiT's distillation token and objective; validated on construction."""

    # Choice fields (reverted by DeiT's declared changes):
    distillation_token: bool = True
    # hard: ½·CE(class head, label) + ½·CE(distillation head, the teacher's arg-max); none: every head on the label.
    # Without the token, "hard" trains the class head towards both (the paper's "usual" hard distillation).
    distillation: str = "hard"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool("distillation_token", self.distillation_token)
        check_choices("DeiTConfig", (("distillation", self.distillation, DISTILLATIONS),))
