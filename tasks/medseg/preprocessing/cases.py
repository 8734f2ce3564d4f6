"""The preprocessing stage of :class:`~tasks.medseg.task.MedsegTask`, :class:`Cases`: reading a dataset, splitting
it into training, validation and test cases (folds included), planning a 3D model's patch, and what a run records
to read new data as its training did (run.json's preprocessing, ``classes.json``, ``splits_final.json``).

The training (:mod:`tasks.medseg.training.examples`) and evaluation (:mod:`tasks.medseg.evaluation.evaluator`)
stages read the cases from here; none of them keeps a copy."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tasks.medseg.config import MedsegConfig
from tasks.medseg.reading.data import load_medseg
from tasks.medseg.reading.volume import SegData, Volume
from zoo.vision import patch_sides

if TYPE_CHECKING:  # annotations only: the registry is imported where a variant is resolved
    from zoo.registry import Variant

log = logging.getLogger(__name__)

SPLIT_SEED = 0  # held-out validation cases do not move with --seed

# How the loaders hand intensities to the model: as the files store them, no normalisation by the task.
INTENSITY = {
    "synapse": "as stored: TransUNet's preprocessing, CT clipped to [-125, 275] HU and scaled to [0, 1] per volume",
    "acdc": "as stored by the ACDC layout read (its own per-volume normalisation); no normalisation by the task",
}
INTENSITY["phantom"] = INTENSITY["synapse"]  # the phantom goes through the Synapse preprocessing
INTENSITY_RANGE = {"synapse": (0.0, 1.0), "phantom": (0.0, 1.0)}  # the range those files hold, when fixed
CANONICAL = ("NIfTI: reoriented to RAS, resampled to nifti.preprocessing.spacing (R, A, S mm; image linear or cubic, "
             "label nearest), sliced across the RAS axis of the largest spacing (nifti.slice_axis), rows and columns "
             "the other two in S, A, R order; intensities by nifti.preprocessing.rules")


def nifti_options(c: MedsegConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`~tasks.medseg.preprocessing.nifti_data.load_nifti_dataset` that the config
    sets."""
    return {"spacing": c.target_spacing, "ct_window": c.window, "image_order": c.image_order, "modality": c.modality}


def nifti_info(nifti: Any) -> dict[str, Any]:
    """What a NIfTI run records in run.json (``preprocessing["nifti"]``) to read new files as its training did."""
    return {"layout": nifti.layout, "channel_names": list(nifti.channel_names),
            "preprocessing": nifti.preprocessing.to_dict(), "slice_axis": nifti.preprocessing.slice_axis}


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


