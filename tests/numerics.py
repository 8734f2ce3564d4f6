"""How the tests compare two computations of the same numbers (the policy is in tests/README.md).

Two paths that are equal in exact arithmetic (fused vs reference kernel, ours vs timm with copied weights,
cached vs full decoding) differ in float32 by rounding that depends on the CPU's kernels (AVX2, AVX-512,
AMX, the thread count), and a deep model piles it up: a 1e-5 tolerance that holds on one machine fails on
another. So such comparisons run in float64, where rounding is ~1e-16 and a tight tolerance still means
"the same computation", while any real bug (a missing scale, a wrong mask, a swapped weight) is off by
orders of magnitude more.
"""

from __future__ import annotations

import contextlib

import torch
from torch.testing import assert_close

# Two float64 paths: measured 1e-16-2.5e-14 apart on models of a few layers (MISSFormer tiny, Swin, ViT);
# a bug is >= 1e-6. Relative and absolute, since outputs are O(1).
FP64 = {"rtol": 1e-10, "atol": 1e-10}

# A float64 path through core.attention.reference_attention: its softmax runs in float32 whatever the
# input dtype (reported in issue 12; tests/core/test_attention.py::test_reference_kernel_keeps_float64 pins it),
# so the attention weights carry float32 rounding, ~1e-7 of the output per layer (MISSFormer tiny: 7.4e-7
# at outputs of 3.2). Replace by FP64 once that softmax keeps float64.
REFERENCE_FP64 = {"rtol": 1e-5, "atol": 1e-5}


@contextlib.contextmanager
def float64():
    """Build and run in float64: the default dtype inside (models, ``torch.randn``); also a decorator."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def assert_close_fp64(actual, expected, tolerance: dict[str, float] = FP64, **kwargs) -> None:
    """``assert_close`` at a float64 tolerance, refusing tensors that are not float64 (a test that silently
    ran in float32 would fail for the wrong reason, or pass against a tolerance it never met)."""
    for name, value in (("actual", actual), ("expected", expected)):
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64:
            raise TypeError(f"{name} is {value.dtype}: build and run both paths under tests.numerics.float64()")
    assert_close(actual, expected, **{**tolerance, **kwargs})

