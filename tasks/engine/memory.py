"""Peak memory of a training run, as ``metrics.json`` records it beside the training time.

On a CUDA device the figure is PyTorch's own, ``torch.cuda.max_memory_allocated``: the tensors' peak, without
the caching allocator's reserve; elsewhere it is the process's peak resident set size from
``resource.getrusage`` (the whole process: Python, libraries and data included), the only peak a CPU run has.
Both are peaks since the process started (or the device's statistics were last reset), so runs that share one
process (``--launcher serial``) report at least the peak of the runs before them; the local, Ray and submitit
launchers start a process per run.
"""

from __future__ import annotations

import sys

import torch

__all__ = ["peak_memory"]


def peak_memory(device: torch.device) -> dict[str, float | str]:
    """``{"mb": peak in MiB, "kind": "cuda_allocated" | "process_rss"}`` of this process on ``device`` (see the
    module docstring); ``{}`` where neither is available (a platform without ``resource``)."""
    if device.type == "cuda" and torch.cuda.is_available():
        return {"mb": torch.cuda.max_memory_allocated(device) / 2**20, "kind": "cuda_allocated"}
    try:
        import resource
    except ImportError:  # Windows has no getrusage
        return {}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return {"mb": peak / (2**20 if sys.platform == "darwin" else 2**10), "kind": "process_rss"}
