"""Helpers that turn bad user input into errors that name the value and the fix."""

from __future__ import annotations

import difflib
import importlib
import math
from collections.abc import Iterable


def unknown_name(kind: str, name: object, known: Iterable[str]) -> ValueError:
    """A ValueError for an unknown ``kind`` name, with a "did you mean" suggestion and the known names."""
    known = sorted(known)
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown {kind} {name!r}.{hint} Known: {', '.join(known)}.")


def import_extra(module: str, needed_by: str, extra: str, package: str | None = None):
    """``module`` imported, or a ValueError naming what ``needed_by`` (a flag) needs and the extra that installs it.

    ``package``: the distribution to install, when it is not ``module``'s top-level name.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        package = package or module.split(".")[0]
        raise ValueError(f"{needed_by} needs {package}: pip install -e '.[{extra}]' (or pip install {package})"
                         ) from None


def _bounds(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    """The allowed range as the messages write it: ``> 0``, ``>= 2``, ``<= 180``, ``in [0, 0.5)``."""
    if high is None:
        return f"{'>' if low_open else '>='} {low}"
    if low is None:
        return f"{'<' if high_open else '<='} {high}"
    return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


def _check_bounds(name: str, value: float, low: float | None, high: float | None, low_open: bool,
                  high_open: bool, hint: str) -> None:
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        why = f" ({hint})" if hint else ""
        raise ValueError(f"{name} must be {_bounds(low, high, low_open, high_open)}{why}, got {value}")


def check_int(
    name: str,
    value: object,
    low: int | None = None,
    high: int | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    hint: str = "",
) -> None:
    """Raise unless ``value`` is an int (not a bool) within the bounds; ``hint`` says why the bounds are there."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    _check_bounds(name, value, low, high, low_open, high_open, hint)


def check_number(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    hint: str = "",
) -> None:
    """Raise unless ``value`` is a finite real number (an int or a float, not a bool) within the bounds.

    NaN and infinities are refused by name: ``nan <= 0`` is False, so a bare comparison lets NaN through.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    _check_bounds(name, value, low, high, low_open, high_open, hint)


def check_positive(name: str, value: object, *, allow_zero: bool = False) -> None:
    """Raise if ``value`` is not a positive int (or non-negative when ``allow_zero``)."""
    check_int(name, value, 0, low_open=not allow_zero)


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
