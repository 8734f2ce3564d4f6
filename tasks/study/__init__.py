"""``zoo study``: one change measured across tasks, datasets and presets, each side at its own learning rate.

:mod:`~tasks.study.grid` (the cells), :mod:`~tasks.study.plan` (the runs), :mod:`~tasks.study.tune` (learning rates
chosen on validation), :mod:`~tasks.study.study` (the whole study), :mod:`~tasks.study.report` (what it writes).
"""
