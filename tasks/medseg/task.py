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

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from core.errors import check_int, check_number, check_positive, unknown_name
from tasks.engine.config import TrainConfig
from tasks.engine.distributed import DistInfo
from tasks.engine.task import Task
from tasks.medseg import paired
from tasks.medseg.data import ALL_DATASETS
from tasks.medseg.metrics import CONVENTIONS
from tasks.medseg.reference import REFERENCE_MODELS
from tasks.medseg.task_data import MedsegData, nifti_options, zoom_slices
from tasks.medseg.task_evaluation import MedsegEvaluation
from tasks.medseg.task_training import MedsegTraining, warmup_poly
from tasks.medseg.volume import SegData, Volume
from zoo.analysis.delta import TaskShape

__all__ = ["MedsegConfig", "MedsegTask", "nifti_options", "warmup_poly", "zoom_slices"]  # the last three: re-exported


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


class MedsegTask(MedsegData, MedsegTraining, MedsegEvaluation, Task):
    """The task, one job per mixin: :class:`~tasks.medseg.task_data.MedsegData` reads and splits the data and
    records its preprocessing, :class:`~tasks.medseg.task_training.MedsegTraining` builds and trains the model,
    :class:`~tasks.medseg.task_evaluation.MedsegEvaluation` predicts, scores and reports the cases."""

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
    # The state the mixins share: these are set by setup (load_data, then prepare_training unless restored), the
    # rest start in __init__; restore() sets class_names, dataset_name, in_channels and nifti_info from run.json.
    data: SegData  # the data read by load_data
    class_names: list[str]  # including the background, from the data or from a restored run
    dataset_name: str  # SegData.name (phantom, synapse, acdc, a NIfTI dataset's), from the data or a restored run
    train_images: Tensor  # (N, C, S, S) the training slices zoomed to image_size, by prepare_training
    train_labels: Tensor  # (N, 1, S, S) their labels
    criterion: nn.Module  # MONAI's DiceCELoss with the config's weights

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

    def setup(self) -> None:
        """Read the data; a restored run keeps its classes (refusing data with others) and skips the training
        slices' zoom, augmentation and loss, which evaluation does not need."""
        self.load_data()
        if self.restored is None:
            self.prepare_training()
