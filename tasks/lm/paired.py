"""The language model's paired metrics for `zoo compare` (:mod:`tasks.compare.paired`): test loss per token and
bits per character, from each scored window's summed loss, tokens and characters."""

from __future__ import annotations

import math

import numpy as np

from tasks.compare.paired import PairedMetric, mean_score


def _window_stats(records: list[dict], info: dict) -> np.ndarray:
    """Per window: summed loss (nats), tokens scored, characters they decode to, ``(n, 3)``."""
    return np.array([[r["nll"], r["tokens"], r["chars"]] for r in records], dtype=np.float64)


def _loss(sums: np.ndarray) -> np.ndarray:
    return mean_score(np.atleast_2d(sums)[:, :2])  # total nats / tokens


def _bits_per_char(sums: np.ndarray) -> np.ndarray:
    sums = np.atleast_2d(sums)
    return sums[:, 0] / (sums[:, 2] * math.log(2))


def paired_metrics(info: dict) -> list[PairedMetric]:
    return [PairedMetric("loss", "loss", "test", False, "bootstrap", _window_stats, _loss, unit="nats/token"),
            PairedMetric("bits_per_char", "bits/char", "test", False, "bootstrap", _window_stats, _bits_per_char,
                         role="secondary")]
