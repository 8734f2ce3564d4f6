"""The evaluation stage of :class:`~tasks.medseg.task.MedsegTask`, :class:`Evaluator`, the papers' protocol: each
case predicted slice by slice, zoomed back with order 0, scored per organ on the whole 3D volume (both HD95
conventions), and reported (``predictions/<split>.jsonl``, on NIfTI data also nnU-Net's ``summary.json`` on the
original grid). It reads the cases from the preprocessing stage (:class:`~tasks.medseg.preprocessing.cases.Cases`)
and keeps only its caches."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from plumbing.tables import markdown_table
from tasks.engine.distributed import DistInfo, shard
from tasks.medseg.config import MedsegConfig
from tasks.medseg.evaluation.metrics import (
    CONVENTIONS,
    NSD_RULES,
    case_scores_per_convention,
    organ_status,
    summarise,
)
from tasks.medseg.evaluation.nifti_scoring import OriginalGeometryScores
from tasks.medseg.preprocessing.cases import INTENSITY, Cases, model_slices
from tasks.medseg.reading.volume import Volume
from tasks.medseg.training.examples import trained_flip_axes
from tasks.runs.records import split_hash, write_records

log = logging.getLogger(__name__)

SPLIT_TITLES = {"test": "Test results", "valid": "Validation results"}

# Published Synapse figures (avg DSC %, HD95 in the papers' convention), for real-data reports.
ANCHORS = {"MISSFormer": (81.96, 18.20), "Swin-Unet": (79.13, 21.55), "TransUNet": (77.48, 31.69)}


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def channels_first(volume: Volume) -> Tensor:
    """A case's image as a 3D model takes it, float32. Shape: (D, H, W) or (C, D, H, W) -> (C, D, H, W)."""
    return torch.from_numpy(np.asarray(volume.image if volume.image.ndim == 4 else volume.image[None], np.float32))


def nearest_on_slices(array: np.ndarray, size: Sequence[int]) -> np.ndarray:
    """``array`` zoomed along its last two axes to ``size`` with order 0 (nearest neighbour), as the papers zoom a
    2D model's arg-max back to each slice; unchanged when it has that size already. Labels and probabilities go
    through this one function, so that every voxel takes the values of the same model-grid pixel in both.

    Shape:
        (..., S, S) -> (..., H, W) with ``size`` (H, W).
    """
    h, w = (int(n) for n in size)
    s_h, s_w = array.shape[-2:]
    if (h, w) == (s_h, s_w):
        return array
    from scipy.ndimage import zoom

    return zoom(array, (1,) * (array.ndim - 2) + (h / s_h, w / s_w), order=0)


def _axis_names(axes: Sequence[int]) -> str:
    return f"axis {'DHW'[axes[0]]}" if len(axes) == 1 else f"axes {', '.join('DHW'[a] for a in axes)}"


def _trained_note(trained: Sequence[int]) -> str:
    """What training flipped, for the log and the report."""
    if not trained:
        return "the run trained without flips (--flip-prob 0; train with --flip-prob 0.5 to mirror)"
    return f"training flipped {_axis_names(trained)}"


def records_nsd_tolerance(records: list[dict[str, Any]]) -> float | None:
    """The NSD tolerance (mm) the case records were scored at, or None when they hold no NSD (records written
    before NSD was scored); records scored at different tolerances cannot be averaged together."""
    tolerances = {r.get("nsd_tolerance") for r in records}
    if len(tolerances) > 1:
        raise ValueError(f"the case records score NSD at different tolerances ({', '.join(map(repr, tolerances))} "
                         "mm); score them again at one --nsd-tolerance")
    return tolerances.pop() if tolerances else None


