"""The medical-segmentation task: 2D slices in, per-case 3D Dice and HD95 per organ out, as the Synapse papers do.

Default data: the generated multi-organ phantom, written in the Synapse layout (see :mod:`tasks.medseg.phantom`).
Real data: ``--data DIR`` holding Synapse (TransUNet's ``train_npz`` / ``test_vol_h5``) or ACDC (either layout).

Training: every training slice is zoomed to ``image_size`` (order 3 for the image, order 0 for the labels, as the
papers do), augmented with MONAI (rotation, zoom, intensity shift and scale; flips optional), and scored by
MONAI's Dice + cross-entropy loss with MISSFormer's weights (0.6 Dice, 0.4 CE). AdamW with linear warm-up then
the poly decay lr·(1 − t/T)^0.9 the papers use. The augmentation of slice ``i`` in epoch ``e`` is a function of
(seed, e, i) alone, so resumed and distributed runs see the same images as an uninterrupted one.

Evaluation (the papers' protocol): each case is predicted slice by slice at ``image_size``, the arg-max is zoomed
back to the slice size with order 0, and Dice and HD95 are computed per organ on the whole 3D volume, averaged
over cases per organ, then over organs. Two HD95 conventions are reported (see :mod:`tasks.medseg.metrics`):
the papers' (what their code gives) and a spacing-aware one in millimetres with explicit empty-mask rules.
Validation uses ``valid_cases`` training cases held out (the layout's own validation split when it has one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from core.errors import check_positive, check_probability, unknown_name
from tasks.config import TrainConfig
from tasks.distributed import shard
from tasks.medseg.data import DATASETS, SegData, Volume, load_medseg
from tasks.medseg.metrics import CONVENTIONS, case_scores, case_status, summarise
from tasks.medseg.reference import REFERENCE_MODELS
from tasks.report import markdown_table
from tasks.task import Task

SPLIT_SEED = 0  # held-out validation cases do not move with --seed

# Published Synapse figures (avg DSC %, HD95 in the papers' convention), for real-data reports.
ANCHORS = {"MISSFormer": (81.96, 18.20), "Swin-Unet": (79.13, 21.55), "TransUNet": (77.48, 31.69)}


@dataclass
class MedsegConfig(TrainConfig):
    task: str = "medseg"
    variant: str = "missformer"
    dataset: str = "auto"  # synapse, acdc; auto: the phantom without --data, else read from the folder
    image_size: int = 96  # slices are zoomed to this square size (the papers use 224)
    epochs: int = 20
    batch_size: int = 16
    lr: float = 2e-3  # peak learning rate, after the warm-up
    weight_decay: float = 1e-4
    warmup: int = 50  # optimizer steps
    poly_power: float = 0.9  # lr·(1 − t/T)^power after the warm-up, as in the Synapse papers
    dice_weight: float = 0.6  # loss = dice_weight·Dice + ce_weight·CE (MISSFormer's 0.6 / 0.4)
    ce_weight: float = 0.4
    rotate_degrees: float = 15.0  # random rotation in ±degrees (probability 0.5); 0 disables
    zoom: float = 0.1  # random zoom in [1 − zoom, 1 + zoom] (probability 0.5); 0 disables
    intensity: float = 0.1  # random intensity shift and scale by ±intensity (probability 0.5 each); 0 disables
    # Off by default: a left–right flip turns the left kidney into a right one without changing its label, and
    # the phantom (like real anatomy) makes left/right organs tell apart by position only.
    flip_prob: float = 0.0
    valid_cases: int = 2  # training cases held out for validation when the layout has no validation split
    hd95: str = "papers"  # the convention of the headline HD95: papers (no spacing, their empty rules) or mm
    eval_batch_size: int = 32  # slices per forward pass at evaluation
    # One CPU thread: the models are small, and on a busy 2-core machine two OpenMP threads wait on each other
    # (an epoch took > 5 min with 2 threads next to another job, 15–40 s with one). 0 keeps torch's default.
    num_threads: int = 1
    overlay_slices: int = 4  # test slices shown in overlays.png

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset != "auto" and self.dataset not in DATASETS:
            raise unknown_name("dataset", self.dataset, ("auto", *DATASETS))
        if self.hd95 not in CONVENTIONS:
            raise unknown_name("hd95 convention", self.hd95, CONVENTIONS)
        for name in ("image_size", "eval_batch_size"):
            check_positive(name, getattr(self, name))
        for name in ("valid_cases", "overlay_slices"):
            check_positive(name, getattr(self, name), allow_zero=True)
        for name in ("rotate_degrees", "zoom", "intensity", "dice_weight", "ce_weight", "poly_power"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        check_probability("flip_prob", self.flip_prob)
        if self.image_size % 32:
            raise ValueError(f"image_size must be divisible by 32 (the models halve it 5 times), got "
                             f"{self.image_size}; try {max(32, round(self.image_size / 32) * 32)}")
        if self.zoom >= 1:
            raise ValueError(f"zoom must be < 1 (a zoom range of [1 − zoom, 1 + zoom]), got {self.zoom}")
        if self.dice_weight + self.ce_weight == 0:
            raise ValueError("dice_weight and ce_weight are both 0: the loss would be 0; set at least one")


def warmup_poly(warmup: int, total: int, power: float):
    """LR factor of optimizer step ``s``: linear warm-up over ``warmup`` steps, then (1 − progress)^power."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        return (1.0 - progress) ** power

    return factor


