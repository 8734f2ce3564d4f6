"""What a task's comparison tests: :class:`PairedMetric`, one metric compared example by example.

A task runner declares its metrics (:meth:`tasks.engine.task.Task.paired_metrics`); ``zoo compare`` tests them
(:mod:`tasks.compare.paired`, which re-exports the class). The description lives here, on the engine's floor, so that
the engine's interface names no module above it, not even in an annotation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PairedMetric:
    """A metric a comparison tests: where it is read, which way is better, what is reported beside.

    ``stats`` turns a run's records of ``split`` (and its run.json) into per-example statistics ``(n, k)``;
    ``score`` turns their sums over examples ``(B, k)`` into the metric ``(B,)``; ``value`` gives the
    per-example value ``(n,)`` the McNemar / Wilcoxon tests pair (None for a bootstrap-only metric).
    """

    key: str  # the key in results.json ("bleu", "hd95", "liver/dice")
    title: str  # the column title ("BLEU", "long BLEU", "HD95")
    split: str
    higher_is_better: bool
    # reported beside the bootstrap, never deciding: paired_bs (sacreBLEU's p; the resamples are then scored
    # from float32 sums, as sacreBLEU scores them), mcnemar, wilcoxon, or bootstrap (nothing besides)
    extra_test: str
    stats: Callable[[list[dict], dict], np.ndarray]
    score: Callable[[np.ndarray], np.ndarray]
    value: Callable[[np.ndarray], np.ndarray] | None = None
    role: str = "headline"  # headline (ranks the variants), secondary, or per-class
    unit: str = ""  # shown after the title in the report, e.g. "voxels"
