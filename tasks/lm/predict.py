"""``zoo predict`` for a language-model run: continue a prompt.

The prompt is ``--prompt TEXT``, or else the whole text of each input file (one prompt per file, read as UTF-8),
or standard input when no file (or ``-``) is given. Each prompt is encoded with the run's tokenizer and
continued by ``max_new_tokens`` tokens (:func:`core.generation.generate`, with the KV cache): greedy at
``temperature`` 0, else sampled at that temperature, optionally from the ``top_k`` most probable tokens or the
nucleus of mass ``top_p``. Sampling is seeded (``seed``, default the run's), so a command repeats its text.

A prompt plus ``max_new_tokens`` that does not fit a learned position table is refused before generating, with
both numbers; nothing is cropped. The continuations (prompt included) go to standard output or to the file ``out``.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch

from plumbing.atomic import write_text_atomic
from plumbing.errors import check_int, check_positive
from tasks.lm.corpus import decode_text
from tasks.runs.onnx_runtime import OnnxDecoder
from tasks.runs.run import Run

DEFAULTS = {"max_new_tokens": 200, "temperature": 1.0}
STDIN = "-"


def read_prompt(name: str) -> str:
    """The whole UTF-8 text of file ``name`` (``-``: standard input), one prompt."""
    if name == STDIN:
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        return decode_text(data, "standard input")
    path = Path(name)
    if not path.is_file():
        raise FileNotFoundError(f"prompt file {path} not found (or not a file); give text files, or --prompt TEXT")
    return decode_text(path.read_bytes(), path)


def predict(run: Run, inputs: list[str], out: str | None, prompt: str | None = None,
            max_new_tokens: int | None = None, temperature: float | None = None, top_k: int | None = None,
            top_p: float | None = None, seed: int | None = None, batch_size: int | None = None) -> str:
    """Continue ``prompt`` (or the text of each of ``inputs``) and write the texts to ``out`` (standard output when
    None); returns the one-line summary. ``batch_size`` is accepted for the shared flag and unused (one prompt
    at a time: prompts differ in length)."""
    max_new_tokens = DEFAULTS["max_new_tokens"] if max_new_tokens is None else max_new_tokens
    temperature = DEFAULTS["temperature"] if temperature is None else temperature
    check_positive("--max-new-tokens", max_new_tokens, allow_zero=True)
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"--temperature must be >= 0 (0: greedy, > 0: sampling), got {temperature}")
    if top_k is not None:
        check_positive("--top-k", top_k)
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"--top-p must be in (0, 1], got {top_p}")
    seed = run.config.seed if seed is None else seed
    check_int("--seed", seed, 0, 2**63 - 1)
    if out is not None and Path(out).is_dir():
        raise ValueError(f"--out {out} is a folder; give the file to write the generated text to")
    if prompt is not None and inputs:
        raise ValueError(f"--prompt and input files ({', '.join(inputs)}) both give prompts; give one of them")
    names = inputs or [STDIN]
    prompts = [("--prompt", prompt)] if prompt is not None else [(name, read_prompt(name)) for name in names]
    task, model = run.task, run.model
    encoded = []
    for name, text in prompts:
        ids = task.tokenizer.encode(text)
        if not ids:
            raise ValueError(f"{name}: the prompt is empty; give at least one character to continue")
        model.check_length(len(ids) + max(max_new_tokens - 1, 0),
                           f"{name}: a prompt of {len(ids)} tokens plus --max-new-tokens {max_new_tokens}")
        encoded.append(ids)
    from core.generation import generate

    tic = time.perf_counter()
    generator = torch.Generator(device=run.device).manual_seed(seed)
    texts = []
    with run.context():  # the precision the run trained in
        for ids in encoded:
            tokens = generate(model, torch.tensor([ids], device=run.device), max_new_tokens, temperature, top_k,
                              top_p, generator=generator)
            texts.append(task.tokenizer.decode(tokens[0].tolist()))
    text = "\n\n".join(texts) + "\n"
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_text_atomic(out, text)
    # an ONNX export's decoder graph has no cache to keep: each step recomputes the prefix (tasks.runs.onnx_runtime)
    cache = "the prefix recomputed each step (ONNX graph)" if isinstance(model, OnnxDecoder) else "KV cache"
    how = "greedy decoding" if temperature == 0 else (
        f"sampling (temperature {temperature:g}" + "".join(f", {k} {v}" for k, v in (("top-k", top_k),
                                                                                      ("top-p", top_p)) if v) + ")")
    return (f"generated {max_new_tokens} tokens for {len(encoded)} prompt{'s' * (len(encoded) != 1)} with {how}, "
            f"seed {seed}, {cache}, on {run.device} in {time.perf_counter() - tic:.1f} s -> "
            f"{'standard output' if out is None else out}")
