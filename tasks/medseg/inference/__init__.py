"""Inference: whole cases predicted — slice by slice or by sliding window, mirrored, ensembled over folds — their
probabilities and label maps written in each input's own format and grid, and the MONAI bundle export."""
