"""Cross-validation by case, in nnU-Net's ``splits_final.json`` format.

A split file is a JSON list with one ``{"train": [case, ...], "val": [case, ...]}`` per fold. :func:`make_folds`
draws it the way nnU-Net v2 does when it has none (``generate_crossval_split``): the case names sorted, then
scikit-learn's ``KFold(n_splits=k, shuffle=True, random_state=seed)``, seed 12345 by default, so that the same
cases give nnU-Net's own folds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from sklearn.model_selection import KFold

from plumbing.atomic import write_text_atomic
from plumbing.errors import check_int

NNUNET_SEED = 12345
"""The seed nnU-Net v2 draws its default 5-fold split with."""
SPLITS_FILE = "splits_final.json"


def make_folds(cases: Iterable[str], k: int = 5, seed: int = NNUNET_SEED) -> list[dict[str, list[str]]]:
    """Split cases into ``k`` folds: each case is validated in exactly one fold and trained on in the others.

    Returns:
        ``[{"train": [...], "val": [...]}, ...]``, one entry per fold, names in sorted order within each list.
    """
    names = _unique(cases, "cases")
    check_int("k", k, 2, hint="a cross-validation needs at least two folds")
    if k > len(names):
        raise ValueError(f"k={k} folds need at least {k} cases, got {len(names)}; lower k")
    check_int("seed", seed, 0)
    names = sorted(names)
    folds = []
    for train, val in KFold(n_splits=k, shuffle=True, random_state=seed).split(names):
        folds.append({"train": [names[i] for i in train], "val": [names[i] for i in val]})
    return folds


def resolve_folds(
    cases: Sequence[str], k: int, splits: str | Path | None = None, *, folders: Sequence[str | Path | None] = (),
) -> tuple[list[dict[str, list[str]]], Path | None]:
    """The folds of a cross-validation over ``cases`` and the file they came from (None: drawn now).

    The first that exists wins: the file ``splits`` (an error when it does not exist), ``splits_final.json`` in each
    of ``folders`` in order (e.g. the data folder, then the run folder), else :func:`make_folds` (nnU-Net's draw).
    A file must split exactly ``cases`` into ``k`` folds.
    """
    check_int("folds", k, 2, hint="a cross-validation needs at least two folds")
    candidates = [Path(splits).expanduser()] if splits is not None else []
    candidates += [Path(f) / SPLITS_FILE for f in folders if f is not None]
    for i, path in enumerate(candidates):
        if not path.is_file():
            if i == 0 and splits is not None:
                raise FileNotFoundError(f"--splits {path} does not exist; give a {SPLITS_FILE} (a list of "
                                        f"{{\"train\": [...], \"val\": [...]}}, one per fold)")
            continue
        folds = read_splits(path, cases)
        if len(folds) != k:
            raise ValueError(f"{path} holds {len(folds)} folds but --folds is {k}; pass --folds {len(folds)} or "
                             f"another split file")
        return folds, path
    if k > len(cases):
        raise ValueError(f"--folds {k} needs at least {k} training cases, the data has {len(cases)}; lower --folds")
    return make_folds(cases, k), None


def write_splits(path: str | Path, folds: Sequence[dict[str, Sequence[str]]]) -> Path:
    """Write ``folds`` as nnU-Net's ``splits_final.json`` (checked first; written to a temporary file and renamed)."""
    path = Path(path)
    check_splits(folds, str(path))
    text = json.dumps([{"train": list(f["train"]), "val": list(f["val"])} for f in folds], indent=4, sort_keys=True)
    return write_text_atomic(path, text + "\n")


def read_splits(path: str | Path, cases: Iterable[str] | None = None) -> list[dict[str, list[str]]]:
    """Read a ``splits_final.json``; with ``cases``, each fold must split exactly those cases.

    Raises:
        FileNotFoundError: no such file. ValueError: not a list of {"train", "val"} lists of case names, a case
        in both lists of a fold or twice in one, a case of ``cases`` missing from a fold, or an unknown case name.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"split file {path} does not exist")
    try:
        folds = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it as JSON ({exc})") from exc
    check_splits(folds, str(path), cases)
    return [{"train": list(f["train"]), "val": list(f["val"])} for f in folds]


def check_splits(folds: object, origin: str, cases: Iterable[str] | None = None) -> None:
    """Raise a ValueError naming ``origin`` (the file) unless ``folds`` is a valid list of folds (see read_splits)."""
    if not isinstance(folds, list) or not folds:
        raise ValueError(f"{origin}: expected a non-empty list of folds {{\"train\": [...], \"val\": [...]}}")
    known = None if cases is None else set(_unique(cases, "cases"))
    for i, fold in enumerate(folds):
        if not isinstance(fold, dict) or set(fold) != {"train", "val"}:
            got = sorted(fold) if isinstance(fold, dict) else type(fold).__name__
            raise ValueError(f"{origin}: fold {i} must have exactly the keys 'train' and 'val', got {got}")
        train = set(_unique(fold["train"], f"{origin}: fold {i} 'train'"))
        val = set(_unique(fold["val"], f"{origin}: fold {i} 'val'"))
        if not val:
            raise ValueError(f"{origin}: fold {i} has no validation case")
        both = sorted(train & val)
        if both:
            raise ValueError(f"{origin}: fold {i} has {both[:5]} in both 'train' and 'val'")
        if known is not None:
            unknown = sorted((train | val) - known)
            if unknown:
                raise ValueError(f"{origin}: fold {i} names unknown case(s) {unknown[:5]} (not in the dataset)")
            missing = sorted(known - train - val)
            if missing:
                raise ValueError(f"{origin}: fold {i} leaves out case(s) {missing[:5]}: each fold must cover every "
                                 f"case")


def _unique(names: object, what: str) -> list[str]:
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise ValueError(f"{what} must be a list of case names, got {type(names).__name__}")
    names = list(names)
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what}: case names must be non-empty strings, got {name!r}")
        if name in seen:
            raise ValueError(f"{what}: case {name!r} appears twice")
        seen.add(name)
    return names
