"""Training: what the network learns from — 2D slices or 3D patches with their augmentation —, the recipes it is
trained with (``--recipe``: optimiser, schedule, loss, deep supervision), and the reference baselines trained beside
the zoo's segmenters."""
