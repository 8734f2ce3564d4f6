"""The vocabulary of parts: every module that matters is tagged with one part.

Diffs, parameter counts and FLOP counts are grouped by these tags, so that a variant's story
("it replaced the attention part") can be checked against the modules it really builds.
"""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

PARTS: tuple[str, ...] = (
    "embedding",  # token embedding, or a patch/pixel tokenizer
    "position",  # positional scheme
    "attention",  # (multi-head) attention and its kernel
    "ffn",  # position-wise feed-forward network
    "norm",  # normalisation layers
    "stacking",  # depth, hierarchy, merging/expanding, skips, encoder-decoder topology
    "head",  # output projection / classifier
    "decoding",  # generation procedure
    "objective",  # losses and auxiliary losses
)

# Parts that are procedures rather than layers: a change of the generation procedure or of the training loss
# may build no module at all, so it has no parameters or FLOPs of its own to measure (training measures it).
PROCEDURES: tuple[str, ...] = ("decoding", "objective")

_ATTR = "zoo_part"


def check_part(part: str) -> str:
    """Return ``part`` if it is a known part name, else raise a ValueError with a suggestion."""
    if part not in PARTS:
        from plumbing.errors import unknown_name

        raise unknown_name("part", part, PARTS)
    return part


def tag(module: nn.Module, part: str) -> nn.Module:
    """Tag ``module`` (and, by inheritance, its untagged children) with ``part``; returns the module."""
    setattr(module, _ATTR, check_part(part))
    return module


def part_of(module: nn.Module) -> str | None:
    """The part a module is tagged with (instance tag first, then a class-level ``zoo_part``)."""
    return getattr(module, _ATTR, None)


def module_parts(model: nn.Module) -> dict[str, str]:
    """Map every module name to its part: its own tag, else its nearest tagged ancestor's.

    Untagged containers (``nn.ModuleList``, the model itself) belong to ``stacking``: they are the
    wiring that decides depth and topology. A module *explicitly tagged* ``stacking`` (a bridge, a
    decoder added for the topology) owns its whole subtree: the attention and FFN inside it exist only
    because of that topology change.
    """
    owner: dict[str, str] = {}
    owned_by_stacking: set[str] = set()
    for name, module in model.named_modules():
        parent = name.rpartition(".")[0] if name else None
        if parent is not None and parent in owned_by_stacking:
            owner[name] = "stacking"
            owned_by_stacking.add(name)
            continue
        own = part_of(module)
        if own == "stacking":
            owned_by_stacking.add(name)
        owner[name] = own or (owner.get(parent, "stacking") if parent is not None else "stacking")
    return owner


def parameters_by_part(model: nn.Module) -> OrderedDict[str, int]:
    """Exact parameter count per part; the values sum to ``sum(p.numel() for p in model.parameters())``.

    Shared (tied) parameters are counted once, under the first module that owns them.
    """
    owner = module_parts(model)
    counts: OrderedDict[str, int] = OrderedDict((p, 0) for p in PARTS)
    for name, param in model.named_parameters():  # named_parameters() already skips duplicates
        module_name = name.rpartition(".")[0]
        counts[owner.get(module_name, "stacking")] += param.numel()
    return counts


BACKBONE = "backbone"  # --freeze's shorthand for every part but the head (linear probing)


def freeze_parts(model: nn.Module, parts: list[str] | tuple[str, ...]) -> int:
    """Stop the gradients of every parameter whose module belongs to one of ``parts`` (``backbone``: all but
    ``head``); returns how many values were frozen. Shared parameters are frozen where any owner is."""
    wanted = {check_part(p) for p in parts if p != BACKBONE} | ({p for p in PARTS if p != "head"} if BACKBONE in parts
                                                                 else set())
    owner = module_parts(model)
    frozen = 0
    for name, param in model.named_parameters():
        if owner.get(name.rpartition(".")[0], "stacking") in wanted:
            param.requires_grad_(False)
            frozen += param.numel()
    return frozen
