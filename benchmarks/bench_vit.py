"""Side-by-side CPU benchmark of our ViT against timm's ``VisionTransformer``, in one process.

Run: ``.venv/bin/python benchmarks/bench_vit.py [--quick] [--threads N] [--rounds R] [--batch B]``.

What is measured (float32, CPU, identical weights copied from timm into ours with
``zoo.vit.load_timm_weights``): the ViT-Tiny width at CIFAR size — 32×32 RGB images, patch 4 (64 patches
+ [CLS]), d 192, 12 layers, 3 heads, MLP 768, 10 classes, dropout and drop-path 0 — built from one
:class:`~zoo.vit.ViTConfig` (ours) and ``zoo.vit.timm_kwargs`` of it (timm: qkv bias, class token,
``global_pool='token'``, LayerNorm eps 1e-6, exact GELU):

1. training step, batch 32: forward, cross-entropy, backward, ``AdamW.step()`` (each model its own
   optimizer with the same settings; gradients cleared with ``set_to_none``). Target ours/timm <= 1.05.
2. inference forward, batch 32, ``eval()`` and ``torch.inference_mode()``. Target ours/timm <= 1.05.

Timing as in ``bench_core.py`` (whose helpers this reuses): warm-up iterations, then R rounds alternating
ours/timm (the order flips every round), ``time.perf_counter`` per call; medians, their ratio, PASS/MISS
against the target, and the interquartile range as a noise flag. These are measurements, not tests:
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
from bench_core import HEADER, Row, print_row, summarise, time_pair, timed_row
from torch import Tensor, nn

from zoo.vit import VisionTransformer, ViTConfig, load_timm_weights, timm_kwargs

CONFIG = dict(image_size=32, patch_size=4, in_channels=3, num_classes=10, d_model=192, depth=12, heads=3)


def build_pair() -> tuple[VisionTransformer, nn.Module]:
    """Our ViT and timm's of the same config, ours holding timm's weights."""
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    torch.manual_seed(0)
    config = ViTConfig(**CONFIG)
    peer = TimmViT(**timm_kwargs(config))
    return load_timm_weights(VisionTransformer(config), peer), peer


def training_step(model: nn.Module, images: Tensor, labels: Tensor) -> Callable[[], None]:
    """One optimisation step of ``model`` on a fixed batch: forward, cross-entropy, backward, AdamW."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()

    return step


def inference_step(model: nn.Module, images: Tensor) -> Callable[[], None]:
    def step() -> None:
        with torch.inference_mode():
            model(images)

    return step


def eval_diff(ours: nn.Module, peer: nn.Module, images: Tensor) -> float:
    """Max |logits ours - timm| in eval mode (checks that both really compute the same function)."""
    ours.eval()
    peer.eval()
    with torch.no_grad():
        diff = (ours(images) - peer(images)).abs().max().item()
    ours.train()
    peer.train()
    return diff


def run_all(args: argparse.Namespace) -> list[Row]:
    rounds = args.rounds or (7 if args.quick else 15)
    warmup = 2 if args.quick else 3
    print(
        f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads "
        f"(os.cpu_count {os.cpu_count()}), float32 CPU, {warmup} warm-up + {rounds} rounds, medians"
    )
    c = CONFIG
    shape = f"B{args.batch} {c['image_size']}px p{c['patch_size']} d{c['d_model']} {c['depth']}L h{c['heads']}"
    print(f"ViT: {shape}, mlp 4x, {c['num_classes']} classes; peer = timm VisionTransformer, same weights")
    print("IQR: the larger interquartile range / median of the two timings (noise)\n")
    print(HEADER + "\n" + "-" * len(HEADER))
    ours, peer = build_pair()
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(args.batch, c["in_channels"], c["image_size"], c["image_size"], generator=gen)
    labels = torch.randint(0, c["num_classes"], (args.batch,), generator=gen)
    note = f"(eval max|diff| {eval_diff(ours, peer, images):.1e})"
    samples = time_pair(training_step(ours, images, labels), training_step(peer, images, labels), warmup, rounds)
    rows = [print_row(timed_row(f"train step fwd+bwd+AdamW {shape}", samples, 1.05), note)]
    ours.eval()
    peer.eval()
    samples = time_pair(inference_step(ours, images), inference_step(peer, images), warmup, rounds)
    rows.append(print_row(timed_row(f"inference fwd {shape}", samples, 1.05)))
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer warm-up iterations and rounds")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per pair (15; 7 with --quick)")
    parser.add_argument("--batch", type=int, default=32, help="images per step (32)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    start = time.perf_counter()
    rows = run_all(args)
    summarise(rows, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
