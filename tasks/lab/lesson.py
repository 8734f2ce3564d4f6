"""What a lesson is, the lesson index, and how a lesson's result is written (``lesson.md``, ``result.json``)."""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from plumbing.atomic import write_text_atomic
from plumbing.errors import unknown_name


@dataclass(frozen=True)
class Lesson:
    """One pitfall: its name on the command line, the part of the architecture it is about, and its module.

    ``module`` must define ``run(settings: LabSettings) -> LessonResult``.
    """

    name: str
    title: str
    part: str  # the architecture part (see core.parts.PARTS) or "training" / "decoding"
    question: str  # what the learner finds out, one line
    module: str

    def load(self) -> Callable[[LabSettings], LessonResult]:
        return importlib.import_module(self.module).run


# The index is static so that `zoo lab --list` imports no lesson (and no torch model code).
LESSONS: dict[str, Lesson] = {lesson.name: lesson for lesson in (
    Lesson("scale", "The 1/√d_k scale", "attention",
           "What happens to the softmax, its entropy and the gradients without the 1/√d_k scale?",
           "tasks.lab.scale"),
    Lesson("mask", "Masking with −∞, not 0", "attention",
           "How much weight leaks to future tokens when masked scores are filled with 0, and what does it do "
           "to decoding?", "tasks.lab.mask"),
    Lesson("norm", "Post-LN vs Pre-LN", "norm",
           "Which norm placement trains at depth 6, 12 and 24, with and without warm-up?", "tasks.lab.norm"),
    Lesson("warmup", "Noam warm-up", "training",
           "Does the warm-up matter, against a constant learning rate of the same peak?", "tasks.lab.warmup"),
    Lesson("position", "Positional information", "position",
           "No positions (a bag of words), swapped sin/cos, unscaled embeddings, and extrapolation past the "
           "training length", "tasks.lab.position"),
    Lesson("temperature", "Greedy vs sampling temperature", "decoding",
           "What do temperatures 0.7, 1.0 and 1.3 do to BLEU and to diversity?", "tasks.lab.temperature"),
    Lesson("init", "Q/K/V initialisation", "attention",
           "Too large a variance in Q/K/V saturates attention: entropy, the loss plateau, and the fix",
           "tasks.lab.init"),
    Lesson("params", "Where the parameters go", "embedding",
           "The article's per-layer estimates vs exact accounting, the embedding share, tying on and off",
           "tasks.lab.params"),
    Lesson("small-data", "ViT, CNN and DeiT on small data", "training",
           "Does a ViT lose to a CNN of the same FLOPs at 10 %, 30 % and 100 % of the data, and does DeiT's "
           "distillation close the gap?", "tasks.lab.small_data"),
    Lesson("swin-windows", "Swin's windows and the shift", "attention",
           "Do windows make attention linear in the image size, and what does the shift let cross the windows?",
           "tasks.lab.swin_windows"),
    Lesson("moe-routing", "How MoE routes tokens", "ffn",
           "Does the load collapse without the balancing loss, what do the capacity factor and top-1 vs top-2 "
           "drop and cost, and how does a batch-ranked capacity leak the future?", "tasks.lab.moe_routing"),
    Lesson("exposure-bias", "Exposure bias: teacher forcing vs free running", "decoding",
           "How far does greedy decoding fall below the teacher-forced accuracy, position by position, and does "
           "scheduled sampling close the gap?", "tasks.lab.exposure_bias"),
    Lesson("extrapolation", "Reading a language model past its training length", "position",
           "Trained at L, what perplexity does each position scheme give at 2L, 4L and 8L: which break, by how much?",
           "tasks.lab.extrapolation"),
    Lesson("sampling", "Temperature on generated text", "decoding",
           "What do greedy decoding and T = 0.7, 1.0, 1.3 do to a language model's text: its looping, diversity and "
           "likelihood?", "tasks.lab.sampling"),
    Lesson("causal-mask", "A causal mask filled with 0: training looks fine, generation collapses", "attention",
           "How low does the leaking model's training loss go, and what are its honest loss and generated text?",
           "tasks.lab.causal_mask"),
)}


def get_lesson(name: str) -> Lesson:
    if name not in LESSONS:
        raise unknown_name("lesson", name, LESSONS)
    return LESSONS[name]


@dataclass
class LabSettings:
    """How a lesson runs. ``quick`` shrinks every budget so a lesson takes at most ~3 minutes on 2 CPU cores."""

    out: Path
    quick: bool = False
    seed: int = 0
    progress: bool = True  # tqdm bars on training loops
    scale: float = 1.0  # further shrinks budgets (the tests run lessons at e.g. 0.1)

    def steps(self, full: int, quick: int) -> int:
        """A training budget: ``quick`` with --quick, else ``full``, times ``scale`` (at least 2)."""
        return max(2, round((quick if self.quick else full) * self.scale))


@dataclass
class LessonResult:
    """What a lesson found.

    Args:
        verdict: two lines for the learner: what the mistake did, and the right choice.
        holds: whether the measured effect has the expected direction (e.g. unscaled scores saturate more).
        findings: the measured numbers, JSON-ready; written to ``result.json``.
        body: markdown sections of ``lesson.md`` between the verdict and the reproduction line (tables, notes).
        figures: file names (under ``settings.out``) of the plots the lesson saved.
    """

    verdict: tuple[str, str]
    holds: bool
    findings: dict[str, Any]
    body: str = ""
    figures: list[str] = field(default_factory=list)


def run_lesson(name: str, settings: LabSettings) -> LessonResult:
    """Run lesson ``name`` and write ``lesson.md`` and ``result.json`` under ``settings.out``."""
    lesson = get_lesson(name)
    run = lesson.load()
    settings.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = run(settings)
    seconds = time.perf_counter() - start
    if len(result.verdict) != 2:
        raise ValueError(f"lesson {name!r} must give a two-line verdict, got {len(result.verdict)} lines")
    command = f"zoo lab {name}{' --quick' if settings.quick else ''} --seed {settings.seed}"
    lines = [f"# Lesson: {lesson.title}", "", f"*Part of the architecture:* `{lesson.part}`. {lesson.question}", "",
             "## Verdict", "", *(f"> {line}  " for line in result.verdict), "",
             f"Expected direction {'**holds**' if result.holds else '**does not hold** in this run'}.", ""]
    if result.body:
        lines += [result.body.rstrip(), ""]
    lines += [f"![{figure}]({figure})" for figure in result.figures]
    lines += ["", f"Reproduce: `{command}` ({seconds:.0f} s here).", ""]
    write_text_atomic(settings.out / "lesson.md", "\n".join(lines))
    plain = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()}
    record = {"lesson": name, "settings": plain, "seconds": seconds, **asdict(result)}
    record.pop("body")
    write_text_atomic(settings.out / "result.json", json.dumps(record, indent=2, default=float) + "\n")
    return result
