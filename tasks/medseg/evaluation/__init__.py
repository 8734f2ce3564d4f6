"""Evaluation: per-case Dice, HD95 and nnU-Net's ``summary.json``, folders of predictions scored, the paired metrics
``zoo compare`` tests and the run's report."""
