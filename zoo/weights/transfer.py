"""Map a checkpoint onto a model, tensor by tensor, and report every tensor's fate.

Each of the model's tensors is, after the names are mapped:

- **loaded**: the checkpoint has it, same shape;
- **resized**: the checkpoint has it at another size the model knows how to adapt (a learned position table
  on another patch grid is resampled bicubically, as timm does: ``model.resize_state(name, tensor)``; the first
  convolution of RGB weights is adapted to grey or multi-channel images, as timm does);
- **re-initialised**: a head whose classes differ keeps its fresh initialisation;
- **initialised**: absent from the checkpoint (a decoder on top of a pretrained encoder) and kept as built;

and each tensor of the checkpoint that has no place in the model is **unused**. Nothing is skipped without a
row: a shape that differs anywhere else is an error, and a file whose names mostly do not match is refused
(it is another model), naming what did not match.

A load must also cover most of the *model*: one that loads or resizes less than :data:`MIN_SHARE` of the model's
parameter values (a file of only the head loads its 2 tensors and leaves the rest fresh) is refused unless the
caller asks for a partial load (``zoo train --init-partial``, ``zoo.create(..., partial=True)``), as a
pretrained encoder under a new decoder is. A run or export of this package that records another variant is named,
beside the model's, in a warning (a softmax ViT's weights may rightly start a linear-attention ViT) and in any
refusal.

Names: a checkpoint of this package uses the model's own names. A checkpoint of the reference
implementation (timm, MONAI) is renamed by the variant's ``import_weights`` (:class:`zoo.registry.Variant`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from core.parts import module_parts
from zoo.weights.sources import Source, read_source

log = logging.getLogger(__name__)

STATUSES = ("loaded", "resized", "re-initialised", "initialised", "unused")
# the share of the model's parameter values a load must place (loaded or resized) unless a partial load is asked
# for: below half, the checkpoint is not "this model, pretrained" but a piece of one (or a file of another model)
MIN_SHARE = 0.5
PLACED = ("loaded", "resized")
ImportWeights = Callable[[dict[str, Tensor], nn.Module], dict[str, Tensor]]


@dataclass
class Row:
    name: str  # ours, or the checkpoint's for an unused tensor
    status: str
    source_shape: tuple[int, ...] | None
    shape: tuple[int, ...] | None  # ours
    numel: int


@dataclass
class Transfer:
    """What :func:`load_pretrained` did: a row per tensor, and the source it read."""

    source: str
    renamed: bool  # the names went through the variant's import_weights
    rows: list[Row] = field(default_factory=list)
    share: float = 0.0  # of the model's parameter values, the share loaded or resized
    source_variant: str | None = None  # the variant a run or export of this package records, when not the model's

    def counts(self) -> dict[str, int]:
        found = Counter(row.status for row in self.rows)
        return {status: found.get(status, 0) for status in STATUSES}

    def names(self, status: str) -> list[str]:
        return [row.name for row in self.rows if row.status == status]

    def summary(self) -> str:
        counts = ", ".join(f"{n} {status}" for status, n in self.counts().items() if n)
        return f"initialised from {self.source}{self._of_variant}: {counts}; {_percent(self.share)} of the parameters"

    @property
    def _of_variant(self) -> str:
        return f" (a run of {self.source_variant})" if self.source_variant else ""

    def table(self, limit: int = 6) -> str:
        """Markdown: one line per status with its tensors, parameters and (the first ``limit``) names."""
        mapped = " (names mapped from the reference implementation)" if self.renamed else ""
        lines = [f"Initialised from `{self.source}`{self._of_variant}{mapped}: {_percent(self.share)} of the model's "
                 "parameter values loaded or resized", "",
                 "| status | tensors | values | names |", "|---|---|---|---|"]
        for status in STATUSES:
            rows = [row for row in self.rows if row.status == status]
            if not rows:
                continue
            shown = ", ".join(_label(row) for row in rows[:limit]) + (f", … ({len(rows) - limit} more)"
                                                                      if len(rows) > limit else "")
            lines.append(f"| {status} | {len(rows)} | {sum(r.numel for r in rows):,} | {shown} |")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"source": self.source, "renamed": self.renamed, "counts": self.counts(),
                "share": round(self.share, 6), "source_variant": self.source_variant,
                **{status: self.names(status) for status in STATUSES if status != "loaded"}}


def _label(row: Row) -> str:
    if row.status in ("resized", "re-initialised") and row.source_shape is not None:
        return f"`{row.name}` {list(row.source_shape)}→{list(row.shape)}"
    return f"`{row.name}`"


@torch.no_grad()
def load_pretrained(model: nn.Module, source: str | Path | Source, import_weights: ImportWeights | None = None,
                    partial: bool = False, variant: str | None = None) -> Transfer:
    """Load the checkpoint ``source`` into ``model`` in place; returns the per-tensor report.

    Args:
        model: a freshly built model (its initialisation stays where the checkpoint has nothing).
        source: a file or folder (:func:`zoo.weights.sources.read_source`) or a :class:`Source` already read.
        import_weights: renames a reference implementation's checkpoint (timm, MONAI) to the model's names; used
            when the checkpoint's names are mostly not the model's.
        partial: accept a load that places less than :data:`MIN_SHARE` of the model's parameter values (an
            encoder-only checkpoint under a new decoder); it is logged as a warning.
        variant: the model's variant; a run or export of this package that records another is named (warning).

    Raises:
        ValueError: the checkpoint is another model (most names match nothing), a tensor other than a position
            table or the head has another shape (another size of the model: build it with the checkpoint's
            sizes), or, without ``partial``, the load covers less than :data:`MIN_SHARE` of the parameters.
    """
    read = source if isinstance(source, Source) else read_source(source)
    own = model.state_dict()
    state, renamed = read.state, False
    if _share(state, own) < 0.5 and import_weights is not None:
        state, renamed = import_weights(dict(state), model), True
    parts = module_parts(model)
    other = read.variant if read.variant is not None and variant is not None and read.variant != variant else None
    transfer = Transfer(str(read.file), renamed, source_variant=other)
    who = f"{read.describe}, of variant {other!r} where this model is {variant!r}," if other else read.describe
    merged, wrong = dict(own), []
    for name, target in own.items():
        shape = tuple(target.shape)
        if name not in state:
            transfer.rows.append(Row(name, "initialised", None, shape, target.numel()))
            continue
        tensor, part = state[name], parts.get(name.rpartition(".")[0])
        theirs = tuple(tensor.shape)
        if theirs == shape:
            merged[name], status = tensor.to(target.dtype), "loaded"
        elif (resized := _resize(model, name, tensor, target, part)) is not None and tuple(resized.shape) == shape:
            merged[name], status = resized.to(target.dtype), "resized"
        elif part == "head":
            status = "re-initialised"  # other classes: keep the fresh head
        else:
            wrong.append(f"{name} checkpoint {list(theirs)} ours {list(shape)}")
            continue
        transfer.rows.append(Row(name, status, theirs, shape, target.numel()))
    transfer.rows += [Row(name, "unused", tuple(t.shape), None, t.numel()) for name, t in state.items()
                      if name not in own]
    placed = len(state) - len(transfer.names("unused"))
    if placed < 0.5 * len(state) or not transfer.names("loaded"):
        theirs = [n for n in state if n not in own][:5]
        ours = transfer.names("initialised")[:5]
        how = "after mapping the reference implementation's names" if renamed else \
            "(no mapping of a reference implementation's names applies)" if import_weights is None else ""
        raise ValueError(f"{who} does not fit this model: {placed} of its {len(state)} tensors find a "
                         f"place {how}. Its names such as {theirs} match nothing here; ours such as {ours} are "
                         "not in it. Is it a checkpoint of this architecture?")
    if wrong:
        raise ValueError(f"{who} is another size of this model: {'; '.join(wrong[:6])}"
                         f"{' …' if len(wrong) > 6 else ''}. Build the model with the checkpoint's sizes "
                         "(--preset / --model-set, or create(..., **overrides))")
    _check_coverage(model, transfer, parts, who, partial)
    model.load_state_dict(merged)
    return transfer


def _check_coverage(model: nn.Module, transfer: Transfer, parts: dict[str, str], who: str, partial: bool) -> None:
    """Set ``transfer.share``; refuse (unless ``partial``) a load placing under :data:`MIN_SHARE` of the model's
    parameter values, naming the share, the threshold, the biggest parts left fresh and the flag; warn when the
    checkpoint is another variant's or the load is partial. Values, not tensors: the head of cifar's ViT is 2 of its
    56 tensors but 0.238 % of its values (1,290 of 542,090)."""
    params = dict(model.named_parameters())  # tied weights once
    total = sum(p.numel() for p in params.values())
    placed = sum(row.numel for row in transfer.rows if row.status in PLACED and row.name in params)
    transfer.share = placed / max(total, 1)
    fresh: Counter[str] = Counter()
    first: dict[str, str] = {}  # part -> its first tensor left fresh, to show where it is
    for row in transfer.rows:
        if row.status not in PLACED and row.name in params:
            part = parts.get(row.name.rpartition(".")[0], "stacking")
            fresh[part] += row.numel
            first.setdefault(part, row.name)
    missing = ", ".join(f"{part} {n:,} (`{first[part]}`…)" for part, n in fresh.most_common(3))
    loads = f"loads {_percent(transfer.share)} of this model's parameter values ({placed:,} of {total:,})"
    if transfer.share < MIN_SHARE and not partial:
        raise ValueError(f"{who} {loads}, below the {_percent(MIN_SHARE)} a load needs; the biggest parts left at "
                         f"their initialisation: {missing}. Pass --init-partial (zoo train) or partial=True "
                         "(zoo.create, load_pretrained) to load it anyway, as for a pretrained encoder under a new "
                         "decoder")
    if transfer.source_variant:
        log.warning("%s %s: check that this is the start you want", who, loads)
    elif transfer.share < MIN_SHARE:
        log.warning("partial load: %s %s; left at their initialisation: %s", who, loads, missing)


def _percent(share: float) -> str:
    """``0.5`` as ``50 %``, ``1.8e-5`` as ``0.0018 %``: three significant digits, so a tiny share is not 0."""
    return f"{100 * share:.3g} %"


def _share(state: dict[str, Tensor], own: dict[str, Tensor]) -> float:
    """The share of the checkpoint's names the model has."""
    return sum(name in own for name in state) / max(len(state), 1)


def _resize(model: nn.Module, name: str, tensor: Tensor, target: Tensor, part: str | None) -> Tensor | None:
    """``tensor`` adapted to the model's ``name``: by the model's own rule (``resize_state``), or, for the
    embedding's first convolution on images of other channels, by timm's rule (RGB weights summed for one
    channel, repeated and rescaled for more); None when neither applies."""
    resize = getattr(model, "resize_state", None)
    resized = resize(name, tensor) if resize is not None else None
    if resized is not None:
        return resized
    same_but_channels = tensor.dim() == target.dim() == 4 and tensor.shape[0] == target.shape[0] \
        and tensor.shape[2:] == target.shape[2:]
    if part == "embedding" and same_but_channels:
        from timm.models import adapt_input_conv

        if tensor.shape[1] == 3:  # timm's default source: RGB (timm < 1.0.23, which nnU-Net's network package pins,
            return adapt_input_conv(target.shape[1], tensor)  # has no base_chans)   (O, C', kh, kw)
        return adapt_input_conv(target.shape[1], tensor, base_chans=tensor.shape[1])  # (O, C', kh, kw)
    return None
