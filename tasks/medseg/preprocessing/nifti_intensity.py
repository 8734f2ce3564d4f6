"""Intensity normalisation by modality, and the dataset fingerprint, for NIfTI datasets.

Rules, per channel, from the channel's name in dataset.json (``modality`` / ``channel_names``):

- ``CT`` with a window (default -125 .. 275 HU, the Synapse papers'): clip to the window, scale to [0, 1] by
  ``(x - low) / (high - low)`` (fixed bounds, not the volume's min/max, so that 0 and 1 mean the same HU in
  every case);
- ``CT`` with ``ct_window=None``: nnU-Net's CTNormalization: clip to the 0.5 / 99.5 percentiles of the training
  foreground, subtract its mean, divide by its std (all from the fingerprint below);
- ``noNorm``: left as stored;
- anything else (MRI, T1, T2, FLAIR, ADC, unknown, ...): nnU-Net's ZScoreNormalization, per case and channel:
  ``(x - mean) / max(std, 1e-8)`` over the case's **nonzero region** when the dataset is "cropped" (the median,
  over training cases, of the nonzero bounding box's share of the volume is below 3/4: skull-stripped brains with
  zero background), the other voxels staying 0; otherwise over **all voxels**. The nonzero region is nnU-Net's
  ``create_nonzero_mask``: voxels where any channel is nonzero, with holes filled.

The fingerprint follows nnU-Net's dataset fingerprint: intensity statistics per channel over the **foreground**
(voxels labelled > 0 in the original grid, at most :data:`FOREGROUND_SAMPLES` drawn per case), plus what this
package reports besides: shapes, spacings, orientations, class voxel shares.

Shape legend: ``C`` channels, ``D, H, W`` slices, rows, columns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import ndimage

FOREGROUND_SAMPLES = 10_000
"""Foreground voxels per case kept for the intensity statistics (nnU-Net's default per-case sample size)."""
CROPPED_SHARE = 0.75
"""nnU-Net's rule: z-score over the nonzero region when the median nonzero bounding box is below this share."""
_EPS = 1e-8


@dataclass(frozen=True)
class IntensityRule:
    """How one channel is normalised; recorded per channel in the data and the report."""

    channel: int
    name: str  # the channel's name in dataset.json ("CT", "T1", "unknown", ...)
    rule: str  # "ct-window", "ct-percentiles", "zscore" or "none"
    low: float | None = None  # clip bounds of the CT rules
    high: float | None = None
    mean: float | None = None  # ct-percentiles: the foreground statistics used for every case
    std: float | None = None
    voxels: str | None = None  # zscore: "all" or "nonzero" (see the module docstring)

    def describe(self) -> str:
        """One line for logs and reports."""
        if self.rule == "ct-window":
            return f"channel {self.channel} ({self.name}): CT window [{self.low:g}, {self.high:g}] HU scaled to [0, 1]"
        if self.rule == "ct-percentiles":
            return (f"channel {self.channel} ({self.name}): nnU-Net CT: clip to foreground percentiles "
                    f"[{self.low:.4g}, {self.high:.4g}], z-score with foreground mean {self.mean:.4g}, "
                    f"std {self.std:.4g}")
        if self.rule == "none":
            return f"channel {self.channel} ({self.name}): not normalised"
        where = "the nonzero region (any channel != 0, holes filled)" if self.voxels == "nonzero" else "all voxels"
        return f"channel {self.channel} ({self.name}): z-score per case over {where}"

    def to_dict(self) -> dict:
        return asdict(self)


def choose_rules(
    channel_names: Sequence[str], ct_window: tuple[float, float] | None, fingerprint: Mapping,
) -> list[IntensityRule]:
    """The rule of each channel (see the module docstring), given the dataset's fingerprint."""
    if ct_window is not None:
        low, high = (float(v) for v in ct_window)
        if not (np.isfinite([low, high]).all() and low < high):
            raise ValueError(f"ct_window must be (low, high) HU with low < high, got {ct_window!r}")
    cropped = fingerprint["median_nonzero_share"] < CROPPED_SHARE
    rules = []
    for c, name in enumerate(channel_names):
        kind = name.strip().lower()
        if kind == "ct" and ct_window is not None:
            rules.append(IntensityRule(c, name, "ct-window", low=low, high=high))
        elif kind == "ct":
            stats = fingerprint["intensity"][c]
            if not np.isfinite(stats["std"]):
                raise ValueError(f"channel {c} (CT): no foreground voxel in the training labels, so nnU-Net's CT "
                                 f"normalisation has no statistics; pass a ct_window")
            rules.append(IntensityRule(c, name, "ct-percentiles", low=stats["percentile_00_5"],
                                       high=stats["percentile_99_5"], mean=stats["mean"], std=stats["std"]))
        elif kind == "nonorm":
            rules.append(IntensityRule(c, name, "none"))
        else:
            rules.append(IntensityRule(c, name, "zscore", voxels="nonzero" if cropped else "all"))
    return rules


def normalise(image: np.ndarray, rules: Sequence[IntensityRule]) -> np.ndarray:
    """Apply each channel's rule to a ``(C, D, H, W)`` image; returns a new float32 array."""
    out = np.array(image, dtype=np.float32)  # (C, D, H, W)
    mask = None
    for rule in rules:
        x = out[rule.channel]  # (D, H, W), a view
        if rule.rule == "ct-window":
            np.clip(x, rule.low, rule.high, out=x)
            x -= rule.low
            x /= rule.high - rule.low
        elif rule.rule == "ct-percentiles":
            np.clip(x, rule.low, rule.high, out=x)
            x -= rule.mean
            x /= max(rule.std, _EPS)
        elif rule.rule == "zscore":
            if rule.voxels == "nonzero":
                mask = nonzero_mask(image) if mask is None else mask
                values = x[mask]
                x[mask] = (values - values.mean()) / max(float(values.std()), _EPS) if values.size else values
            else:
                x -= x.mean()
                x /= max(float(x.std()), _EPS)
    return out


def nonzero_mask(image: np.ndarray) -> np.ndarray:
    """nnU-Net's nonzero region of a ``(C, ...)`` image: any channel nonzero, holes filled."""
    return ndimage.binary_fill_holes((np.asarray(image) != 0).any(axis=0))


def nonzero_share(image: np.ndarray) -> float:
    """The share of the volume inside the bounding box of the nonzero region (1.0 when nothing is zero)."""
    nonzero = (np.asarray(image) != 0).any(axis=0)  # filling holes never grows the bounding box
    if not nonzero.any():
        return 1.0
    extent = [np.flatnonzero(nonzero.any(axis=tuple(a for a in range(nonzero.ndim) if a != k)))
              for k in range(nonzero.ndim)]
    return float(np.prod([e[-1] - e[0] + 1 for e in extent]) / nonzero.size)


def foreground_sample(image: np.ndarray, label: np.ndarray, seed: int) -> np.ndarray:
    """``(C, N)`` intensities of at most :data:`FOREGROUND_SAMPLES` voxels labelled > 0 (drawn without replacement)."""
    voxels = np.flatnonzero(np.asarray(label).ravel() > 0)
    if voxels.size > FOREGROUND_SAMPLES:
        voxels = np.sort(np.random.default_rng(seed).choice(voxels, FOREGROUND_SAMPLES, replace=False))
    return np.asarray(image, dtype=np.float32).reshape(image.shape[0], -1)[:, voxels]


# ---- the fingerprint ---------------------------------------------------------------------------------------


def fingerprint(
    cases: Sequence[Mapping], channel_names: Sequence[str], class_names: Sequence[str],
    target_spacing: Sequence[float], spacing_rule: str,
) -> dict:
    """The dataset fingerprint from the per-case records of the training cases.

    Args:
        cases: one mapping per training case with ``case``, ``shape`` and ``spacing`` (along R, A, S, before
            resampling), ``orientation`` (as stored), ``foreground`` ((C, N) sample), ``class_counts`` (voxels per
            label value) and ``nonzero_share``.
        target_spacing: the spacing (R, A, S) the cases are resampled to; ``spacing_rule`` says where it came from.
    """
    pooled = [np.concatenate([c["foreground"][k] for c in cases]) for k in range(len(channel_names))]
    counts = np.zeros(len(class_names), dtype=np.int64)
    for c in cases:
        counts[: len(c["class_counts"])] += np.asarray(c["class_counts"], dtype=np.int64)
    total = max(int(counts.sum()), 1)
    spacings = np.array([c["spacing"] for c in cases], dtype=np.float64)
    return {
        "cases": len(cases),
        "shapes": {c["case"]: list(c["shape"]) for c in cases},
        "spacings": {c["case"]: [round(float(s), 4) for s in c["spacing"]] for c in cases},
        "median_spacing": [float(s) for s in np.median(spacings, axis=0)],
        "target_spacing": [float(s) for s in target_spacing],
        "target_spacing_rule": spacing_rule,
        "orientations": dict(sorted(Counter(c["orientation"] for c in cases).items())),
        "median_nonzero_share": float(np.median([c["nonzero_share"] for c in cases])),
        "intensity": [{"channel": k, "name": channel_names[k], **_stats(pooled[k])} for k in range(len(channel_names))],
        "class_voxel_shares": {name: float(counts[k] / total) for k, name in enumerate(class_names)},
    }


def _stats(values: np.ndarray) -> dict:
    if values.size == 0:
        nan = float("nan")
        return {"voxels": 0, "mean": nan, "std": nan, "median": nan, "min": nan, "max": nan,
                "percentile_00_5": nan, "percentile_99_5": nan}
    low, median, high = np.percentile(values, (0.5, 50.0, 99.5))
    return {"voxels": int(values.size), "mean": float(values.mean()), "std": float(values.std()),
            "median": float(median), "min": float(values.min()), "max": float(values.max()),
            "percentile_00_5": float(low), "percentile_99_5": float(high)}


def fingerprint_lines(fp: Mapping, rules: Sequence[IntensityRule] = ()) -> list[str]:
    """Markdown lines for report.md (also what loading logs)."""
    shapes = np.array(list(fp["shapes"].values()))
    lines = [
        f"- cases: {fp['cases']}; shapes (R, A, S voxels, before resampling) from {shapes.min(axis=0).tolist()} to "
        f"{shapes.max(axis=0).tolist()}",
        f"- orientations found: {', '.join(f'{k} x{v}' for k, v in fp['orientations'].items())}",
        f"- spacing (R, A, S) mm: median {_mm(fp['median_spacing'])}; resampled to {_mm(fp['target_spacing'])} "
        f"({fp['target_spacing_rule']})",
    ]
    for s in fp["intensity"]:
        lines.append(f"- channel {s['channel']} ({s['name']}) foreground intensities ({s['voxels']} voxels): mean "
                     f"{s['mean']:.4g}, std {s['std']:.4g}, percentiles 0.5 / 99.5: {s['percentile_00_5']:.4g} / "
                     f"{s['percentile_99_5']:.4g}")
    lines += [f"- normalisation: {rule.describe()}" for rule in rules]
    shares = ", ".join(f"{name} {100 * share:.2f} %" for name, share in fp["class_voxel_shares"].items())
    lines.append(f"- class voxel shares: {shares}")
    return lines


def _mm(values: Sequence[float]) -> str:
    return " x ".join(f"{v:.3g}" for v in values)
