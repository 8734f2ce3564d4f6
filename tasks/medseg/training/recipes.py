"""Training recipes: the named sets of training settings a medseg run trains with (``--recipe``).

"nnU-Net Revisited" (Isensee et al., MICCAI 2024) found most "Transformer beats CNN" results came from CNN baselines
trained the wrong way. A recipe names the settings a network is trained with, so that a comparison says which ones
each side had:

- ``default``: this package's settings, read from the config (AdamW, ``--warmup`` steps of linear warm-up then
  lr·(1 − t/T)^``--poly-power`` per optimizer step, MONAI's ``DiceCELoss`` with ``--dice-weight`` / ``--ce-weight``
  over every class, ``--foreground`` patches centred on an organ). A run under it is the run of before recipes.
- ``nnunet``: nnU-Net v2's ``nnUNetTrainer`` (``configure_optimizers``, ``_build_loss``, ``PolyLRScheduler``):
  SGD with Nesterov momentum 0.99, lr 1e-2 and weight decay 3e-5 on every parameter (one group); lr·(1 − e/E)^0.9
  per epoch ``e`` of ``E``, no warm-up; soft Dice (background left out, smooth 1e-5) + cross-entropy, weights 1 and
  1; Dice over the whole batch in 2D and per patch in 3D (nnU-Net's plans: ``batch_dice`` is true for 2d, and for
  3d_fullres only when a 3d_lowres stage exists, which small cases like the phantoms never need); deep supervision
  where the network has it (:func:`deep_supervision_weights`); a third of the patches centred on an organ. Patch and
  voxel spacing come from the plan as they already do (``--patch-size`` unset); the batch stays ``--batch-size``
  (nnU-Net sizes it from a GPU-memory model this package does not have); gradient clipping stays ``--grad-clip``
  (nnU-Net clips at 12).
- ``own``: the variant's declared recipe — a config class attribute ``recipe`` (``dynunet``: nnunet), ``default``
  for a variant that declares none.

Deep supervision is *preferred* by ``nnunet``, not required: a network that has it (:func:`supports_deep_supervision`)
trains with it, one without trains with the main output only (the report says which). A recipe that requires it
(``deep_supervision="require"``) refuses a network without it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from plumbing.errors import unknown_name

if TYPE_CHECKING:  # annotations only: the config module imports this one
    from tasks.medseg.config import MedsegConfig
    from zoo.registry import Variant

RECIPES = ("default", "nnunet")
OWN = "own"  # --recipe own: the variant's declared recipe
DEEP_SUPERVISION = ("off", "prefer", "require")
# the config fields nnunet sets itself: a value other than the field's default would be silently ignored
NNUNET_FIELDS = ("lr", "weight_decay", "warmup", "poly_power", "dice_weight", "ce_weight", "foreground")


@dataclass(frozen=True)
class Recipe:
    """A named set of training settings; ``settings()`` is what run.json records of it."""

    name: str
    optimizer: str  # adamw or sgd
    lr: float  # the peak (adamw: after the warm-up) or initial (sgd) learning rate
    weight_decay: float  # adamw: decoupled; sgd: L2 added to the gradient, as torch's SGD does
    momentum: float  # sgd only
    nesterov: bool  # sgd only
    warmup: int  # optimizer steps of linear warm-up (0: none)
    poly_power: float  # lr·(1 − progress)^power after the warm-up
    per_epoch: bool  # the poly factor moves once per epoch (nnU-Net's PolyLRScheduler), else every optimizer step
    dice_weight: float  # loss = dice_weight·Dice + ce_weight·CE
    ce_weight: float
    dice_background: bool  # the background class counts in the Dice term (nnU-Net: do_bg=False)
    batch_dice: bool  # one Dice over the whole batch, not the mean of per-example Dice
    deep_supervision: str  # off, prefer (used where the network has it) or require (refuse a network without)
    foreground: float  # share of 3D patches centred on an organ

    def settings(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self, deep_supervision: bool) -> str:
        """One line for report.md: the optimiser, schedule, loss and whether deep supervision ran."""
        momentum = f"SGD with {'Nesterov ' if self.nesterov else ''}momentum {self.momentum:g}"
        opt = f"{momentum if self.optimizer == 'sgd' else 'AdamW'}, lr {self.lr:g}, weight decay {self.weight_decay:g}"
        warm = f"{self.warmup} warm-up steps then " if self.warmup else "no warm-up, "
        unit = "epoch" if self.per_epoch else "step"
        loss = (f"{self.dice_weight:g}·Dice ({'with' if self.dice_background else 'without'} background, "
                f"{'batch' if self.batch_dice else 'per-example'}) + {self.ce_weight:g}·CE")
        ds = "with deep supervision (nnU-Net's weights)" if deep_supervision else "no deep supervision"
        return (f"recipe **{self.name}**: {opt}; {warm}poly {self.poly_power:g} per {unit}; {loss}; {ds}; "
                f"foreground share {self.foreground:g}")

    def optimizer_for(self, model: nn.Module) -> torch.optim.Optimizer:
        """The optimiser over every parameter of ``model``, one group (neither recipe exempts biases or norms)."""
        if self.optimizer == "sgd":
            return torch.optim.SGD(model.parameters(), lr=self.lr, momentum=self.momentum, nesterov=self.nesterov,
                                   weight_decay=self.weight_decay)
        return torch.optim.AdamW(model.parameters(), lr=self.lr, weight_decay=self.weight_decay)

    def criterion(self) -> nn.Module:
        """MONAI's ``DiceCELoss`` with the recipe's weights, background rule and batch rule. For nnunet it equals
        nnU-Net's ``DC_and_CE_loss`` (soft Dice, smooth 1e-5 above and below) plus 1: MONAI's Dice term is
        1 − Dice, nnU-Net's −Dice, the same gradient (tested)."""
        from monai.losses import DiceCELoss

        return DiceCELoss(to_onehot_y=True, softmax=True, include_background=self.dice_background,
                          batch=self.batch_dice, lambda_dice=self.dice_weight, lambda_ce=self.ce_weight)


