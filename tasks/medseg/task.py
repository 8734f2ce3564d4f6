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
the poly decay lr·(1 − t/T)^0.9 the papers use. The augmentation of slice ``i`` in epoch ``e`` is a function of
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

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from tasks.engine.distributed import DistInfo
from tasks.engine.registry import register_task
from tasks.engine.task import Task
from tasks.medseg.config import MedsegConfig
from tasks.medseg.evaluation import paired
from tasks.medseg.evaluation.task_evaluation import MedsegEvaluation
from tasks.medseg.preprocessing.task_data import MedsegData, nifti_options, zoom_slices
from tasks.medseg.reading.volume import SegData, Volume
from tasks.medseg.training.reference import REFERENCE_MODELS
from tasks.medseg.training.task_training import MedsegTraining, warmup_poly
from zoo.analysis.delta import TaskShape

if TYPE_CHECKING:  # annotations only: runs and sweeps sit above the tasks
    from tasks.runs.run import Run
    from tasks.sweeps.launchers import Launch

# MedsegConfig and the last three are re-exported from the modules that define them
__all__ = ["MedsegConfig", "MedsegTask", "nifti_options", "warmup_poly", "zoom_slices"]


@register_task
class MedsegTask(MedsegData, MedsegTraining, MedsegEvaluation, Task):
    """The task, one job per mixin: :class:`~tasks.medseg.preprocessing.task_data.MedsegData` reads and splits the
    data and records its preprocessing, :class:`~tasks.medseg.training.task_training.MedsegTraining` builds and trains
    the model, :class:`~tasks.medseg.evaluation.task_evaluation.MedsegEvaluation` predicts, scores and reports the
    cases."""

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
        """Two folders of NIfTI label maps, scored as nnU-Net's evaluation does
        (:mod:`tasks.medseg.evaluation.folder_eval`)."""
        from tasks.medseg.evaluation.folder_eval import score_folders

        _, out_dir, lines = score_folders(pred, labels, dataset_json, out, chill=chill)
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

    def __init__(self, config: MedsegConfig, device: torch.device, dist: DistInfo) -> None:
        super().__init__(config, device, dist)
        self.volumes: dict[str, list[Volume]] = {}
        self._zoomed_valid: dict[str, Tensor] = {}  # case -> (D, C, S, S), filled by the first validation
        self.in_channels = 1  # image channels C, from the data or from a restored run
        self.nifti_info: dict[str, Any] | None = None  # a NIfTI run's layout, channels and preprocessing (run.json)
        self.split_info: dict[str, Any] | None = None  # the fold used: folds, fold, origin, valid cases
        self.folds: list[dict[str, list[str]]] | None = None  # every fold, written to the run's splits_final.json
        self.patch_size: tuple[int, int, int] | None = None  # a 3D model's patch (D, H, W), from the data or the run
        self.voxel_spacing: tuple[float, float, float] | None = None  # the training cases' median (z, y, x) mm

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
