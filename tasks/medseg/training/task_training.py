"""The training side of :class:`~tasks.medseg.task.MedsegTask`: the model, its training examples (a 2D model's
zoomed slices, a 3D model's patches: :mod:`tasks.medseg.training.patches`) and their augmentation, the Dice + CE loss,
and the warm-up + poly learning-rate schedule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from tasks.medseg.preprocessing.task_data import model_slices, zoom_slices


def warmup_poly(warmup: int, total: int, power: float):
    """LR factor of optimizer step ``s``: linear warm-up over ``warmup`` steps, then (1 − progress)^power."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        return (1.0 - progress) ** power

    return factor


class MedsegTraining:
    """Mixin of :class:`~tasks.medseg.task.MedsegTask` : builds the model and trains it on
    ``volumes["train"]``. The state the mixins share is documented on ``MedsegTask`` (class body and
    ``__init__``)."""

    # --- model ---------------------------------------------------------------------------------------
    @property
    def spatial_dims(self) -> int:
        """3 for a variant registered as 3D (trained on patches, predicted through a sliding window), else 2 (a
        reference model's slices too). Read from the variant the run resolved once (:attr:`Task.variant`)."""
        return 2 if self.variant is None else int(self.variant.spatial_dims)

    def model_overrides(self) -> dict[str, Any]:
        """The variant's config overrides: ``--model-set`` fields plus the sizes the task and data decide."""
        decided: dict[str, Any] = {"in_channels": self.in_channels, "num_classes": self.num_classes}
        if self.spatial_dims == 2:
            decided["image_size"] = self.config.image_size
            return self.decided_overrides(decided, "the task (--image-size and the data)")
        import dataclasses

        fields = {f.name for f in dataclasses.fields(self.variant.config_class)}
        decided.update(patch_size=self.patch_size, image_size=None)
        if "spacing" in fields:  # nnU-Net's rules plan the network from the spacing (dynunet)
            decided["spacing"] = self.voxel_spacing
        return self.decided_overrides(decided, "the task (--patch-size and the data)")

    def delta_overrides(self) -> dict[str, Any]:
        """The model's overrides; a 3D model is measured at its patch when the patch is square in-plane (the delta
        analysis grows ``image_size``, the in-plane side), else at the task's shape (D × 96 × 96)."""
        overrides = self.model_overrides()
        if self.spatial_dims == 3:
            side = self.patch_size[1]
            if side == self.patch_size[2]:
                overrides["image_size"] = side
            else:
                del overrides["image_size"]
        return overrides

    def build_model(self) -> nn.Module:
        return self.build_variant(self.model_overrides(), *self.reference_args())

    def reference_args(self) -> tuple[int, int, int]:
        """(in_channels, num_classes, image_size) of the reference models' builders."""
        return self.in_channels, self.num_classes, self.config.image_size

    def make_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int):
        c = self.config
        return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_poly(c.warmup, total_steps, c.poly_power))

    # --- training ------------------------------------------------------------------------------------
    def prepare_training(self) -> None:
        """A 2D model's training slices zoomed to ``image_size`` (order 3 for the images, 0 for the labels) and their
        augmentation, or a 3D model's patch sampler; the loss."""
        from monai.losses import DiceCELoss

        c, train = self.config, self.volumes["train"]
        self.criterion = DiceCELoss(to_onehot_y=True, softmax=True, lambda_dice=c.dice_weight, lambda_ce=c.ce_weight)
        if self.spatial_dims == 3:
            self._prepare_patches()
            return
        images = np.concatenate([model_slices(v.image, c.image_size) for v in train])  # (N, C, S, S)
        labels = np.concatenate([zoom_slices(v.label, c.image_size, 0) for v in train])  # (N, S, S)
        self.train_images = torch.from_numpy(images.astype(np.float32))  # (N, C, S, S)
        self.train_labels = torch.from_numpy(labels.astype(np.int64))[:, None]  # (N, 1, S, S)
        self._augment = self._augmentation() if self._augmenting() else None

    def _prepare_patches(self) -> None:
        """The 3D patch sampler over the training cases, on their own grid (no zoom)."""
        from tasks.medseg.training.patches import Augmentation, PatchSampler

        c, train = self.config, self.volumes["train"]
        augmentation = Augmentation(c.rotate_degrees, c.zoom, c.intensity, c.flip_prob, self.trained_flip_axes()) \
            if self._augmenting() else None
        self.sampler = PatchSampler([v.image if v.image.ndim == 4 else v.image[None] for v in train],
                                    [v.label for v in train], self.patch_size, c.foreground, augmentation)

    def _augmenting(self) -> bool:
        c = self.config
        return bool(c.rotate_degrees or c.zoom or c.intensity or c.flip_prob)

    def _augmentation(self):
        """MONAI's dictionary transforms on one ``(1, S, S)`` slice (the 3D patches' function, in 2D)."""
        from tasks.medseg.training.patches import Augmentation, augmentation_transform

        c = self.config
        return augmentation_transform(Augmentation(c.rotate_degrees, c.zoom, c.intensity, c.flip_prob,
                                                   self.trained_flip_axes()), dims=2)

    def train_batches(self, epoch: int) -> list[list[tuple[int, int]]]:
        """Shuffled batches of rows ``(index, epoch)`` of a slice (2D) or of a case's patch (3D: ``patches_per_case``
        rows per case): the epoch keys each example's augmentation (and a patch's place)."""
        count = len(self.sampler) * self.config.patches_per_case if self.spatial_dims == 3 else len(self.train_images)
        return self.shuffled_batches(count, epoch, max(self.dist.world, 2))  # Dice needs 2+ examples

    def _example_seed(self, index: int, epoch: int) -> int:
        return (self.config.seed * 1_000_003 + epoch * 10_007 + index) % 2**32

    def augmented(self, rows: Sequence[tuple[int, int]]) -> tuple[Tensor, Tensor]:
        """Images ``(B, C, S, S)`` and labels ``(B, 1, S, S)`` of ``rows`` (3D: patches ``(B, C, pd, ph, pw)`` and
        ``(B, 1, pd, ph, pw)``), augmented from (seed, epoch, index)."""
        if self.spatial_dims == 3:
            per_case = self.config.patches_per_case
            pairs = [self.sampler.sample(i // per_case, self._example_seed(i, epoch)) for i, epoch in rows]
            return torch.stack([image for image, _ in pairs]), torch.stack([label for _, label in pairs])
        index = torch.tensor([i for i, _ in rows], dtype=torch.long)
        images, labels = self.train_images[index], self.train_labels[index]
        if self._augment is None:
            return images, labels
        out_images, out_labels = [], []
        for (i, epoch), image, label in zip(rows, images, labels):
            self._augment.set_random_state(seed=self._example_seed(i, epoch))
            sample = self._augment({"image": image, "label": label.float()})
            out_images.append(torch.as_tensor(sample["image"]).float())
            out_labels.append(torch.as_tensor(sample["label"]).round().long())
        return torch.stack(out_images), torch.stack(out_labels)

    def loss(self, model: nn.Module, rows: Sequence[tuple[int, int]]) -> tuple[Tensor, float]:
        """Dice + CE (MONAI ``DiceCELoss``) of the batch, times its size: the loop divides by the slice count.

        The Dice term is a batch statistic, so accumulated or distributed batches give the mean of per-shard
        Dice losses rather than one Dice over the union (the usual practice; the CE term is exact).
        """
        images, labels = self.augmented(rows)
        logits = model(images.to(self.device))  # (B, K, S, S) or (B, K, pd, ph, pw)
        loss = self.criterion(logits.float(), labels.to(self.device))
        return loss * len(rows), float(len(rows))
