"""The zoo: variants of the classic Transformer, each a declared and measured patch on ``core``."""

from zoo import classic, linear, missformer, moe, swin, vit  # noqa: F401  (importing a variant's package registers it)
from zoo.registry import Change, Paper, Variant, create, get_variant, list_variants, register, tasks_of

__all__ = ["Change", "Paper", "Variant", "create", "get_variant", "list_variants", "register", "tasks_of"]
