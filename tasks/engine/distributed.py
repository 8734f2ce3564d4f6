"""Scale-out on an existing engine: ``torch.distributed`` + ``DistributedDataParallel``.

Under ``torchrun --nproc_per_node N`` every process runs the same training loop. Each global batch is
built identically on every rank (same seed, same epoch) and each rank takes its own shard of the rows,
so N processes train exactly like one process on the combined batch. Losses are normalised by the
*global* number of items, so that DDP's gradient average equals the single-process gradient.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: torch.device) -> DistInfo:
    """Join the process group when launched by torchrun (gloo on CPU, NCCL on CUDA)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def shard(rows: list, info: DistInfo) -> list:
    """This rank's rows of a global batch: ``rows[rank::world]``."""
    return rows[info.rank :: info.world] if info.enabled else rows


def all_reduce_sum(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """Sum a few numbers across ranks (identity in a single process)."""
    if not info.enabled:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def gather_records(records: list, info: DistInfo) -> list:
    """Concatenate every rank's list of evaluation records, in rank order."""
    if not info.enabled:
        return records
    gathered: list[list] = [None] * info.world  # type: ignore[list-item]
    dist.all_gather_object(gathered, records)
    return [r for part in gathered for r in part]


def select_device(name: str) -> torch.device:
    """``auto`` picks CUDA when available, else CPU; otherwise the named device, validated."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} was requested but CUDA is not available here; use --device cpu")
    return device
