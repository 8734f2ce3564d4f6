"""Classification's paired metrics for `zoo compare` (:mod:`tasks.compare.paired`): top-1 from per-image
correctness, macro-F1 from per-image confusion cells."""

from __future__ import annotations

import numpy as np

from tasks.compare.paired import PairedMetric, first_column, mean_score


def _correct_stats(records: list[dict], info: dict) -> np.ndarray:
    return np.array([[float(r["label"] == r["prediction"]), 1.0] for r in records])  # (n, 2): right, counted


def _confusion_stats(records: list[dict], info: dict) -> np.ndarray:
    k = len(info["preprocessing"]["class_names"])
    out = np.zeros((len(records), k * k))  # one-hot cell (label, prediction) of each image
    out[np.arange(len(records)), [r["label"] * k + r["prediction"] for r in records]] = 1.0
    return out


def _macro_f1(sums: np.ndarray) -> np.ndarray:
    """Macro-F1 over all K classes from summed confusion cells, as scikit-learn's report with ``labels`` = all
    classes and ``zero_division=0`` (a class neither labelled nor predicted counts as F1 0)."""
    sums = np.atleast_2d(sums)
    k = int(round(sums.shape[1] ** 0.5))
    cm = sums.reshape(-1, k, k)  # (B, true, predicted)
    tp = np.diagonal(cm, axis1=1, axis2=2)  # (B, K)
    denominator = cm.sum(2) + cm.sum(1)  # 2·tp + fp + fn per class
    f1 = np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=denominator > 0)
    return f1.mean(1)


def paired_metrics(info: dict) -> list[PairedMetric]:
    return [PairedMetric("top1", "top-1", "test", True, "mcnemar", _correct_stats, mean_score, first_column),
            PairedMetric("macro_f1", "macro-F1", "test", True, "bootstrap", _confusion_stats, _macro_f1,
                         role="secondary")]
