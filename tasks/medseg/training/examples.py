"""The training stage of :class:`~tasks.medseg.task.MedsegTask`, :class:`TrainingExamples`: a 2D model's training
slices zoomed to ``image_size`` or a 3D model's patch sampler (:mod:`tasks.medseg.training.patches`), their
augmentation, and the recipe's Dice + CE loss on them (deep supervision included); and the warm-up + poly
learning-rate schedule of the default recipe."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from tasks.medseg.config import MedsegConfig
from tasks.medseg.preprocessing.cases import model_slices, zoom_slices
from tasks.medseg.reading.volume import Volume
from tasks.medseg.training.recipes import Recipe, deep_supervision_loss, output_heads, resolve_recipe


def warmup_poly(warmup: int, total: int, power: float):
    """LR factor of optimizer step ``s``: linear warm-up over ``warmup`` steps, then (1 − progress)^power."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        return (1.0 - progress) ** power

    return factor


def trained_flip_axes(config: MedsegConfig, spatial_dims: int, left_right_axis: int) -> tuple[int, ...]:
    """The axes of the (D, H, W) grid that training flips (``--flip-prob``; none when it is 0): every axis but the
    left-right one (:meth:`~tasks.medseg.preprocessing.cases.Cases.left_right_axis`), whose flip would turn the left
    kidney into a right one without changing its label (and, for a 2D model, not D: it sees every slice alone).
    A function of the run's config and cases alone, so that a restored run knows them (``--tta mirror`` flips
    only these)."""
    from tasks.medseg.inference.sliding import default_mirror_axes

    if not config.flip_prob:
        return ()
    return default_mirror_axes(spatial_dims, left_right_axis)


