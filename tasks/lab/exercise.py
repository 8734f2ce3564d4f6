"""Exercises: a lesson's mistake left in a file for the learner to find, and a check that measures their fix.

``write_exercise(NAME, DIR)`` copies the lesson's exercise file (:mod:`tasks.lab.exercises`: plain Python that
subclasses the core part the lesson's mistake subclasses, its docstring stating the symptom, not the fix) to
``DIR/exercise.py`` with an ``EXERCISE.md`` saying what to observe and how to check. ``check_exercise(DIR)``
imports the learner's file and measures what it defines beside the core's reference and the lesson's own mistake
(the lab's switch, e.g. :class:`tasks.lab.scale.UnscaledAttention`), on the same seed and inputs, in seconds.

The measures are exact or nearly so (float64 where the code allows): the learner's kernel against the core's
reference on random inputs, the weight on masked keys, the drift of a model's outputs when later tokens change,
the attention entropy of a fresh model. A lesson whose subject is a setting or a measurement (``params``,
``temperature``, ...) has no code mistake to fix, and so no exercise.
"""

from __future__ import annotations

import functools
import json
import math
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from core.attention import ReferenceAttention, reference_attention
from core.language_model import build_language_model
from core.model import build_transformer
from core.multihead import record_attention
from core.position import SinusoidalPosition, sinusoid_table
from plumbing.atomic import write_text_atomic
from plumbing.tables import markdown_table
from tasks.i18n import check_lang
from tasks.lab.init import reinit_qkv
from tasks.lab.lesson import get_lesson
from tasks.lab.mask import ZeroFilledMaskAttention
from tasks.lab.norm import WIDTH, layer_grad_norms
from tasks.lab.position import SwappedSinusoidalPosition
from tasks.lab.scale import UnscaledAttention
from tasks.lab.toolkit import entropy, saturation

EXERCISES_DIR = Path(__file__).parent / "exercises"
RECORD = "exercise.json"  # which lesson and language a folder holds, written beside exercise.py


@dataclass(frozen=True)
class Measure:
    """One number of the check: its name in each language, and how far from the correct value still counts as
    correct (the mistake's value must be further than that, and is by construction: a test checks it)."""

    en: str
    zh: str
    tolerance: float


def _same(thing: Any) -> Any:
    """The identity: the learner's symbol as it is, or a model left with the core's initialisation."""
    return thing


@dataclass(frozen=True)
class Exercise:
    """A lesson's exercise.

    Args:
        lesson: the lesson's name (``zoo lab NAME``).
        file: the exercise file under :data:`EXERCISES_DIR` copied to the learner's ``exercise.py``.
        symbol: what the learner's file must define (a class or a function), substituted into the measurement.
        correct: the core's reference, in the form ``measure`` takes (that of ``symbol`` after ``adapt``).
        mistake: the lesson's own mistake, in the same form (e.g. :class:`tasks.lab.scale.UnscaledAttention`).
        measure: ``(thing, seed) -> values``, one per entry of ``measures``, in their order.
        measures: what ``measure`` returns, with the tolerance of each.
        fix: (the mistaken line, its correction), stripped of indentation: used by the tests only, which apply it
            to show that the check passes a fixed file. Never shown to the learner.
        observe: what EXERCISE.md tells the learner to look at, per language.
        adapt: turns the learner's ``symbol`` into the form ``measure`` takes (the identity unless they differ).
    """

    lesson: str
    file: str
    symbol: str
    correct: Any
    mistake: Any
    measure: Callable[[Any, int], list[float]]
    measures: tuple[Measure, ...]
    fix: tuple[str, str]
    observe: dict[str, str]
    adapt: Callable[[Any], Any] = _same


@dataclass
class ExerciseCheck:
    """What ``check_exercise`` found: ``fixed`` when every measure of the learner's code is within its tolerance of
    the correct value and further than that from the mistake's; ``evidence`` holds (measure, learner's value,
    correct value, mistake's value); ``message`` the verdict and the evidence as a table."""

    fixed: bool
    evidence: list[tuple[str, float, float, float]]
    message: str


