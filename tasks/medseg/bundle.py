"""Where a MONAI bundle exported before medseg was folded by stage finds its runner: its ``configs/inference.json``
names ``tasks.medseg.bundle.BundleInference``. Bundles exported now name :mod:`tasks.medseg.inference.bundle`."""

from tasks.medseg.inference.bundle import BundleInference

__all__ = ["BundleInference"]
