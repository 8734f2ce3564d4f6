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

Using a finished run: run.json's preprocessing holds the classes, channels, native image size and the training
images' mean and std, so ``zoo.load_run`` needs no data; ``zoo evaluate`` writes ``predictions/<split>.jsonl``
(one record per image: id, label, prediction, p_label, top5) and ``zoo predict`` classifies image files
(:mod:`tasks.cifar.predict`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.errors import check_bool, check_int, check_number, check_positive, check_probability, unknown_name
from tasks.cifar.augment import crop_flip, draw_crop_flip
from tasks.cifar.datasets import DATASETS, IMAGE_SIZE, channel_stats, load_images, stratified_split
from tasks.cifar.reference import REFERENCE_MODELS
from tasks.cifar.report import attention_heatmaps, class_scores, most_confused, plot_attention, plot_confusion
from tasks.config import TrainConfig
from tasks.distributed import shard
from tasks.records import split_hash, write_records
from tasks.report import markdown_table
from tasks.task import Task

SPLIT_SEED = 0  # the held-out validation images do not move with --seed, so seeds are compared on one split
# what run.json's preprocessing holds (see CifarTask.preprocessing); "source" is informative only
PREPROCESSING_KEYS = ("dataset", "class_names", "in_channels", "image_size", "native_size", "mean", "std")

log = logging.getLogger(__name__)


@dataclass
class CifarConfig(TrainConfig):
    task: str = "cifar"
    variant: str = "vit"
    dataset: str = "auto"  # fmnist, cifar10, cifar100; auto: fmnist without --data, else read from the folder
    download: bool = False  # fetch CIFAR into --data first (needs internet)
    epochs: int = 20
    batch_size: int = 128  # images per micro-batch
    lr: float = 1e-3  # peak learning rate, reached after the warm-up
    weight_decay: float = 0.05  # AdamW's, on weight matrices only (not on biases and norm gains)
    warmup: int = 36  # optimizer steps; ~1 epoch of the embedded data (4,500 images / 128)
    label_smoothing: float = 0.1  # of the cross-entropy, in [0, 1)
    valid_fraction: float = 0.1  # of the training images, held out for validation; 0: validate on test
    # Augmentation is off by default: on the 4,500-image embedded subset and a ~10-minute CPU budget it
    # slows learning (ViT "cpu": 80.5 % test after 20 epochs without it, 78.2 % after 30 with crop + flip).
    # For CIFAR use --crop-padding 4 --flip true.
    crop_padding: int = 0  # random-crop padding in pixels; 0 disables cropping
    flip: bool = False  # random horizontal flips
    eval_batch_size: int = 500  # images per forward pass at evaluation
    attention_images: int = 6  # test images shown with their attention maps in the report

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset != "auto" and self.dataset not in DATASETS:
            raise unknown_name("dataset", self.dataset, ("auto", *DATASETS))
        check_probability("label_smoothing", self.label_smoothing)
        check_number("valid_fraction", self.valid_fraction, 0, 0.5, high_open=True,
                     hint="0 validates on the test split")
        check_int("crop_padding", self.crop_padding, 0, IMAGE_SIZE // 2,
                  hint="half the image size, so that every crop keeps at least a quarter of the image")
        check_positive("eval_batch_size", self.eval_batch_size)
        check_positive("attention_images", self.attention_images, allow_zero=True)
        for name in ("download", "flip"):
            check_bool(name, getattr(self, name))


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
    eval_splits = ("test", "valid")
    reference_models = REFERENCE_MODELS

    # --- data ----------------------------------------------------------------------------------------
    def setup(self) -> None:
        """Read the images; fit the normalisation on the training images, or keep a restored run's and refuse
        data of another number of channels or classes."""
        c: CifarConfig = self.config
        self.data = data = load_images(c.dataset, c.data, c.download)
        if self.restored is not None:
            self._check_compatible(data)
        kept, held = stratified_split(data.train_y, c.valid_fraction, SPLIT_SEED)
        if c.valid_fraction and not len(held) and self.restored is None:  # evaluating the test split needs none
            raise ValueError(f"valid_fraction={c.valid_fraction} holds out no image of {len(kept)}; raise it, "
                             "or set it to 0 to validate on the test split")
        self.arrays = {"train": (data.train_x[kept], data.train_y[kept]),
                       "valid": (data.train_x[held], data.train_y[held]) if c.valid_fraction else
                                (data.test_x, data.test_y),
                       "test": (data.test_x, data.test_y)}
        if self.restored is None:
            mean, std = channel_stats(self.arrays["train"][0])
            self._use({"dataset": data.name, "source": data.source, "class_names": list(data.class_names),
                       "in_channels": data.in_channels, "image_size": IMAGE_SIZE,
                       "native_size": list(data.native_size), "mean": mean, "std": std})
        on_device = [s for s in self.arrays if s != "train" or self.restored is None]  # evaluation trains nothing
        self.images = {s: torch.from_numpy(self.arrays[s][0]).to(self.device) for s in on_device}  # (N, C, 32, 32)
        self.labels = {s: torch.from_numpy(y).long().to(self.device) for s, (_, y) in self.arrays.items()}  # (N,)
        self._augmentation: tuple[int, Tensor, Tensor] | None = None

    def _use(self, preprocessing: dict[str, Any]) -> None:
        """Adopt ``preprocessing`` (fitted by ``setup`` or read from run.json): classes, channels, normalisation."""
        from torchvision.transforms import v2  # imported here: torchvision takes seconds to import

        self._preprocessing = dict(preprocessing)
        self.dataset_name = str(preprocessing["dataset"])
        self.class_names = [str(n) for n in preprocessing["class_names"]]
        self.in_channels = int(preprocessing["in_channels"])
        self.native_size = tuple(int(n) for n in preprocessing["native_size"])  # (H, W) before padding to 32×32
        self.mean, self.std = list(preprocessing["mean"]), list(preprocessing["std"])
        self.normalize = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(self.mean, self.std)])

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def _where(self) -> str:
        return f"--data {self.config.data}" if self.config.data else "the embedded data"

    def _check_compatible(self, data) -> None:
        where = self._where()
        if (data.in_channels, data.num_classes) != (self.in_channels, self.num_classes):
            raise ValueError(f"{where} holds {data.name} images of {data.in_channels} channel(s) and "
                             f"{data.num_classes} classes, but the run was trained on {self.dataset_name} with "
                             f"{self.in_channels} channel(s) and {self.num_classes} classes; give it data of that kind")
        if data.class_names != self.class_names:
            log.warning("%s names its classes %s, the run %s; scoring by class index", where,
                        data.class_names[:4], self.class_names[:4])

    def inputs(self, images: Tensor) -> Tensor:
        """uint8 images to the model's normalised float input.

        Shape:
            (B, C, H, W) uint8 -> (B, C, H, W) float32.
        """
        return self.normalize(images)

    # --- model ---------------------------------------------------------------------------------------
    def model_overrides(self) -> dict[str, Any]:
        """The variant's config overrides: ``--model-set`` fields plus the sizes the data decides."""
        decided = {"image_size": IMAGE_SIZE, "in_channels": self.in_channels, "num_classes": self.num_classes}
        return self.decided_overrides(decided, f"the data ({self.dataset_name})")

    def build_model(self) -> nn.Module:
        return self.build_variant(self.model_overrides(), *self.reference_args())

    def reference_args(self) -> tuple[int, int]:
        return self.in_channels, self.num_classes

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
    def logits(self, model: nn.Module, images: Tensor, batch_size: int | None = None) -> Tensor:
        """Float logits of uint8 ``images``, ``batch_size`` (default ``eval_batch_size``) at a time, on the CPU.

        Shape:
            (N, C, 32, 32) uint8 on any device -> (N, K) float32.
        """
        size = batch_size or self.config.eval_batch_size
        out = [model(self.inputs(images[j : j + size].to(self.device))).float().cpu()
               for j in range(0, len(images), size)]
        return torch.cat(out) if out else torch.zeros(0, self.num_classes)

    def predict(self, model: nn.Module, split: str, index: list[int]) -> tuple[Tensor, Tensor]:
        """Logits (n, K) and per-image cross-entropy (n,) (no smoothing) of images ``index`` of ``split``."""
        idx = torch.tensor(index, dtype=torch.long)
        logits = self.logits(model, self.images[split][idx.to(self.device)])
        return logits, F.cross_entropy(logits, self.labels[split].cpu()[idx], reduction="none")

    def evaluate(self, model: nn.Module, split: str) -> list[tuple[int, int, float]]:
        """Records ``(image index, predicted class, cross-entropy)`` of this rank's shard of ``split``."""
        index = shard(list(range(len(self.labels[split]))), self.dist)
        logits, losses = self.predict(model, split, index)
        return list(zip(index, logits.argmax(-1).tolist(), losses.tolist()))

    def score(self, records: list[tuple[int, int, float]], split: str) -> dict[str, float]:
        records = sorted(records)
        labels = self.labels[split].cpu().numpy()
        if [i for i, _, _ in records] != list(range(len(labels))):
            raise ValueError(f"expected one record per image of {split!r} ({len(labels)}), got {len(records)}")
        preds = np.array([p for _, p, _ in records])
        return {"top1": float((preds == labels).mean()), "loss": float(np.mean([loss for _, _, loss in records]))}

    def records(self, split: str, logits: Tensor) -> list[dict[str, Any]]:
        """One record per image of ``split``: true and predicted class, the true class's probability, the top 5."""
        probs = logits.softmax(-1)  # (N, K)
        top_p, top_k = probs.topk(min(5, probs.shape[-1]), dim=-1)  # (N, 5)
        labels, names = self.labels[split].cpu().tolist(), self.class_names
        return [{"id": i, "label": y, "prediction": int(k[0]), "p_label": _prob(probs[i, y]),
                 "top5": [[int(c), _prob(q)] for c, q in zip(k, p)], "label_name": names[y],
                 "prediction_name": names[int(k[0])]}
                for i, (y, k, p) in enumerate(zip(labels, top_k.tolist(), top_p.tolist()))]

    def final_report(self, model: nn.Module, out_dir: Path, splits: Sequence[str] | None = None
                     ) -> tuple[dict[str, Any], str]:
        """Scores, per-class table, confusion matrix and records of ``splits`` (default: test), attention maps."""
        out_dir, c = Path(out_dir), self.config
        splits = list(splits or self.eval_splits[:1])
        n = {s: len(self.labels[s]) for s in self.labels}
        for split in splits:
            if split not in self.eval_splits:
                raise unknown_name("split of the cifar task", split, self.eval_splits)
            if not n[split]:
                raise ValueError(f"the {split} split of {self._where()} holds no image (valid_fraction="
                                 f"{c.valid_fraction} of {n['train']} training images); score another split")
        lines = ["## Test results" if splits == ["test"] else f"## Results ({', '.join(splits)})", "",
                 f"{self.dataset_name} from {self.data.source}: {n['train']} training, {n['valid']} validation "
                 f"({'held out of train' if c.valid_fraction else 'the test split'}), {n['test']} test images, "
                 f"{self.num_classes} classes, {self.in_channels} channel(s) at {IMAGE_SIZE}×{IMAGE_SIZE}.", ""]
        results, details, first_preds = {}, [], None
        for split in splits:
            logits, losses = self.predict(model, split, list(range(n[split])))
            preds, y_true = logits.argmax(-1), self.labels[split].cpu().numpy()
            metrics, rows = class_scores(y_true, preds.numpy(), self.class_names)
            metrics["loss"] = float(losses.mean())
            results[split] = metrics
            first_preds = preds if first_preds is None else first_preds
            cm = np.array(metrics["confusion_matrix"])
            figure = "confusion_matrix.png" if split == "test" else f"confusion_matrix_{split}.png"
            suffix = "" if splits == ["test"] else f" ({split})"
            if self.num_classes <= 20:
                details += [f"### Per class{suffix}", "", markdown_table(rows), ""]
            details += [f"### Most confused{suffix}", "",
                        markdown_table(most_confused(cm, self.class_names)) or "No confusions.", "",
                        f"![confusion matrix{suffix}]({figure})", ""]
            if self.dist.is_main:
                plot_confusion(cm, self.class_names, out_dir / figure, title=f"confusion matrix ({split})")
                images, labels = self.arrays[split]
                write_records(out_dir, split, self.records(split, logits), split_hash([images, labels]))
        lines += [markdown_table([{"split": s, "top-1": m["top1"], "macro-F1": m["macro_f1"], "loss": m["loss"]}
                                  for s, m in results.items()]), "", *details]
        attention = self._attention_figure(model, out_dir, splits[0], first_preds)
        lines += ["### Attention", "", attention or "No attention map: the model records no attention over a "
                  "square grid of patches (e.g. a CNN).", ""]
        return results, "\n".join(lines)

    def _attention_figure(self, model: nn.Module, out_dir: Path, split: str, preds: Tensor) -> str:
        """Save ``attention.png`` for the first image of each of a few classes of ``split``; its markdown, or ''."""
        n = self.config.attention_images
        labels = self.labels[split].cpu()
        firsts = [int(torch.nonzero(labels == k)[0]) for k in labels.unique().tolist()][:n]
        if not firsts:
            return ""
        images = self.images[split][torch.tensor(firsts, device=self.device)]
        heat = attention_heatmaps(model, self.inputs(images))
        if heat is None:
            return ""
        names = self.class_names
        titles = [f"{names[int(labels[i])]} → {names[int(preds[i])]}" for i in firsts]
        if self.dist.is_main:
            plot_attention(images.cpu().numpy(), heat, titles, out_dir / "attention.png")
        return (f"Last attention layer, averaged over heads, on {heat.shape[1]}×{heat.shape[2]} patches "
                f"({split} images, true → predicted class):\n\n![attention maps](attention.png)")

    # --- delta analysis, artefacts and restoring a run -----------------------------------------------
    def delta_overrides(self) -> dict[str, Any]:
        return self.model_overrides()

    def preprocessing(self) -> dict[str, Any]:
        """The dataset, class names, channels, image size, native size (before padding) and the training
        images' per-channel mean and std: all that turns an image file into the model's input."""
        return dict(self._preprocessing)

    def save_artifacts(self, out_dir: Path) -> None:
        """``classes.json``: a readable copy of run.json's preprocessing (``restore`` reads run.json)."""
        (Path(out_dir) / "classes.json").write_text(json.dumps(self.preprocessing(), indent=2) + "\n")

    def restore(self, preprocessing: dict[str, Any], run_dir) -> None:
        missing = [k for k in PREPROCESSING_KEYS if k not in preprocessing]
        if missing:
            raise ValueError(f"{Path(run_dir) / 'run.json'}: the preprocessing lacks {missing}; it was not written "
                             "by a cifar run of this package, retrain it")
        super().restore(preprocessing, run_dir)
        self._use(preprocessing)


def _prob(p: float) -> float:
    """A probability for the records: 6 significant digits are plenty and keep the files readable."""
    return float(f"{float(p):.6g}")
