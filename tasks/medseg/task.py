"""The medical-segmentation task: 2D slices in, per-case 3D Dice and HD95 per organ out, as the Synapse papers do.

Default data: the generated multi-organ phantom, written in the Synapse layout (see :mod:`tasks.medseg.phantom`).
Real data: ``--data DIR`` holding Synapse (TransUNet's ``train_npz`` / ``test_vol_h5``), ACDC (either layout), or
NIfTI as users hold it: a Medical Segmentation Decathlon task folder, an nnU-Net v2 raw dataset, or ``images/`` +
``labels/`` (see :mod:`tasks.medseg.nifti_layout`). NIfTI cases are reoriented to RAS, resampled to one spacing
(``--spacing``, default the training cases' median), normalised by modality (``--ct-window`` for CT, a z-score
otherwise) and sliced across the axis of the largest spacing; their C channels are the model's input channels.
``--dataset phantom-nifti`` (or ``phantom-nnunet``) writes the phantom as such a folder.

Cross-validation (NIfTI data always, other data with ``--fold``): the training cases are split into ``--folds``
folds as nnU-Net draws them (or as ``splits_final.json`` in the data folder, the run folder or ``--splits`` says),
fold ``--fold`` (default 0) is held out for validation, and the folds used are written to the run's
``splits_final.json``. A NIfTI folder without labelled test cases (``labelsTs/``) is evaluated on the fold's
validation cases, as nnU-Net's cross-validation is. ``zoo cv medseg`` trains every fold (:mod:`tasks.medseg.cv`).

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

On NIfTI data every final evaluation also maps each predicted label map back onto its file's grid, writes it as
``predictions/<split>/CASE.nii.gz`` (the input's shape, affine and orientation), and scores it against the
original label file as nnU-Net v2 does: ``predictions/<split>/summary.json`` (:mod:`tasks.medseg.nnunet_eval`).

Each final evaluation (training's, ``zoo evaluate``) writes ``predictions/<split>.jsonl``, one record per case::

    {"case": "case0001", "papers": {"aorta": {"dice": 0.91, "hd95": 2.2}, ...}, "mm": {...same organs...},
     "voxels": {"aorta": {"pred": 1520, "ref": 1498}, ...}, "spacing": [3.0, 0.78, 0.78] or null}

with a hash of the split's case names, images and labels (see :mod:`tasks.runs.records`); on NIfTI data they are scored
on the canonical (resampled) grid, summary.json on the original one. A run's model is used on new volumes by
:mod:`tasks.medseg.predict`. Synapse and ACDC intensities are used as the files store them (Synapse: [0, 1]); NIfTI
intensities go through the modality rules recorded in run.json, which prediction repeats.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from core.errors import check_int, check_number, check_positive, unknown_name
from core.tables import markdown_table
from tasks.engine.config import TrainConfig
from tasks.engine.distributed import DistInfo, shard
from tasks.engine.task import Task
from tasks.medseg import paired
from tasks.medseg.data import ALL_DATASETS, load_medseg
from tasks.medseg.metrics import CONVENTIONS, case_scores_per_convention, organ_status, summarise
from tasks.medseg.nifti_scoring import OriginalGeometryScores
from tasks.medseg.reference import REFERENCE_MODELS
from tasks.medseg.volume import SegData, Volume
from tasks.runs.records import split_hash, write_records
from zoo.analysis.delta import TaskShape

log = logging.getLogger(__name__)

SPLIT_SEED = 0  # held-out validation cases do not move with --seed

# How the loaders hand intensities to the model: as the files store them, no normalisation by the task.
INTENSITY = {
    "synapse": "as stored: TransUNet's preprocessing, CT clipped to [-125, 275] HU and scaled to [0, 1] per volume",
    "acdc": "as stored by the ACDC layout read (its own per-volume normalisation); no normalisation by the task",
}
INTENSITY["phantom"] = INTENSITY["synapse"]  # the phantom goes through the Synapse preprocessing
INTENSITY_RANGE = {"synapse": (0.0, 1.0), "phantom": (0.0, 1.0)}  # the range those files hold, when fixed
SPLIT_TITLES = {"test": "Test results", "valid": "Validation results"}
CANONICAL = ("NIfTI: reoriented to RAS, resampled to nifti.preprocessing.spacing (R, A, S mm; image linear or cubic, "
             "label nearest), sliced across the RAS axis of the largest spacing (nifti.slice_axis), rows and columns "
             "the other two in S, A, R order; intensities by nifti.preprocessing.rules")

# Published Synapse figures (avg DSC %, HD95 in the papers' convention), for real-data reports.
ANCHORS = {"MISSFormer": (81.96, 18.20), "Swin-Unet": (79.13, 21.55), "TransUNet": (77.48, 31.69)}


@dataclass
class MedsegConfig(TrainConfig):
    task: str = "medseg"
    variant: str = "missformer"
    dataset: str = "auto"  # synapse, acdc, decathlon, nnunet, pairs, phantom-nifti, phantom-nnunet; auto: from --data
    image_size: int = 96  # slices are zoomed to this square size, a multiple of 32 (the papers use 224)
    epochs: int = 20
    batch_size: int = 16  # slices per micro-batch
    lr: float = 2e-3  # peak learning rate, after the warm-up
    weight_decay: float = 1e-4  # AdamW's decoupled weight decay
    warmup: int = 50  # optimizer steps
    poly_power: float = 0.9  # lr·(1 − t/T)^power after the warm-up, as in the Synapse papers
    dice_weight: float = 0.6  # loss = dice_weight·Dice + ce_weight·CE (MISSFormer's 0.6 / 0.4)
    ce_weight: float = 0.4  # weight of the cross-entropy term of the loss
    rotate_degrees: float = 15.0  # random rotation in ±degrees (probability 0.5), up to 180; 0 disables
    zoom: float = 0.1  # random zoom in [1 − zoom, 1 + zoom] (probability 0.5), below 1; 0 disables
    intensity: float = 0.1  # random intensity shift and scale by ±intensity (probability 0.5 each), below 1; 0 disables
    # Off by default: a left–right flip turns the left kidney into a right one without changing its label, and
    # the phantom (like real anatomy) makes left/right organs tell apart by position only.
    flip_prob: float = 0.0  # probability of a random left-right flip of a training slice
    valid_cases: int = 2  # cases held out for validation without folds, when the layout has no validation split
    hd95: str = "papers"  # the convention of the headline HD95: papers (no spacing, their empty rules) or mm
    eval_batch_size: int = 32  # slices per forward pass at evaluation
    # One CPU thread: the models are small, and on a busy 2-core machine two OpenMP threads wait on each other
    # (an epoch took > 5 min with 2 threads next to another job, 15–40 s with one). 0 keeps torch's default.
    num_threads: int = 1
    overlay_slices: int = 4  # test slices shown in overlays.png
    # NIfTI folders (tasks.medseg.nifti_data): the grid and intensities every case is brought to, saved in run.json
    # so that `zoo predict` repeats them on new files. A window starting with a minus sign needs the = form on the
    # command line: --ct-window=-100,200.
    spacing: str | None = None  # NIfTI: target spacing R,A,S mm, e.g. 0.8,0.8,3; None: the training cases' median
    ct_window: str = "-125,275"  # NIfTI CT: HU window scaled to [0, 1], e.g. --ct-window=-100,200; none: nnU-Net's rule
    image_order: int = 1  # NIfTI: image interpolation when resampling, 1 linear or 3 cubic (labels: nearest)
    modality: str | None = None  # NIfTI images/ + labels/: the modality (CT: window; else z-score); None: unknown
    folds: int = 5  # cross-validation folds over the training cases (nnU-Net's split: KFold seed 12345)
    fold: str | None = None  # fold held out, 0 .. folds-1 (zoo cv: all); None: 0 on NIfTI data, else no folds
    splits: str | None = None  # splits_final.json of the folds; None: the data's, the run's, else drawn

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset != "auto" and self.dataset not in ALL_DATASETS:
            raise unknown_name("dataset", self.dataset, ("auto", *ALL_DATASETS))
        if isinstance(self.spacing, tuple | list):  # from Python: (0.8, 0.8, 3.0)
            self.spacing = ",".join(str(v) for v in self.spacing)
        if isinstance(self.ct_window, tuple | list):
            self.ct_window = ",".join(str(v) for v in self.ct_window)
        if isinstance(self.fold, int) and not isinstance(self.fold, bool):
            self.fold = str(self.fold)
        check_int("folds", self.folds, 2, hint="a cross-validation needs at least two folds")
        _ = (self.target_spacing, self.window, self.fold_index)  # each property parses and checks its field
        check_int("image_order", self.image_order, 1, 3)
        if self.image_order not in (1, 3):
            raise ValueError(f"image_order must be 1 (linear) or 3 (cubic spline), got {self.image_order}")
        for name in ("modality", "splits"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty string or None, got {value!r}")
        if self.hd95 not in CONVENTIONS:
            raise unknown_name("hd95 convention", self.hd95, CONVENTIONS)
        for name in ("image_size", "eval_batch_size"):
            check_positive(name, getattr(self, name))
        for name in ("valid_cases", "overlay_slices"):
            check_positive(name, getattr(self, name), allow_zero=True)
        for name in ("dice_weight", "ce_weight", "poly_power"):
            check_number(name, getattr(self, name), 0)
        check_number("rotate_degrees", self.rotate_degrees, 0, 180)
        check_number("zoom", self.zoom, 0)
        check_number("intensity", self.intensity, 0, 1, high_open=True,
                     hint="a scale by 1 ± intensity must keep the image's sign")
        check_number("flip_prob", self.flip_prob, 0, 1)
        if self.image_size % 32:
            raise ValueError(f"image_size must be divisible by 32 (the models halve it 5 times), got "
                             f"{self.image_size}; try {max(32, round(self.image_size / 32) * 32)}")
        if self.zoom >= 1:
            raise ValueError(f"zoom must be < 1 (a zoom range of [1 − zoom, 1 + zoom]), got {self.zoom}")
        if self.dice_weight + self.ce_weight == 0:
            raise ValueError("dice_weight and ce_weight are both 0: the loss would be 0; set at least one")

    @property
    def target_spacing(self) -> tuple[float, float, float] | None:
        """``spacing`` as (R, A, S) mm, or None."""
        if self.spacing is None:
            return None
        values = _numbers(self.spacing)
        if values is None or len(values) != 3 or min(values) <= 0:
            raise ValueError(f"spacing must be three positive numbers R,A,S in mm, e.g. 0.8,0.8,3, got "
                             f"{self.spacing!r}")
        return values[0], values[1], values[2]

    @property
    def window(self) -> tuple[float, float] | None:
        """``ct_window`` as (low, high) HU, or None for nnU-Net's CT normalisation."""
        if isinstance(self.ct_window, str) and self.ct_window.strip().lower() == "none":
            return None
        values = _numbers(self.ct_window)
        if values is None or len(values) != 2 or values[0] >= values[1]:
            raise ValueError(f"ct_window must be LO,HI in HU with LO < HI (e.g. --ct-window=-125,275), or none for "
                             f"nnU-Net's percentile rule, got {self.ct_window!r}")
        return values[0], values[1]

    @property
    def fold_index(self) -> int | None:
        """``fold`` as an int, None when not given; "all" is for ``zoo cv`` and reads as None here."""
        if self.fold is None or self.fold == "all":
            return None
        if not isinstance(self.fold, str) or not self.fold.strip().isdigit():
            raise ValueError(f"fold must be 0 .. {self.folds - 1} or all (zoo cv), got {self.fold!r}")
        index = int(self.fold)
        if index >= self.folds:
            raise ValueError(f"fold must be 0 .. {self.folds - 1} with --folds {self.folds}, got {index}")
        return index


