"""Side-by-side CPU benchmark of the mixture-of-experts FFN against a dense FFN of the same active FLOPs.

Run: ``.venv/bin/python benchmarks/bench_moe.py [--quick] [--threads N] [--rounds R]``.

What is measured (float32, CPU, train mode, dropout 0): forward + backward of one FFN on 8,192 tokens
(B 8 × N 1024), d 256, loss = mean of the output:

* ours: ``zoo.moe.MoEFFN`` with 8 experts of d_ff 1024, top-2 routing, plus its auxiliary loss
  (``zoo.moe.auxiliary_loss``: load balancing + router z-loss) in the loss, so routing, dispatch, the
  combine and the router's backward are all timed;
* peer: ``core.ffn.PositionwiseFFN`` with d_ff 2048 = 2 × 1024 — each token visits 2 experts of 1024, so
  both do the same matmul FLOPs per token (the router's T·D·E more is < 1%).

1. MoE **dropless** (every token reaches both its experts: the same work as the dense FFN, whatever the
   routing) vs dense. Target MoE/dense <= 1.5: what the sort → per-expert matmul → combine dispatch may
   cost over one big matmul.
2. MoE with capacity factor 1.25 (the default; assignments over capacity are dropped, so it may do *less*
   work than dense) vs dense, for information; the row notes the fraction dropped.

The MoE runs 8 smaller matmuls (and their backward) where dense runs one, so it enters about 8× as many
OpenMP parallel regions. On a CPU shared with other processes, OpenMP's default spin-waiting at each
region's barrier then costs the MoE far more than the dense FFN (measured on a 2-core machine at load
average 8: MoE/dense 1.7 with 2 threads, 0.9 with ``--threads 1`` or ``OMP_WAIT_POLICY=PASSIVE``):
on a busy machine, compare with ``--threads 1`` to see the cost of the dispatch alone.

Timing as in ``bench_core.py`` (whose helpers this reuses): warm-up iterations, then R rounds alternating
ours/peer (the order flips every round), ``time.perf_counter`` per call; medians, their ratio, PASS/MISS
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

import torch
from bench_core import HEADER, Row, print_row, summarise, time_pair, timed_row, train_step
from torch import Tensor

from core.ffn import PositionwiseFFN
from zoo.moe import MoEFFN, auxiliary_loss, routing_stats

BATCH, TOKENS, D_MODEL, D_EXPERT, EXPERTS, TOP_K = 8, 1024, 256, 1024, 8, 2


def bench_moe(dropless: bool, warmup: int, rounds: int) -> tuple[Row, str]:
    """MoE FFN vs a dense FFN of the same active FLOPs, forward + backward; the row and a routing note."""
    torch.manual_seed(0)
    moe = MoEFFN(D_MODEL, D_EXPERT, EXPERTS, TOP_K, dropless=dropless)
    dense = PositionwiseFFN(D_MODEL, TOP_K * D_EXPERT)
    x = torch.randn(BATCH, TOKENS, D_MODEL, requires_grad=True)

    def moe_loss() -> Tensor:
        return moe(x).mean() + auxiliary_loss(moe)

    samples = time_pair(train_step(moe_loss, moe, (x,)), train_step(lambda: dense(x).mean(), dense, (x,)),
                        warmup, rounds)
    stats = routing_stats(moe)[""]
    mode = "dropless" if dropless else f"cf {moe.capacity_factor:g}"
    name = f"moe {EXPERTS}x{D_EXPERT} top-{TOP_K} {mode} vs dense {TOP_K * D_EXPERT} T{BATCH * TOKENS}"
    note = f"(dropped {100 * stats['dropped']:.1f}%, max load {max(stats['load']):.3f} vs 1/E {1 / EXPERTS:.3f})"
    return timed_row(name, samples, 1.5 if dropless else None), note


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per pair (15; 7 with --quick)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    rounds = args.rounds or (7 if args.quick else 15)
    warmup = 2 if args.quick else 3
    start = time.perf_counter()
    print(
        f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads "
        f"(os.cpu_count {os.cpu_count()}), float32 CPU, {warmup} warm-up + {rounds} rounds, medians"
    )
    print(f"ours = MoEFFN ({EXPERTS} experts of d_ff {D_EXPERT}, top-{TOP_K}, + auxiliary loss); "
          f"peer = dense PositionwiseFFN of d_ff {TOP_K * D_EXPERT} (same active matmul FLOPs); d {D_MODEL}")
    print("IQR: the larger interquartile range / median of the two timings (noise)\n")
    print(HEADER + "\n" + "-" * len(HEADER))
    rows = [print_row(*bench_moe(dropless, warmup, rounds)) for dropless in (True, False)]
    summarise(rows, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
