"""An ONNX export run by onnxruntime, in the place of the PyTorch model: ``zoo predict EXPORT --runtime onnxruntime``.

:func:`onnx_model` returns a module whose calls go to onnxruntime sessions, shaped like the model the task's
prediction code already calls — ``model(x)`` for a classifier or segmenter; ``encode``, ``decode``, ``new_cache``
and ``config`` for a translation model (:func:`core.decoding.greedy_decode` and beam search then run unchanged,
recomputing the prefix at each step: the exported decoder step has no cache); ``model(ids, cache)``, ``new_cache``,
``check_length`` and ``config`` for a decoder-only language model (a ``decoder`` graph), so that
:func:`core.generation.generate` runs unchanged too. Every input and output crosses as
a NumPy array on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from plumbing.errors import import_extra


class Session:
    """One ONNX file's onnxruntime session, called with tensors, returning tensors."""

    def __init__(self, file: Path, threads: int = 0) -> None:
        ort = import_extra("onnxruntime", "--runtime onnxruntime", "onnx")
        if not file.is_file():
            raise FileNotFoundError(f"{file} is missing; export the run again with `zoo export RUN --format onnx`")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        try:
            self.session = ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime's own error types (InvalidGraph, Fail...) carry the reason
            raise ValueError(f"{file} is not a loadable ONNX graph ({str(error)[:200]}); export the run again") \
                from None
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, *tensors: Tensor) -> list[Tensor]:
        feed = {name: t.detach().cpu().numpy() for name, t in zip(self.inputs, tensors)}
        return [torch.from_numpy(np.asarray(out)) for out in self.session.run(None, feed)]


class OnnxModel(nn.Module):
    """A one-graph export (classifier, segmenter) as a module: ``forward(x)`` runs the ONNX graph."""

    def __init__(self, session: Session, config: Any = None) -> None:
        super().__init__()
        self.session, self.config = session, config

    def forward(self, x: Tensor) -> Tensor:
        return self.session(x)[0].to(x.device)


class OnnxSeq2Seq(nn.Module):
    """A translation export (encoder + decoder step) with the methods decoding calls on a model."""

    def __init__(self, encoder: Session, step: Session, config: Any) -> None:
        super().__init__()
        self.encoder, self.step, self.config = encoder, step, config

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        memory, src_mask = self.encoder(src)  # (B, S, D), (B, 1, 1, S)
        return memory.to(src.device), src_mask.to(src.device)

    def new_cache(self) -> None:
        return None  # the step graph recomputes the prefix (see tasks.engine.export_graphs)

    def decode(self, tokens: Tensor, memory: Tensor, src_mask: Tensor, cache: None = None) -> Tensor:
        if cache is not None:
            raise ValueError("the ONNX decoder step takes no cache; decode with use_cache=False")
        logits = self.step(tokens, memory, src_mask)[0]  # (B, V): the last position's
        return logits[:, None].to(tokens.device)  # (B, 1, V): decoding reads [:, -1]


class Prefix:
    """What :class:`OnnxDecoder` keeps between generation steps in the place of a KV cache: the ids fed so far."""

    def __init__(self) -> None:
        self.ids: Tensor | None = None  # (B, t)

    @property
    def length(self) -> int:
        return 0 if self.ids is None else self.ids.shape[1]


class OnnxDecoder(nn.Module):
    """A decoder-only export (one ``decoder`` graph: ids ``(B, N)`` -> next-token logits ``(B, N, V)``) with what
    generation calls on a language model.

    The graph takes no cache (see :mod:`tasks.engine.export_graphs`), so the "cache" of :meth:`new_cache` is the
    prefix fed so far: a cached call runs the graph on the prefix and the new ids and returns the new positions'
    logits, as the PyTorch model's cached forward does. ``check_length`` is the PyTorch model's own (a learned
    position table's limit), taken from a build on the meta device: no weights, no second copy of the rule.
    """

    def __init__(self, session: Session, config: Any, check_length: Callable[[int, str], None] | None = None
                 ) -> None:
        super().__init__()
        self.session, self.config, self._check_length = session, config, check_length

    def new_cache(self) -> Prefix:
        return Prefix()

    def check_length(self, length: int, what: str = "the sequence") -> None:
        if self._check_length is not None:
            self._check_length(length, what)

    def forward(self, ids: Tensor, cache: Prefix | None = None) -> Tensor:
        fed = ids if cache is None or cache.ids is None else torch.cat((cache.ids, ids), dim=1)  # (B, t + N)
        self.check_length(fed.shape[1])
        if cache is not None:
            cache.ids = fed
        return self.session(fed)[0][:, -ids.shape[1] :].to(ids.device)  # (B, N, V): the new positions'


def onnx_model(folder: Path, info: dict[str, Any], config: Any, threads: int = 0, variant: Any = None) -> nn.Module:
    """The module of the ONNX export in ``folder`` (``info``: its run.json; ``config``: the variant's config;
    ``variant``: its registration, built on the meta device for a decoder graph's ``check_length``; None: a
    reference model, no length check)."""
    graphs = info.get("graphs")
    if not graphs:
        raise ValueError(f"{folder} holds no ONNX graphs (run.json has no 'graphs'); export the run with "
                         "`zoo export RUN --format onnx` to use --runtime onnxruntime")
    sessions = {name: Session(folder / file, threads) for name, file in graphs.items()}
    if "encoder" in sessions:
        return OnnxSeq2Seq(sessions["encoder"], sessions["decoder_step"], config)
    if "decoder" in sessions:
        shape_model = None
        if variant is not None:
            with torch.device("meta"):  # shapes only: the model's limits without its weights
                shape_model = variant.build(config)
        return OnnxDecoder(sessions["decoder"], config, getattr(shape_model, "check_length", None))
    return OnnxModel(sessions["model"], config)
