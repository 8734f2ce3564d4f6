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
DeiT's recipe (Touvron et al. 2021) is there too: a per-image RandAugment or TrivialAugment (``--augment``),
MixUp / CutMix (``--mixup``, ``--cutmix``) and repeated augmentation (``--repeated-augment``), off by default
for every variant, DeiT included (see the config). The augmentation of image ``i`` in epoch ``e`` is a
function of (seed, e, i) alone, so a resumed or distributed run sees exactly the images of an uninterrupted one.

Distillation: a variant whose objective declares a teacher target (DeiT, see :mod:`tasks.cifar.distill`)
trains with ``--teacher RUN``, any finished cifar run, which sees the same augmented images through its own
normalisation. run.json records the teacher (``config.teacher`` and ``preprocessing.teacher``); using the
finished run needs no teacher.

Using a finished run: run.json's preprocessing holds the classes, channels, native image size and the training
images' mean and std, so ``zoo.load_run`` needs no data; ``zoo evaluate`` writes ``predictions/<split>.jsonl``
(one record per image: id, label, prediction, p_label, top5) and ``zoo predict`` classifies image files
(:mod:`tasks.cifar.predict`).
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plumbing.errors import check_bool, check_int, check_number, check_positive, check_probability, unknown_name
from plumbing.tables import markdown_table
from tasks.cifar import paired
from tasks.cifar.augment import (
    POLICIES,
    apply_policy,
    augment_seed,
    crop_flip,
    draw_crop_flip,
    draw_mix,
    mix_images,
    mix_targets,
    policy_transform,
)
from tasks.cifar.datasets import DATASETS, IMAGE_SIZE, channel_stats, load_images, stratified_split
from tasks.cifar.distill import Teacher, needs_teacher, objective_loss
from tasks.cifar.reference import REFERENCE_MODELS
from tasks.cifar.report import attention_heatmaps, class_scores, most_confused, plot_attention, plot_confusion
from tasks.engine.config import TrainConfig
from tasks.engine.distributed import shard
from tasks.engine.registry import register_task
from tasks.engine.task import Task
from tasks.runs.records import split_hash, write_records
from zoo.analysis.delta import TaskShape
from zoo.analysis.doctor import Batch, entropy

if TYPE_CHECKING:  # annotations only: runs sit above the tasks
    from tasks.runs.run import Run

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
    # DeiT's recipe (its values in brackets) is off by default, for DeiT too: at CPU budgets it slows learning
    # more than it regularises (zoo lab small-data: at 300 steps of 32 of 500 images, TrivialAugment cost a
    # distilled ViT 14 points of test top-1, 59.5 % -> 45.6 %, and a plain ViT 6).
    augment: str = "none"  # per-image policy: none, randaugment, trivialaugment (DeiT: randaugment)
    randaugment_ops: int = 2  # RandAugment's operations per image (DeiT: 2)
    randaugment_magnitude: int = 9  # RandAugment's strength, 0-30 (DeiT: 9)
    mixup: float = 0.0  # MixUp's Beta(a, a); 0 off (DeiT: 0.8)
    cutmix: float = 0.0  # CutMix's Beta(a, a); 0 off (DeiT: 1.0); with both on, each image takes one of the two
    repeated_augment: int = 1  # copies of each image in its batch, augmented apart; 1 off (DeiT: 3)
    teacher: str | None = None  # a finished cifar run (its folder) that a distilling variant (deit) learns from
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
        if self.augment not in POLICIES:
            raise unknown_name("augment", self.augment, POLICIES)
        for name in ("mixup", "cutmix"):
            check_number(name, getattr(self, name), 0, 10, hint="the α of Beta(α, α); 0 turns it off")
        check_int("randaugment_ops", self.randaugment_ops, 1, 14, hint="RandAugment chooses among 14 operations")
        check_int("randaugment_magnitude", self.randaugment_magnitude, 0, 30, hint="RandAugment's 31 bins: 0-30")
        check_int("repeated_augment", self.repeated_augment, 1, 16, hint="1 turns it off; DeiT uses 3")
        if self.teacher is not None and not isinstance(self.teacher, str):
            raise TypeError(f"teacher must be the path of a run folder, got {type(self.teacher).__name__}")

    def check_paths(self) -> None:
        """Also refuse a ``--teacher`` that is not a finished cifar run, before any data loads."""
        super().check_paths()
        if self.teacher is not None:
            from tasks.runs.run import read_run_info

            try:
                info = read_run_info(self.teacher)
            except (FileNotFoundError, ValueError) as error:
                raise type(error)(f"--teacher {self.teacher}: {error}") from None
            if info["task"] != "cifar":
                raise ValueError(f"--teacher {self.teacher} is a {info['task']} run; a teacher must be a finished "
                                 "cifar run, e.g. the --out folder of `zoo train cifar --variant resnet18`")


