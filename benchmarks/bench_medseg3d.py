"""3D segmentation on the CPU: a training step and the sliding-window inference of one volume, ours vs MONAI direct.

Run: ``.venv/bin/python benchmarks/bench_medseg3d.py [--quick] [--threads N] [--rounds R] [--clock wall|cpu]
[--no-memory]``.

What is measured (float32, CPU):

* **training step** (forward, cross-entropy per voxel, backward, AdamW) on a fixed batch of 2 random patches, for
  each 3D variant at its ``cpu`` preset: ours is the registered build (``zoo.create``: MONAI's network inside our
  wrapper, which checks the input and tags parts), the peer is MONAI's network constructed directly with the same
  arguments and our weights. Target: ours/peer <= 1.05 (the wrapper must cost nothing). ``missformer3d`` has no
  MONAI original: its row is timed against ``dynunet`` (an info row, no target).
* **sliding-window inference of one volume** (eval, no gradients): ours is
:func:`tasks.medseg.inference.sliding.window_logits`
  with the registered build, as ``zoo evaluate`` / ``zoo predict`` call it (overlap 0.5, Gaussian weighting, 2
  windows per pass), the peer is ``monai.inferers.sliding_window_inference`` called on MONAI's network directly with
  the same settings. Target <= 1.05.
* **peak memory of inference** against ``--sw-batch-size`` (1 and 4 windows per pass): each setting runs in a
  fresh subprocess, which samples its resident set size (``/proc/self/statm``, every 2 ms) during the inference and
  reports the peak minus the size before it (model, volume and a warm-up inference already in memory): what the
  inference itself added. Memory grows with the windows per pass, not the volume. Linux only.

Timing by ``bench_core.time_pair`` (warm-up, then rounds alternating ours/peer); medians and their ratio. These are
measurements, not tests: nothing is asserted, exit code 0.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_core import CLOCKS, HEADER, Row, bench_parser, summarise, time_pair, timed_row
from torch import Tensor, nn

import zoo

CLASSES, TARGET = 9, 1.05
VOLUMES = {"swinunetr3d": (64, 128, 128)}  # a volume a few windows wide; others (48, 128, 128)
MEMORY_CHILD = """
import json, os, sys, threading, time, torch, zoo
from tasks.medseg.inference.sliding import window_logits
torch.set_num_threads(1)
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
name, sw, side = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
model = zoo.create(name, preset="cpu", num_classes=9).eval()
volume = torch.randn(1, *side)
window_logits(model, volume[:, :8, :64, :64], model.config.patch_size, 0.5, "gaussian", 1)  # warm the allocator
before, peak, running = rss(), [0], [True]
def watch():
    while running[0]:
        peak[0] = max(peak[0], rss())
        time.sleep(0.002)
thread = threading.Thread(target=watch)
thread.start()
window_logits(model, volume, model.config.patch_size, 0.5, "gaussian", sw)
running[0] = False
thread.join()
print(json.dumps((max(peak[0], rss()) - before) / 2**20))
"""


def monai_twin(ours: nn.Module) -> nn.Module:
    """MONAI's network built directly with the arguments of ``ours`` (a registered 3D build), its weights copied."""
    from monai.networks.nets import UNETR, DynUNet, SwinUNETR

    c, network = ours.config, ours.network
    if isinstance(network, SwinUNETR):
        twin = SwinUNETR(in_channels=c.in_channels, out_channels=c.num_classes, depths=c.depths,
                         num_heads=c.num_heads, window_size=c.window_size, feature_size=c.feature_size, spatial_dims=3)
    elif isinstance(network, UNETR):
        twin = UNETR(in_channels=c.in_channels, out_channels=c.num_classes, img_size=c.patch_size,
                     feature_size=c.feature_size, hidden_size=c.hidden_size, mlp_dim=c.mlp_dim, num_heads=c.num_heads)
    else:
        plan = c.plan()
        twin = DynUNet(3, c.in_channels, c.num_classes, plan.kernel_sizes, plan.strides, plan.upsample_kernel_sizes,
                       filters=plan.filters)
    twin.load_state_dict(network.state_dict(), strict=False)  # UNETR: its never-called cross-attention norms stay
    return twin


