"""The image-classification task: a variant classifies 32×32 images, scored by top-1 accuracy.

Default data: the Fashion-MNIST subset shipped in the repository (5,000 train + 1,000 test, 1 channel,
padded from 28×28 to 32×32). Real data: ``--data DIR`` holding CIFAR-10 or CIFAR-100 (python batches) or
the Fashion-MNIST idx files; ``--download`` fetches CIFAR there.

Validation: ``valid_fraction`` of the training images (stratified, the same split whatever ``--seed``)
are held out and scored after each epoch; the test split is only used by the final report. Set
``valid_fraction=0`` to validate on the test split, as many CIFAR papers do (it leaks the test set into
model selection).

Training: AdamW (no weight decay on biases and norm gains) with linear warm-up over ``--warmup`` steps to
``--lr``, then cosine decay to zero; label smoothing; optional per-image random crop (``--crop-padding``) and
horizontal flip (``--flip``), usable on every dataset — a mirrored shirt, shoe or bag is still one, so
flips preserve Fashion-MNIST's labels as they do CIFAR's. Both are off by default (see the config).
The augmentation of image ``i`` in epoch ``e`` is a function
of (seed, e, i) alone, so a resumed or distributed run sees exactly the images of an uninterrupted one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.errors import check_positive, check_probability, unknown_name
from tasks.cifar.augment import crop_flip, draw_crop_flip
from tasks.cifar.datasets import DATASETS, IMAGE_SIZE, channel_stats, load_images, stratified_split
from tasks.cifar.reference import REFERENCE_MODELS
from tasks.cifar.report import attention_heatmaps, class_scores, most_confused, plot_attention, plot_confusion
from tasks.config import TrainConfig
from tasks.distributed import shard
from tasks.report import markdown_table
from tasks.task import Task

SPLIT_SEED = 0  # the held-out validation images do not move with --seed, so seeds are compared on one split


@dataclass
class CifarConfig(TrainConfig):
    task: str = "cifar"
    variant: str = "vit"
    dataset: str = "auto"  # fmnist, cifar10, cifar100; auto: fmnist without --data, else read from the folder
    download: bool = False  # fetch CIFAR into --data first (needs internet)
    epochs: int = 20
    batch_size: int = 128
    lr: float = 1e-3  # peak learning rate, reached after the warm-up
    weight_decay: float = 0.05
    warmup: int = 36  # optimizer steps; ~1 epoch of the embedded data (4,500 images / 128)
    label_smoothing: float = 0.1
    valid_fraction: float = 0.1  # of the training images, held out for validation; 0: validate on test
    # Augmentation is off by default: on the 4,500-image embedded subset and a ~10-minute CPU budget it
    # slows learning (ViT "cpu": 80.5 % test after 20 epochs without it, 78.2 % after 30 with crop + flip).
    # For CIFAR use --crop-padding 4 --flip true.
    crop_padding: int = 0  # random-crop padding in pixels; 0 disables cropping
    flip: bool = False  # random horizontal flips
    eval_batch_size: int = 500
    attention_images: int = 6  # test images shown with their attention maps in the report

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset != "auto" and self.dataset not in DATASETS:
            raise unknown_name("dataset", self.dataset, ("auto", *DATASETS))
        check_probability("label_smoothing", self.label_smoothing)
        if not 0.0 <= self.valid_fraction < 0.5:
            raise ValueError(f"valid_fraction must be in [0, 0.5), got {self.valid_fraction}")
        check_positive("crop_padding", self.crop_padding, allow_zero=True)
        check_positive("eval_batch_size", self.eval_batch_size)
        check_positive("attention_images", self.attention_images, allow_zero=True)
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")


def warmup_cosine(warmup: int, total: int):
    """LR factor of optimizer step ``s``: linear from 1/warmup to 1 over ``warmup`` steps, then cosine to 0."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