def summaries(records: list[dict[str, Any]], class_names: list[str]) -> dict[str, dict]:
    """:func:`~tasks.medseg.evaluation.metrics.summarise` of case records (:meth:`Evaluator.case_record`), per
    convention; the "mm" one with the NSD when the records hold it."""
    index = {name: k for k, name in enumerate(class_names)}
    status = {r["case"]: {index[n]: organ_status(v["pred"] > 0, v["ref"] > 0) for n, v in r["voxels"].items()}
              for r in records}
    assumed = any(r["spacing"] is None for r in records)
    tolerance = records_nsd_tolerance(records)
    out = {}
    for name in CONVENTIONS:
        nsd = tolerance if name == "mm" else None
        fields = ("dice", "hd95") if nsd is None else ("dice", "hd95", "nsd")
        per_case = {r["case"]: {index[n]: tuple(s[f] for f in fields) for n, s in r[name].items()} for r in records}
        out[name] = summarise(per_case, class_names, name, status=status, spacing_assumed=assumed, nsd_tolerance=nsd)
    return out


class Evaluator:
    """The evaluation stage: predicts and scores the cases of ``cases.volumes[split]``, and writes the final report.

    Its own state is two caches: the validation cases zoomed to model input (scored every epoch, zoomed once) and
    the warnings already logged. Everything else it reads from ``cases`` when it needs it, so a restored run's
    classes and a later :meth:`Cases.load <tasks.medseg.preprocessing.cases.Cases.load>` are seen at once.

    Args:
        config: the run's config (``image_size``, evaluation batch, sliding window, ``--tta``, HD95 convention).
        cases: the preprocessing stage whose cases, classes and plan are predicted and scored.
        spatial_dims: 2 (slice by slice) or 3 (sliding window on the case's grid).
        device: where the model runs.
        dist: this rank, of which :meth:`evaluate` scores its shard.
    """

    def __init__(self, config: MedsegConfig, cases: Cases, spatial_dims: int, device: torch.device,
                 dist: DistInfo) -> None:
        self.config, self.cases, self.spatial_dims, self.device, self.dist = config, cases, spatial_dims, device, dist
        self._zoomed_valid: dict[str, Tensor] = {}  # case -> (D, C, S, S), filled by the first validation
        self._warned: set[str] = set()  # messages logged once (mirroring asks for its axes once per case)

    def forget_zoomed(self) -> None:
        """Drop the zoomed validation cases: the cases were read again (:meth:`Cases.load`)."""
        self._zoomed_valid = {}

    @torch.no_grad()
    def zoomed(self, volume: Volume) -> Tensor:
        """The volume's slices zoomed to ``image_size`` as model input ``(D, C, S, S)``; validation cases, scored
        every epoch, are zoomed once and kept (test cases, scored once, are not kept: real ones are large)."""
        if volume.case in self._zoomed_valid:
            return self._zoomed_valid[volume.case]
        slices = torch.from_numpy(model_slices(volume.image, self.config.image_size).astype(np.float32))
        if any(volume is v for v in self.cases.volumes.get("valid", ())):
            self._zoomed_valid[volume.case] = slices
        return slices

    @torch.no_grad()
    def predict_volume(self, model: nn.Module | Sequence[nn.Module], volume: Volume, batch_size: int | None = None,
                       mirror: bool = False) -> np.ndarray:
        """Label volume of ``volume``: a 2D model's predicted slice by slice and its arg-max zoomed back to the slice
        size with order 0 (the papers' way); a 3D model's through MONAI's sliding window on the case's grid.

        ``model`` may be a list (an ensemble: the mean of their probabilities); ``mirror`` averages over flips
        along the mirror axes (see :meth:`predict_probabilities`). ``batch_size`` slices go through a 2D model at
        once (default: ``eval_batch_size``).

        Shape:
            image (D, H, W) or (C, D, H, W) -> labels (D, H, W) uint8.
        """
        if self.spatial_dims == 2 and isinstance(model, nn.Module) and not mirror:  # the papers' path, unchanged
            return self._slice_labels(model, volume, batch_size)
        return self.labels_of(self.predict_probabilities(model, volume, batch_size, mirror), volume)

    def _slice_labels(self, model: nn.Module, volume: Volume, batch_size: int | None) -> np.ndarray:
        d, h, w = volume.shape
        batch = batch_size or self.config.eval_batch_size
        slices = self.zoomed(volume)  # (D, C, S, S)
        preds = []
        for j in range(0, d, batch):
            logits = model(slices[j : j + batch].to(self.device))  # (b, K, S, S)
            preds.append(logits.argmax(1).to(torch.uint8).cpu())
        return nearest_on_slices(torch.cat(preds).numpy(), (h, w))  # (D, S, S) -> (D, H, W)

    @torch.no_grad()
    def predict_probabilities(self, model: nn.Module | Sequence[nn.Module], volume: Volume,
                              batch_size: int | None = None, mirror: bool = False) -> Tensor:
        """Class probabilities of ``volume`` on the model's grid: the slices zoomed to ``image_size`` (2D) or the
        case's own grid (3D, :func:`~tasks.medseg.inference.sliding.window_logits`). ``model`` a list: the mean of the
        members' probabilities; ``mirror``: each member's averaged over every flip along :meth:`mirror_axes`.

        Shape:
            -> (K, D, S, S) for a 2D model, (K, D, H, W) for a 3D one; float32.
        """
        from tasks.medseg.inference.sliding import ensemble_probabilities, mirrored_probabilities

        models = list(model) if isinstance(model, list | tuple) else [model]
        # (C, D, H, W) for a 3D model; the zoomed slices (C, D, S, S) for a 2D one
        image = channels_first(volume) if self.spatial_dims == 3 else self.zoomed(volume).transpose(0, 1)
        axes = self.mirror_axes() if mirror else ()
        members = [lambda x, m=m: mirrored_probabilities(lambda y: self._softmax(m, y, batch_size), x, axes)
                   for m in models]
        return ensemble_probabilities(members, image)

    def _softmax(self, model: nn.Module, image: Tensor, batch_size: int | None) -> Tensor:
        """Softmax of one model on a model-grid volume. Shape: (C, D, S, S) or (C, D, H, W) -> (K, ...)."""
        c = self.config
        if self.spatial_dims == 3:
            from tasks.medseg.inference.sliding import window_logits

            logits = window_logits(model, image, self.cases.patch_size, c.overlap, c.sw_mode,
                                   batch_size or c.sw_batch_size, self.device)  # (K, D, H, W)
            return logits.softmax(0)
        batch, slices = batch_size or c.eval_batch_size, image.transpose(0, 1)  # (D, C, S, S)
        out = [model(slices[j : j + batch].to(self.device)).float().softmax(1).cpu()
               for j in range(0, slices.shape[0], batch)]  # (b, K, S, S) each
        return torch.cat(out).transpose(0, 1)  # (K, D, S, S)

    def onnx_graphs(self, model: nn.Module, n: int = 8) -> list:
        """One graph, on the first test case: a 2D model's slices ``(B, C, S, S)`` (the ``n`` middle ones) or a 3D
        model's patches ``(B, C, D, H, W)`` (its centre, padded to the patch where the case is smaller) ->
        logits ``(B, K, ...)``. The batch is dynamic (the export checks it at another size than it traced); the
        spatial sizes are those inference feeds it (the slice size, the sliding window's patch)."""
        from tasks.engine.export_graphs import batch_graph

        volume = (self.cases.volumes.get("test") or self.cases.volumes["valid"])[0]
        if self.spatial_dims == 2:
            slices = self.zoomed(volume)  # (D, C, S, S)
            start = max(0, (slices.shape[0] - n) // 2)
            return [batch_graph(model, "slices", slices[start : start + n])]
        from monai.transforms import CenterSpatialCrop, SpatialPad

        image = channels_first(volume)  # (C, D, H, W)
        patch = CenterSpatialCrop(self.cases.patch_size)(SpatialPad(self.cases.patch_size)(image))  # (C, pd, ph, pw)
        patch = torch.as_tensor(patch)
        # three different examples: traced at batch 2 and checked at 3, so a graph with its batch baked in fails
        return [batch_graph(model, "patches", torch.stack([patch, patch.flip(-1), patch.flip(-2)]))]

    def labels_of(self, probabilities: Tensor, volume: Volume) -> np.ndarray:
        """The arg-max of probabilities on the model's grid, on the volume's grid (2D: zoomed back with order 0,
        :func:`nearest_on_slices`, so it is the arg-max of :meth:`probabilities_on_volume` voxel for voxel).

        Shape:
            (K, D, S, S) or (K, D, H, W) -> (D, H, W) uint8.
        """
        return nearest_on_slices(probabilities.argmax(0).to(torch.uint8).numpy(), volume.shape[1:])

    def probabilities_on_volume(self, probabilities: Tensor, volume: Volume) -> np.ndarray:
        """Probabilities on the volume's grid, as ``--save-probabilities`` writes them: a 2D model's zoomed back
        with order 0 as its labels are (:func:`nearest_on_slices`; a linear zoom would move the class boundaries
        away from the label map's), so their arg-max is :meth:`labels_of` everywhere.

        Shape:
            (K, D, S, S) or (K, D, H, W) -> (K, D, H, W) float32.
        """
        return nearest_on_slices(probabilities.float().numpy(), volume.shape[1:])

    def trained_flip_axes(self) -> tuple[int, ...]:
        """The axes training flipped (:func:`~tasks.medseg.training.examples.trained_flip_axes`)."""
        return trained_flip_axes(self.config, self.spatial_dims, self.cases.left_right_axis())

    def mirror_axes(self) -> tuple[int, ...]:
        """The axes ``--tta mirror`` flips: those training flipped (:meth:`trained_flip_axes`, as nnU-Net mirrors at
        test time along its training's mirror axes), narrowed to ``--mirror-axes`` when given. An axis training did
        not flip is never mirrored (the model never saw such an image: its flipped predictions are worse, not an
        augmentation); asking for one, or mirroring a run trained without flips, logs a warning saying so."""
        trained, asked = self.trained_flip_axes(), self.config.axes
        if asked is not None:
            asked = tuple(a for a in asked if self.spatial_dims == 3 or a != 0)
            dropped = [a for a in asked if a not in trained]
            if dropped:
                self._warn_once(f"--mirror-axes {self.config.mirror_axes}: {_axis_names(dropped)} not mirrored, "
                                f"training did not flip {'it' if len(dropped) == 1 else 'them'} "
                                f"({_trained_note(trained)})")
            trained = tuple(a for a in asked if a in trained)
        if not trained:
            self._warn_once(f"--tta mirror: nothing to mirror, {_trained_note(self.trained_flip_axes())}; "
                            "predicting without flips")
        return trained

    def _warn_once(self, message: str) -> None:
        """Log ``message`` once per task: mirroring asks for its axes once per case."""
        if message not in self._warned:
            self._warned.add(message)
            log.warning(message)

    def inference_lines(self, members: int = 1) -> list[str]:
        """How the cases were predicted, for the report: the sliding window, the ensemble, the mirroring."""
        c, lines = self.config, []
        if self.spatial_dims == 3:
            lines.append(f"- 3D: MONAI's sliding window of {'×'.join(map(str, self.cases.patch_size))} voxels, overlap "
                         f"{c.overlap}, {c.sw_mode} weighting, {c.sw_batch_size} window(s) per pass")
        if members > 1:
            lines.append(f"- ensemble of {members} models: their softmax probabilities averaged")
        if c.tta == "mirror":
            lines.append(f"- mirroring: {self.mirroring_note()}")
        return lines

    def mirroring_note(self) -> str:
        """What ``--tta mirror`` did, for the report and ``zoo predict``'s summary: the flips and why those."""
        axes = self.mirror_axes()
        what = (f"probabilities averaged over {2 ** len(axes)} flips along {_axis_names(axes)}" if axes else
                "none (--tta mirror asked for it, but there was no axis to mirror)")
        return (f"{what}; mirroring flips only axes training flipped ({_trained_note(self.trained_flip_axes())}; "
                f"never the left-right axis {'DHW'[self.cases.left_right_axis()]})")

    def case_record(self, volume: Volume, pred: np.ndarray) -> dict[str, Any]:
        """The per-example record of one case (a line of ``predictions/<split>.jsonl``): per organ, (Dice, HD95)
        in each convention, under "mm" also the NSD at ``nsd_tolerance`` mm, and the voxel counts of prediction
        and reference; the spacing (z, y, x) in mm or None, and the NSD's tolerance.
        """
        k, names, tolerance = self.cases.num_classes, self.cases.class_names, self.config.nsd_tolerance
        record: dict[str, Any] = {"case": volume.case}
        per_convention = case_scores_per_convention(pred, volume.label, k, volume.spacing, tolerance)  # checks both
        for convention, scores in per_convention.items():
            record[convention] = {names[o]: dict(zip(("dice", "hd95", "nsd"), values)) for o, values in scores.items()}
        counts = np.bincount(pred.ravel(), minlength=k), np.bincount(volume.label.ravel(), minlength=k)  # (K,) each
        record["voxels"] = {names[o]: {"pred": int(counts[0][o]), "ref": int(counts[1][o])} for o in range(1, k)}
        record["spacing"] = list(volume.spacing) if volume.spacing is not None else None
        record["nsd_tolerance"] = tolerance
        return record

    def evaluate(self, model: nn.Module, split: str) -> list[dict[str, Any]]:
        """One record per case of this rank's shard (see :meth:`case_record`)."""
        return [self.case_record(v, self.predict_volume(model, v)) for v in shard(self.cases.volumes[split], self.dist)]

    def summaries(self, records: list[dict[str, Any]]) -> dict[str, dict]:
        """:func:`summaries` of case records with the run's classes."""
        return summaries(records, self.cases.class_names)

    def score(self, records: list[dict[str, Any]], split: str) -> dict[str, float]:
        expected = len(self.cases.volumes[split])
        if len(records) != expected:
            raise ValueError(f"expected one record per case of {split!r} ({expected}), got {len(records)}")
        return self.headline_metrics(self.summaries(records))

    def headline_metrics(self, summaries: dict[str, dict]) -> dict[str, float]:
        """Mean Dice and HD95 in the headline convention, and in the mm one with its NSD (when scored)."""
        head, mm = summaries[self.config.hd95], summaries["mm"]
        metrics = {"dice": head["mean_dice"], "hd95": head["mean_hd95"], "dice_mm": mm["mean_dice"],
                   "hd95_mm": mm["mean_hd95"]}
        if "mean_nsd" in mm:  # its tolerance is the run's --nsd-tolerance, and in the "mm" summary
            metrics["nsd"] = mm["mean_nsd"]
        return metrics

    def final_report(self, model: nn.Module, out_dir: Path, splits: Sequence[str] | None = None
                     ) -> tuple[dict[str, Any], str]:
        """Score ``splits`` case by case, write their records, and report them; overlays of the first split's cases.

        Default splits: test, and with a fold of a dataset that has labelled test cases also the fold's validation
        cases (the cross-validation's figure; :mod:`tasks.medseg.cv` collects it).
        """
        out_dir, metrics, sections = Path(out_dir), {}, [self._data_section()]
        if splits is None:
            info = self.cases.split_info
            cv = info is not None and not info["test_is_valid"] and self.cases.volumes["valid"]
            splits = ("test", "valid") if cv else ("test",)
        for n, split in enumerate(splits):
            metrics[split], section = self._split_report(model, split, out_dir, overlays=n == 0)
            sections.append(section)
        return metrics, "\n".join(sections)

    def _data_section(self) -> str:
        """The dataset (for NIfTI: its fingerprint and preprocessing) and the fold used, as markdown."""
        lines, cases = ["## Data", ""], self.cases
        nifti = getattr(cases.data, "nifti", None)
        if nifti is not None:
            lines += nifti.report_lines()
        else:
            lines.append(f"- {cases.data.name} from {cases.data.source}; intensities "
                         f"{INTENSITY.get(cases.dataset_name, 'as the files store them')}")
        info = cases.split_info
        if info is not None:
            lines.append(f"- fold {info['fold']} of {info['folds']} ({info['origin']}): {len(cases.volumes['train'])} "
                         f"training, {len(cases.volumes['valid'])} validation cases ({', '.join(info['valid'][:8])}"
                         f"{', ...' if len(info['valid']) > 8 else ''}); the run's splits_final.json holds every fold")
            if info["test_is_valid"]:
                lines.append("- no labelled test split (labelsTs/): the fold's validation cases are the evaluation "
                             "split, as in nnU-Net's cross-validation; they also chose the best checkpoint, so the "
                             "figures are optimistic by that choice")
        return "\n".join(lines) + "\n"

    def _split_report(self, model: nn.Module, split: str, out_dir: Path, overlays: bool) -> tuple[dict, str]:
        from tasks.medseg.evaluation.report import case_table, organ_table, pick_overlay_slices, plot_overlays

        c, cases = self.config, self.cases
        data, names, volumes = cases.data, cases.class_names, cases.volumes[split]
        if not volumes:
            raise ValueError(f"the {split} split of {data.source} is empty: nothing to evaluate")
        shown = (c.overlay_slices + 1) // 2 if overlays and c.figures else 0  # cases whose slices are drawn, two each
        nifti = getattr(data, "nifti", None)
        original = OriginalGeometryScores(out_dir / "predictions" / split, cases.num_classes) \
            if nifti is not None and self.dist.is_main else None
        nifti_cases = {c.case: c for c in nifti.train + nifti.test} if original is not None else {}
        records, samples = [], []
        for i, volume in enumerate(volumes):
            pred = self.predict_volume(model, volume, mirror=c.tta == "mirror")  # (D, H, W), scored and drawn
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
        train_slices = sum(v.shape[0] for v in cases.volumes["train"])
        title = SPLIT_TITLES.get(split, split)
        if split == "test" and cases.split_info is not None and cases.split_info["test_is_valid"]:
            title += f" (fold {cases.split_info['fold']}'s validation cases: the data has no labelled test split)"
        grid = "the canonical grid (reoriented, resampled)" if original is not None else "each whole 3D volume"
        how = (f"slices zoomed to {c.image_size}×{c.image_size}. Predicted slice by slice, zoomed back with order 0"
               if self.spatial_dims == 2 else
               f"3D patches of {'×'.join(map(str, cases.patch_size))} voxels. Predicted through a sliding window")
        members = len(model) if isinstance(model, list | tuple) else 1
        lines = [f"## {title}", "",
                 f"{data.name} from {data.source}: {len(cases.volumes['train'])} training cases "
                 f"({train_slices} slices), {len(cases.volumes['valid'])} validation, {len(cases.volumes['test'])} "
                 f"test cases; {cases.num_classes} classes; {cases.in_channels} channel(s); {how}, scored per "
                 f"organ on {grid}, averaged over cases per organ, then over organs.", "",
                 *self.inference_lines(members), "",
                 f"Headline convention: **{c.hd95}** — {CONVENTIONS[c.hd95]}", "",
                 "### Per organ", "", markdown_table(organ_table(head, names)), ""]
        other = "mm" if c.hd95 == "papers" else "papers"
        lines += [f"Other convention, **{other}** — {CONVENTIONS[other]}", "",
                  markdown_table(organ_table(summaries[other], names)), ""]
        if "mean_nsd" in summaries["mm"]:
            lines += [f"NSD in the **mm** table, at {summaries['mm']['nsd_tolerance_mm']:g} mm for every organ — "
                      f"{NSD_RULES}", ""]
        lines += ["### Per case", "", markdown_table(case_table(head)), ""]
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