def training_step(model: nn.Module, patches: Tensor, labels: Tensor):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(patches), labels).backward()
        optimizer.step()

    return step


def bench_train(name: str, warmup: int, rounds: int, clock) -> Row:
    torch.manual_seed(0)
    ours = zoo.create(name, preset="cpu", num_classes=CLASSES)
    peer = zoo.create("dynunet", preset="cpu", num_classes=CLASSES) if name == "missformer3d" else monai_twin(ours)
    patches = torch.randn(2, 1, *ours.config.patch_size)
    labels = torch.randint(0, CLASSES, (2, *ours.config.patch_size))
    samples = time_pair(training_step(ours, patches, labels), training_step(peer, patches, labels), warmup, rounds,
                        clock)
    what = "vs dynunet" if name == "missformer3d" else "vs MONAI direct"
    patch = "×".join(map(str, ours.config.patch_size))
    return timed_row(f"train step {name} {patch} ({what})", samples, None if name == "missformer3d" else TARGET)


def bench_inference(name: str, warmup: int, rounds: int, clock) -> Row:
    from monai.inferers import sliding_window_inference

    from tasks.medseg.inference.sliding import window_logits

    torch.manual_seed(0)
    ours = zoo.create(name, preset="cpu", num_classes=CLASSES).eval()
    peer = monai_twin(ours).eval()
    side = VOLUMES.get(name, (48, 128, 128))
    volume = torch.randn(1, *side)
    patch = ours.config.patch_size

    def mine() -> None:
        window_logits(ours, volume, patch, 0.5, "gaussian", 2)

    def theirs() -> None:
        with torch.no_grad():
            sliding_window_inference(volume[None], patch, 2, peer, overlap=0.5, mode="gaussian")

    samples = time_pair(mine, theirs, warmup, rounds, clock)
    return timed_row(f"sliding window {name} {'×'.join(map(str, side))} (vs MONAI)", samples, TARGET)


def memory(name: str, sw_batch_size: int) -> float:
    """MiB the inference of one volume added to the peak RSS, measured in a fresh process."""
    side = VOLUMES.get(name, (48, 128, 128))
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, name, str(sw_batch_size), json.dumps(side)],
                         capture_output=True, text=True, cwd=root, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, "dynunet and unetr only, fewer rounds", "timed rounds per row (default 5; 3 quick)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    rounds, warmup = args.rounds or (3 if args.quick else 5), 1
    names = ("dynunet", "unetr") if args.quick else ("dynunet", "unetr", "swinunetr3d", "missformer3d")
    start, clock = time.perf_counter(), CLOCKS[args.clock]
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads (os.cpu_count "
          f"{os.cpu_count()}), float32 CPU, {warmup} warm-up + {rounds} rounds, medians, {args.clock} clock")
    print("train step = forward + cross-entropy + backward + AdamW on 2 patches of the cpu preset; sliding window = "
          "one volume, overlap 0.5, gaussian, 2 windows per pass\n")
    print(HEADER + "\n" + "-" * len(HEADER))
    rows = []
    for name in names:
        for bench in (bench_train, bench_inference):
            if bench is bench_inference and name == "missformer3d":
                continue  # no MONAI original to call directly
            rows.append(bench(name, warmup, rounds, clock))
            print(rows[-1].line(), flush=True)
    if not args.no_memory:
        print("\npeak memory added by the sliding-window inference of one volume (fresh process, RSS):")
        for name in names[:1] if args.quick else names:
            added = {sw: memory(name, sw) for sw in (1, 4)}
            print(f"  {name:<13} sw-batch-size 1: {added[1]:7.0f} MiB   4: {added[4]:7.0f} MiB   "
                  f"(×{added[4] / max(added[1], 1e-9):.2f})")
    summarise(rows, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
