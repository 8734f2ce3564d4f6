"""Side-by-side CPU benchmark of our MISSFormer against MONAI's SwinUNETR and the official code, in one process.

Run: ``.venv/bin/python benchmarks/bench_missformer.py [--quick] [--threads N] [--rounds R] [--batch B]
[--clock wall|cpu] [--official DIR]``.

What is measured (float32, CPU, train mode): one training step — forward, pixel-wise cross-entropy,
backward, AdamW step — on a fixed batch of B (8) random 1×96×96 slices with 9 classes, the medseg task's
input:

* ours: ``zoo.missformer`` ``cpu`` preset (the medseg task's default: widths 32/64/128/160, depths 2/2/2/2,
  heads 1/2/4/5, reductions 8/4/2/1, bridge depth 2, decoder depth 1);
* peer: ``monai.networks.nets.SwinUNETR(in_channels=1, out_channels=9, spatial_dims=2, feature_size=F)``
  with F = 12 (the medseg task's SwinUNETR baseline) and F = 24 (MONAI's default; skipped with ``--quick``).

The two are different architectures, so there is no target: the table gives median ms per step, the ratio of
the medians, and each model's throughput in images/s; the closing line gives the throughput ratio
MISSFormer / SwinUNETR (above 1: ours trains faster per image).

**Against the official code** (``--official DIR``, a checkout of github.com/ZhifangDeng/MISSFormer: the folder
holding ``networks/MISSFormer.py``; the project never fetches it, and without it the row is skipped with a
message): the same training step on B (2) random 1×224×224 slices for the official ``MISSFormer(num_classes=9)``
and our ``paper`` preset, with identical weights (the official model's initial state dict loaded into ours by
``zoo.missformer.load_official_weights``); max |Δ logits| between the two in eval mode is printed. The official
ReMix-FFN (``MixFFN_skip``) computes its first linear layer twice per call, and the official model builds
7.0 M parameters its forward never uses (``norm2``/``norm3`` of every ReMix-FFN, the deepest decoder stage's
``concat_linear`` and Transformer blocks); ours does neither. Target: our throughput >= 1.15× the official
(ours/peer ms <= 0.87).

Timing by ``bench_core.time_pair``: warm-up steps, then R rounds alternating
ours/peer (the order flips every round); ``--clock cpu`` times the CPU time of this process, which other
processes on a shared machine do not inflate (use it with ``--threads 1``). On a loaded machine two threads
can be several times slower than one: every small op waits for the thread that was descheduled.
These are measurements, not tests: nothing is asserted, exit code 0.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_core import CLOCKS, HEADER, Row, bench_parser, print_row, summarise, time_pair, timed_row
from torch import Tensor, nn

import zoo
from zoo.missformer import load_official_weights

IMAGE, CHANNELS, CLASSES = 96, 1, 9
OFFICIAL_IMAGE, OFFICIAL_BATCH, OFFICIAL_TARGET = 224, 2, 1 / 1.15  # ours/official ms <= 0.87: >= 1.15x throughput
SKIPPED = ("official MISSFormer row skipped: pass --official DIR, a checkout of github.com/ZhifangDeng/MISSFormer "
           "(the folder holding networks/MISSFormer.py; the project never fetches it)")


def build_pair(feature_size: int) -> tuple[nn.Module, nn.Module]:
    """Our MISSFormer (``cpu`` preset) and MONAI's 2-D SwinUNETR of ``feature_size``, same input and classes."""
    from monai.networks.nets import SwinUNETR

    torch.manual_seed(0)
    variant = zoo.get_variant("missformer", "medseg")
    ours = variant.build(variant.config("cpu", image_size=IMAGE, in_channels=CHANNELS, num_classes=CLASSES))
    peer = SwinUNETR(in_channels=CHANNELS, out_channels=CLASSES, spatial_dims=2, feature_size=feature_size)
    return ours, peer