class TrainingExamples:
    """The training stage: what the model trains on, made once from the training cases.

    A 2D model's: every slice of ``train`` zoomed to ``image_size`` (order 3 for the images, 0 for the labels, as the
    papers do) and MONAI's augmentation of one slice; a 3D model's: a :class:`~tasks.medseg.training.patches.
    PatchSampler` on the cases' own grid (``patch_size``, a ``--foreground`` share centred on an organ, 3D
    augmentation). Both scored by the recipe's loss (:meth:`Recipe.criterion
    <tasks.medseg.training.recipes.Recipe.criterion>`), each head of a deeply supervised network weighted as nnU-Net
    weights it. An example's augmentation is a function of (seed, epoch, index) alone, so resumed and distributed
    runs see the same images.

    Args:
        config: the run's config (augmentation, loss weights, ``image_size``, ``patches_per_case``, seed).
        train: the training cases (:attr:`Cases.volumes["train"] <tasks.medseg.preprocessing.cases.Cases>`).
        spatial_dims: 2 (slices) or 3 (patches).
        patch_size: a 3D model's patch (D, H, W); None for a 2D model.
        flip_axes: the axes augmentation flips (:func:`trained_flip_axes`).
        recipe: the loss and foreground share (:mod:`~tasks.medseg.training.recipes`); None: the config's default.
        deep_supervision: the model returns several heads in training (a recipe that uses deep supervision, on a
            network that has it); a model that does so otherwise is refused.
    """

    def __init__(self, config: MedsegConfig, train: Sequence[Volume], spatial_dims: int,
                 patch_size: tuple[int, int, int] | None, flip_axes: tuple[int, ...], recipe: Recipe | None = None,
                 deep_supervision: bool = False) -> None:
        from tasks.medseg.training.patches import Augmentation, PatchSampler, augmentation_transform

        c = self.config = config
        self.spatial_dims = spatial_dims
        self.recipe = recipe if recipe is not None else resolve_recipe(config, None, spatial_dims)
        self.deep_supervision = deep_supervision
        self.criterion = self.recipe.criterion()
        augmenting = bool(c.rotate_degrees or c.zoom or c.intensity or c.flip_prob)
        augmentation = Augmentation(c.rotate_degrees, c.zoom, c.intensity, c.flip_prob, flip_axes) \
            if augmenting else None
        if spatial_dims == 3:  # patches of the cases' own grid, no zoom
            self.sampler = PatchSampler([v.image if v.image.ndim == 4 else v.image[None] for v in train],
                                        [v.label for v in train], patch_size, self.recipe.foreground, augmentation)
            return
        images = np.concatenate([model_slices(v.image, c.image_size) for v in train])  # (N, C, S, S)
        labels = np.concatenate([zoom_slices(v.label, c.image_size, 0) for v in train])  # (N, S, S)
        self.images = torch.from_numpy(images.astype(np.float32))  # (N, C, S, S)
        self.labels = torch.from_numpy(labels.astype(np.int64))[:, None]  # (N, 1, S, S)
        # MONAI's dictionary transforms on one (1, S, S) slice (the 3D patches' function, in 2D)
        self.augment = augmentation_transform(augmentation, dims=2) if augmentation is not None else None

    def __len__(self) -> int:
        """Examples per epoch: the slices (2D), or ``patches_per_case`` patches of each case (3D)."""
        if self.spatial_dims == 3:
            return len(self.sampler) * self.config.patches_per_case
        return len(self.images)

    def _example_seed(self, index: int, epoch: int) -> int:
        return (self.config.seed * 1_000_003 + epoch * 10_007 + index) % 2**32

    def augmented(self, rows: Sequence[tuple[int, int]]) -> tuple[Tensor, Tensor]:
        """Images ``(B, C, S, S)`` and labels ``(B, 1, S, S)`` of ``rows`` ``(index, epoch)`` (3D: patches
        ``(B, C, pd, ph, pw)`` and ``(B, 1, pd, ph, pw)``), augmented from (seed, epoch, index)."""
        if self.spatial_dims == 3:
            per_case = self.config.patches_per_case
            pairs = [self.sampler.sample(i // per_case, self._example_seed(i, epoch)) for i, epoch in rows]
            return torch.stack([image for image, _ in pairs]), torch.stack([label for _, label in pairs])
        index = torch.tensor([i for i, _ in rows], dtype=torch.long)
        images, labels = self.images[index], self.labels[index]
        if self.augment is None:
            return images, labels
        out_images, out_labels = [], []
        for (i, epoch), image, label in zip(rows, images, labels):
            self.augment.set_random_state(seed=self._example_seed(i, epoch))
            sample = self.augment({"image": image, "label": label.float()})
            out_images.append(torch.as_tensor(sample["image"]).float())
            out_labels.append(torch.as_tensor(sample["label"]).round().long())
        return torch.stack(out_images), torch.stack(out_labels)

    def loss(self, model: nn.Module, rows: Sequence[tuple[int, int]], device: torch.device) -> tuple[Tensor, float]:
        """Dice + CE (MONAI ``DiceCELoss``) of the batch, times its size: the loop divides by the slice count.
        With deep supervision, the heads' losses weighted as nnU-Net weights them
        (:func:`~tasks.medseg.training.recipes.deep_supervision_loss`).

        The Dice term is a batch statistic, so accumulated or distributed batches give the mean of per-shard
        Dice losses rather than one Dice over the union (the usual practice; the CE term is exact).
        """
        images, labels = self.augmented(rows)
        labels = labels.to(device)
        logits = model(images.to(device))  # (B, K, S, S) or (B, K, pd, ph, pw); deep supervision: several heads
        heads = output_heads(logits, labels)
        if len(heads) > 1 and not self.deep_supervision:
            raise ValueError(f"the model returns {len(heads)} deep-supervision heads in training but recipe "
                             f"{self.recipe.name} does not use deep supervision; build it without "
                             f"(--model-set deep_supervision=false) or train with --recipe nnunet")
        loss = deep_supervision_loss(self.criterion, heads, labels)
        return loss * len(rows), float(len(rows))
