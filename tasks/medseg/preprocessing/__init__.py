"""Preprocessing: a case brought to the network's terms — canonical geometry and spacing, intensity by modality,
the dataset fingerprint — and the split into folds."""
