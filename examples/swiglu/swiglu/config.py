"""Config and presets: those of the classic Transformer, with ffn="swiglu" (ffn.py).

The config class is the classic Transformer's own (TransformerConfig). Options of your module go in the
config's ffn_options dict, which reaches its constructor as keywords; e.g. a preset of your own:
``"tiny-wide": {**BASE_PRESETS["tiny"], "ffn": "swiglu", "ffn_options": {"gain": 2.0}}``.
"""

from core.model import PRESETS as BASE_PRESETS
from core.model import TransformerConfig

CONFIG_CLASS = TransformerConfig
DEFAULT_PRESET = "small"

PRESETS: dict[str, dict] = {
    preset: {**values, "ffn": "swiglu"} for preset, values in BASE_PRESETS.items()
}
