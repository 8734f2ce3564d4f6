"""The peak memory metrics.json records (tasks.engine.memory): PyTorch's allocator peak on CUDA, the process's
peak RSS elsewhere, in MiB."""

from __future__ import annotations

import resource
import sys

import pytest
import torch

from tasks.engine.memory import peak_memory


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux")
def test_a_cpu_run_records_the_processs_peak_rss_in_mib():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    found = peak_memory(torch.device("cpu"))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert found["kind"] == "process_rss" and before <= found["mb"] <= after


def test_a_cuda_run_records_the_allocators_peak(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: asked.append(device) or 3 * 2**20)
    assert peak_memory(torch.device("cuda", 0)) == {"mb": 3.0, "kind": "cuda_allocated"}
    assert asked == [torch.device("cuda", 0)]