def check_recipe_name(name: object) -> None:
    """Refuse a ``--recipe`` that names no recipe, with a "did you mean"."""
    if name not in (*RECIPES, OWN):
        raise unknown_name("recipe (--recipe)", name, (*RECIPES, OWN))


def own_recipe(variant: Variant | None) -> str:
    """The recipe ``variant`` declares as its own: its config class's ``recipe`` attribute, else ``default`` (a
    reference model, ``variant`` None, declares none)."""
    name = getattr(variant.config_class, "recipe", "default") if variant is not None else "default"
    check_recipe_name(name)
    return name


def resolve_recipe(config: MedsegConfig, variant: Variant | None, spatial_dims: int) -> Recipe:
    """The recipe a run of ``config`` trains with: ``--recipe``, or the variant's own for ``own``.

    Raises:
        ValueError: an unknown name, or a config field the nnunet recipe sets given another value than its
            default (it would be ignored).
    """
    check_recipe_name(config.recipe)
    name = own_recipe(variant) if config.recipe == OWN else config.recipe
    c = config
    if name == "default":
        return Recipe("default", "adamw", c.lr, c.weight_decay, 0.0, False, c.warmup, c.poly_power, False,
                      c.dice_weight, c.ce_weight, dice_background=True, batch_dice=False, deep_supervision="off",
                      foreground=c.foreground)
    defaults = {f.name: f.default for f in dataclasses.fields(c)}
    changed = [f"--{f.replace('_', '-')} {getattr(c, f)}" for f in NNUNET_FIELDS if getattr(c, f) != defaults[f]]
    if changed:
        raise ValueError(f"recipe nnunet sets {', '.join(NNUNET_FIELDS)} itself (nnU-Net's values), so "
                         f"{', '.join(changed)} would be ignored: drop it, or train with --recipe default")
    return Recipe("nnunet", "sgd", 1e-2, 3e-5, 0.99, True, 0, 0.9, True, 1.0, 1.0, dice_background=False,
                  batch_dice=spatial_dims == 2, deep_supervision="prefer", foreground=0.33)


def supports_deep_supervision(model_or_config: Any) -> bool:
    """Whether a network (a module, its config, its config class or its registration) can train with deep
    supervision. The contract of the registered networks (:mod:`zoo.monai3d.config`): a config has a
    ``deep_supervision`` field, True builds the extra heads, and a class attribute ``supports_deep_supervision``
    says whether the network has them (a config with the field and no such attribute: it has). A bare module: a
    ``deep_supervision`` attribute (MONAI's DynUNet, MedNeXt), or a wrapped ``.network`` with one."""
    target = getattr(model_or_config, "config_class", model_or_config)  # a registration: its config class
    if dataclasses.is_dataclass(target):
        has_field = any(f.name == "deep_supervision" for f in dataclasses.fields(target))
        return has_field and bool(getattr(target, "supports_deep_supervision", True))
    if isinstance(target, nn.Module):
        config = getattr(target, "config", None)
        if dataclasses.is_dataclass(config):
            return supports_deep_supervision(config)
        inner = getattr(target, "network", None)
        return hasattr(target, "deep_supervision") or (isinstance(inner, nn.Module) and
                                                        supports_deep_supervision(inner))
    return False


