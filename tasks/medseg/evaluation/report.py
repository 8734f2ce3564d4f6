"""The medical segmentation report: per-organ and per-case tables, and overlay figures of chosen slices.

The tables take the output of :func:`tasks.medseg.evaluation.metrics.summarise` and give rows for
:func:`plumbing.tables.markdown_table`: Dice (and NSD) in percent and HD95 with two decimals, as the papers print them,
already formatted as strings so that the table does not round them to four significant digits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# One colour per class, fixed, so that an organ has the same colour in every figure of every run: matplotlib's
# "tab10" without its grey (invisible on a grayscale scan), organ k taking colour k-1; background is not drawn.
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]
OVERLAY_ALPHA = 0.55


def class_colours(num_classes: int) -> np.ndarray:
    """RGBA colour of each class; class 0 (background) is fully transparent.

    Shape:
        -> (K, 4) float in [0, 1].
    """
    from matplotlib.colors import to_rgba

    colours = np.zeros((num_classes, 4))
    for k in range(1, num_classes):
        colours[k] = to_rgba(_PALETTE[(k - 1) % len(_PALETTE)], alpha=OVERLAY_ALPHA)
    return colours


def plot_overlays(samples: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]], class_names: list[str],
                  path: Path | str) -> None:
    """One row per sample: the image, the ground truth over it, the prediction over it; a legend of organs.

    Args:
        samples: ``(title, image2d, gt2d, pred2d)`` per row, e.g. "case0001 slice 12".
        class_names: all K class names, background first; fixes each organ's colour.
        path: where the PNG goes.

    Shape:
        image2d (H, W) float; gt2d, pred2d (H, W) int in 0..K-1.
    """
    if not samples:
        raise ValueError("plot_overlays needs at least one (title, image, gt, pred) sample")
    num_classes = len(class_names)
    checked = []
    for title, image, gt, pred in samples:
        image, gt, pred = np.asarray(image, dtype=float), np.asarray(gt), np.asarray(pred)
        if image.ndim != 2 or gt.shape != image.shape or pred.shape != image.shape:
            raise ValueError(f"sample {title!r}: image, gt and pred must be 2D of one shape, got "
                             f"{image.shape}, {gt.shape}, {pred.shape}")
        for name, labels in (("gt", gt), ("pred", pred)):
            if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
                raise ValueError(f"sample {title!r}: {name} holds labels {labels.min()}..{labels.max()}, outside "
                                 f"0..{num_classes - 1} of class_names")
        checked.append((title, image, gt.astype(np.int64), pred.astype(np.int64)))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    colours = class_colours(num_classes)
    fig, axes = plt.subplots(len(checked), 3, figsize=(8.4, 2.9 * len(checked) + 0.6), squeeze=False,
                             layout="constrained")
    for row, (title, image, gt, pred) in zip(axes, checked):
        for ax, labels, name in zip(row, (None, gt, pred), ("image", "ground truth", "prediction")):
            ax.imshow(image, cmap="gray", interpolation="nearest")
            if labels is not None:
                ax.imshow(colours[labels], interpolation="nearest")  # (H, W, 4), background transparent
            ax.set_title(f"{title}: {name}" if name == "image" else name, fontsize=9)
            ax.axis("off")
    handles = [Patch(facecolor=colours[k, :3], label=class_names[k]) for k in range(1, num_classes)]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pick_overlay_slices(label_volume: np.ndarray, k: int) -> list[int]:
    """The ``k`` slices showing the most organ classes, in slice order; ties go to more organ voxels, then
    to the lower index, so the choice is deterministic.

    Shape:
        label_volume (D, H, W) int labels -> k slice indices (all D when k > D).
    """
    labels = np.asarray(label_volume)
    if labels.ndim != 3 or not np.issubdtype(labels.dtype, np.integer) or labels.dtype == bool:
        raise ValueError(f"label_volume must be a (D, H, W) integer volume, got shape {labels.shape} "
                         f"dtype {labels.dtype}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    if labels.size and labels.min() < 0:
        raise ValueError(f"label_volume holds negative label {labels.min()}")
    depth, num_classes = labels.shape[0], int(labels.max(initial=0)) + 1
    # One bincount over (slice, class) pairs instead of a np.unique per slice.
    pairs = labels.reshape(depth, -1) + num_classes * np.arange(depth)[:, None]
    counts = np.bincount(pairs.ravel(), minlength=depth * num_classes).reshape(depth, num_classes)  # (D, K)
    organs = (counts[:, 1:] > 0).sum(axis=1)  # (D,)
    area = counts[:, 1:].sum(axis=1)  # (D,)
    ranked = sorted(range(depth), key=lambda z: (-organs[z], -area[z], z))
    return sorted(int(z) for z in ranked[:k])


def _percent(value: float | None) -> str | None:
    return None if value is None else f"{100 * value:.2f}"


def _two(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}"


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def nsd_column(summary: dict[str, Any]) -> str | None:
    """The NSD column's title, with its tolerance ("NSD @ 1 mm (%)"; in voxels where the spacing was assumed), or
    None when the summary holds no NSD (the "papers" convention, records scored before NSD)."""
    if "mean_nsd" not in summary:
        return None
    unit = "voxel" if summary["spacing_assumed"] else "mm"
    return f"NSD @ {summary['nsd_tolerance_mm']:g} {unit} (%)"


def _scores(row: dict[str, Any], hd_column: str, nsd: str | None) -> dict[str, str | None]:
    """A summary row's Dice (%), HD95 and, with an NSD column, NSD (%) as the tables print them."""
    cells = {"Dice (%)": _percent(row["dice"]), hd_column: _two(row["hd95"])}
    if nsd is not None:
        cells[nsd] = _percent(row["nsd"])
    return cells


def organ_table(summary: dict[str, Any], class_names: list[str]) -> list[dict[str, Any]]:
    """One row per organ in ``class_names`` order, then the mean over organs (the papers' headline figure).

    The status counts (absent / missed / false positive) appear when ``summarise`` was given them; an NSD column
    when the summary holds NSD (:func:`nsd_column`).
    """
    hd_column, nsd = f"HD95 ({summary['hd95_unit']})", nsd_column(summary)
    by_name = {row["organ"]: row for row in summary["organs"]}
    counted = [s for s in ("absent", "missed", "false positive") if summary["organs"] and s in summary["organs"][0]]
    rows = []
    for name in class_names[1:]:
        if name not in by_name:
            continue
        organ = by_name[name]
        rows.append({"organ": name, **_scores(organ, hd_column, nsd), **{s: organ[s] for s in counted}})
    means = {"dice": summary["mean_dice"], "hd95": summary["mean_hd95"], "nsd": summary.get("mean_nsd")}
    rows.append({"organ": "mean", **_scores(means, hd_column, nsd)})
    return rows


def case_table(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per case (its mean over organs), then the mean over cases."""
    hd_column, nsd = f"HD95 ({summary['hd95_unit']})", nsd_column(summary)
    cases = summary["cases"]
    rows = [{"case": c["case"], **_scores(c, hd_column, nsd)} for c in cases]
    means = {key: _mean([c.get(key) for c in cases]) for key in ("dice", "hd95", "nsd")}
    rows.append({"case": "mean over cases", **_scores(means, hd_column, nsd)})
    return rows
