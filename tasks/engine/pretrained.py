"""``--init-from`` and ``--freeze``: a run that starts from someone's weights and trains only some parts.

The weights are mapped by :func:`zoo.weights.transfer.load_pretrained` (timm's and MONAI's names through the
variant's ``import_weights``; this package's runs and exports as they are), and its per-tensor table is logged
and kept for the run's ``report.md`` and ``run.json``. A load covering under half the model's parameters is
refused unless ``--init-partial`` is given; another variant's run is named in a warning. A resumed run takes its
weights from its checkpoint, not from ``--init-from`` again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from torch import nn

from core.parts import freeze_parts
from zoo.weights.transfer import Transfer, load_pretrained

if TYPE_CHECKING:  # annotations only
    from zoo.registry import Variant

log = logging.getLogger(__name__)


def initialise(model: nn.Module, config, variant: Variant | None) -> Transfer | None:
    """Load ``config.init_from`` into ``model`` (None when the run starts from its own initialisation).

    ``variant``: the run's registration (:attr:`tasks.engine.task.Task.variant`), whose ``import_weights`` maps a
    reference implementation's names; ``None`` for a task's reference model, which loads runs of this package only.
    """
    if not config.init_from:
        return None
    import_weights = variant.import_weights if variant is not None else None
    transfer = load_pretrained(model, config.init_from, import_weights, partial=config.init_partial,
                               variant=config.variant)
    log.info("%s", transfer.summary())
    return transfer


def freeze(model: nn.Module, config) -> int:
    """Freeze ``config.freeze``'s parts; returns the values frozen (refusing a freeze that leaves nothing to train)."""
    from tasks.engine.config import freeze_names

    parts = freeze_names(config.freeze)
    if not parts:
        return 0
    frozen = freeze_parts(model, parts)
    total = sum(p.numel() for p in model.parameters())
    if frozen == total:
        raise ValueError(f"--freeze {config.freeze} freezes all {total:,} parameters: nothing would train; leave "
                         "at least one part (e.g. the head) out")
    log.info("--freeze %s: %s of %s parameters frozen", config.freeze, f"{frozen:,}", f"{total:,}")
    return frozen