class Cases:
    """The preprocessing stage of :class:`~tasks.medseg.task.MedsegTask` (nnU-Net's plans and splits, in one object):
    the data read, its cases split into training, validation and test (a fold of them when the run has folds), the
    classes, channels and NIfTI preprocessing they were read with and, for a 3D model, the patch and voxel spacing
    planned from the training cases.

    It owns this state: a new run fills it from the data (:meth:`load`), a finished one from run.json
    (:meth:`restore`, then :meth:`load` to evaluate on data, which keeps the run's classes and preprocessing). What
    it fills is recorded by :meth:`preprocessing` (run.json) and :meth:`save_artifacts`.
    """

    def __init__(self, config: MedsegConfig) -> None:
        self.config = config
        self.data: SegData | None = None  # the data read by load (None: a restored run that has read none)
        self.volumes: dict[str, list[Volume]] = {}  # split -> its cases
        self.class_names: list[str] = []  # including the background, from the data or from a restored run
        self.dataset_name = ""  # SegData.name (phantom, synapse, acdc, a NIfTI dataset's), from the data or the run
        self.in_channels = 1  # image channels C, from the data or from a restored run
        self.nifti_info: dict[str, Any] | None = None  # a NIfTI run's layout, channels and preprocessing (run.json)
        self.split_info: dict[str, Any] | None = None  # the fold used: folds, fold, origin, valid cases
        self.folds: list[dict[str, list[str]]] | None = None  # every fold, written to the run's splits_final.json
        # a 3D model's plan (None for a 2D model's run): its patch (D, H, W) and the training cases' median (z, y, x) mm
        self.patch_size: tuple[int, int, int] | None = None
        self.voxel_spacing: tuple[float, float, float] | None = None

    @property
    def num_classes(self) -> int:
        """Classes including the background."""
        return len(self.class_names)

    def load(self, plan_for: Variant | None, restored: dict[str, Any] | None) -> None:
        """Read the data and split it into ``volumes``. ``restored``: a finished run's preprocessing (run.json), whose
        classes are kept (data with others is refused) and whose split is reused; otherwise the classes, channels and
        NIfTI preprocessing are taken from the data and, for ``plan_for`` (a 3D variant; None for a 2D model), a patch
        and voxel spacing are planned from the training cases."""
        c = self.config
        if c.fold == "all":
            raise ValueError("--fold all trains every fold: run `zoo cv medseg` with the same options (zoo train "
                             f"trains one fold, 0 .. {c.folds - 1})")
        self.data = load_medseg(c.data, c.dataset, **self._nifti_options(restored))
        if restored is not None:
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
        train, valid, test = self._split(self.data, restored)
        self.volumes = {"train": train, "valid": valid, "test": test}
        if plan_for is not None and restored is None:
            self.plan_patches(self.data.train, plan_for)

    def plan_patches(self, train: list[Volume], variant: Variant) -> None:
        """A 3D model's patch (``--patch-size``, else sized for a CPU from the training cases) and voxel spacing,
        planned once from every training case of the data, as nnU-Net plans, so that the folds of a
        cross-validation agree (their ensemble needs it)."""
        from tasks.medseg.training.patches import check_patch, default_patch

        # What the network divides a side by (multiple) and needs at least (min_side), from the variant the run
        # resolved once. A config of the preset, not its class: a ClassVar of MONAI's networks, but MISSFormer3D's
        # multiple is a property of its stages (stride 4, halved once per further stage).
        needs = variant.config(self.config.preset)
        multiple, min_side = max(16, int(getattr(needs, "multiple", 16))), int(getattr(needs, "min_side", 16))
        shapes = [v.shape for v in train]
        self.patch_size = self.config.patch_size or default_patch(shapes, multiple=multiple, min_side=min_side)
        check_patch(self.patch_size, shapes, multiple)
        spacings = [v.spacing for v in train if v.spacing is not None]
        median = np.median(np.asarray(spacings, dtype=float), axis=0) if spacings else np.ones(3)
        self.voxel_spacing = tuple(round(float(x), 4) for x in median)

    def left_right_axis(self) -> int:
        """The axis of the (D, H, W) grid that runs from left to right: W for the Synapse, ACDC and phantom layouts
        and for NIfTI cases sliced across S or A (columns run along R), D for NIfTI cases sliced across R."""
        if self.nifti_info is not None and self.nifti_info.get("slice_axis") == "R":
            return 0
        return 2

    def _nifti_options(self, restored: dict[str, Any] | None) -> dict[str, Any]:
        """The keyword arguments of ``load_nifti_dataset`` (used only for NIfTI folders): the config's, or for a
        restored NIfTI run its saved preprocessing and classes, so that other data gets exactly the training's."""
        options = nifti_options(self.config)
        if restored is not None and self.nifti_info is not None:
            from tasks.medseg.preprocessing.nifti_data import Preprocessing

            options["preprocessing"] = Preprocessing.from_dict(self.nifti_info["preprocessing"])
            options["class_names"] = self.class_names  # an images/ + labels/ folder does not name its classes
        return options

    def _split(self, data: SegData, restored: dict[str, Any] | None
               ) -> tuple[list[Volume], list[Volume], list[Volume]]:
        """(training, validation, test cases): a fold of the training cases (NIfTI data, or ``--fold``), else the
        layout's validation split, else ``valid_cases`` held out; test: the labelled test cases, or for a NIfTI
        folder without any the fold's validation cases."""
        c = self.config
        if restored is not None and restored.get("split") is not None:
            return self._restored_fold(data, restored["split"])
        if (c.fold is not None or data.nifti is not None) and restored is None:
            return self._fold(data)
        train, valid = self._held_out(data)
        return train, valid, data.test or train + valid  # a restored run on a folder without a test split: all

    def _fold(self, data: SegData) -> tuple[list[Volume], list[Volume], list[Volume]]:
        from tasks.medseg.preprocessing.folds import resolve_folds

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

    # --- artefacts, and using a finished run (see tasks.runs.run) ------------------------------------------
    def save_artifacts(self, out_dir: Path, preprocessing: dict[str, Any] | None = None) -> None:
        """``classes.json``: the preprocessing (as in run.json: ``preprocessing``, the task's, default the cases')
        plus the data folder and the cases of each split; ``splits_final.json``: every fold, when the run trained on
        one (nnU-Net's format)."""
        info = {**(self.preprocessing() if preprocessing is None else preprocessing), "source": self.data.source,
                **{f"{split}_cases": [v.case for v in self.volumes[split]] for split in ("train", "valid", "test")}}
        (Path(out_dir) / "classes.json").write_text(json.dumps(info, indent=2) + "\n")
        if self.folds is not None:
            from tasks.medseg.preprocessing.folds import SPLITS_FILE, write_splits

            write_splits(Path(out_dir) / SPLITS_FILE, self.folds)

    def preprocessing(self) -> dict[str, Any]:
        """What turns a volume into the model's input and its output back into labels (run.json)."""
        pre = {"dataset": self.dataset_name, "class_names": list(self.class_names), "num_classes": self.num_classes,
               "in_channels": self.in_channels, "slice_axis": 0, "image_size": self.config.image_size,
               "resize": "each (H, W) slice zoomed to image_size × image_size (spline order 3); the arg-max "
                         "zoomed back to (H, W) with order 0",
               "intensity": INTENSITY.get(self.dataset_name, "as the files store them"),
               "intensity_range": INTENSITY_RANGE.get(self.dataset_name)}
        if self.nifti_info is not None:
            from tasks.medseg.preprocessing.nifti_intensity import IntensityRule

            rules = [IntensityRule(**r) for r in self.nifti_info["preprocessing"]["rules"]]
            pre.update(intensity="; ".join(r.describe() for r in rules), intensity_range=None, nifti=self.nifti_info,
                       resize=f"{CANONICAL}; then {pre['resize']}")
        if self.patch_size is not None:  # planned for a 3D model
            pre.update(spatial_dims=3, patch_size=list(self.patch_size), voxel_spacing=list(self.voxel_spacing),
                       resize="none: the model sees patches of each case's own grid; whole cases are predicted "
                              "through MONAI's sliding window of the patch size")
            if self.nifti_info is not None:
                pre["resize"] = f"{CANONICAL}; then {pre['resize']}"
        if self.split_info is not None:
            pre["split"] = {k: v for k, v in self.split_info.items() if k != "test_is_valid"}
        return pre

    def restore(self, preprocessing: dict[str, Any], run_dir: str | Path) -> None:
        """Take the classes, channels, NIfTI preprocessing and 3D plan of a finished run from its ``preprocessing``
        (run.json in ``run_dir``, named in errors), so that its model is rebuilt without reading its data."""
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
        if preprocessing.get("spatial_dims") == 3:
            self.patch_size = patch_sides(preprocessing["patch_size"])  # a list in run.json
            self.voxel_spacing = tuple(preprocessing["voxel_spacing"])