# --- inputs shared by the measures --------------------------------------------------------------------------
D_K = 64  # head width of the kernel measures: wide enough for a missing 1/√d_k to saturate the softmax
N = 12  # tokens


def _unit_qkv(seed: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """float64 q, k, v ``(2, 2, N, D_K)`` with unit-variance components, and a padding mask ``(2, 1, 1, N)`` that
    hides the last 4 keys of the second sequence."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(3, 2, 2, N, D_K, generator=gen, dtype=torch.float64)
    mask = torch.ones(2, 1, 1, N, dtype=torch.bool)
    mask[1, ..., -4:] = False
    return q, k, v, mask


def _attend(kernel_class: type, q: Tensor, k: Tensor, v: Tensor, **kwargs) -> tuple[Tensor, Tensor]:
    out, weights = kernel_class().eval()(q, k, v, need_weights=True, **kwargs)
    if weights is None:
        raise ValueError(f"{kernel_class.__name__} returned no weights with need_weights=True; return "
                         "(out, weights) as core.attention.AttentionKernel does")
    return out, weights


def _future_drift(forward: Callable[[Tensor], Tensor], ids: Tensor, t: int, vocab: int, low: int) -> float:
    """max |logits[:, :t+1]| change when every token after ``t`` of ``ids`` ``(B, T)`` becomes another real token
    (ids ``low``..``vocab``-1), relative to the largest logit: 0 for a causal model."""
    changed = ids.clone()
    changed[:, t + 1:] = low + (changed[:, t + 1:] - low + 1) % (vocab - low)  # every later token differs
    with torch.no_grad():
        before, after = forward(ids)[:, : t + 1], forward(changed)[:, : t + 1]  # (B, t+1, V)
    return float((after - before).abs().max() / before.abs().max())


# --- the lessons' measurements ------------------------------------------------------------------------------
def _scale_measure(kernel_class: type, seed: int) -> list[float]:
    q, k, v, mask = _unit_qkv(seed)
    out, weights = _attend(kernel_class, q, k, v, mask=mask)
    reference, _ = reference_attention(q, k, v, mask)
    return [float((out - reference).abs().max()), entropy(weights)]


def _kernel_leaks(kernel_class: type, seed: int) -> list[float]:
    """Weight on future keys (causal), weight on padded keys, and max |output − the core's| (both masks)."""
    q, k, v, mask = _unit_qkv(seed)
    _, causal = _attend(kernel_class, q, k, v, is_causal=True)
    _, padded = _attend(kernel_class, q, k, v, mask=mask)
    out, _ = _attend(kernel_class, q, k, v, mask=mask, is_causal=True)
    reference, _ = reference_attention(q, k, v, mask, is_causal=True)
    future = torch.ones(N, N, dtype=torch.bool).triu(1)  # (N, N) key after query
    return [float((causal * future).sum(-1).mean()), float((padded * ~mask).sum(-1).mean()),
            float((out - reference).abs().max())]


def _mask_measure(kernel_class: type, seed: int) -> list[float]:
    """The kernel's leaks, then the drift of a translation decoder whose self-attention uses it."""
    torch.manual_seed(seed)
    model = build_transformer("tiny").eval()  # vocabulary 64; ids 0..3 are special
    for layer in model.decoder.layers:
        layer.self_attn.kernel = kernel_class()
    gen = torch.Generator().manual_seed(seed)
    src, tgt = torch.randint(4, 64, (2, 2, N), generator=gen)
    return [*_kernel_leaks(kernel_class, seed), _future_drift(lambda ids: model(src, ids), tgt, N // 2, 64, 4)]


def _causal_mask_measure(kernel_class: type, seed: int) -> list[float]:
    """The kernel's weight on future keys, then the drift of a language model whose self-attention uses it."""
    torch.manual_seed(seed)
    model = build_language_model("tiny", vocab_size=32).eval()
    for layer in model.decoder.layers:
        layer.self_attn.kernel = kernel_class()
    ids = torch.randint(0, 32, (2, N), generator=torch.Generator().manual_seed(seed))
    return [_kernel_leaks(kernel_class, seed)[0], _future_drift(model, ids, N // 2, 32, 0)]


def _position_measure(make: Callable[..., Any], seed: int) -> list[float]:
    """The table against §3.5's, its value at (position 0, dimension 0), and the drift of a sinusoidal model's
    outputs when its table is replaced by this one."""
    d_model = 32
    table = make(d_model, 64).embed(torch.zeros(1, 64, d_model, dtype=torch.float64))[0]  # (64, D)
    torch.manual_seed(seed)
    model = build_transformer("tiny", max_len=64).eval()  # d_model 32, sinusoidal positions
    src, tgt = torch.randint(4, 64, (2, 2, N), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        before = model(src, tgt)  # (B, T, V)
        model.position = make(d_model, 64)
        after = model(src, tgt)
    return [float((table - sinusoid_table(64, d_model).double()).abs().max()), float(table[0, 0]),
            float((after - before).abs().max() / before.abs().max())]


def _init_measure(init: Callable[[Any], Any], seed: int) -> list[float]:
    """The std of the packed Q/K/V weights after ``init``, and the attention entropy and saturation of every map
    of the fresh model on random tokens."""
    torch.manual_seed(seed)
    model = build_transformer("tiny", d_model=64, heads=2, d_ff=128)  # d_k 32
    model = init(model).eval()
    src, tgt = torch.randint(4, 64, (2, 8, 16), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad(), record_attention(model) as maps:
        model(src, tgt)
        weights = list(maps.values())  # (B, H, Nq, Nk) each
    qkv = torch.cat([layer.self_attn.qkv.weight.detach().flatten() for layer in model.encoder.layers])
    rows = [w[..., 1:, :] for w in weights]  # (B, H, Nq-1, Nk): the decoder's row 0 is one-hot whatever the init
    return [float(qkv.std()), sum(map(entropy, rows)) / len(rows), sum(map(saturation, rows)) / len(rows)]


DEPTH = 6  # layers per stack of the norm exercise: Post-LN's gradient ratio is already ~4× Pre-LN's


def _deep_model(norm_first: bool, seed: int) -> Any:
    """The lesson's narrow model (:data:`tasks.lab.norm.WIDTH`) at depth :data:`DEPTH` + :data:`DEPTH`."""
    torch.manual_seed(seed)
    return build_transformer("tiny", **WIDTH, encoder_layers=DEPTH, decoder_layers=DEPTH, norm_first=norm_first)


def _with_residual(residual_class: type) -> Callable[[int], Any]:
    """A builder of the Pre-LN model (final norms included) whose every layer calls ``residual_class.residual``."""
    def build(seed: int) -> Any:
        model = _deep_model(True, seed)
        for layer in [*model.encoder.layers, *model.decoder.layers]:
            layer.residual = types.MethodType(residual_class.residual, layer)
        return model

    return build


def _norm_measure(build: Callable[[int], Any], seed: int) -> list[float]:
    """Gradient norm of the last decoder layer over the first at initialisation on one batch, and
    the drift of the model's outputs from the core's Pre-LN model of the same weights."""
    model = build(seed)
    src, tgt = torch.randint(4, 64, (2, 8, 10), generator=torch.Generator().manual_seed(seed))  # (B, N) each
    logits = model(src, tgt)  # (B, N, V)
    F.cross_entropy(logits.flatten(0, 1), tgt.flatten()).backward()  # the next-token shift is not needed here
    grads = layer_grad_norms(model)  # encoder layers 1…DEPTH, then decoder layers 1…DEPTH
    with torch.no_grad():
        reference = _deep_model(True, seed)(src, tgt)
    return [grads[-1] / grads[DEPTH], float((logits.detach() - reference).abs().max() / reference.abs().max())]


def _sinusoidal(d_model: int, length: int) -> SinusoidalPosition:
    """The core's sinusoidal scheme, built as the exercise's class is (``d_model``, ``length``)."""
    return SinusoidalPosition(d_model, initial_length=length)


def _post_ln_model(seed: int) -> Any:
    """The lesson's mistake in the exercise's model: the core's Post-LN placement (``norm_first`` off in every
    layer) with the stacks' final norms kept, so that the placement is the one difference from the correct model."""
    model = _deep_model(True, seed)
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        layer.norm_first = False
    return model


_OUTPUT = Measure("largest difference from the core reference's output (float64 inputs)",
                  "与核心参考实现输出的最大绝对差（float64 输入）", 1e-5)
_FUTURE = Measure("attention weight on later positions (causal)", "落在后面位置上的注意力权重（因果掩码）", 1e-6)
_CHECK_COMMAND = "`zoo lab --check {folder}`"

EXERCISES: dict[str, Exercise] = {e.lesson: e for e in (
    Exercise(
        "scale", "attention_scale.py", "Attention", ReferenceAttention, UnscaledAttention,
        _scale_measure,
        (_OUTPUT, Measure("attention entropy, unit-variance q and k, d_k 64 (nats)",
                          "注意力的熵，q、k 方差为 1，d_k 64（奈特）", 1e-4)),
        ("scores = q @ k.transpose(-2, -1)  # (B, H, Nq, Nk)",
         "scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, H, Nq, Nk)"),
        {"en": "the entropy of the attention rows: near 0 nats means a near one-hot softmax that passes almost no "
               "gradient back; a correct kernel keeps it near ln N for random queries and keys",
         "zh": "注意力各行的熵：接近 0 奈特说明 softmax 几乎是独热的，几乎传不回梯度；正确的核在随机的 q、k 上"
               "熵接近 ln N"}),
    Exercise(
        "mask", "masked_attention.py", "MaskedAttention", ReferenceAttention, ZeroFilledMaskAttention,
        _mask_measure,
        (_FUTURE, Measure("attention weight on padded keys", "落在填充位置上的注意力权重", 1e-6), _OUTPUT,
         Measure("decoder logits drift at positions ≤ t when later target tokens change (relative)",
                 "改变 t 之后的目标 token 时，解码器在 t 及之前位置输出的相对变化", 1e-5)),
        ("scores = scores.masked_fill(~mask, 0.0)", "scores = scores.masked_fill(~mask, float(\"-inf\"))"),
        {"en": "the weight each position puts on later positions and on padding, and whether a translation "
               "decoder's outputs at position t move when only the target tokens after t change",
         "zh": "每个位置落在后面位置和填充位置上的权重，以及只改变 t 之后的目标 token 时，翻译模型解码器在位置 t "
               "的输出会不会变"}),
    Exercise(
        "causal-mask", "masked_attention.py", "MaskedAttention", ReferenceAttention, ZeroFilledMaskAttention,
        _causal_mask_measure,
        (_FUTURE, Measure("language model logits drift at positions ≤ t when later tokens change (relative)",
                          "改变 t 之后的 token 时，语言模型在 t 及之前位置输出的相对变化", 1e-5)),
        ("scores = scores.masked_fill(~mask, 0.0)", "scores = scores.masked_fill(~mask, float(\"-inf\"))"),
        {"en": "whether a language model's outputs at position t move when only the tokens after t change: if they "
               "do, training reads the answer from the future and generation, which has no future, collapses",
         "zh": "只改变 t 之后的 token 时，语言模型在位置 t 的输出会不会变：如果会，训练就是从未来读到了答案，"
               "而没有未来可读的生成就会崩掉"}),
    Exercise(
        "position", "sinusoids.py", "Sinusoids", _sinusoidal, SwappedSinusoidalPosition, _position_measure,
        (Measure("largest difference from §3.5's sinusoid table", "与 §3.5 正弦表的最大绝对差", 1e-5),
         Measure("table value at position 0, dimension 0", "位置 0、维度 0 处的表值", 1e-6),
         Measure("outputs drift of a sinusoidal model read with this table (relative)",
                 "用这张表替换正弦位置编码后，模型输出的相对变化", 1e-5)),
        ("table[:, 0::2], table[:, 1::2] = torch.cos(angles), torch.sin(angles)",
         "table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)"),
        {"en": "the table's row at position 0 against the formula, and how far a model built with the core's "
               "sinusoidal positional encoding moves when this table replaces its own: the table must be the one the "
               "model was trained with",
         "zh": "表在位置 0 的那一行与公式是否一致，以及用这张表替换核心的正弦位置编码后模型输出变了多少："
               "表必须和训练时用的那张相同"}),
    Exercise(
        "init", "qkv_init.py", "init_qkv", _same, functools.partial(reinit_qkv, std=1.0), _init_measure,
        (Measure("std of the packed Q/K/V weight", "打包的 Q/K/V 权重的标准差", 0.1),
         Measure("attention entropy at initialisation (nats)", "初始化时注意力的熵（奈特）", 0.15),
         Measure("saturated attention rows at initialisation (max weight > 0.99)",
                 "初始化时饱和的注意力行（最大权重 > 0.99）", 0.05)),
        ("module.qkv.weight.normal_(0.0, 1.0)", "module.qkv.weight.normal_(0.0, 0.02)"),
        {"en": "the attention entropy and the share of saturated rows of a fresh model: the core's initialisation "
               "(Xavier) keeps the rows spread; the tolerances admit any fan-in-aware scale, e.g. N(0, 0.02²)",
         "zh": "新建模型的注意力熵和饱和行的比例：核心的初始化（Xavier）让各行保持分散；容差允许任何考虑了扇入的"
               "尺度，例如 N(0, 0.02²)"}),
    Exercise(
        "norm", "residual.py", "Residual", functools.partial(_deep_model, True), _post_ln_model,
        _norm_measure,
        (Measure(f"gradient norm at initialisation, last decoder layer / first (depth {DEPTH})",
                 f"初始化时梯度范数之比，解码器最后一层 / 第一层（深度 {DEPTH}）", 0.4),
         Measure("largest difference from the logits of the core's Pre-LN model (relative, same weights)",
                 "与核心 Pre-LN 模型（相同权重）输出的最大相对差", 1e-5)),
        ("return norm(x + self.drop_path(self.dropout(sublayer(x))))  # (B, N, D)",
         "return x + self.drop_path(self.dropout(sublayer(norm(x))))  # (B, N, D)"),
        {"en": f"the gradients of a fresh {DEPTH} + {DEPTH}-layer model, layer by layer: when those near the output "
               "are several times those near the input, a high learning rate without warm-up throws the top layers "
               "off; the placement of the layer normalisation decides it (the lesson norm trains both)",
         "zh": f"新建的 {DEPTH} + {DEPTH} 层模型逐层的梯度：靠近输出的层的梯度是靠近输入的层的好几倍时，不加预热的"
               "大学习率会把顶层带偏；这取决于层归一化放在哪里（实验课 norm 把两种都训练了一遍）"},
        _with_residual),
)}

# Lessons whose subject is a setting or a measurement, not a piece of code with a mistake in it.
NO_EXERCISE = {
    "warmup": "the schedule is a setting (a warm-up length), not code to fix",
    "temperature": "it measures decoding settings", "sampling": "it measures decoding settings",
    "params": "it is a measurement (parameter accounting)", "small-data": "it measures data sizes",
    "swin-windows": "it measures the cost and reach of windows", "extrapolation": "it measures lengths",
    "exposure-bias": "it measures a training procedure against decoding",
    "moe-routing": "the balancing loss is a weight of the training loss (a setting), not code to fix",
}


def get_exercise(name: str) -> Exercise:
    """The exercise of lesson ``name``; an unknown lesson, or one without an exercise, is a ValueError."""
    get_lesson(name)  # unknown lesson: unknown_name's error
    if name not in EXERCISES:
        why = NO_EXERCISE.get(name, "its mistake is not a piece of code")
        raise ValueError(f"lesson {name!r} has no exercise: {why}. Lessons with an exercise: "
                         f"{', '.join(sorted(EXERCISES))}.")
    return EXERCISES[name]


# --- the learner's folder -----------------------------------------------------------------------------------
_WORDS = {
    "en": {
        "title": "# Exercise: {title}",
        "intro": "`exercise.py` holds the mistake of the lesson `{name}` (`zoo lab {name}`) as code left in place: "
                 "its docstring states the symptom, not the fix. Find the line that causes it and change it; the file "
                 "runs on its own (`python exercise.py`).",
        "observe": "## What to observe", "check": "## How to check",
        "how": "Run {command}. It imports your `exercise.py`, puts its `{symbol}` into the lesson's measurement beside "
               "the core's reference and the lesson's own mistake, on the same seed and inputs (a few seconds), and "
               "says whether your fix restores the correct behaviour, with the numbers. It is accepted when every "
               "measure is within its tolerance of the correct value and further than that from the mistake's.",
        "measure": "measure", "tolerance": "counts as correct within", "yours": "yours", "correct": "correct",
        "mistake": "with the mistake",
        "fixed": "Fixed: every measure of your `{symbol}` ({path}) is within its tolerance of the correct value "
                 "and away from the mistake's.",
        "not_fixed": "Not fixed yet: your `{symbol}` ({path}) is off the correct value on: {off}.",
    },
    "zh": {
        "title": "# 练习：{title}",
        "intro": "`exercise.py` 里以代码的形式保留了实验课 `{name}`（`zoo lab {name}`）中的错误：文件的文档字符串"
                 "只描述症状，不给出修法。找到导致它的那一行并改正；这个文件可以单独运行（`python exercise.py`）。",
        "observe": "## 观察什么", "check": "## 如何检查",
        "how": "运行 {command}。它会导入你的 `exercise.py`，把其中的 `{symbol}` 放进这节实验课的测量里，与核心的参考"
               "实现和实验课自己的错误版本并排，用相同的随机种子和输入测量（几秒钟），并给出数字，告诉你的修改是否"
               "恢复了正确的行为。每一项测量都在正确值的容差之内、并且与错误版本的差超过该容差时，才算修好。",
        "measure": "测量", "tolerance": "容差", "yours": "你的", "correct": "正确", "mistake": "错误版本",
        "fixed": "已修好：你的 `{symbol}`（{path}）的每一项测量都在正确值的容差之内，并且远离错误版本的值。",
        "not_fixed": "还没修好：你的 `{symbol}`（{path}）在这些测量上偏离正确值：{off}。",
    },
}


def exercise_markdown(name: str, folder: Path, lang: str = "en") -> str:
    """``EXERCISE.md`` of lesson ``name``'s exercise in ``folder``, in ``lang``: what the file holds, what to
    observe, how to check, and the tolerance of each measure."""
    exercise, words = get_exercise(name), _WORDS[check_lang(lang)]
    lesson = get_lesson(name)
    tolerances = markdown_table([{words["measure"]: getattr(m, lang), words["tolerance"]: f"{m.tolerance:g}"}
                                 for m in exercise.measures])
    return "\n\n".join([
        words["title"].format(title=lesson.title_zh if lang == "zh" else lesson.title),
        words["intro"].format(name=name), words["observe"], exercise.observe[lang] + ("。" if lang == "zh" else "."),
        words["check"],
        words["how"].format(command=_CHECK_COMMAND.format(folder=folder), symbol=exercise.symbol),
        tolerances,
    ]) + "\n"


def write_exercise(name: str, out: Path, lang: str = "en") -> Path:
    """Write lesson ``name``'s exercise to folder ``out``: ``exercise.py`` (the mistake, for the learner to fix),
    ``EXERCISE.md`` (in ``lang``) and ``exercise.json`` (the lesson and language ``check_exercise`` reads).

    Returns ``out``. Refuses to overwrite an ``exercise.py`` that differs from the exercise (the learner's work).
    """
    exercise = get_exercise(name)
    lang = check_lang(lang)
    out = Path(out)
    source = (EXERCISES_DIR / exercise.file).read_text(encoding="utf-8")
    target = out / "exercise.py"
    if target.exists() and target.read_text(encoding="utf-8") != source:
        raise ValueError(f"{target} exists and holds other code (your edits?); move it away or choose another "
                         "folder with --out")
    write_text_atomic(target, source)
    write_text_atomic(out / "EXERCISE.md", exercise_markdown(name, out, lang))
    write_text_atomic(out / RECORD, json.dumps({"lesson": name, "lang": lang}, indent=2) + "\n")
    return out


def _read_record(folder: Path) -> tuple[Exercise, str]:
    record = folder / RECORD
    if not folder.is_dir():
        raise FileNotFoundError(f"exercise folder {folder} does not exist; write one with zoo lab NAME --exercise")
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
        name, lang = data["lesson"], data.get("lang", "en")
    except FileNotFoundError:
        raise FileNotFoundError(f"{record} is missing, so {folder} is not an exercise folder; write one with "
                                "zoo lab NAME --exercise") from None
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{record} is not the record zoo lab --exercise writes ({{\"lesson\": NAME, \"lang\": "
                         "LANG}); write the exercise again") from None
    return get_exercise(name), check_lang(lang)


def load_learner(folder: Path, symbol: str) -> Any:
    """``symbol`` as defined by ``folder/exercise.py``, imported as a fresh module (the learner's own code).

    Every way the file can fail to give it is a one-line ValueError naming the file and what is wrong.
    """
    path = folder / "exercise.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; write the exercise again with zoo lab NAME --exercise")
    # Compiled from its text, not through the import system: a cached .pyc keyed on the file's mtime and size would
    # hide an edit that keeps both (a sin/cos swap made within the second), and the learner's folder stays clean.
    module = types.ModuleType(f"zoo_lab_exercise_{path.parent.name}")
    module.__file__ = str(path)
    try:
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)
    except SyntaxError as error:
        raise ValueError(f"{path}, line {error.lineno}: syntax error ({error.msg}); fix it and check again") from None
    except Exception as error:  # the learner's code may raise anything at import
        raise ValueError(f"{path} failed to import: {_one_line(error)}") from None
    if not hasattr(module, symbol):
        raise ValueError(f"{path} defines no {symbol!r}: the check measures {symbol}, so keep its name "
                         "(rename it back, or write the exercise again in another folder)")
    return getattr(module, symbol)


def _one_line(error: Exception) -> str:
    """``Type: message`` of ``error``, its message cut to the first line (torch's errors can run over several)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _off(learner: float, correct: float, mistake: float, tolerance: float) -> bool:
    """Whether a learner's value does not count as correct: outside the tolerance, not finite, or no further
    from the mistake's value than the tolerance."""
    return not (math.isfinite(learner) and abs(learner - correct) <= tolerance
                and abs(learner - mistake) > tolerance)


def check_exercise(folder: Path, seed: int = 0) -> ExerciseCheck:
    """Measure the learner's code in exercise ``folder`` beside the core's reference and the lesson's mistake.

    Same seed and inputs for the three; see :class:`ExerciseCheck`. The message is in the exercise's language.
    """
    folder = Path(folder)
    exercise, lang = _read_record(folder)
    words = _WORDS[lang]
    path = folder / "exercise.py"
    learner = load_learner(folder, exercise.symbol)
    try:
        yours = exercise.measure(exercise.adapt(learner), seed)
    except Exception as error:  # the learner's code runs inside the measurement
        raise ValueError(f"{path}: {exercise.symbol} failed in the measurement: {_one_line(error)}") from None
    correct = exercise.measure(exercise.correct, seed)
    mistake = exercise.measure(exercise.mistake, seed)
    evidence = [(getattr(m, lang), y, c, w) for m, y, c, w in zip(exercise.measures, yours, correct, mistake,
                                                                 strict=True)]
    off = [name for (name, y, c, w), m in zip(evidence, exercise.measures) if _off(y, c, w, m.tolerance)]
    verdict = (words["not_fixed"].format(symbol=exercise.symbol, path=path, off="; ".join(off)) if off
               else words["fixed"].format(symbol=exercise.symbol, path=path))
    table = markdown_table([{words["measure"]: name, words["yours"]: y, words["correct"]: c, words["mistake"]: w,
                             words["tolerance"]: f"{m.tolerance:g}"}
                            for (name, y, c, w), m in zip(evidence, exercise.measures)])
    return ExerciseCheck(not off, evidence, f"{verdict}\n\n{table}")
