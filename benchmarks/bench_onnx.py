"""CPU inference through onnxruntime against PyTorch eager, for the graphs ``zoo export --format onnx`` writes.

Run: ``.venv/bin/python benchmarks/bench_onnx.py [--quick] [--threads N] [--rounds R] [--clock cpu]``.

Each model is exported by :func:`tasks.runs.onnx_export.export_graph` (the code ``zoo export`` runs, with its
check against PyTorch) and timed in one process, onnxruntime's CPU provider (``intra_op_num_threads`` = torch's
threads) against the same module under ``torch.inference_mode()`` on the same input: "ours" is onnxruntime,
"peer" PyTorch, so a ratio below 1 means onnxruntime is faster. Random weights (speed does not depend on them):

1. cifar ViT-Tiny width (d 192, 12 layers, 32 px, patch 4), batch 32;
2. medseg MISSFormer (``cpu`` preset), a batch of 8 slices;
3. medseg DynUNet (``tiny`` preset), one 32×64×64 patch, as the sliding window feeds it;
4. translation classic (``small`` preset): the encoder on 16 sources of 32 tokens, and the decoder step on a
   24-token prefix (recomputed without a cache, as the export runs it).

Measurements, not tests: no target, nothing asserted, exit code 0.
"""

from __future__ import annotations

import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from bench_core import CLOCKS, HEADER, Row, bench_parser, print_row, summarise, time_pair, timed_row

import zoo
from tasks.engine.export_graphs import Graph, batch_graph, seq2seq_graphs
from tasks.runs.onnx_export import export_graph
from tasks.runs.onnx_runtime import Session


def graphs(quick: bool) -> list[tuple[str, Graph]]:
    torch.manual_seed(0)
    vit = zoo.create("vit", image_size=32, patch_size=4, d_model=192, depth=12 if not quick else 6, heads=3).eval()
    missformer = zoo.create("missformer", preset="cpu", task="medseg").eval()
    size = missformer.config.image_size
    dynunet = zoo.create("dynunet", preset="tiny", task="medseg").eval()
    classic = zoo.create("classic", preset="small").eval()
    vocab = classic.config.src_vocab
    src, tgt = torch.randint(4, vocab, (16, 32)), torch.randint(4, vocab, (16, 24))
    encoder, step = seq2seq_graphs(classic, src, tgt)
    return [
        (f"cifar ViT d192 {vit.config.depth}L, B32 32px", batch_graph(vit, "images", torch.randn(32, 3, 32, 32))),
        (f"medseg MISSFormer cpu, 8 slices {size}px", batch_graph(missformer, "slices", torch.randn(8, 1, size, size))),
        ("medseg DynUNet tiny, patch 32x64x64", batch_graph(dynunet, "patches", torch.randn(1, 1, 32, 64, 64))),
        ("translation classic small, encoder 16x32", encoder),
        ("translation classic small, decoder step 16x24", step),
    ]


def run_all(quick: bool, rounds: int, clock) -> list[Row]:
    warmup = 2 if quick else 3
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads, float32 CPU, "
          f"{warmup} warm-up + {rounds} rounds, medians; ours = onnxruntime, peer = PyTorch eager\n")
    print(HEADER + "\n" + "-" * len(HEADER))
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, graph in graphs(quick):
            file = Path(folder) / f"{graph.name}-{len(rows)}.onnx"
            check = export_graph(graph, file)
            session = Session(file, torch.get_num_threads())
            inputs = tuple(graph.inputs.values())

            def ort(session=session, inputs=inputs) -> None:
                session(*inputs)

            def eager(module=graph.module, inputs=inputs) -> None:
                with torch.inference_mode():
                    module(*inputs)

            samples = time_pair(ort, eager, warmup, rounds, clock)
            rows.append(print_row(timed_row(name, samples, None),
                                  f"(max|diff| {check['max_abs_diff']:.1e}, {check['exporter']})"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, "fewer rounds, a 6-layer ViT", "timed rounds per pair (11; 5 with --quick)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    start = time.perf_counter()
    rows = run_all(args.quick, args.rounds or (5 if args.quick else 11), CLOCKS[args.clock])
    summarise(rows, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
