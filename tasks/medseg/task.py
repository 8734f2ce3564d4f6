"""The medical-segmentation task: 2D slices in, per-case 3D Dice and HD95 per organ out, as the Synapse papers do.

Default data: the generated multi-organ phantom, written in the Synapse layout (see
:mod:`tasks.medseg.reading.phantom`). Real data: ``--data DIR`` holding Synapse (TransUNet's ``train_npz`` /
``test_vol_h5``), ACDC (either layout), or NIfTI as users hold it: a Medical Segmentation Decathlon task folder, an
nnU-Net v2 raw dataset, or ``images/`` + ``labels/`` (see :mod:`tasks.medseg.reading.nifti_layout`). NIfTI cases are
reoriented to RAS, resampled to one spacing (``--spacing``, default the training cases' median), normalised by
modality (``--ct-window`` for CT, a z-score otherwise) and sliced across the axis of the largest spacing; their C
channels are the model's input channels. ``--dataset phantom-nifti`` (or ``phantom-nnunet``) writes the phantom as
such a folder; ``--dataset phantom3d`` its 3D form, smaller cases for 3D models (``--variant dynunet``,
``swinunetr3d``, ``unetr``: patches and a sliding window).

Cross-validation (NIfTI data always, other data with ``--fold``): the training cases are split into ``--folds``
folds as nnU-Net draws them (or as ``splits_final.json`` in the data folder, the run folder or ``--splits`` says),
fold ``--fold`` (default 0) is held out for validation, and the folds used are written to the run's
``splits_final.json``. A NIfTI folder without labelled test cases (``labelsTs/``) is evaluated on the fold's
validation cases, as nnU-Net's cross-validation is. ``zoo cv medseg`` trains every fold (:mod:`tasks.medseg.cv`).

Training: every training slice is zoomed to ``image_size`` (order 3 for the image, order 0 for the labels, as the
papers do), augmented with MONAI (rotation, zoom, intensity shift and scale; flips optional), and scored by
MONAI's Dice + cross-entropy loss with MISSFormer's weights (0.6 Dice, 0.4 CE). AdamW with linear warm-up then
the poly decay lr·(1 − t/T)^0.9 the papers use. That is the ``default`` recipe; ``--recipe nnunet`` trains as nnU-Net's
trainer does (SGD, Nesterov momentum 0.99, poly per epoch, Dice + CE, deep supervision where the network has it) and
``--recipe own`` with the variant's declared recipe (:mod:`tasks.medseg.training.recipes`); the recipe is recorded in
run.json, metrics.json and report.md. The augmentation of slice ``i`` in epoch ``e`` is a function of
(seed, e, i) alone, so resumed and distributed runs see the same images as an uninterrupted one.

3D variants (registered with ``spatial_dims=3``: ``swinunetr3d``, ``unetr``, ``dynunet``) train on patches of the
cases' own grid instead (:mod:`tasks.medseg.training.patches`: ``--patch-size``, a ``--foreground`` share of them
centred on an organ, 3D augmentation, the same loss and schedule) and predict each whole case through MONAI's sliding
window (:mod:`tasks.medseg.inference.sliding`: ``--overlap``, ``--sw-mode``, ``--sw-batch-size``), in validation, the
final evaluation, ``zoo evaluate`` and ``zoo predict`` alike; the patch and the voxel spacing are planned once from
every training case and recorded in run.json. ``--tta mirror`` averages the probabilities over flips along the axes
training flipped (``--flip-prob``: every axis but the left-right one); ``zoo predict`` / ``zoo evaluate`` on a
``zoo cv`` folder average its folds' probabilities.

Evaluation (the papers' protocol): each case is predicted slice by slice at ``image_size``, the arg-max is zoomed
back to the slice size with order 0, and Dice and HD95 are computed per organ on the whole 3D volume, averaged
over cases per organ, then over organs. Two HD95 conventions are reported (see :mod:`tasks.medseg.evaluation.metrics`):
the papers' (what their code gives) and a spacing-aware one in millimetres with explicit empty-mask rules.
Validation uses ``valid_cases`` training cases held out (the layout's own validation split when it has one).

On NIfTI data every final evaluation also maps each predicted label map back onto its file's grid, writes it as
``predictions/<split>/CASE.nii.gz`` (the input's shape, affine and orientation), and scores it against the
original label file as nnU-Net v2 does: ``predictions/<split>/summary.json``
(:mod:`tasks.medseg.evaluation.nnunet_eval`).

Each final evaluation (training's, ``zoo evaluate``) writes ``predictions/<split>.jsonl``, one record per case::

    {"case": "case0001", "papers": {"aorta": {"dice": 0.91, "hd95": 2.2}, ...}, "mm": {...same organs...},
     "voxels": {"aorta": {"pred": 1520, "ref": 1498}, ...}, "spacing": [3.0, 0.78, 0.78] or null}

with a hash of the split's case names, images and labels (see :mod:`tasks.runs.records`); on NIfTI data they are scored
on the canonical (resampled) grid, summary.json on the original one. A run's model is used on new volumes by
:mod:`tasks.medseg.inference.predict`. Synapse and ACDC intensities are used as the files store them (Synapse: [0,
1]); NIfTI intensities go through the modality rules recorded in run.json, which prediction repeats.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from tasks.engine.distributed import DistInfo
from tasks.engine.registry import register_task
from tasks.engine.task import Task
from tasks.medseg.config import MedsegConfig
from tasks.medseg.evaluation import paired
from tasks.medseg.evaluation.evaluator import Evaluator
from tasks.medseg.preprocessing.cases import Cases, nifti_options, zoom_slices
from tasks.medseg.reading.volume import Volume
from tasks.medseg.training.examples import TrainingExamples, trained_flip_axes, warmup_poly
from tasks.medseg.training.recipes import (
    Recipe,
    epoch_poly,
    resolve_recipe,
    supports_deep_supervision,
    uses_deep_supervision,
)
from tasks.medseg.training.reference import REFERENCE_MODELS
from zoo.analysis.delta import TaskShape

if TYPE_CHECKING:  # annotations only: runs and sweeps sit above the tasks
    from tasks.runs.run import Run
    from tasks.sweeps.launchers import Launch

# MedsegConfig and the last three are re-exported from the modules that define them
__all__ = ["MedsegConfig", "MedsegTask", "nifti_options", "warmup_poly", "zoom_slices"]


@register_task
class MedsegTask(Task):
    """The task, composed of one object per pipeline stage, each owning its state (as nnU-Net's folders own theirs):

    - ``cases`` (:class:`~tasks.medseg.preprocessing.cases.Cases`): the data read and split, its classes, channels,
      NIfTI preprocessing and folds, a 3D model's planned patch; recorded in run.json and restored from it;
    - ``training`` (:class:`~tasks.medseg.training.examples.TrainingExamples`): the zoomed training slices or the 3D
      patch sampler, their augmentation and the loss; made by ``setup`` for a run that trains (None otherwise);
    - ``evaluator`` (:class:`~tasks.medseg.evaluation.evaluator.Evaluator`): predicts, scores and reports cases.

    The task itself implements the :class:`~tasks.engine.task.Task` hooks by handing each to its stage, and decides
    what belongs to the model (the variant's spatial dims, its overrides, the schedule).
    """

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
    cost_note = ("Here one input is one slice at --image-size for a 2D model and one patch of --patch-size for a 3D "
                 "one: a case costs its slices, or its sliding-window windows, times that.")
    predict_options = ("labels", "save_probabilities", "members")  # members: a zoo cv folder's runs, ensembled

    @classmethod
    def paired_metrics(cls, info: dict[str, Any]) -> list:
        return paired.paired_metrics(info)

    @classmethod
    def training_recipe(cls, info: dict[str, Any]) -> str:
        """The recipe a finished run trained with, from its run.json ``info`` (``own`` resolved; a run from before
        recipes trained with ``default``): what a comparison's row can show beside the variant."""
        recorded = info.get("preprocessing", {}).get("recipe")
        return recorded["name"] if recorded else info.get("config", {}).get("recipe", "default")

    @classmethod
    def score_folders(cls, pred: str, labels: str, dataset_json: str | None, chill: bool,
                      out: str | None, nsd_tolerance: float | None = None) -> list[str]:
        """Two folders of NIfTI label maps, scored as nnU-Net's evaluation does
        (:mod:`tasks.medseg.evaluation.folder_eval`)."""
        from tasks.medseg.evaluation.folder_eval import score_folders

        _, out_dir, lines = score_folders(pred, labels, dataset_json, out, chill=chill, nsd_tolerance=nsd_tolerance)
        return [*lines, f"outputs in {out_dir}/ (summary.json: nnU-Net's; metrics.json: both HD95 conventions)"]

    @classmethod
    def predict_inputs(cls, run: Run, inputs: list[str], out: str | None, progress: bool = True,
                       **options: Any) -> str:
        """Segment volume files and folders, or a cv folder's ensemble (:mod:`tasks.medseg.inference.predict`)."""
        from tasks.medseg.inference.predict import predict

        return predict(run, inputs, out, progress=progress, **options)

    @classmethod
    def cross_validate(cls, config: MedsegConfig, launch: Launch | None = None) -> tuple[dict[str, Any], list[str]]:
        """Every fold as one sweep, summarised as nnU-Net's cross-validation is (:mod:`tasks.medseg.cv`)."""
        from tasks.medseg.cv import cross_validate

        return cross_validate(config, launch)

    @classmethod
    def plan_folds(cls, config: MedsegConfig, out: Path) -> Path:
        """``zoo compare --folds``: the folds every variant trains, written once to ``out`` (:mod:`tasks.medseg.cv`)."""
        from tasks.medseg.cv import plan_folds

        return plan_folds(config, out)[1]

    def __init__(self, config: MedsegConfig, device: torch.device, dist: DistInfo) -> None:
        super().__init__(config, device, dist)
        self.cases = Cases(config)
        self.training: TrainingExamples | None = None  # made by setup for a run that trains
        self._evaluator: Evaluator | None = None  # made on first use: it needs the variant's spatial dims

    @property
    def config(self) -> MedsegConfig:
        """The run's settings, which every stage reads. Generic code replaces a restored task's config (``zoo
        evaluate --data``, ``zoo predict``'s and a MONAI bundle's inference options): the stages get the new one."""
        return self._config

    @config.setter
    def config(self, config: MedsegConfig) -> None:
        self._config = config
        for stage in (self.__dict__.get("cases"), self.__dict__.get("training"), self.__dict__.get("_evaluator")):
            if stage is not None:
                stage.config = config

    # --- the state the stages own, read through the task by the generic code and the inference modules ------
    @property
    def volumes(self) -> dict[str, list[Volume]]:
        """Split -> its cases (:attr:`Cases.volumes <tasks.medseg.preprocessing.cases.Cases>`)."""
        return self.cases.volumes

    @property
    def class_names(self) -> list[str]:
        """The classes, background included (owned by :attr:`cases`)."""
        return self.cases.class_names

    @property
    def num_classes(self) -> int:
        """Classes including the background (owned by :attr:`cases`)."""
        return self.cases.num_classes

    @property
    def in_channels(self) -> int:
        """Image channels (owned by :attr:`cases`)."""
        return self.cases.in_channels

    @property
    def patch_size(self) -> tuple[int, int, int] | None:
        """A 3D model's planned patch (D, H, W); None for a 2D model (owned by :attr:`cases`)."""
        return self.cases.patch_size

    @property
    def evaluator(self) -> Evaluator:
        """The evaluation stage, made on first use (after the config's variant is known to be 2D or 3D)."""
        if self._evaluator is None:
            self._evaluator = Evaluator(self.config, self.cases, self.spatial_dims, self.device, self.dist)
        return self._evaluator

    @property
    def spatial_dims(self) -> int:
        """3 for a variant registered as 3D (trained on patches, predicted through a sliding window), else 2 (a
        reference model's slices too). Read from the variant the run resolved once (:attr:`Task.variant`)."""
        return 2 if self.variant is None else int(self.variant.spatial_dims)

    @property
    def recipe(self) -> Recipe:
        """The training recipe, from ``--recipe`` (``own``: the variant's declared one)
        (:func:`~tasks.medseg.training.recipes.resolve_recipe`)."""
        return resolve_recipe(self.config, self.variant, self.spatial_dims)

    @property
    def deep_supervision(self) -> bool:
        """Whether the model trains with deep supervision: the recipe uses it and the network has it (a recipe that
        requires it refuses a network without)."""
        return uses_deep_supervision(self.recipe, self.variant)

    # --- setup and using a finished run (see tasks.runs.run) ---------------------------------------------
    def setup(self) -> None:
        """Read the data; a restored run keeps its classes (refusing data with others) and skips the training
        stage (the slices' zoom, augmentation and loss), which evaluation does not need. A run that trains checks
        its recipe against the config and the network first, before any data is read."""
        if self.restored is None:
            _ = self.deep_supervision
        self.cases.load(self.variant if self.spatial_dims == 3 else None, self.restored)
        self.evaluator.forget_zoomed()
        if self.restored is None:
            self.prepare_training()

    def prepare_training(self) -> None:
        """The training stage, from the training cases read by :meth:`setup`."""
        self.training = TrainingExamples(self.config, self.cases.volumes["train"], self.spatial_dims,
                                         self.cases.patch_size, self.trained_flip_axes(), self.recipe,
                                         self.deep_supervision)

    def trained_flip_axes(self) -> tuple[int, ...]:
        """The axes training flips (:func:`~tasks.medseg.training.examples.trained_flip_axes`)."""
        return trained_flip_axes(self.config, self.spatial_dims, self.cases.left_right_axis())

    def preprocessing(self) -> dict[str, Any]:
        """The cases' preprocessing, and the recipe the model was trained with (its settings, for the record)."""
        return {**self.cases.preprocessing(),
                "recipe": {**self.recipe.settings(), "deep_supervision_used": self.deep_supervision}}

    def restore(self, preprocessing: dict[str, Any], run_dir: str | Path) -> None:
        super().restore(preprocessing, run_dir)
        self.cases.restore(preprocessing, run_dir)

    def save_artifacts(self, out_dir: Path) -> None:
        self.cases.save_artifacts(out_dir, self.preprocessing())  # run.json's preprocessing, the recipe included

    # --- model ---------------------------------------------------------------------------------------
    def model_overrides(self) -> dict[str, Any]:
        """The variant's config overrides: ``--model-set`` fields plus the sizes the task and data decide, and
        ``deep_supervision`` for a network that has it (the recipe decides)."""
        decided: dict[str, Any] = {"in_channels": self.in_channels, "num_classes": self.num_classes}
        if self.variant is not None and supports_deep_supervision(self.variant):
            decided["deep_supervision"] = self.deep_supervision
        if self.spatial_dims == 2:
            decided["image_size"] = self.config.image_size
            return self.decided_overrides(decided, "the task (--image-size and the data)")
        fields = {f.name for f in dataclasses.fields(self.variant.config_class)}
        decided.update(patch_size=self.patch_size, image_size=None)
        if "spacing" in fields:  # nnU-Net's rules plan the network from the spacing (dynunet)
            decided["spacing"] = self.cases.voxel_spacing
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

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        """The recipe's optimiser (default: AdamW; nnunet: SGD with Nesterov momentum), one group of every
        parameter."""
        return self.recipe.optimizer_for(model)

    def make_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int):
        """The recipe's schedule: warm-up then poly per step (default), or nnU-Net's poly per epoch."""
        r = self.recipe
        factor = epoch_poly(total_steps, self.config.epochs, r.poly_power) if r.per_epoch else \
            warmup_poly(r.warmup, total_steps, r.poly_power)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)

    # --- training, evaluation: the stages' ----------------------------------------------------------------
    def train_batches(self, epoch: int) -> list[list[tuple[int, int]]]:
        """Shuffled batches of rows ``(index, epoch)`` of a slice (2D) or of a case's patch (3D: ``patches_per_case``
        rows per case): the epoch keys each example's augmentation (and a patch's place)."""
        return self.shuffled_batches(len(self.training), epoch, max(self.dist.world, 2))  # Dice needs 2+ examples

    def loss(self, model: nn.Module, rows: Sequence[tuple[int, int]]) -> tuple[Tensor, float]:
        return self.training.loss(model, rows, self.device)

    def evaluate(self, model: nn.Module, split: str) -> list[dict[str, Any]]:
        return self.evaluator.evaluate(model, split)

    def score(self, records: list[dict[str, Any]], split: str) -> dict[str, float]:
        return self.evaluator.score(records, split)

    def final_report(self, model: nn.Module, out_dir: Path, splits: Sequence[str] | None = None
                     ) -> tuple[dict[str, Any], str]:
        """The evaluator's report, with the recipe the model was trained with: its name in the metrics (a string,
        so that readers of per-split numbers pass over it) and its settings in one line of report.md."""
        metrics, section = self.evaluator.final_report(model, out_dir, splits)
        line = f"Trained with the {self.recipe.describe(self.deep_supervision)}."
        return {**metrics, "recipe": self.recipe.name}, f"{section.rstrip()}\n\n{line}\n" if section else line

    def onnx_graphs(self, model: nn.Module, n: int = 8) -> list:
        return self.evaluator.onnx_graphs(model, n)