def training_step(model: nn.Module, images: Tensor, labels: Tensor) -> Callable[[], None]:
    """One optimisation step on a fixed batch: forward, cross-entropy per pixel, backward, AdamW."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()

    return step


def params(model: nn.Module) -> str:
    return f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M"


def bench(feature_size: int, batch: int, warmup: int, rounds: int, clock: Callable[[], float]) -> Row:
    ours, peer = build_pair(feature_size)
    ours.train()
    peer.train()
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(batch, CHANNELS, IMAGE, IMAGE, generator=gen)
    labels = torch.randint(0, CLASSES, (batch, IMAGE, IMAGE), generator=gen)
    samples = time_pair(training_step(ours, images, labels), training_step(peer, images, labels), warmup, rounds,
                        clock)
    row = timed_row(f"train step B{batch} 1x{IMAGE}x{IMAGE} vs SwinUNETR F{feature_size}", samples, None)
    per_second = 1e3 * batch / row.ours, 1e3 * batch / row.peer
    return print_row(row, f"({per_second[0]:.1f} vs {per_second[1]:.1f} images/s; params {params(ours)} vs "
                          f"{params(peer)})")


def load_official(directory: Path) -> type[nn.Module]:
    """The ``MISSFormer`` class of an official checkout (its ``networks`` folder is imported as a package)."""
    sys.path.insert(0, str(directory))
    try:
        return importlib.import_module("networks.MISSFormer").MISSFormer
    finally:
        sys.path.remove(str(directory))


def bench_official(directory: Path, warmup: int, rounds: int, clock: Callable[[], float]) -> Row:
    """Our ``paper`` preset vs the official model, same weights, training step at 224×224."""
    torch.manual_seed(0)
    official = load_official(directory)(num_classes=CLASSES)
    variant = zoo.get_variant("missformer", "medseg")
    ours = variant.build(variant.config("paper", num_classes=CLASSES))
    unused = load_official_weights(ours, official.state_dict())  # the official keys its forward never reads
    never_used = sum(official.state_dict()[k].numel() for k in unused) / 1e6
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(OFFICIAL_BATCH, CHANNELS, OFFICIAL_IMAGE, OFFICIAL_IMAGE, generator=gen)
    labels = torch.randint(0, CLASSES, (OFFICIAL_BATCH, OFFICIAL_IMAGE, OFFICIAL_IMAGE), generator=gen)
    ours.eval()
    official.eval()
    with torch.no_grad():
        diff = (ours(images) - official(images)).abs().max().item()
    ours.train()
    official.train()
    samples = time_pair(training_step(ours, images, labels), training_step(official, images, labels), warmup,
                        rounds, clock)
    name = f"train step B{OFFICIAL_BATCH} 1x{OFFICIAL_IMAGE}x{OFFICIAL_IMAGE} vs official MISSFormer"
    row = timed_row(name, samples, OFFICIAL_TARGET)
    return print_row(row, f"({row.peer / row.ours:.2f}x the official throughput, target >= 1.15x; eval max|Δ logits| "
                          f"{diff:.1e}; params {params(ours)} vs {params(official)}, {never_used:.1f}M never used)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, "fewer rounds, only SwinUNETR feature size 12",
                          "timed rounds per pair (11; 5 with --quick)")
    parser.add_argument("--batch", type=int, default=8, help="slices per step (8)")
    parser.add_argument("--official", type=Path, default=None, metavar="DIR",
                        help="a checkout of github.com/ZhifangDeng/MISSFormer: adds the same-weights row at 224x224")
    parser.add_argument("--skip-swin", action="store_true", help="leave out the SwinUNETR rows")
    args = parser.parse_args(argv)
    if args.official is not None and not (args.official / "networks" / "MISSFormer.py").is_file():
        parser.error(f"--official {args.official}: no networks/MISSFormer.py there; pass the folder of a checkout "
                     "of github.com/ZhifangDeng/MISSFormer")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    rounds = args.rounds or (5 if args.quick else 11)
    warmup = 1 if args.quick else 2
    start = time.perf_counter()
    print_preamble(warmup, rounds, args.clock)
    clock = CLOCKS[args.clock]
    sizes = () if args.skip_swin else (12,) if args.quick else (12, 24)
    rows = [bench(f, args.batch, warmup, rounds, clock) for f in sizes]
    if args.official is None:
        print(SKIPPED)
    else:
        rows.append(bench_official(args.official, warmup, rounds, clock))
    for row in rows[: len(sizes)]:
        print(f"{row.name}: MISSFormer / SwinUNETR throughput = {row.peer / row.ours:.2f}")
    summarise(rows, start)
    return 0


def print_preamble(warmup: int, rounds: int, clock: str) -> None:
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads (os.cpu_count "
          f"{os.cpu_count()}), float32 CPU, {warmup} warm-up + {rounds} rounds, medians, {clock} clock")
    print("step = forward + cross-entropy + backward + AdamW; ours = MISSFormer cpu preset vs MONAI SwinUNETR at "
          f"{IMAGE}x{IMAGE}; paper preset vs the official code (same weights) at {OFFICIAL_IMAGE}x{OFFICIAL_IMAGE}")
    print("IQR: the larger interquartile range / median of the two timings (noise)\n")
    print(HEADER + "\n" + "-" * len(HEADER))


if __name__ == "__main__":
    sys.exit(main())
