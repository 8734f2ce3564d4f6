"""Exports written before medseg was folded by pipeline stage still run."""

from __future__ import annotations

import pydoc

import pytest

from tasks.medseg.inference.bundle import BundleInference


@pytest.mark.parametrize("target", ["tasks.medseg.bundle.BundleInference",  # a bundle exported before the move
                                    "tasks.medseg.inference.bundle.BundleInference"])
def test_a_bundles_runner_target_resolves_to_todays_runner(target):
    """A bundle's configs/inference.json names its runner by dotted path (``_target_``), which MONAI imports."""
    assert pydoc.locate(target) is BundleInference