def warmup_cosine(warmup: int, total: int):
    """LR factor of optimizer step ``s``: linear from 1/warmup to 1 over ``warmup`` steps, then cosine to 0."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


@register_task
class CifarTask(Task):
    name = "cifar"
    config_class = CifarConfig
    main_metric = "top1"
    baseline = "vit"
    headline = ("test", "top1")
    extra_columns = (("test", "macro_f1", "macro-F1"),)
    eval_splits = ("test", "valid")
    reference_models = REFERENCE_MODELS
    delta_shape = TaskShape("cifar", None, {"batch": 1, "image_size": 32, "in_channels": 1, "num_classes": 10},
                            ("image_size",), "one 32×32 single-channel image (the embedded Fashion-MNIST, padded)",
                            tokens_per_grow=2, config_keys=("image_size", "in_channels", "num_classes"))
    predict_options = ("attention",)

    @classmethod
    def paired_metrics(cls, info: dict[str, Any]) -> list:
        return paired.paired_metrics(info)

    @classmethod
    def predict_inputs(cls, run: Run, inputs: list[str], out: str | None, progress: bool = True,
                       **options: Any) -> str:
        """Classify image files and folders into a CSV (:mod:`tasks.cifar.predict`)."""
        from tasks.cifar.predict import predict

        return predict(run, inputs, out, progress=progress, **options)

    def data_hash(self, split: str) -> str:
        """The hash of ``split``'s images and labels (``valid`` is the test split's with ``valid_fraction=0``)."""
        return split_hash(list(self.arrays[split]))

    def doctor_batch(self, split: str = "valid", n: int = 64) -> Batch:
        """The first ``n`` images of ``split``, normalised as the model saw them, and their labels."""
        if split not in self.labels:
            raise ValueError(f"the cifar data has no {split!r} split (it has: {', '.join(self.labels)})")
        images = self.images.get(split)
        if images is None:  # a restored run keeps its training images on the CPU side only
            images = torch.from_numpy(self.arrays[split][0]).to(self.device)
        return Batch((self.inputs(images[:n]),), self.labels[split][:n], "classification")

    def onnx_graphs(self, model: nn.Module, n: int = 8) -> list:
        """One graph: normalised images ``(B, C, S, S)`` -> logits ``(B, K)``, on the first ``n`` test images."""
        from tasks.engine.export_graphs import batch_graph

        split = "test" if "test" in self.labels else "valid"
        return [batch_graph(model, "images", self.doctor_batch(split, n).inputs[0].cpu())]

    def target_entropy(self, n: int = 5000) -> float:
        """Entropy of the training labels' frequencies."""
        return entropy(Counter(self.labels["train"].tolist()))

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
        self._augmentation: dict[tuple[int, int], tuple[Tensor, Tensor]] = {}
        self._policy = policy_transform(c.augment, c.randaugment_ops, c.randaugment_magnitude)
        self.teacher: Teacher | None = None
        if c.teacher is not None and self.restored is None:  # a finished run is used without its teacher
            self.teacher = Teacher(c.teacher, self.device, self.class_names, self.in_channels)
            self._preprocessing["teacher"] = self.teacher.describe()

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
        """uint8 images (or float ones on the [0, 1] scale) to the model's normalised float input.

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
        """The model to train; refuses a variant that distills without ``--teacher`` (and drops an unused one)."""
        model = self.build_variant(self.model_overrides(), *self.reference_args())
        wanted = needs_teacher(model)
        if wanted and getattr(self, "teacher", None) is None:
            raise ValueError(f"variant {self.config.variant!r} learns from a teacher's predictions: pass --teacher "
                             "RUN, a finished cifar run (e.g. of --variant resnet18), or --model-set distillation=none")
        if not wanted and getattr(self, "teacher", None) is not None:
            log.warning("--teacher %s is not used: %s's objective has no teacher term", self.config.teacher,
                        self.config.variant)
            self.teacher = None
        return model

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
    def train_batches(self, epoch: int) -> list[list[tuple[int, ...]]]:
        """Shuffled batches of rows ``(image index, epoch)``: the epoch keys each image's augmentation. With
        ``repeated_augment`` k > 1, rows ``(image index, epoch, copy)``: an epoch holds as many rows as images,
        N / k images k times each, the copies side by side in one batch (Hoffer et al. 2020)."""
        n, k = len(self.labels["train"]), self.config.repeated_augment
        if k == 1:
            return self.shuffled_batches(n, epoch, self.dist.world)  # every rank needs an image
        batches = self.shuffled_batches(-(-n // k), epoch, 0)  # the images of this epoch, in shuffled order
        rows = [(i, epoch, r) for batch in batches for i, _ in batch for r in range(k)][:n]
        size = self.config.batch_size
        out = [rows[j : j + size] for j in range(0, len(rows), size)]
        if len(out) > 1 and len(out[-1]) < self.dist.world:
            out.pop()
        return out

    def augmentation(self, epoch: int, copy: int = 0) -> tuple[Tensor, Tensor]:
        """Crop offsets (N, 2) and flips (N,) of every training image in ``epoch`` (its ``copy``-th copy under
        repeated augmentation), drawn from (seed, epoch, copy)."""
        if (epoch, copy) not in self._augmentation:
            c = self.config
            self._augmentation = {key: v for key, v in self._augmentation.items() if key[0] == epoch}
            gen = torch.Generator().manual_seed(c.seed * 100_003 + epoch + 7_919  # apart from the batch order
                                                + copy * 1_000_003)
            self._augmentation[epoch, copy] = draw_crop_flip(len(self.labels["train"]), c.crop_padding, c.flip, gen,
                                                             self.device)
        return self._augmentation[epoch, copy]

    def augmented(self, index: list[int], copies: list[int], epoch: int) -> Tensor:
        """Training images ``index`` as augmented in ``epoch``: crop and flip, then the per-image policy.

        Shape:
            -> (B, C, 32, 32) uint8 on the task's device.
        """
        c = self.config
        idx = torch.tensor(index, dtype=torch.long, device=self.device)
        params = [self.augmentation(epoch, r) for r in sorted(set(copies))]
        if len(params) == 1:
            offsets, flips = params[0][0][idx], params[0][1][idx]
        else:  # several copies in one batch: each row takes its copy's draw
            by_copy = dict(zip(sorted(set(copies)), params))
            offsets = torch.stack([by_copy[r][0][i] for i, r in zip(index, copies)])
            flips = torch.stack([by_copy[r][1][i] for i, r in zip(index, copies)])
        images = crop_flip(self.images["train"][idx], c.crop_padding, offsets, flips)
        if self._policy is not None:
            seeds = [augment_seed(c.seed, epoch, i, r, stream=1) for i, r in zip(index, copies)]
            images = apply_policy(images, seeds, self._policy).to(self.device)
        return images

    def training_batch(self, rows: Sequence[tuple[int, ...]]) -> tuple[Tensor, Tensor]:
        """The augmented images of ``rows`` and their targets: labels, or soft targets of MixUp / CutMix (each
        image mixed with a partner drawn from its own seed, the partner augmented as in this epoch).

        Shape:
            -> images (B, C, 32, 32): uint8, or float on the [0, 1] scale when mixed; targets (B,) long or (B, K).
        """
        c = self.config
        epochs = {row[1] for row in rows}
        if len(epochs) != 1:
            raise ValueError(f"a batch must come from one epoch, got rows of epochs {sorted(epochs)}")
        epoch = epochs.pop()
        index, copies = [row[0] for row in rows], [row[2] if len(row) > 2 else 0 for row in rows]
        images = self.augmented(index, copies, epoch)
        labels = self.labels["train"][torch.tensor(index, dtype=torch.long, device=self.device)]  # (B,)
        if not (c.mixup or c.cutmix):
            return images, labels
        seeds = [augment_seed(c.seed, epoch, i, r, stream=2) for i, r in zip(index, copies)]
        mix = draw_mix(seeds, len(self.labels["train"]), c.mixup, c.cutmix, IMAGE_SIZE)
        partners = mix["partner"].tolist()
        to_float = self.normalize.transforms[0]  # uint8 -> [0, 1], as the normalisation does
        mixed = mix_images(to_float(images), to_float(self.augmented(partners, copies, epoch)), mix)
        partner_labels = self.labels["train"][mix["partner"].to(self.device)]
        return mixed, mix_targets(labels, partner_labels, mix["lam"], self.num_classes)

    def loss(self, model: nn.Module, rows: Sequence[tuple[int, ...]]) -> tuple[Tensor, float]:
        """The objective (:func:`tasks.cifar.distill.objective_loss`) summed over the rows' images, and their count."""
        images, targets = self.training_batch(rows)
        output = model(self.inputs(images))  # (B, K)
        teacher = self.teacher.predict(images) if getattr(self, "teacher", None) is not None else None
        return objective_loss(model, output, targets, teacher, self.config.label_smoothing), float(len(rows))

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
        teacher = self._preprocessing.get("teacher")
        if teacher:
            top1 = f", test top-1 {teacher['test_top1']:.4f}" if teacher.get("test_top1") is not None else ""
            lines += [f"Distilled from the teacher {teacher['path']} ({teacher['variant']}{top1}); "
                      "the model predicts without it.", ""]
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
                        *([f"![confusion matrix{suffix}]({figure})", ""] if c.figures else [])]
            if self.dist.is_main:
                if c.figures:
                    plot_confusion(cm, self.class_names, out_dir / figure, title=f"confusion matrix ({split})")
                write_records(out_dir, split, self.records(split, logits), self.data_hash(split))
        lines += [markdown_table([{"split": s, "top-1": m["top1"], "macro-F1": m["macro_f1"], "loss": m["loss"]}
                                  for s, m in results.items()]), "", *details]
        if c.figures:
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