def zoom_slices(volume: np.ndarray, size: int, order: int) -> np.ndarray:
    """Zoom every slice of a ``(D, H, W)`` volume to ``(D, size, size)`` with spline ``order`` (0 for labels).

    Shape:
        (D, H, W) -> (D, size, size).
    """
    from scipy.ndimage import zoom

    d, h, w = volume.shape
    if (h, w) == (size, size):
        return volume.copy()
    return zoom(volume, (1, size / h, size / w), order=order)


class MedsegTask(Task):
    name = "medseg"
    config_class = MedsegConfig
    main_metric = "dice"
    baseline = "basicunet"  # the CNN U-Net every segmentation paper compares with
    headline = ("test", "dice")
    extra_columns = (("test", "hd95", "HD95"),)
    reference_models = REFERENCE_MODELS

    # --- data ----------------------------------------------------------------------------------------
    def setup(self) -> None:
        c: MedsegConfig = self.config
        self.data: SegData = load_medseg(c.data, c.dataset)
        train, valid = self._split(self.data)
        self.volumes: dict[str, list[Volume]] = {"train": train, "valid": valid, "test": self.data.test}
        size = c.image_size
        images = np.concatenate([zoom_slices(v.image, size, 3) for v in train])  # (N, S, S)
        labels = np.concatenate([zoom_slices(v.label, size, 0) for v in train])  # (N, S, S)
        self.train_images = torch.from_numpy(images.astype(np.float32))[:, None]  # (N, 1, S, S)
        self.train_labels = torch.from_numpy(labels.astype(np.int64))[:, None]  # (N, 1, S, S)
        self._augment = self._augmentation() if self._augmenting() else None
        self._zoomed_valid: dict[str, Tensor] = {}  # case -> (D, 1, S, S), filled by the first validation
        from monai.losses import DiceCELoss

        self.criterion = DiceCELoss(to_onehot_y=True, softmax=True, lambda_dice=c.dice_weight, lambda_ce=c.ce_weight)

    def _split(self, data: SegData) -> tuple[list[Volume], list[Volume]]:
        """(training cases, validation cases): the layout's validation split, else ``valid_cases`` held out."""
        c = self.config
        if data.valid:
            return data.train, data.valid
        if c.valid_cases >= len(data.train):
            raise ValueError(f"valid_cases={c.valid_cases} leaves no training case of {len(data.train)}; lower it")
        if c.valid_cases == 0:
            return data.train, data.test
        order = np.random.default_rng(SPLIT_SEED).permutation(len(data.train))
        held = set(order[: c.valid_cases].tolist())
        return ([v for i, v in enumerate(data.train) if i not in held],
                [v for i, v in enumerate(data.train) if i in held])

    def _augmenting(self) -> bool:
        c = self.config
        return bool(c.rotate_degrees or c.zoom or c.intensity or c.flip_prob)

    def _augmentation(self):
        """MONAI's dictionary transforms on one ``(1, S, S)`` slice: geometry on image and label alike."""
        import monai.transforms as T

        c, keys = self.config, ("image", "label")
        steps = []
        if c.rotate_degrees:
            steps.append(T.RandRotated(keys, range_x=np.deg2rad(c.rotate_degrees), prob=0.5,
                                       mode=("bilinear", "nearest"), padding_mode="zeros"))
        if c.zoom:
            steps.append(T.RandZoomd(keys, prob=0.5, min_zoom=1 - c.zoom, max_zoom=1 + c.zoom,
                                     mode=("bilinear", "nearest"), padding_mode="constant"))
        if c.flip_prob:
            steps.append(T.RandFlipd(keys, prob=c.flip_prob, spatial_axis=1))
        if c.intensity:
            steps.append(T.RandShiftIntensityd("image", offsets=c.intensity, prob=0.5))
            steps.append(T.RandScaleIntensityd("image", factors=c.intensity, prob=0.5))
        return T.Compose(steps)

    # --- model ---------------------------------------------------------------------------------------
    def model_overrides(self) -> dict[str, Any]:
        """The variant's config overrides: ``--model-set`` fields plus the sizes the task and data decide."""
        decided = {"image_size": self.config.image_size, "in_channels": 1, "num_classes": self.data.num_classes}
        return self.decided_overrides(decided, "the task (--image-size and the data)")

    def build_model(self) -> nn.Module:
        return self.build_variant(self.model_overrides(), 1, self.data.num_classes, self.config.image_size)

    def make_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int):
        c = self.config
        return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_poly(c.warmup, total_steps, c.poly_power))

    # --- training ------------------------------------------------------------------------------------
    def train_batches(self, epoch: int) -> list[list[tuple[int, int]]]:
        """Shuffled batches of rows ``(slice index, epoch)``: the epoch keys each slice's augmentation."""
        return self.shuffled_batches(len(self.train_images), epoch, max(self.dist.world, 2))  # Dice needs 2+ slices

    def augmented(self, rows: Sequence[tuple[int, int]]) -> tuple[Tensor, Tensor]:
        """Images ``(B, 1, S, S)`` and labels ``(B, 1, S, S)`` of ``rows``, augmented from (seed, epoch, index)."""
        index = torch.tensor([i for i, _ in rows], dtype=torch.long)
        images, labels = self.train_images[index], self.train_labels[index]
        if self._augment is None:
            return images, labels
        out_images, out_labels = [], []
        for (i, epoch), image, label in zip(rows, images, labels):
            self._augment.set_random_state(seed=(self.config.seed * 1_000_003 + epoch * 10_007 + i) % 2**32)
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
        logits = model(images.to(self.device))  # (B, K, S, S)
        loss = self.criterion(logits.float(), labels.to(self.device))
        return loss * len(rows), float(len(rows))

    # --- evaluation ----------------------------------------------------------------------------------
    @torch.no_grad()
    def zoomed(self, volume: Volume) -> Tensor:
        """The volume's slices zoomed to ``image_size`` as model input ``(D, 1, S, S)``; validation cases, scored
        every epoch, are zoomed once and kept (test cases, scored once, are not kept: real ones are large)."""
        if volume.case in self._zoomed_valid:
            return self._zoomed_valid[volume.case]
        slices = torch.from_numpy(zoom_slices(volume.image, self.config.image_size, 3).astype(np.float32))[:, None]
        if any(volume is v for v in self.volumes["valid"]):
            self._zoomed_valid[volume.case] = slices
        return slices

    def predict_volume(self, model: nn.Module, volume: Volume) -> np.ndarray:
        """Label volume predicted slice by slice, zoomed back to the slice size with order 0 (the papers' way).

        Shape:
            image (D, H, W) -> labels (D, H, W) uint8.
        """
        size, (d, h, w) = self.config.image_size, volume.image.shape
        slices = self.zoomed(volume)  # (D, 1, S, S)
        preds = []
        for j in range(0, d, self.config.eval_batch_size):
            logits = model(slices[j : j + self.config.eval_batch_size].to(self.device))  # (b, K, S, S)
            preds.append(logits.argmax(1).to(torch.uint8).cpu())
        pred = torch.cat(preds).numpy()  # (D, S, S)
        if (h, w) != (size, size):
            from scipy.ndimage import zoom

            pred = zoom(pred, (1, h / size, w / size), order=0)
        return pred

    def case_record(self, volume: Volume, pred: np.ndarray) -> dict[str, Any]:
        """Per-organ (Dice, HD95) of ``pred`` against ``volume`` in each convention, and each organ's status."""
        k = self.data.num_classes
        return {"case": volume.case, "spacing_known": volume.spacing is not None,
                "status": case_status(pred, volume.label, k),
                **{name: case_scores(pred, volume.label, k, name, volume.spacing) for name in CONVENTIONS}}

    def evaluate(self, model: nn.Module, split: str) -> list[dict[str, Any]]:
        """One record per case of this rank's shard: per-organ (Dice, HD95) in each convention."""
        return [self.case_record(v, self.predict_volume(model, v)) for v in shard(self.volumes[split], self.dist)]

    def _summaries(self, records: list[dict[str, Any]]) -> dict[str, dict]:
        names = self.data.class_names
        status = {r["case"]: {int(o): s for o, s in r["status"].items()} for r in records}
        assumed = not all(r["spacing_known"] for r in records)
        return {name: summarise({r["case"]: {int(o): s for o, s in r[name].items()} for r in records}, names, name,
                                status=status, spacing_assumed=assumed)
                for name in CONVENTIONS}

    def score(self, records: list[dict[str, Any]], split: str) -> dict[str, float]:
        expected = len(self.volumes[split])
        if len(records) != expected:
            raise ValueError(f"expected one record per case of {split!r} ({expected}), got {len(records)}")
        return self._headline(self._summaries(records))

    def _headline(self, summaries: dict[str, dict]) -> dict[str, float]:
        """Mean Dice and HD95 in the headline convention, and in the mm one."""
        head = summaries[self.config.hd95]
        return {"dice": head["mean_dice"], "hd95": head["mean_hd95"],
                "dice_mm": summaries["mm"]["mean_dice"], "hd95_mm": summaries["mm"]["mean_hd95"]}

    def final_report(self, model: nn.Module, out_dir: Path) -> tuple[dict[str, Any], str]:
        from tasks.medseg.report import case_table, organ_table, pick_overlay_slices, plot_overlays

        out_dir, c, data = Path(out_dir), self.config, self.data
        shown = (c.overlay_slices + 1) // 2  # test cases whose slices are drawn, two slices each
        records, samples = [], []
        for i, volume in enumerate(data.test):
            pred = self.predict_volume(model, volume)  # (D, H, W), scored and drawn from one prediction
            records.append(self.case_record(volume, pred))
            if i < shown:
                samples += [(f"{volume.case} slice {z}", volume.image[z], volume.label[z], pred[z])
                            for z in pick_overlay_slices(volume.label, 2)]
        summaries = self._summaries(records)
        metrics = {**self._headline(summaries), "conventions": summaries}
        head = summaries[c.hd95]
        lines = ["## Test results", "",
                 f"{data.name} from {data.source}: {len(self.volumes['train'])} training cases "
                 f"({len(self.train_images)} slices), {len(self.volumes['valid'])} validation, {len(data.test)} test "
                 f"cases; {data.num_classes} classes; slices zoomed to {c.image_size}×{c.image_size}. Predicted slice "
                 "by slice, zoomed back with order 0, scored per organ on each whole 3D volume, averaged over cases "
                 "per organ, then over organs.", "",
                 f"Headline convention: **{c.hd95}** — {CONVENTIONS[c.hd95]}", "",
                 "### Per organ", "", markdown_table(organ_table(head, data.class_names)), ""]
        other = "mm" if c.hd95 == "papers" else "papers"
        lines += [f"Other convention, **{other}** — {CONVENTIONS[other]}", "",
                  markdown_table(organ_table(summaries[other], data.class_names)), "",
                  "### Per case", "", markdown_table(case_table(head)), ""]
        if data.name == "synapse":
            anchors = ", ".join(f"{k} {d:.2f} / {h:.2f}" for k, (d, h) in ANCHORS.items())
            lines += [f"Published Synapse anchors (DSC % / HD95, papers' convention): {anchors}.", ""]
        if samples and self.dist.is_main:
            plot_overlays(samples[: c.overlay_slices], data.class_names, out_dir / "overlays.png")
            lines += ["### Overlays", "", "Image, ground truth and prediction for a few test slices:", "",
                      "![overlays](overlays.png)", ""]
        return {"test": metrics}, "\n".join(lines)

    # --- delta analysis and artefacts ----------------------------------------------------------------
    def delta_overrides(self) -> dict[str, Any]:
        return self.model_overrides()

    def save_artifacts(self, out_dir: Path) -> None:
        data, c = self.data, self.config
        info = {"dataset": data.name, "source": data.source, "class_names": data.class_names,
                "image_size": c.image_size, "train_cases": [v.case for v in self.volumes["train"]],
                "valid_cases": [v.case for v in self.volumes["valid"]], "test_cases": [v.case for v in data.test]}
        (Path(out_dir) / "classes.json").write_text(json.dumps(info, indent=2) + "\n")
