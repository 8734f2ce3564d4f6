"""Config dataclasses from JSON: what ``run.json`` and an exported ``config.json`` hold."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any


def config_from_dict(config_class: type, values: dict[str, Any]) -> Any:
    """Rebuild a config dataclass from its JSON form (JSON turns tuples into lists; turn them back)."""
    hints = typing.get_type_hints(config_class)
    known = {f.name for f in dataclasses.fields(config_class) if f.init}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"fields {unknown} are not fields of {config_class.__name__}")
    return config_class(**{k: _tuples(v, hints.get(k)) for k, v in values.items()})


def _tuples(value: Any, hint: Any) -> Any:
    if not isinstance(value, list) or hint is None:
        return value
    kinds = [hint, *typing.get_args(hint)]
    if any(k is tuple or typing.get_origin(k) is tuple for k in kinds):
        return tuple(_tuples(v, None) if not isinstance(v, list) else tuple(v) for v in value)
    return value
