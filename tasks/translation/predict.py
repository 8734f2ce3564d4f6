"""``zoo predict`` for a translation run: sentences in, translations out, one per line, in input order.

Inputs are UTF-8 text files of one source sentence per line (several files are read one after the other), or
standard input when no file (or ``-``) is given. Each line is stripped of surrounding whitespace and encoded with
the run's tokenizer; an empty line gives an empty output line without reaching the model. The output goes to
standard output, or to the file ``out``.

Decoding: greedy by default; ``beam_size`` > 1 for beam search (with the run's length penalty);
``temperature`` > 0 to sample, optionally from the ``top_k`` most probable tokens or the nucleus of mass
``top_p`` (seeded with the run's seed, so a command repeats its output).

Long inputs are refused, not cut: a line of more than ``TranslationTask.source_limit`` tokens stops the command
with an error naming its file, line and the limit. The limit is the run's ``max_len`` (256 by default: training
kept only shorter sentences, and its evaluation cuts longer sources there), or, for a model with a learned
position table, the table's size less one (for the eos) when that is smaller. A translation has at most
2·n + 10 tokens, n being the longest source of its batch with its eos (fewer if a learned table ends first), as
in the training's evaluation.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch

from plumbing.errors import check_positive
from tasks.runs.run import Run

STDIN = "-"


def predict(run: Run, inputs: list[str], out: str | None, progress: bool = True, batch_size: int | None = None,
            beam_size: int | None = None, temperature: float | None = None, top_k: int | None = None,
            top_p: float | None = None) -> str:
    """Translate the lines of ``inputs`` (files; standard input when empty) and write them to ``out`` (a file;
    standard output when None). Returns the one-line summary."""
    method, options = _decoding(beam_size, temperature, top_k, top_p)
    batch_size = 64 if batch_size is None else batch_size
    check_positive("--batch-size", batch_size)
    if out is not None and Path(out).is_dir():
        raise ValueError(f"--out {out} is a folder; give the file to write the translations to")
    lines = [(name, number, text) for name in (inputs or [STDIN]) for number, text in _read_lines(name)]
    if not lines:
        names = ", ".join(inputs) if inputs else "standard input"
        raise ValueError(f"no input: {names} holds no lines; give one source sentence per line")
    task, sentences = run.task, [text.strip() for _, _, text in lines]
    limit = task.source_limit(run.model)
    why = "the run's max_len" if limit == run.config.max_len else f"its learned position table has {limit + 1} places"
    todo = [i for i, text in enumerate(sentences) if text]
    for i, ids in zip(todo, task.tokenizer.encode_batch([sentences[i] for i in todo])):
        if len(ids) > limit:
            name, number, _ = lines[i]
            raise ValueError(f"{_label(name)}, line {number}: {len(ids)} tokens, but this model takes sources of at "
                             f"most {limit} tokens ({why}); split the sentence into shorter ones")
    tic = time.perf_counter()
    generator = torch.Generator(device=run.device).manual_seed(run.config.seed) if method == "sample" else None
    with run.context():  # the precision the run trained in
        translated = task.translate(run.model, [sentences[i] for i in todo], method, batch_size, generator,
                                    progress=progress and len(todo) > batch_size, **options)  # bar: > 1 batch
    outputs = [""] * len(sentences)
    for i, text in zip(todo, translated):
        outputs[i] = text
    _write(outputs, out)
    seconds = time.perf_counter() - tic
    empty = len(sentences) - len(todo)
    kept = f" (and kept {empty} empty line{'s' * (empty != 1)} empty)" if empty else ""
    return (f"translated {len(todo)} sentence{'s' * (len(todo) != 1)}{kept} with {_describe(method, options)} on "
            f"{run.device} in {seconds:.1f} s -> {'standard output' if out is None else out}")


def _decoding(beam_size: int | None, temperature: float | None, top_k: int | None, top_p: float | None
              ) -> tuple[str, dict]:
    """The ``translate`` method and options the flags ask for; one-line errors for contradictory flags."""
    if beam_size is not None:
        check_positive("--beam-size", beam_size)
    if temperature is not None and not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"--temperature must be >= 0 (0: greedy, > 0: sampling), got {temperature}")
    sampling = temperature is not None and temperature > 0
    if not sampling and (top_k is not None or top_p is not None):
        raise ValueError("--top-k/--top-p restrict sampling: give them with --temperature > 0 (e.g. --temperature 1)")
    if sampling and beam_size is not None and beam_size > 1:
        raise ValueError("--beam-size and --temperature are two decoding methods; give one of them")
    if top_k is not None:
        check_positive("--top-k", top_k)
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"--top-p must be in (0, 1], got {top_p}")
    if sampling:
        return "sample", {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    if beam_size is not None and beam_size > 1:
        return "beam", {"beam_size": beam_size}
    return "greedy", {}


def _describe(method: str, options: dict) -> str:
    if method == "beam":
        return f"beam search (beam {options['beam_size']})"
    if method == "sample":
        extra = "".join(f", {k} {v}" for k, v in options.items() if k != "temperature" and v is not None)
        return f"sampling (temperature {options['temperature']:g}{extra})"
    return "greedy decoding"


def _label(name: str) -> str:
    return "standard input" if name == STDIN else name


def _read_lines(name: str) -> list[tuple[int, str]]:
    """(line number, text) of each line of file ``name`` (or of standard input), decoded as UTF-8."""
    if name == STDIN:
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    else:
        path = Path(name)
        if not path.exists():
            raise FileNotFoundError(f"input file {path} not found; give text files of one sentence per line")
        if path.is_dir():
            raise ValueError(f"{path} is a folder; give the text files in it (one sentence per line)")
        data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(f"{_label(name)} is not UTF-8 text (line {line}: byte 0x{data[error.start]:02x}); convert it, "
                         "e.g. `iconv -f latin1 -t utf-8`") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline ending the last line starts no new line
    return [(number, line.removesuffix("\r")) for number, line in enumerate(lines, start=1)]


def _write(outputs: list[str], out: str | None) -> None:
    text = "".join(line + "\n" for line in outputs)
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text, encoding="utf-8")
