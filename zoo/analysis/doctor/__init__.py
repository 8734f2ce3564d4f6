"""The doctor: the debugging chain of "what to check when a Transformer trains badly", as measurements.

``zoo.analysis.doctor.examine(model, batch)`` runs the checks on any model built from the package's parts and returns a
:class:`Diagnosis`: ranked findings (problem, evidence with the number and where, likely cause, fix) and every
number each check measured. ``zoo doctor`` (``tasks/cli/doctor.py``) runs it on a finished run or on a
fresh variant, and ``zoo train --doctor`` before the first step and after every epoch.

The checks, each in its own module: attention saturation and the score scale (:mod:`zoo.analysis.doctor.attention`),
mask
leaks by perturbation (:mod:`zoo.analysis.doctor.leaks`), the position signal (:mod:`zoo.analysis.doctor.position`),
initialisation, activations and gradients by depth (:mod:`zoo.analysis.doctor.depth`), the training curve
(:mod:`zoo.analysis.doctor.curve`) and the train/inference gap of generation (:mod:`zoo.analysis.doctor.generation`).
"""

from zoo.analysis.doctor.batch import Batch, seq2seq_batch
from zoo.analysis.doctor.curve import curve_checks
from zoo.analysis.doctor.examine import examine
from zoo.analysis.doctor.findings import CHECKS, CheckResult, Diagnosis, Finding
from zoo.analysis.doctor.plateau import entropy

__all__ = ["CHECKS", "Batch", "CheckResult", "Diagnosis", "Finding", "curve_checks", "entropy", "examine",
           "seq2seq_batch"]
