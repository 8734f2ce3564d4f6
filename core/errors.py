"""Helpers that turn bad user input into errors that name the value and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def unknown_name(kind: str, name: object, known: Iterable[str]) -> ValueError:
    """A ValueError for an unknown ``kind`` name, with a "did you mean" suggestion and the known names."""
    known = sorted(known)
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown {kind} {name!r}.{hint} Known: {', '.join(known)}.")


def check_positive(name: str, value: object, *, allow_zero: bool = False) -> None:
    """Raise if ``value`` is not a positive int (or non-negative when ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {value}")


def check_bool(name: str, value: object) -> None:
    """Raise if ``value`` is not a bool (a 0/1 int or a "true" string is not taken for one)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def check_int_tuple(name: str, value: object) -> tuple[int, ...]:
    """``value`` (a non-empty tuple or list of positive ints, one per stage) as a tuple; raise otherwise."""
    if not isinstance(value, (tuple, list)) or not value:
        raise TypeError(f"{name} must be a non-empty tuple of ints (one per stage), got {value!r}")
    for item in value:
        check_positive(f"each entry of {name}", item)
    return tuple(value)


def check_probability(name: str, value: object) -> None:
    """Raise if ``value`` is not a float in [0, 1) (dropout rates, label smoothing)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__} {value!r}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")


def check_choices(owner: str, choices: Iterable[tuple[str, object, Iterable[str]]]) -> None:
    """Raise a "did you mean" ValueError for the first ``(kind, value, known)`` whose value is not known."""
    for kind, value, known in choices:
        if value not in known:
            raise unknown_name(f"{kind} choice of {owner}", value, known)
