"""The image task's test report: per-class scores, the confusion matrix, and attention maps.

Attention maps come from :func:`core.multihead.record_attention`. The map shown is the last attention
layer's, averaged over heads: with a class token (keys = 1 + a square number of patches), the class
token's attention to each patch (after DeiT's distillation token too: the model's ``extra_tokens``); without
one (keys = a square number), the attention each patch
receives, averaged over the queries. Models whose last recorded attention is not one map per image over
a square grid (a CNN, windowed attention over many windows) get no attention figure.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from core.multihead import record_attention


def class_scores(y_true: np.ndarray, y_pred: np.ndarray, class_names: list[str]) -> tuple[dict[str, Any], list[dict]]:
    """Top-1, macro-F1, the confusion matrix and one row per class (accuracy = recall, precision, F1)."""
    from sklearn.metrics import classification_report, confusion_matrix

    labels = list(range(len(class_names)))
    cm = confusion_matrix(y_true, y_pred, labels=labels)
    report = classification_report(y_true, y_pred, labels=labels, target_names=class_names, output_dict=True,
                                   zero_division=0)
    rows = [{"class": name, "accuracy": report[name]["recall"], "precision": report[name]["precision"],
             "F1": report[name]["f1-score"], "images": int(report[name]["support"])} for name in class_names]
    metrics = {"top1": float((y_true == y_pred).mean()), "macro_f1": float(report["macro avg"]["f1-score"]),
               "per_class": {r["class"]: r["accuracy"] for r in rows}, "confusion_matrix": cm.tolist()}
    return metrics, rows


def most_confused(cm: np.ndarray, class_names: list[str], k: int = 5) -> list[dict[str, Any]]:
    """The ``k`` largest off-diagonal cells of the confusion matrix: true class, predicted class, count."""
    off = np.array(cm, dtype=np.int64)
    np.fill_diagonal(off, 0)
    cells = np.argsort(off, axis=None)[::-1][:k]
    rows = []
    for true, pred in zip(*np.unravel_index(cells, off.shape)):
        if off[true, pred] > 0:
            share = off[true, pred] / max(int(np.sum(cm[true])), 1)
            rows.append({"true": class_names[true], "predicted as": class_names[pred],
                         "images": int(off[true, pred]), "share of the class": float(share)})
    return rows


def plot_confusion(cm: np.ndarray, class_names: list[str], path: Path, title: str = "confusion matrix (test)") -> None:
    """The confusion matrix normalised per true class, with counts written in the cells when they fit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cm = np.asarray(cm)
    k = len(class_names)
    rates = cm / np.maximum(cm.sum(axis=1, keepdims=True), 1)
    size = min(4 + 0.45 * k, 16)
    fig, ax = plt.subplots(figsize=(size, size * 0.85))
    image = ax.imshow(rates, cmap="Blues", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share of the true class")
    if k <= 20:
        ax.set_xticks(range(k), class_names, rotation=45, ha="right")
        ax.set_yticks(range(k), class_names)
        for (i, j), count in np.ndenumerate(cm):
            ax.text(j, i, str(count), ha="center", va="center", fontsize=8,
                    color="white" if rates[i, j] > 0.5 else "black")
    ax.set(xlabel="predicted", ylabel="true", title=title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@torch.no_grad()
def attention_heatmaps(model: nn.Module, images: Tensor) -> Tensor | None:
    """The last attention layer's map over the patch grid for each image, or ``None`` if there is none.

    Shape:
        images (B, C, H, W) float, normalised as in training -> (B, G, G), each map summing to 1.
    """
    with record_attention(model) as maps:
        model(images)
        if not maps:
            return None
        weights = maps[list(maps)[-1]]  # the attention module called last: (B*, heads, Nq, Nk)
    if weights is None or weights.dim() != 4 or weights.shape[0] != len(images):
        return None
    mean = weights.float().mean(dim=1)  # (B, Nq, Nk)
    n_keys = mean.shape[-1]
    prefix = getattr(model, "extra_tokens", 1)  # tokens before the patches: [CLS] (and DeiT's distillation token)
    grid = math.isqrt(max(n_keys - prefix, 0))
    if prefix >= 1 and grid >= 1 and grid * grid == n_keys - prefix and mean.shape[1] == n_keys:
        heat = mean[:, 0, prefix:]  # class token -> patches: (B, G*G)
    else:
        grid = math.isqrt(n_keys)
        if grid * grid != n_keys:
            return None
        heat = mean.mean(dim=1)  # attention each patch receives: (B, G*G)
    heat = heat / heat.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    return heat.reshape(len(images), grid, grid).cpu()


def plot_attention(images: np.ndarray, heat: Tensor, titles: list[str], path: Path) -> None:
    """Each image beside its attention map (upsampled to the image size, nearest) and the overlay.

    Shape:
        images (B, C, H, W) uint8, heat (B, G, G).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b, c, h, w = images.shape
    fig, axes = plt.subplots(b, 3, figsize=(6.3, 2.1 * b), squeeze=False)
    for i in range(b):
        picture = images[i, 0] if c == 1 else images[i].transpose(1, 2, 0)  # (H, W) or (H, W, 3)
        up = torch.nn.functional.interpolate(heat[i][None, None], size=(h, w), mode="nearest")[0, 0].numpy()
        cmap = "gray" if c == 1 else None
        axes[i, 0].imshow(picture, cmap=cmap)
        axes[i, 0].set_title(titles[i], fontsize=8)
        axes[i, 1].imshow(heat[i].numpy(), cmap="inferno")
        axes[i, 1].set_title(f"attention, {heat.shape[1]}×{heat.shape[2]} patches", fontsize=8)
        axes[i, 2].imshow(picture, cmap=cmap)
        axes[i, 2].imshow(up, cmap="inferno", alpha=0.55)
        axes[i, 2].set_title("overlay", fontsize=8)
        for ax in axes[i]:
            ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