def uses_deep_supervision(recipe: Recipe, variant: Variant | None) -> bool:
    """Whether a run of ``variant`` under ``recipe`` trains with deep supervision.

    Raises:
        ValueError: the recipe requires deep supervision and the network has none.
    """
    if recipe.deep_supervision == "off":
        return False
    supported = variant is not None and supports_deep_supervision(variant)
    if recipe.deep_supervision == "require" and not supported:
        name = "a reference model" if variant is None else f"variant {variant.name!r}"
        raise ValueError(f"recipe {recipe.name} requires deep supervision, but {name} has none (no "
                         f"deep_supervision field in its config); use a recipe that only prefers it (nnunet)")
    return supported


def deep_supervision_weights(outputs: int) -> list[float]:
    """nnU-Net's weights of ``outputs`` deep-supervision outputs, full resolution first: 1/2^i for output i (each
    coarser resolution half the weight), the coarsest set to 0, then normalised to sum 1. One output: [1.0]."""
    if outputs < 1:
        raise ValueError(f"deep supervision needs at least one output, got {outputs}")
    if outputs == 1:
        return [1.0]
    raw = [0.5**i for i in range(outputs - 1)] + [0.0]
    return [w / sum(raw) for w in raw]


def output_heads(logits: Tensor | Sequence[Tensor], labels: Tensor) -> list[Tensor]:
    """A network's training output as its list of heads, full resolution first: MONAI's DynUNet stacks its heads,
    upsampled to full size, along dim 1 (``(B, 1 + N, K, ...)`` for labels ``(B, 1, ...)``); SegResNetDS and
    MedNeXt return a list of heads at their own resolutions; a plain network, one ``(B, K, ...)`` tensor."""
    if isinstance(logits, list | tuple):
        return list(logits)
    if logits.dim() == labels.dim() + 1:
        return list(logits.unbind(1))
    return [logits]


def deep_supervision_loss(criterion: Callable[[Tensor, Tensor], Tensor], heads: Sequence[Tensor],
                          labels: Tensor) -> Tensor:
    """Σ_i w_i · criterion(head_i, labels at head_i's size), with :func:`deep_supervision_weights`; a weight of 0
    is not computed (as nnU-Net's ``DeepSupervisionWrapper``). A head smaller than the labels is scored against
    labels downsampled by nearest neighbour, as nnU-Net downsamples its targets; MONAI's DynUNet upsamples its heads
    to full size instead, so they are scored at full size (MONAI's own DynUNet training does the same; the
    upsampled logits cannot be brought back to the head's grid exactly).

    Shape:
        heads: each (B, K, *S_i); labels (B, 1, *S) integer classes.
    """
    total = None
    for weight, head in zip(deep_supervision_weights(len(heads)), heads):
        if weight == 0:
            continue
        target = labels
        if tuple(head.shape[2:]) != tuple(labels.shape[2:]):
            target = nn.functional.interpolate(labels.float(), size=head.shape[2:], mode="nearest-exact").long()
        term = weight * criterion(head.to(torch.promote_types(head.dtype, torch.float32)), target)  # bf16 → fp32
        total = term if total is None else total + term
    return total


def epoch_poly(total_steps: int, epochs: int, power: float) -> Callable[[int], float]:
    """nnU-Net's ``PolyLRScheduler`` as a factor of optimizer step ``s``: (1 − e/E)^power for the epoch ``e`` the
    step falls in, ``E`` = ``epochs`` epochs of ⌈total_steps / epochs⌉ steps; no warm-up; the last epoch keeps
    (1/E)^power."""
    per_epoch = max(1, math.ceil(total_steps / max(epochs, 1)))

    def factor(step: int) -> float:
        epoch = min(step // per_epoch, epochs - 1)
        return (1.0 - epoch / epochs) ** power

    return factor
