"""Side-by-side CPU benchmark of our Swin Transformer against timm's, in one process.

Run: ``.venv/bin/python benchmarks/bench_swin.py [--quick] [--threads N] [--rounds R]``.

What is measured (float32, CPU, train mode, identical weights copied from timm into ours with
``zoo.swin.load_timm_weights``): one training step — forward, cross-entropy, backward, AdamW step — on a
batch of 32 random 3×32×32 images with 10 classes, patch 2, window 4:

* ``cpu`` preset: embed 64, depths (2, 2, 2), heads (2, 4, 8) — the model ``zoo train cifar`` trains;
* ``swin-t-32`` preset: Swin-T's widths and depths (embed 96, depths (2, 2, 6, 2), heads (3, 6, 12, 24))
  at 32×32 (skipped with ``--quick``).

Ours is ``zoo.swin.SwinTransformer`` (core encoder layers, core multi-head attention with the
``WindowAttention`` kernel, the fused SDPA kernel inside each window); the peer is
``timm.models.swin_transformer.SwinTransformer`` built with the same sizes and stochastic-depth rate.
Target ours/timm <= 1.10.

Timing: warm-up steps, then R rounds alternating ours/timm (the order flips every round), each step timed
with ``time.perf_counter`` (``--clock cpu``: ``time.process_time``, the CPU time of this process, which
other processes on a shared machine do not inflate; use it with ``--threads 1``); the table shows median ms
and the ratio of the medians, with PASS/MISS against the target. These are measurements, not tests:
nothing is asserted, exit code 0.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from bench_core import CLOCKS, HEADER, Row, bench_parser, eval_diff, print_row, summarise, time_pair, timed_row
from timm.models.swin_transformer import SwinTransformer as TimmSwin
from torch import nn

import zoo
from zoo.swin import load_timm_weights, timm_kwargs

Step = Callable[[], None]
BATCH, IMAGE, CHANNELS, CLASSES = 32, 32, 3, 10
TARGET = 1.10


def build_pair(preset: str) -> tuple[nn.Module, nn.Module, str]:
    """Our Swin of ``preset`` at 3×32×32 / 10 classes and timm's of the same sizes, same weights."""
    config = zoo.get_variant("swin").config(preset, image_size=IMAGE, in_channels=CHANNELS, num_classes=CLASSES)
    torch.manual_seed(0)
    peer = TimmSwin(**timm_kwargs(config))
    ours = zoo.get_variant("swin").build(config)
    load_timm_weights(ours, peer)
    params = sum(p.numel() for p in ours.parameters())
    sizes = (f"embed {config.embed_dim}, depths {config.depths}, heads {config.heads}, patch {config.patch_size}, "
             f"window {config.window_size}, drop_path {config.drop_path}, {params / 1e6:.2f}M params")
    return ours, peer, sizes


def train_step(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> Step:
    """Forward, cross-entropy, backward and an AdamW step (lr 1e-3, weight decay 0.05)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()

    return step


def bench_train_step(preset: str, warmup: int, rounds: int, clock: Callable[[], float]) -> tuple[Row, str]:
    ours, peer, sizes = build_pair(preset)
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(BATCH, CHANNELS, IMAGE, IMAGE, generator=gen)
    labels = torch.randint(0, CLASSES, (BATCH,), generator=gen)
    diff = eval_diff(ours, peer, lambda: ours(images), lambda: peer(images))
    steps = train_step(ours, images, labels), train_step(peer, images, labels)
    row = timed_row(f"train step {preset} B{BATCH} {IMAGE}x{IMAGE}", time_pair(*steps, warmup, rounds, clock), TARGET)
    return row, f"{sizes}; eval max|diff| {diff:.1e}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, "fewer rounds, only the cpu preset",
                          "timed rounds per pair (15; 7 with --quick)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    rounds = args.rounds or (7 if args.quick else 15)
    warmup = 2 if args.quick else 3
    start = time.perf_counter()
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads "
          f"(os.cpu_count {os.cpu_count()}), float32 CPU, {warmup} warm-up + {rounds} rounds, medians, "
          f"{args.clock} clock")
    print("step = forward + cross-entropy + backward + AdamW; peer = timm SwinTransformer, same weights")
    print("IQR: the larger interquartile range / median of the two timings (noise)\n")
    print(HEADER + "\n" + "-" * len(HEADER))
    rows = []
    for preset in ("cpu",) if args.quick else ("cpu", "swin-t-32"):
        row, note = bench_train_step(preset, warmup, rounds, CLOCKS[args.clock])
        rows.append(print_row(row, f"({note})"))
    summarise(rows, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
