"""The lab: the classic Transformer's well-known pitfalls as runnable, measured experiments.

Each lesson contrasts the right choice with the mistake, on the same seed and budget, measures the effect on
our own models and ends with a plot and a two-line verdict: ``zoo lab LESSON [--quick]``, ``zoo lab --list``.
The mistakes live here, as small switches applied to models built from public ``core``/``zoo`` parts; they are
never options of the core.
"""

from tasks.lab.lesson import LESSONS, LabSettings, Lesson, LessonResult, get_lesson, run_lesson

__all__ = ["LESSONS", "LabSettings", "Lesson", "LessonResult", "get_lesson", "run_lesson"]
