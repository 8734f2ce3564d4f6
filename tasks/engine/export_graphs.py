"""What a task exports to ONNX: one graph per computation a runtime calls, with real inputs to check it on.

A classifier or a segmenter is one graph (``model``: images or slices or patches -> logits). A translation model
is two: the ``encoder`` (source ids -> memory and its mask), called once per batch, and the ``decoder_step``
(the target prefix, memory, mask -> the next token's logits), called once per generated token. The step graph
takes the whole prefix and recomputes its keys and values (no cache in or out): the cache's in-place writes
do not trace into a graph, and a prefix is at most a few hundred tokens here.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn


@dataclass
class Graph:
    """One graph to export: ``module(*inputs.values())`` returns the ``outputs``, in order.

    ``inputs`` are real examples of the run's test data, as the model takes them; ``dynamic`` names the axes of
    each input and output that may change size between calls (``{"images": {0: "batch"}}``).
    """

    name: str  # the file's stem: model, encoder, decoder_step
    module: nn.Module
    inputs: dict[str, Tensor]
    outputs: tuple[str, ...]
    dynamic: dict[str, dict[int, str]]


def batch_graph(model: nn.Module, name: str, examples: Tensor, output: str = "logits",
                more: dict[int, str] | None = None) -> Graph:
    """The graph of a model that maps one batch to one output, dynamic in the batch (and the axes ``more``)."""
    axes = {0: "batch", **(more or {})}
    return Graph("model", model, {name: examples}, (output,), {name: axes, output: axes})


class Encoder(nn.Module):
    """``model.encode`` as a module. Shape: src (B, S) -> memory (B, S, D), src_mask (B, 1, 1, S) bool."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return self.model.encode(src)


class DecoderStep(nn.Module):
    """The next token's logits after a target prefix, without a cache.

    Shape: tokens (B, t), memory (B, S, D), src_mask (B, 1, 1, S) -> logits (B, V).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        return self.model.decode(tokens, memory, src_mask, None)[:, -1]  # (B, t, V) -> (B, V)


def seq2seq_graphs(model: nn.Module, src: Tensor, tgt_in: Tensor) -> list[Graph]:
    """The encoder and decoder-step graphs of an encoder–decoder, on sources ``src`` (B, S) and target prefixes
    ``tgt_in`` (B, T) of real pairs."""
    import torch

    with torch.no_grad():
        memory, src_mask = model.encode(src)
    sequence = {0: "batch", 1: "source"}
    mask = {0: "batch", 3: "source"}
    encoder = Graph("encoder", Encoder(model), {"src": src}, ("memory", "src_mask"),
                    {"src": sequence, "memory": sequence, "src_mask": mask})
    step = Graph("decoder_step", DecoderStep(model), {"tokens": tgt_in, "memory": memory, "src_mask": src_mask},
                 ("logits",), {"tokens": {0: "batch", 1: "prefix"}, "memory": sequence, "src_mask": mask,
                               "logits": {0: "batch"}})
    return [encoder, step]
