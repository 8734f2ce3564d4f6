"""Segmentation's paired metrics for `zoo compare` (:mod:`tasks.compare.paired`): Dice, HD95 and normalised surface
Dice per case and organ, the mean over organs and each organ on its own."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from tasks.compare.paired import PairedMetric


def _organ_stats(field: str, organs: list[str], nsd_tolerance: float | None = None
                 ) -> Callable[[list[dict], dict], np.ndarray]:
    """Per case, each organ's ``field`` (dice/hd95 in the run's headline convention, nsd in the "mm" one, the only
    one scoring it; 0 where not scored) and whether it was scored. Summed over cases and scored by
    :func:`_organ_mean_score` they give the mean over organs of each organ's mean over the cases that score it, NaN
    left out: the runs' metrics.json headline (:func:`tasks.medseg.evaluation.metrics.summarise`), in either HD95
    convention. NSD pairs only runs scored at the same ``nsd_tolerance``."""

    def stats(records: list[dict], info: dict) -> np.ndarray:
        convention = "mm" if field == "nsd" else info["config"].get("hd95", "papers")
        if field == "nsd" and info["config"].get("nsd_tolerance") != nsd_tolerance:
            raise ValueError(f"NSD is compared at {nsd_tolerance} mm, but a run scored it at "
                             f"{info['config'].get('nsd_tolerance')} mm; evaluate the runs at one --nsd-tolerance")
        out = np.zeros((len(records), 2 * len(organs)))  # (n, 2·organs): value, scored of each organ
        for i, r in enumerate(records):
            for j, organ in enumerate(organs):
                value = r[convention].get(organ, {}).get(field)
                if value is not None:  # None: NaN in the record (an organ absent from both masks under "mm")
                    out[i, 2 * j : 2 * j + 2] = value, 1.0
        return out

    return stats


def _organ_mean_score(sums: np.ndarray) -> np.ndarray:
    sums = np.atleast_2d(sums)  # (B, 2·organs)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an organ no case scores is left out; none left: NaN
        return np.nanmean(sums[:, 0::2] / sums[:, 1::2], axis=1)


def _case_mean_value(stats: np.ndarray) -> np.ndarray:
    """A case's mean over the organs it has a score for (NaN: none): the per-case value the Wilcoxon test
    pairs and the per-case plot shows. Its mean over cases is the headline only when every case scores
    every organ (the papers' convention); the headline itself is :func:`_organ_mean_score`."""
    scored = stats[:, 1::2].sum(1)
    return np.where(scored > 0, stats[:, 0::2].sum(1) / np.maximum(scored, 1), np.nan)


def paired_metrics(info: dict) -> list[PairedMetric]:
    """Dice (headline), HD95 and, for runs that scored it (``nsd_tolerance`` in their config), NSD (secondary),
    over the organs and per organ."""
    unit = "voxels" if info["config"].get("hd95", "papers") == "papers" else "mm"
    tolerance = info["config"].get("nsd_tolerance")  # None: a run from before NSD was scored
    organs = info["preprocessing"]["class_names"][1:]
    fields = [("dice", "Dice", True, ""), ("hd95", "HD95", False, unit)]
    if tolerance is not None:
        fields.append(("nsd", "NSD", True, f"within {tolerance:g} mm"))

    def metric(key: str, title: str, field: str, higher: bool, names: list[str], role: str, unit: str
               ) -> PairedMetric:
        return PairedMetric(key, title, "test", higher, "wilcoxon", _organ_stats(field, names, tolerance),
                            _organ_mean_score, _case_mean_value, role=role, unit=unit)

    metrics = [metric(field, title, field, higher, organs, "headline" if field == "dice" else "secondary", unit)
               for field, title, higher, unit in fields]
    for organ in organs:
        metrics += [metric(f"{organ}/{field}", f"{organ} {title}", field, higher, [organ], "per-class", unit)
                    for field, title, higher, unit in fields]
    return metrics