def _numbers(text: object) -> list[float] | None:
    """``"0.8,0.8,3"`` as finite floats, or None when it is not a comma-separated list of numbers."""
    if not isinstance(text, str):
        return None
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        return None
    return values if all(np.isfinite(values)) else None


def nifti_options(c: MedsegConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`~tasks.medseg.nifti_data.load_nifti_dataset` that the config sets."""
    return {"spacing": c.target_spacing, "ct_window": c.window, "image_order": c.image_order, "modality": c.modality}


def nifti_info(nifti: Any) -> dict[str, Any]:
    """What a NIfTI run records in run.json (``preprocessing["nifti"]``) to read new files as its training did."""
    return {"layout": nifti.layout, "channel_names": list(nifti.channel_names),
            "preprocessing": nifti.preprocessing.to_dict(), "slice_axis": nifti.preprocessing.slice_axis}


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def warmup_poly(warmup: int, total: int, power: float):
    """LR factor of optimizer step ``s``: linear warm-up over ``warmup`` steps, then (1 − progress)^power."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        return (1.0 - progress) ** power

    return factor


def model_slices(image: np.ndarray, size: int) -> np.ndarray:
    """The slices of a ``(D, H, W)`` or ``(C, D, H, W)`` image zoomed (order 3) to model input.

    Shape:
        (D, H, W) -> (D, 1, size, size); (C, D, H, W) -> (D, C, size, size).
    """
    if image.ndim == 3:
        return zoom_slices(image, size, 3)[:, None]
    return np.stack([zoom_slices(channel, size, 3) for channel in image], axis=1)


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
    eval_splits = ("test", "valid")
    delta_shape = TaskShape("medseg", "cpu", {"batch": 1, "image_size": 96, "in_channels": 1, "num_classes": 9},
                            ("image_size",), "one 96×96 single-channel slice (the embedded phantom)", tokens_per_grow=2,
                            config_keys=("image_size", "in_channels", "num_classes"))
    predict_options = ("labels",)

    @classmethod
    def paired_metrics(cls, info: dict[str, Any]) -> list:
        return paired.paired_metrics(info)

    @classmethod
    def score_folders(cls, pred: str, labels: str, dataset_json: str | None, chill: bool,
                      out: str | None) -> list[str]:
        """Two folders of NIfTI label maps, scored as nnU-Net's evaluation does (:mod:`tasks.medseg.folder_eval`)."""
        from tasks.medseg.folder_eval import score_folders

        _, out_dir, lines = score_folders(pred, labels, dataset_json, out, chill=chill)
        return [*lines, f"outputs in {out_dir}/ (summary.json: nnU-Net's; metrics.json: both HD95 conventions)"]

    def __init__(self, config: MedsegConfig, device: torch.device, dist: DistInfo) -> None:
        super().__init__(config, device, dist)
        self.volumes: dict[str, list[Volume]] = {}
        self._zoomed_valid: dict[str, Tensor] = {}  # case -> (D, C, S, S), filled by the first validation
        self.in_channels = 1  # image channels C, from the data or from a restored run
        self.nifti_info: dict[str, Any] | None = None  # a NIfTI run's layout, channels and preprocessing (run.json)
        self.split_info: dict[str, Any] | None = None  # the fold used: folds, fold, origin, valid cases
        self.folds: list[dict[str, list[str]]] | None = None  # every fold, written to the run's splits_final.json

    @property
    def num_classes(self) -> int:
        """Classes including the background, from the data or from a restored run."""
        return len(self.class_names)

    # --- data ----------------------------------------------------------------------------------------
    def setup(self) -> None:
        """Read the data; a restored run keeps its classes (refusing data with others) and skips the training
        slices' zoom, augmentation and loss, which evaluation does not need."""
        c: MedsegConfig = self.config
        if c.fold == "all":
            raise ValueError("--fold all trains every fold: run `zoo cv medseg` with the same options (zoo train "
                             f"trains one fold, 0 .. {c.folds - 1})")
        self.data: SegData = load_medseg(c.data, c.dataset, **self._nifti_options())
        if self.restored is not None:
            if self.data.class_names != self.class_names:
                raise ValueError(
                    f"{self.data.source} holds {self.data.name} data with {self.data.num_classes} classes "
                    f"({', '.join(self.data.class_names)}), but the run was trained on {self.num_classes} "
                    f"({', '.join(self.class_names)}); evaluate it on data with the same classes")
            if self.data.num_channels != self.in_channels:
                raise ValueError(f"{self.data.source} holds images of {self.data.num_channels} channel(s), but the "
                                 f"run was trained on {self.in_channels}; evaluate it on data with the same channels")
        else:
            self.class_names, self.dataset_name = list(self.data.class_names), self.data.name
            self.in_channels = self.data.num_channels
            nifti_only = ("spacing", "ct_window", "image_order", "modality")
            unused = [f"--{f.name.replace('_', '-')}" for f in dataclasses.fields(c)
                      if f.name in nifti_only and getattr(c, f.name) != f.default]
            if self.data.nifti is None and unused:
                log.warning("%s apply to NIfTI folders only; %s is %s data: ignored", ", ".join(unused),
                            self.data.source, self.data.name)
            self.nifti_info = nifti_info(self.data.nifti) if self.data.nifti is not None else None
        train, valid, test = self._split(self.data)
        self.volumes = {"train": train, "valid": valid, "test": test}
        self._zoomed_valid = {}
        if self.restored is not None:
            return
        size = c.image_size
        images = np.concatenate([model_slices(v.image, size) for v in train])  # (N, C, S, S)
        labels = np.concatenate([zoom_slices(v.label, size, 0) for v in train])  # (N, S, S)
        self.train_images = torch.from_numpy(images.astype(np.float32))  # (N, C, S, S)
        self.train_labels = torch.from_numpy(labels.astype(np.int64))[:, None]  # (N, 1, S, S)
        self._augment = self._augmentation() if self._augmenting() else None
        from monai.losses import DiceCELoss

        self.criterion = DiceCELoss(to_onehot_y=True, softmax=True, lambda_dice=c.dice_weight, lambda_ce=c.ce_weight)

    def _nifti_options(self) -> dict[str, Any]:
        """The keyword arguments of ``load_nifti_dataset`` (used only for NIfTI folders): the config's, or for a
        restored NIfTI run its saved preprocessing and classes, so that other data gets exactly the training's."""
        options = nifti_options(self.config)
        if self.restored is not None and self.nifti_info is not None:
            from tasks.medseg.nifti_data import Preprocessing

            options["preprocessing"] = Preprocessing.from_dict(self.nifti_info["preprocessing"])
            options["class_names"] = self.class_names  # an images/ + labels/ folder does not name its classes
        return options

    def _split(self, data: SegData) -> tuple[list[Volume], list[Volume], list[Volume]]:
        """(training, validation, test cases): a fold of the training cases (NIfTI data, or ``--fold``), else the
        layout's validation split, else ``valid_cases`` held out; test: the labelled test cases, or for a NIfTI
        folder without any the fold's validation cases."""
        c = self.config
        if self.restored is not None and self.restored.get("split") is not None:
            return self._restored_fold(data, self.restored["split"])
        if (c.fold is not None or data.nifti is not None) and self.restored is None:
            return self._fold(data)
        train, valid = self._held_out(data)
        return train, valid, data.test or train + valid  # a restored run on a folder without a test split: all

    def _fold(self, data: SegData) -> tuple[list[Volume], list[Volume], list[Volume]]:
        from tasks.medseg.folds import resolve_folds

        c = self.config
        if data.valid:
            raise ValueError(f"{data.source} has its own validation split ({len(data.valid)} cases); folds split the "
                             "training cases of layouts without one: leave out --fold")
        names = [v.case for v in data.train]
        self.folds, origin = resolve_folds(names, c.folds, c.splits, folders=(data.source, c.out_dir))
        fold = c.fold_index or 0
        held = set(self.folds[fold]["val"])
        train, valid = [v for v in data.train if v.case not in held], [v for v in data.train if v.case in held]
        self.split_info = {"folds": c.folds, "fold": fold, "valid": sorted(held), "test_is_valid": not data.test,
                           "origin": str(origin) if origin else "drawn as nnU-Net draws them: sorted cases, "
                                                                "KFold seed 12345"}
        return train, valid, data.test or valid

    def _restored_fold(self, data: SegData, info: dict[str, Any]) -> tuple[list[Volume], list[Volume], list[Volume]]:
        """A restored fold run: its own validation cases when the data holds them; on another folder, whose cases
        the model never saw, every labelled case is scored."""
        held = set(info["valid"])
        self.split_info = dict(info)
        if held <= {v.case for v in data.train}:
            valid = [v for v in data.train if v.case in held]
            self.split_info["test_is_valid"] = not data.test
            return [v for v in data.train if v.case not in held], valid, data.test or valid
        cases = data.train + data.valid
        self.split_info["test_is_valid"] = False
        return [], data.valid or cases, data.test or cases

    def _held_out(self, data: SegData) -> tuple[list[Volume], list[Volume]]:
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
        decided = {"image_size": self.config.image_size, "in_channels": self.in_channels,
                   "num_classes": self.num_classes}
        return self.decided_overrides(decided, "the task (--image-size and the data)")

    def build_model(self) -> nn.Module:
        return self.build_variant(self.model_overrides(), *self.reference_args())

    def reference_args(self) -> tuple[int, int, int]:
        """(in_channels, num_classes, image_size) of the reference models' builders."""
        return self.in_channels, self.num_classes, self.config.image_size

    def make_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int):
        c = self.config
        return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_poly(c.warmup, total_steps, c.poly_power))

    # --- training ------------------------------------------------------------------------------------
    def train_batches(self, epoch: int) -> list[list[tuple[int, int]]]:
        """Shuffled batches of rows ``(slice index, epoch)``: the epoch keys each slice's augmentation."""
        return self.shuffled_batches(len(self.train_images), epoch, max(self.dist.world, 2))  # Dice needs 2+ slices

    def augmented(self, rows: Sequence[tuple[int, int]]) -> tuple[Tensor, Tensor]:
        """Images ``(B, C, S, S)`` and labels ``(B, 1, S, S)`` of ``rows``, augmented from (seed, epoch, index)."""
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
        """The volume's slices zoomed to ``image_size`` as model input ``(D, C, S, S)``; validation cases, scored
        every epoch, are zoomed once and kept (test cases, scored once, are not kept: real ones are large)."""
        if volume.case in self._zoomed_valid:
            return self._zoomed_valid[volume.case]
        slices = torch.from_numpy(model_slices(volume.image, self.config.image_size).astype(np.float32))
        if any(volume is v for v in self.volumes.get("valid", ())):
            self._zoomed_valid[volume.case] = slices
        return slices

    @torch.no_grad()
    def predict_volume(self, model: nn.Module, volume: Volume, batch_size: int | None = None) -> np.ndarray:
        """Label volume predicted slice by slice, zoomed back to the slice size with order 0 (the papers' way).

        ``batch_size`` slices go through the model at once (default: ``eval_batch_size``).

        Shape:
            image (D, H, W) or (C, D, H, W) -> labels (D, H, W) uint8.
        """
        size, (d, h, w) = self.config.image_size, volume.shape
        batch = batch_size or self.config.eval_batch_size
        slices = self.zoomed(volume)  # (D, C, S, S)
        preds = []
        for j in range(0, d, batch):
            logits = model(slices[j : j + batch].to(self.device))  # (b, K, S, S)
            preds.append(logits.argmax(1).to(torch.uint8).cpu())
        pred = torch.cat(preds).numpy()  # (D, S, S)
        if (h, w) != (size, size):
            from scipy.ndimage import zoom

            pred = zoom(pred, (1, h / size, w / size), order=0)
        return pred

    def case_record(self, volume: Volume, pred: np.ndarray) -> dict[str, Any]:
        """The per-example record of one case (a line of ``predictions/<split>.jsonl``): per organ, (Dice, HD95)
        in each convention and the voxel counts of prediction and reference; the spacing (z, y, x) in mm or None.
        """
        k, names = self.num_classes, self.class_names
        record: dict[str, Any] = {"case": volume.case}
        per_convention = case_scores_per_convention(pred, volume.label, k, volume.spacing)  # checks both volumes
        for convention, scores in per_convention.items():
            record[convention] = {names[o]: {"dice": d, "hd95": h} for o, (d, h) in scores.items()}
        counts = np.bincount(pred.ravel(), minlength=k), np.bincount(volume.label.ravel(), minlength=k)  # (K,) each
        record["voxels"] = {names[o]: {"pred": int(counts[0][o]), "ref": int(counts[1][o])} for o in range(1, k)}
        record["spacing"] = list(volume.spacing) if volume.spacing is not None else None
        return record

    def evaluate(self, model: nn.Module, split: str) -> list[dict[str, Any]]:
        """One record per case of this rank's shard (see :meth:`case_record`)."""
        return [self.case_record(v, self.predict_volume(model, v)) for v in shard(self.volumes[split], self.dist)]

    def summaries(self, records: list[dict[str, Any]]) -> dict[str, dict]:
        """:func:`~tasks.medseg.metrics.summarise` of case records, per convention."""
        index = {name: k for k, name in enumerate(self.class_names)}
        status = {r["case"]: {index[n]: organ_status(v["pred"] > 0, v["ref"] > 0) for n, v in r["voxels"].items()}
                  for r in records}
        assumed = any(r["spacing"] is None for r in records)
        return {name: summarise({r["case"]: {index[n]: (s["dice"], s["hd95"]) for n, s in r[name].items()}
                                 for r in records}, self.class_names, name, status=status, spacing_assumed=assumed)
                for name in CONVENTIONS}

    def score(self, records: list[dict[str, Any]], split: str) -> dict[str, float]:
        expected = len(self.volumes[split])
        if len(records) != expected:
            raise ValueError(f"expected one record per case of {split!r} ({expected}), got {len(records)}")
        return self.headline_metrics(self.summaries(records))

    def headline_metrics(self, summaries: dict[str, dict]) -> dict[str, float]:
        """Mean Dice and HD95 in the headline convention, and in the mm one."""
        head = summaries[self.config.hd95]
        return {"dice": head["mean_dice"], "hd95": head["mean_hd95"],
                "dice_mm": summaries["mm"]["mean_dice"], "hd95_mm": summaries["mm"]["mean_hd95"]}

    def final_report(self, model: nn.Module, out_dir: Path, splits: Sequence[str] | None = None
                     ) -> tuple[dict[str, Any], str]:
        """Score ``splits`` case by case, write their records, and report them; overlays of the first split's cases.

        Default splits: test, and with a fold of a dataset that has labelled test cases also the fold's validation
        cases (the cross-validation's figure; :mod:`tasks.medseg.cv` collects it).
        """
        out_dir, metrics, sections = Path(out_dir), {}, [self._data_section()]
        if splits is None:
            cv = self.split_info is not None and not self.split_info["test_is_valid"] and self.volumes["valid"]
            splits = ("test", "valid") if cv else self.eval_splits[:1]
        for n, split in enumerate(splits):
            metrics[split], section = self._split_report(model, split, out_dir, overlays=n == 0)
            sections.append(section)
        return metrics, "\n".join(sections)

    def _data_section(self) -> str:
        """The dataset (for NIfTI: its fingerprint and preprocessing) and the fold used, as markdown."""
        lines = ["## Data", ""]
        nifti = getattr(self.data, "nifti", None)
        if nifti is not None:
            lines += nifti.report_lines()
        else:
            lines.append(f"- {self.data.name} from {self.data.source}; intensities "
                         f"{INTENSITY.get(self.dataset_name, 'as the files store them')}")
        info = self.split_info
        if info is not None:
            lines.append(f"- fold {info['fold']} of {info['folds']} ({info['origin']}): {len(self.volumes['train'])} "
                         f"training, {len(self.volumes['valid'])} validation cases ({', '.join(info['valid'][:8])}"
                         f"{', ...' if len(info['valid']) > 8 else ''}); the run's splits_final.json holds every fold")
            if info["test_is_valid"]:
                lines.append("- no labelled test split (labelsTs/): the fold's validation cases are the evaluation "
                             "split, as in nnU-Net's cross-validation; they also chose the best checkpoint, so the "
                             "figures are optimistic by that choice")
        return "\n".join(lines) + "\n"

    def _split_report(self, model: nn.Module, split: str, out_dir: Path, overlays: bool) -> tuple[dict, str]:
        from tasks.medseg.report import case_table, organ_table, pick_overlay_slices, plot_overlays

        c, data, names, volumes = self.config, self.data, self.class_names, self.volumes[split]
        if not volumes:
            raise ValueError(f"the {split} split of {data.source} is empty: nothing to evaluate")
        shown = (c.overlay_slices + 1) // 2 if overlays else 0  # cases whose slices are drawn, two slices each
        nifti = getattr(data, "nifti", None)
        original = OriginalGeometryScores(out_dir / "predictions" / split, self.num_classes) \
            if nifti is not None and self.dist.is_main else None
        nifti_cases = {c.case: c for c in nifti.train + nifti.test} if original is not None else {}
        records, samples = [], []
        for i, volume in enumerate(volumes):
            pred = self.predict_volume(model, volume)  # (D, H, W), scored and drawn from one prediction
            records.append(self.case_record(volume, pred))
            if original is not None:
                original.add(nifti_cases[volume.case], pred)
            if i < shown:
                image = volume.first_channel()
                samples += [(f"{volume.case} slice {z}", image[z], volume.label[z], pred[z])
                            for z in pick_overlay_slices(volume.label, 2)]
        if self.dist.is_main:
            write_records(out_dir, split, records, split_hash(x for v in volumes for x in (v.case, v.image, v.label)))
        summaries = self.summaries(records)
        head = summaries[c.hd95]
        train_slices = sum(v.shape[0] for v in self.volumes["train"])
        title = SPLIT_TITLES.get(split, split)
        if split == "test" and self.split_info is not None and self.split_info["test_is_valid"]:
            title += f" (fold {self.split_info['fold']}'s validation cases: the data has no labelled test split)"
        grid = "the canonical grid (reoriented, resampled)" if original is not None else "each whole 3D volume"
        lines = [f"## {title}", "",
                 f"{data.name} from {data.source}: {len(self.volumes['train'])} training cases "
                 f"({train_slices} slices), {len(self.volumes['valid'])} validation, {len(self.volumes['test'])} "
                 f"test cases; {self.num_classes} classes; {self.in_channels} channel(s); slices zoomed to "
                 f"{c.image_size}×{c.image_size}. Predicted slice by slice, zoomed back with order 0, scored per "
                 f"organ on {grid}, averaged over cases per organ, then over organs.", "",
                 f"Headline convention: **{c.hd95}** — {CONVENTIONS[c.hd95]}", "",
                 "### Per organ", "", markdown_table(organ_table(head, names)), ""]
        other = "mm" if c.hd95 == "papers" else "papers"
        lines += [f"Other convention, **{other}** — {CONVENTIONS[other]}", "",
                  markdown_table(organ_table(summaries[other], names)), "",
                  "### Per case", "", markdown_table(case_table(head)), ""]
        metrics = {**self.headline_metrics(summaries), "conventions": summaries}
        if original is not None:
            nnunet = original.finish()
            metrics["nnunet_dice"] = _finite(nnunet["foreground_mean"]["Dice"])
            lines += original.report_lines(nnunet, names)
        if data.name == "synapse" and split == "test":
            anchors = ", ".join(f"{k} {d:.2f} / {h:.2f}" for k, (d, h) in ANCHORS.items())
            lines += [f"Published Synapse anchors (DSC % / HD95, papers' convention): {anchors}.", ""]
        if samples and self.dist.is_main:
            plot_overlays(samples[: c.overlay_slices], names, out_dir / "overlays.png")
            lines += ["### Overlays", "", f"Image, ground truth and prediction for a few {split} slices:", "",
                      "![overlays](overlays.png)", ""]
        return metrics, "\n".join(lines)

    # --- delta analysis and artefacts ----------------------------------------------------------------
    def delta_overrides(self) -> dict[str, Any]:
        return self.model_overrides()

    def save_artifacts(self, out_dir: Path) -> None:
        """``classes.json``: the preprocessing (as in run.json) plus the data folder and the cases of each split;
        ``splits_final.json``: every fold, when the run trained on one (nnU-Net's format)."""
        info = {**self.preprocessing(), "source": self.data.source,
                **{f"{split}_cases": [v.case for v in self.volumes[split]] for split in ("train", "valid", "test")}}
        (Path(out_dir) / "classes.json").write_text(json.dumps(info, indent=2) + "\n")
        if self.folds is not None:
            from tasks.medseg.folds import SPLITS_FILE, write_splits

            write_splits(Path(out_dir) / SPLITS_FILE, self.folds)

    # --- using a finished run (see tasks.runs.run) --------------------------------------------------------
    def preprocessing(self) -> dict[str, Any]:
        """What turns a volume into the model's input and its output back into labels (run.json)."""
        pre = {"dataset": self.dataset_name, "class_names": list(self.class_names), "num_classes": self.num_classes,
               "in_channels": self.in_channels, "slice_axis": 0, "image_size": self.config.image_size,
               "resize": "each (H, W) slice zoomed to image_size × image_size (spline order 3); the arg-max "
                         "zoomed back to (H, W) with order 0",
               "intensity": INTENSITY.get(self.dataset_name, "as the files store them"),
               "intensity_range": INTENSITY_RANGE.get(self.dataset_name)}
        if self.nifti_info is not None:
            from tasks.medseg.nifti_intensity import IntensityRule

            rules = [IntensityRule(**r) for r in self.nifti_info["preprocessing"]["rules"]]
            pre.update(intensity="; ".join(r.describe() for r in rules), intensity_range=None, nifti=self.nifti_info,
                       resize=f"{CANONICAL}; then {pre['resize']}")
        if self.split_info is not None:
            pre["split"] = {k: v for k, v in self.split_info.items() if k != "test_is_valid"}
        return pre

    def restore(self, preprocessing: dict[str, Any], run_dir) -> None:
        super().restore(preprocessing, run_dir)
        missing = [k for k in ("dataset", "class_names", "image_size") if k not in preprocessing]
        if missing:
            raise ValueError(f"{Path(run_dir) / 'run.json'}: the medseg preprocessing lacks {missing}; it was not "
                             "written by `zoo train medseg`")
        if preprocessing["image_size"] != self.config.image_size:
            raise ValueError(f"{Path(run_dir) / 'run.json'}: preprocessing image_size {preprocessing['image_size']} "
                             f"differs from the config's {self.config.image_size}; the file was edited")
        self.class_names, self.dataset_name = list(preprocessing["class_names"]), preprocessing["dataset"]
        self.in_channels = int(preprocessing.get("in_channels", 1))
        self.nifti_info = preprocessing.get("nifti")
