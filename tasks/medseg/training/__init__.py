"""Training: what the network learns from — 2D slices or 3D patches with their augmentation — and the reference
baselines trained beside the zoo's segmenters."""
