"""The zoo: variants of the classic Transformer, each a declared and measured patch on ``core``."""

from zoo import classic  # noqa: F401  (registers the classic model and its core-option variants)
from zoo.registry import Change, Paper, Variant, create, get_variant, list_variants, register

__all__ = ["Change", "Paper", "Variant", "create", "get_variant", "list_variants", "register"]
