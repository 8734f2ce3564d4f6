"""Per-example records of an evaluation: the raw material for paired comparisons.

Every evaluation (training's final one, ``zoo evaluate``, ``zoo predict`` with labels) writes
``predictions/<split>.jsonl``, one JSON object per example, and records in ``predictions/index.json`` a hash
of the evaluated split (its inputs and references), so that two runs can later be checked to have been
scored on the same data before their examples are paired.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

INDEX_FILE = "index.json"


def split_hash(items: Iterable[Any]) -> str:
    """A SHA-256 over the items in order (strings, bytes or arrays; each length-prefixed, so that
    ``["ab", "c"]`` and ``["a", "bc"]`` differ). Arrays hash their dtype, shape and bytes."""
    digest = hashlib.sha256()
    for item in items:
        if isinstance(item, np.ndarray):
            item = f"{item.dtype}{item.shape}".encode() + np.ascontiguousarray(item).tobytes()
        elif isinstance(item, str):
            item = item.encode()
        digest.update(len(item).to_bytes(8, "little"))
        digest.update(item)
    return "sha256:" + digest.hexdigest()


def _plain(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_records(out_dir: str | Path, split: str, records: list[dict[str, Any]], data_hash: str) -> Path:
    """Write ``predictions/<split>.jsonl`` and the split's entry in ``predictions/index.json``."""
    folder = Path(out_dir) / "predictions"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{split}.jsonl"
    with path.open("w") as f:
        for record in records:
            f.write(json.dumps(_plain(record), ensure_ascii=False) + "\n")
    index_path = folder / INDEX_FILE
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    index[split] = {"file": path.name, "examples": len(records), "data_hash": data_hash}
    index_path.write_text(json.dumps(index, indent=2) + "\n")
    return path


def read_records(out_dir: str | Path, split: str) -> tuple[list[dict[str, Any]], str]:
    """The records of ``split`` in a run or evaluation folder, and the hash of the data they were scored on."""
    folder = Path(out_dir) / "predictions"
    index_path = folder / INDEX_FILE
    if not index_path.is_file():
        raise FileNotFoundError(f"{out_dir} has no per-example records ({index_path}); evaluate it with "
                                f"`zoo evaluate {out_dir}` first")
    index = json.loads(index_path.read_text())
    if split not in index:
        raise ValueError(f"{out_dir} has no records of split {split!r} (it has: {', '.join(index) or 'none'})")
    path = folder / index[split]["file"]
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if len(records) != index[split]["examples"]:
        raise ValueError(f"{path} holds {len(records)} records but {index_path} says {index[split]['examples']}; "
                         "it was cut short: evaluate again")
    return records, index[split]["data_hash"]
