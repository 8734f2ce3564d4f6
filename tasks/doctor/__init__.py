"""The doctor on the task layer: batches of a task's data, a run's history, the injectable mistakes, and the
hook of ``zoo train --doctor``. The model-level checks live in :mod:`zoo.analysis.doctor`."""
