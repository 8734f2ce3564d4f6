"""The package's plumbing, used on every floor: atomic file writes (:mod:`plumbing.atomic`), errors that name the
value and the fix (:mod:`plumbing.errors`), config dataclasses read from JSON (:mod:`plumbing.configs`) and the
Markdown tables every report prints (:mod:`plumbing.tables`).

Nothing here knows about Transformers: ``core/`` is the classic Transformer, and imports these like every other
floor does. This package imports nothing of the project.
"""
