"""Several runs used as one model: the folds of a cross-validation folder (``zoo cv``: ``OUT/fold_0 .. fold_{k-1}``).

``zoo predict CV_FOLDER`` and ``zoo evaluate CV_FOLDER`` load every fold's run (:func:`load_members`) and hand their
models to the task, which averages their probabilities (nnU-Net predicts its test cases with the ensemble of its
five folds). The folds must be complete — every fold the folder was split into has a finished run — and must agree
on everything but their training cases: the same task, variant config and preprocessing; otherwise the error says
which fold and what differs.
"""

from __future__ import annotations

import json
from pathlib import Path

from tasks.runs.run import Run, load_run

FOLD = "fold_{}"


def fold_count(path: str | Path) -> int | None:
    """The number of folds of the cross-validation folder ``path``, or None when it is not one (a run folder, or a
    folder holding neither ``cv.json`` nor ``splits_final.json`` nor ``fold_*`` folders)."""
    path = Path(path)
    if not path.is_dir() or (path / "run.json").is_file():
        return None
    cv, splits = path / "cv.json", path / "splits_final.json"
    try:
        if cv.is_file():
            return int(json.loads(cv.read_text())["folds"])
        if splits.is_file():
            return len(json.loads(splits.read_text()))
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{cv if cv.is_file() else splits} is unreadable ({error}); it is not a complete "
                         "cross-validation folder") from None
    folds = [p for p in path.glob("fold_*") if p.is_dir()]
    return len(folds) or None


def load_members(path: str | Path, checkpoint: str = "best", device: str = "cpu",
                 task: str | None = None) -> list[Run]:
    """Every fold's run of the cross-validation folder ``path``, in fold order.

    Raises:
        FileNotFoundError: a fold has no finished run (``fold_k/run.json``).
        ValueError: ``path`` is not a cross-validation folder, or two folds differ in what they predict with.
    """
    path = Path(path)
    count = fold_count(path)
    if count is None:
        raise ValueError(f"{path} is not a cross-validation folder (no cv.json, splits_final.json or fold_k/)")
    missing = [k for k in range(count) if not (path / FOLD.format(k) / "run.json").is_file()]
    if missing:
        raise FileNotFoundError(f"{path} has {count} folds but no finished run in "
                                f"{', '.join(FOLD.format(k) for k in missing)}: train them with `zoo cv ... --out "
                                f"{path} --fold K` (or `zoo cv` without --fold), or use one fold's run alone")
    members = [load_run(path / FOLD.format(k), checkpoint, device, task) for k in range(count)]
    first = members[0]
    for k, run in enumerate(members[1:], 1):
        for what, mine, theirs in (("variant", run.variant, first.variant),
                                   ("variant config", run.info.get("variant_config"), first.info.get("variant_config")),
                                   ("preprocessing", _shared(run.preprocessing), _shared(first.preprocessing))):
            if mine != theirs:
                keys = sorted(k2 for k2 in set(mine or {}) | set(theirs or {})
                              if (mine or {}).get(k2) != (theirs or {}).get(k2)) if isinstance(mine, dict) else []
                raise ValueError(f"{path / FOLD.format(k)} differs from {FOLD.format(0)} in its {what}"
                                 f"{' (' + ', '.join(keys) + ')' if keys else ''}: an ensemble averages models that "
                                 "predict the same way; retrain the fold with the others' settings")
    return members


def _shared(preprocessing: dict) -> dict:
    """The preprocessing without what legitimately differs between folds (the held-out cases)."""
    return {k: v for k, v in preprocessing.items() if k != "split"}
