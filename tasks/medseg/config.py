"""The medical-segmentation task's settings: ``zoo train medseg --help`` lists them, from the field comments below.

:class:`MedsegConfig` is the task's :class:`~tasks.engine.config.TrainConfig`; the task itself is
:class:`tasks.medseg.task.MedsegTask` (which re-exports this class), its stages in ``preprocessing.cases``,
``training.examples`` and ``evaluation.evaluator``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from plumbing.errors import check_int, check_number, check_positive, unknown_name
from tasks.engine.config import TrainConfig
from tasks.medseg.evaluation.metrics import CONVENTIONS, check_nsd_tolerance
from tasks.medseg.inference.sliding import check_mode, check_overlap, parse_axes
from tasks.medseg.reading.data import ALL_DATASETS
from tasks.medseg.training.recipes import check_recipe_name
from zoo.vision import patch_sides

TTA = ("none", "mirror")

# What `patch_size` may be given as. `str` comes first: the command line builds a flag's value with the hint's first
# type, so it hands the text over as it is, for the one parser of a patch (zoo.vision.patch_sides).
PatchSize = str | tuple[int, int, int]


# the settings a call of `zoo predict` / `zoo evaluate` (or a MONAI bundle's run) may change: how the model is
# applied, not what it learnt (overlap and sw_* matter to 3D variants only)
INFERENCE_OPTIONS = ("tta", "mirror_axes", "overlap", "sw_mode", "sw_batch_size")


@dataclass
class MedsegConfig(TrainConfig):
    task: str = "medseg"
    variant: str = "missformer"
    dataset: str = "auto"  # synapse, acdc, decathlon, nnunet, pairs, phantom-nifti, -nnunet, phantom3d; auto: --data
    image_size: int = 96  # slices are zoomed to this square size, a multiple of 32 (the papers use 224)
    epochs: int = 20
    # The training recipe (tasks.medseg.training.recipes): default is the settings below; nnunet sets lr,
    # weight_decay, warmup, poly_power, the loss weights and foreground to nnU-Net's and trains as its trainer does.
    recipe: str = "default"  # default (AdamW, warm-up + poly, Dice + CE), nnunet (nnU-Net's), or own (the variant's)
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
    # Never along the left-right axis: its flip turns the left kidney into a right one without changing its label,
    # and the phantom (like real anatomy) tells left/right organs apart by position only. --tta mirror flips these axes.
    flip_prob: float = 0.0  # probability of a random flip of a training slice/patch along each axis but left-right
    valid_cases: int = 2  # cases held out for validation without folds, when the layout has no validation split
    hd95: str = "papers"  # the convention of the headline HD95: papers (no spacing, their empty rules) or mm
    # Normalised surface Dice's tolerance, the same for every organ: FLARE21 scored liver, kidneys, spleen and pancreas
    # by NSD at 1 mm (JunMa11/FLARE's DSC_NSD_eval.py); FLARE22 used 2-7 mm per organ (e.g. liver 5, aorta 2).
    nsd_tolerance: float = 1.0  # mm; NSD counts the surface within this distance of the other surface
    eval_batch_size: int = 32  # slices per forward pass at evaluation
    # One CPU thread: the models are small, and on a busy 2-core machine two OpenMP threads wait on each other
    # (an epoch took > 5 min with 2 threads next to another job, 15–40 s with one). 0 keeps torch's default.
    num_threads: int = 1
    overlay_slices: int = 4  # test slices shown in overlays.png
    # NIfTI folders (tasks.medseg.preprocessing.nifti_data): the grid and intensities every case is brought to, saved
    # in run.json so that `zoo predict` repeats them on new files. A window starting with a minus sign needs the =
    # form on the command line: --ct-window=-100,200.
    spacing: str | None = None  # NIfTI: target spacing R,A,S mm, e.g. 0.8,0.8,3; None: the training cases' median
    ct_window: str = "-125,275"  # NIfTI CT: HU window scaled to [0, 1], e.g. --ct-window=-100,200; none: nnU-Net's rule
    image_order: int = 1  # NIfTI: image interpolation when resampling, 1 linear or 3 cubic (labels: nearest)
    modality: str | None = None  # NIfTI images/ + labels/: the modality (CT: window; else z-score); None: unknown
    folds: int = 5  # cross-validation folds over the training cases (nnU-Net's split: KFold seed 12345)
    fold: str | None = None  # fold held out, 0 .. folds-1 (zoo cv: all); None: 0 on NIfTI data, else no folds
    splits: str | None = None  # splits_final.json of the folds; None: the data's, the run's, else drawn
    # 3D variants (`zoo list` shows them: swinunetr3d, unetr, dynunet) train on patches of the cases' grid, sampled
    # as nnU-Net does, and predict whole cases through MONAI's sliding window (tasks.medseg.training.patches, .sliding).
    # --patch-size's text "32,64,64" (or a config.json's list) is a tuple (D, H, W) from __post_init__ on
    patch_size: PatchSize | None = None  # 3D: D,H,W voxels of a training patch and an inference window; None: CPU-sized
    patches_per_case: int = 4  # 3D: patches drawn from each training case per epoch
    foreground: float = 0.33  # 3D: share of patches centred on a labelled voxel (nnU-Net's oversampling, 0.33)
    overlap: float = 0.5  # 3D sliding window: the share of a window the next one covers again, in [0, 1)
    sw_mode: str = "gaussian"  # 3D sliding window: gaussian (a window's borders count less) or constant weighting
    sw_batch_size: int = 2  # 3D sliding window: windows per forward pass (inference memory grows with it)
    tta: str = "none"  # test-time augmentation of the final evaluation and zoo predict: none or mirror (2^n flips)
    mirror_axes: str | None = None  # --tta mirror: only these of the axes training flipped (0 D, 1 H, 2 W); None: all

    def __post_init__(self) -> None:
        super().__post_init__()
        check_recipe_name(self.recipe)
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
        if self.patch_size is not None:
            self.patch_size = patch_sides(self.patch_size)
        if isinstance(self.mirror_axes, tuple | list):
            self.mirror_axes = ",".join(str(v) for v in self.mirror_axes)
        _ = self.axes
        check_positive("patches_per_case", self.patches_per_case)
        check_positive("sw_batch_size", self.sw_batch_size)
        check_number("foreground", self.foreground, 0, 1)
        check_overlap(self.overlap)
        check_mode(self.sw_mode)
        if self.tta not in TTA:
            raise unknown_name("test-time augmentation (--tta)", self.tta, TTA)
        if self.hd95 not in CONVENTIONS:
            raise unknown_name("hd95 convention", self.hd95, CONVENTIONS)
        self.nsd_tolerance = check_nsd_tolerance(self.nsd_tolerance)
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

    def to_dict(self) -> dict[str, Any]:
        """The fields in their JSON form, as ``config.json`` and ``run.json`` hold them (the patch as a list), so that
        a config compares equal to the one a run recorded (``zoo cv``'s reuse of a fold, ``--resume``)."""
        values = super().to_dict()
        if self.patch_size is not None:
            values["patch_size"] = list(self.patch_size)
        return values

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
    def axes(self) -> tuple[int, ...] | None:
        """``mirror_axes`` as spatial axes, or None (every axis but the left-right one)."""
        return parse_axes(self.mirror_axes)

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
