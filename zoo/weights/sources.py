"""Read a checkpoint into a flat ``{name: tensor}`` dict, whatever wrote it, without executing code.

What a user may point ``--init-from`` / ``pretrained=`` at:

| source | what is read |
|---|---|
| ``*.safetensors`` | the tensors (timm's and Hugging Face's format; ``zoo export``'s) |
| ``*.pth`` / ``*.pt`` / ``*.bin`` | ``torch.load(weights_only=True)``; nested ``state_dict``/``model``/... unwrapped |
| a run folder of this package (``run.json``) | an export's ``model.safetensors``, else ``checkpoints/best.pt`` |
| a ``zoo export --format hf`` folder | its ``model.safetensors`` (``config.json`` says which variant) |
| a timm / Hugging Face folder | ``model.safetensors`` (else ``pytorch_model.bin``) beside timm's ``config.json`` |
| a MONAI bundle folder | ``models/model.pt`` |

DDP's and MONAI's ``module.`` prefix is removed from every name.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

# keys under which training scripts nest the weights (ours: "model"; timm: "state_dict", "state_dict_ema";
# MONAI: "state_dict", "network"), in the order they are tried
_NESTED = ("state_dict", "model", "network", "net", "state_dict_ema", "model_state_dict")
_FOLDER_FILES = ("model.safetensors", "checkpoints/best.pt", "checkpoints/last.pt", "models/model.pt",
                 "pytorch_model.bin")


@dataclass
class Source:
    """Tensors read from a checkpoint, with what is known of who wrote them.

    ``meta``: for a run or export of this package, its ``run.json`` / ``config.json`` (``variant``, ``task``...),
    or for its ``model.safetensors`` alone the ``task`` and ``variant`` in the header; for a timm folder, timm's
    ``config.json``; else empty.
    """

    path: Path
    file: Path  # the file the tensors came from
    state: dict[str, Tensor]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def variant(self) -> str | None:
        """The zoo variant that wrote it, when it is a run or export of this package."""
        return self.meta.get("variant")

    @property
    def describe(self) -> str:
        who = f"a {self.meta['task']} run of {self.variant}" if self.variant and "task" in self.meta else \
            (f"timm's {self.meta['architecture']}" if "architecture" in self.meta else "a checkpoint")
        return f"{self.file} ({who}, {len(self.state)} tensors)"


def read_source(source: str | Path) -> Source:
    """The tensors of ``source`` (a file or folder; see the module docstring). Errors name the path and the fix."""
    path = Path(source).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}; give a .safetensors/.pth file, a run folder of "
                                "`zoo train`/`zoo export`, or a timm/Hugging Face folder")
    meta: dict[str, Any] = {}
    file = path
    if path.is_dir():
        meta = _folder_meta(path)
        found = [path / name for name in _FOLDER_FILES if (path / name).is_file()]
        if not found:
            raise FileNotFoundError(f"{path} holds no weights ({', '.join(_FOLDER_FILES)}); give the folder "
                                    "`zoo train`, `zoo export` or timm's save_pretrained wrote, or the file itself")
        file = found[0]
    state = _read_file(file)
    state = {name.removeprefix("module."): tensor for name, tensor in state.items()}
    return Source(path, file, state, meta or _export_meta(file))


def _export_meta(file: Path) -> dict[str, Any]:
    """The task and variant ``zoo export`` writes into a ``model.safetensors`` header, so that the file alone
    names who wrote it; empty for other files."""
    if file.suffix != ".safetensors":
        return {}
    from safetensors import safe_open

    with safe_open(file, "pt") as opened:
        header = opened.metadata() or {}
    return {key: header[key] for key in ("task", "variant") if key in header}


def _folder_meta(path: Path) -> dict[str, Any]:
    for name in ("run.json", "config.json", "configs/run.json"):
        file = path / name
        if file.is_file():
            try:
                meta = json.loads(file.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise ValueError(f"{file} is corrupt ({error}); export or download the folder again") from None
            return meta if isinstance(meta, dict) else {}
    return {}


def _read_file(file: Path) -> dict[str, Tensor]:
    if file.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(file)
        except (SafetensorError, OSError, ValueError) as error:
            raise ValueError(f"{file} is corrupt or not a safetensors file ({error})") from None
    try:
        loaded = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise ValueError(f"{file} holds more than tensors (weights_only loading refused it: {str(error)[:120]}); "
                         "it is not loaded, as that would run code: convert it to .safetensors") from None
    except (RuntimeError, EOFError, OSError) as error:
        raise ValueError(f"{file} is corrupt or not a PyTorch checkpoint ({str(error)[:120]})") from None
    return _unwrap(loaded, file)


def _unwrap(loaded: Any, file: Path) -> dict[str, Tensor]:
    """The ``{name: tensor}`` dict inside what ``torch.load`` returned."""
    while isinstance(loaded, dict) and not _is_state(loaded):
        inner = next((loaded[k] for k in _NESTED if isinstance(loaded.get(k), dict)), None)
        if inner is None:
            keys = ", ".join(map(str, list(loaded)[:8]))
            raise ValueError(f"{file} is a dict ({keys}) holding no state dict under {', '.join(_NESTED)}; "
                             "save model.state_dict() instead")
        loaded = inner
    if not isinstance(loaded, dict) or not loaded:
        raise ValueError(f"{file} holds a {type(loaded).__name__}, not a state dict of tensors")
    return {str(k): v for k, v in loaded.items() if isinstance(v, Tensor)}


def _is_state(d: dict) -> bool:
    """A state dict: its values are mostly tensors (a checkpoint's optimizer state is nested deeper)."""
    tensors = sum(isinstance(v, Tensor) for v in d.values())
    return tensors > 0 and tensors >= len(d) / 2
