"""The files ``zoo lab NAME --exercise`` copies into a learner's folder, one per kind of mistake.

Each holds a lesson's mistake as plain code left in place for the learner to find: a docstring states the
symptom, never the fix. :mod:`tasks.lab.exercise` says which lesson uses which file, and measures a learner's
edited copy beside the core's reference and the lesson's own mistake.
"""