class CifarTask(Task):
    name = "cifar"
    config_class = CifarConfig
    main_metric = "top1"
    baseline = "vit"
    headline = ("test", "top1")
    extra_columns = (("test", "macro_f1", "macro-F1"),)
    reference_models = REFERENCE_MODELS

    # --- data ----------------------------------------------------------------------------------------
    def setup(self) -> None:
        c: CifarConfig = self.config
        self.data = load_images(c.dataset, c.data, c.download)
        kept, held = stratified_split(self.data.train_y, c.valid_fraction, SPLIT_SEED)
        if c.valid_fraction and not len(held):
            raise ValueError(f"valid_fraction={c.valid_fraction} holds out no image of {len(kept)}; raise it, "
                             "or set it to 0 to validate on the test split")
        arrays = {"train": (self.data.train_x[kept], self.data.train_y[kept]),
                  "valid": (self.data.train_x[held], self.data.train_y[held]) if len(held) else
                           (self.data.test_x, self.data.test_y),
                  "test": (self.data.test_x, self.data.test_y)}
        self.images = {s: torch.from_numpy(x).to(self.device) for s, (x, _) in arrays.items()}  # (N, C, 32, 32)
        self.labels = {s: torch.from_numpy(y).long().to(self.device) for s, (_, y) in arrays.items()}  # (N,)
        self.mean, self.std = channel_stats(arrays["train"][0])
        from torchvision.transforms import v2  # imported here: torchvision takes seconds to import

        self.normalize = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(self.mean, self.std)])
        self._augmentation: tuple[int, Tensor, Tensor] | None = None

    def inputs(self, images: Tensor) -> Tensor:
        """uint8 images to the model's normalised float input.

        Shape:
            (B, C, H, W) uint8 -> (B, C, H, W) float32.
        """
        return self.normalize(images)

    # --- model ---------------------------------------------------------------------------------------
    def model_overrides(self) -> dict[str, Any]:
        """The variant's config overrides: ``--model-set`` fields plus the sizes the data decides."""
        data = self.data
        decided = {"image_size": IMAGE_SIZE, "in_channels": data.in_channels, "num_classes": data.num_classes}
        return self.decided_overrides(decided, f"the data ({data.name})")

    def build_model(self) -> nn.Module:
        return self.build_variant(self.model_overrides(), self.data.in_channels, self.data.num_classes)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        """AdamW; biases and norm gains (1-d tensors) and the model's ``no_weight_decay()`` names are not decayed."""
        skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
        decay, no_decay = [], []
        for name, p in model.named_parameters():
            if p.requires_grad:
                (no_decay if p.ndim <= 1 or name in skip else decay).append(p)
        groups = [{"params": decay, "weight_decay": self.config.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=self.config.lr)

    def make_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(self.config.warmup, total_steps))

    # --- training ------------------------------------------------------------------------------------
    def train_batches(self, epoch: int) -> list[list[tuple[int, int]]]:
        """Shuffled batches of rows ``(image index, epoch)``: the epoch keys each image's augmentation."""
        return self.shuffled_batches(len(self.labels["train"]), epoch, self.dist.world)  # every rank needs an image

    def augmentation(self, epoch: int) -> tuple[Tensor, Tensor]:
        """Crop offsets (N, 2) and flips (N,) of every training image in ``epoch``, drawn from (seed, epoch)."""
        if self._augmentation is None or self._augmentation[0] != epoch:
            c = self.config
            gen = torch.Generator().manual_seed(c.seed * 100_003 + epoch + 7_919)  # apart from the batch order
            offsets, flips = draw_crop_flip(len(self.labels["train"]), c.crop_padding, c.flip, gen, self.device)
            self._augmentation = (epoch, offsets, flips)
        return self._augmentation[1], self._augmentation[2]

    def loss(self, model: nn.Module, rows: Sequence[tuple[int, int]]) -> tuple[Tensor, float]:
        epochs = {e for _, e in rows}
        if len(epochs) != 1:
            raise ValueError(f"a batch must come from one epoch, got rows of epochs {sorted(epochs)}")
        index = torch.tensor([i for i, _ in rows], dtype=torch.long, device=self.device)
        offsets, flips = self.augmentation(epochs.pop())
        images = crop_flip(self.images["train"][index], self.config.crop_padding, offsets[index], flips[index])
        logits = model(self.inputs(images))  # (B, K)
        loss = F.cross_entropy(logits.float(), self.labels["train"][index], reduction="sum",
                               label_smoothing=self.config.label_smoothing)
        return loss, float(len(rows))

    # --- evaluation ----------------------------------------------------------------------------------
    @torch.no_grad()
    def predict(self, model: nn.Module, split: str, index: list[int]) -> tuple[Tensor, Tensor]:
        """Predicted classes and per-image cross-entropy (no smoothing) of images ``index`` of ``split``."""
        preds, losses = [], []
        size = self.config.eval_batch_size
        for j in range(0, len(index), size):
            idx = torch.tensor(index[j : j + size], dtype=torch.long, device=self.device)
            logits = model(self.inputs(self.images[split][idx])).float()  # (b, K)
            preds.append(logits.argmax(-1))
            losses.append(F.cross_entropy(logits, self.labels[split][idx], reduction="none"))
        if not preds:
            return torch.zeros(0, dtype=torch.long), torch.zeros(0)
        return torch.cat(preds).cpu(), torch.cat(losses).cpu()

    def evaluate(self, model: nn.Module, split: str) -> list[tuple[int, int, float]]:
        """Records ``(image index, predicted class, cross-entropy)`` of this rank's shard of ``split``."""
        index = shard(list(range(len(self.labels[split]))), self.dist)
        preds, losses = self.predict(model, split, index)
        return list(zip(index, preds.tolist(), losses.tolist()))

    def score(self, records: list[tuple[int, int, float]], split: str) -> dict[str, float]:
        records = sorted(records)
        labels = self.labels[split].cpu().numpy()
        if [i for i, _, _ in records] != list(range(len(labels))):
            raise ValueError(f"expected one record per image of {split!r} ({len(labels)}), got {len(records)}")
        preds = np.array([p for _, p, _ in records])
        return {"top1": float((preds == labels).mean()), "loss": float(np.mean([loss for _, _, loss in records]))}

    def final_report(self, model: nn.Module, out_dir: Path) -> tuple[dict[str, Any], str]:
        out_dir, data, c = Path(out_dir), self.data, self.config
        index = list(range(len(self.labels["test"])))
        preds, losses = self.predict(model, "test", index)
        y_true = self.labels["test"].cpu().numpy()
        metrics, rows = class_scores(y_true, preds.numpy(), data.class_names)
        metrics["loss"] = float(losses.mean())
        confused = most_confused(np.array(metrics["confusion_matrix"]), data.class_names)
        lines = ["## Test results", "",
                 f"{data.name} from {data.source}: {len(self.labels['train'])} training, "
                 f"{len(self.labels['valid'])} validation "
                 f"({'held out of train' if c.valid_fraction else 'the test split'}), {len(y_true)} test images, "
                 f"{data.num_classes} classes, {data.in_channels} channel(s) at {IMAGE_SIZE}×{IMAGE_SIZE}.", "",
                 markdown_table([{"split": "test", "top-1": metrics["top1"], "macro-F1": metrics["macro_f1"],
                                  "loss": metrics["loss"]}]), ""]
        if data.num_classes <= 20:
            lines += ["### Per class", "", markdown_table(rows), ""]
        lines += ["### Most confused", "", markdown_table(confused) or "No confusions.", "",
                  "![confusion matrix](confusion_matrix.png)", ""]
        attention = self._attention_figure(model, out_dir, preds)
        lines += ["### Attention", "", attention or "No attention map: the model records no attention over a "
                  "square grid of patches (e.g. a CNN).", ""]
        if self.dist.is_main:
            plot_confusion(np.array(metrics["confusion_matrix"]), data.class_names, out_dir / "confusion_matrix.png")
        return {"test": metrics}, "\n".join(lines)

    def _attention_figure(self, model: nn.Module, out_dir: Path, preds: Tensor) -> str:
        """Save ``attention.png`` for the first test image of each of a few classes; its markdown, or ''."""
        n = self.config.attention_images
        labels = self.labels["test"].cpu()
        firsts = [int(torch.nonzero(labels == k)[0]) for k in labels.unique().tolist()][:n]
        if not firsts:
            return ""
        images = self.images["test"][torch.tensor(firsts, device=self.device)]
        heat = attention_heatmaps(model, self.inputs(images))
        if heat is None:
            return ""
        names = self.data.class_names
        titles = [f"{names[int(labels[i])]} → {names[int(preds[i])]}" for i in firsts]
        if self.dist.is_main:
            plot_attention(images.cpu().numpy(), heat, titles, out_dir / "attention.png")
        return (f"Last attention layer, averaged over heads, on {heat.shape[1]}×{heat.shape[2]} patches "
                "(true → predicted class):\n\n![attention maps](attention.png)")

    # --- delta analysis and artefacts ----------------------------------------------------------------
    def delta_overrides(self) -> dict[str, Any]:
        return self.model_overrides()

    def save_artifacts(self, out_dir: Path) -> None:
        data = self.data
        info = {"dataset": data.name, "source": data.source, "class_names": data.class_names,
                "in_channels": data.in_channels, "image_size": IMAGE_SIZE, "mean": self.mean, "std": self.std}
        (Path(out_dir) / "classes.json").write_text(json.dumps(info, indent=2) + "\n")
