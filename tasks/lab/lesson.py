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
from tasks.i18n import check_lang
from tasks.i18n.article import section


@dataclass(frozen=True)
class Lesson:
    """One pitfall: its name on the command line, the part of the architecture it is about, and its module.

    ``module`` must define ``run(settings: LabSettings) -> LessonResult``. ``sections`` are the numbers of the
    article's sections whose claim the lesson measures (see :data:`tasks.i18n.article.SECTIONS`), so a reader can
    go from a section to its lesson; ``title_zh`` and ``question_zh`` are the Chinese ``title`` and ``question``.
    """

    name: str
    title: str
    part: str  # the architecture part (see core.parts.PARTS) or "training" / "decoding"
    question: str  # what the learner finds out, one line
    module: str
    sections: tuple[str, ...] = ()  # e.g. ("5.2", "7.2")
    title_zh: str = ""
    question_zh: str = ""

    def load(self) -> Callable[[LabSettings], LessonResult]:
        return importlib.import_module(self.module).run


# The index is static so that `zoo lab --list` imports no lesson (and no torch model code).
LESSONS: dict[str, Lesson] = {lesson.name: lesson for lesson in (
    Lesson("scale", "The 1/√d_k scale", "attention",
           "What happens to the softmax, its entropy and the gradients without the 1/√d_k scale?",
           "tasks.lab.scale", ("2.3",), "1/√d_k 缩放",
           "去掉 1/√d_k 缩放后，softmax、注意力的熵和梯度会发生什么？"),
    Lesson("mask", "Masking with −∞, not 0", "attention",
           "How much weight leaks to future tokens when masked scores are filled with 0, and what does it do "
           "to decoding?", "tasks.lab.mask", ("5.2", "7.2"), "掩码填 −∞，而不是 0",
           "被掩码的分数填 0 时，有多少注意力权重漏到了后面的 token 上？这又会怎样影响解码？"),
    Lesson("norm", "Post-LN vs Pre-LN", "norm",
           "Which norm placement trains at depth 6, 12 and 24, with and without warm-up?", "tasks.lab.norm",
           ("4.1", "7.3"), "Post-LN 与 Pre-LN",
           "层数为 6、12、24 时，无论有没有预热，层归一化放在哪个位置的模型能训练起来？"),
    Lesson("warmup", "Noam warm-up", "training",
           "Does the warm-up matter, against a constant learning rate of the same peak?", "tasks.lab.warmup",
           ("7.1",), "Noam 预热", "和峰值相同的恒定学习率相比，预热到底有没有用？"),
    Lesson("position", "Positional information", "position",
           "No positions (a bag of words), swapped sin/cos, unscaled embeddings, and extrapolation past the "
           "training length", "tasks.lab.position", ("3.1", "3.2", "3.3", "7.5"), "位置信息",
           "不加位置（退化成词袋）、sin/cos 对调、嵌入不乘缩放因子，以及超出训练长度时的外推"),
    Lesson("temperature", "Greedy vs sampling temperature", "decoding",
           "What do temperatures 0.7, 1.0 and 1.3 do to BLEU and to diversity?", "tasks.lab.temperature",
           ("7.4",), "贪心解码与采样温度", "温度取 0.7、1.0、1.3 时，BLEU 和输出的多样性分别怎样变化？"),
    Lesson("init", "Q/K/V initialisation", "attention",
           "Too large a variance in Q/K/V saturates attention: entropy, the loss plateau, and the fix",
           "tasks.lab.init", ("5.3",), "Q/K/V 初始化",
           "Q/K/V 初始化的方差过大会让注意力饱和：看熵、看 loss 停滞，再看怎么修"),
    Lesson("params", "Where the parameters go", "embedding",
           "The article's per-layer estimates vs exact accounting, the embedding share, tying on and off",
           "tasks.lab.params", ("5.4",), "参数量花在哪里",
           "文章的逐层估算与精确清点对比，嵌入层所占的比例，以及共享与不共享嵌入权重的差别"),
    Lesson("small-data", "ViT, CNN and DeiT on small data", "training",
           "Does a ViT lose to a CNN of the same FLOPs at 10 %, 30 % and 100 % of the data, and does DeiT's "
           "distillation close the gap?", "tasks.lab.small_data", ("6.1",), "小数据上的 ViT、CNN 与 DeiT",
           "只用 10 %、30 % 和 100 % 的数据时，ViT 会不会输给 FLOPs 相同的 CNN？DeiT 的蒸馏能否补上这段差距？"),
    Lesson("swin-windows", "Swin's windows and the shift", "attention",
           "Do windows make attention linear in the image size, and what does the shift let cross the windows?",
           "tasks.lab.swin_windows", ("6.2",), "Swin 的窗口与移位",
           "窗口能否让注意力的计算量随图像大小线性增长？移位又让哪些信息跨过了窗口边界？"),
    # MoE is named only in the article's unnumbered introduction (as the large-model variant). It replaces the
    # feed-forward sublayer that §4.1 takes apart, and the lesson reads it with §6.4's three questions (where it
    # cut: the FFN; the flaw it claims: compute per token; its scope: general).
    Lesson("moe-routing", "How MoE routes tokens", "ffn",
           "Does the load collapse without the balancing loss, what do the capacity factor and top-1 vs top-2 "
           "drop and cost, and how does a batch-ranked capacity leak the future?", "tasks.lab.moe_routing",
           ("4.1", "6.4"), "MoE 如何分配 token",
           "去掉负载均衡损失后负载会不会坍缩？容量因子和 top-1、top-2 各丢掉多少 token、多花多少计算？"
           "按整批排序的容量又是怎样泄漏未来信息的？"),
    Lesson("exposure-bias", "Exposure bias: teacher forcing vs free running", "decoding",
           "How far does greedy decoding fall below the teacher-forced accuracy, position by position, and does "
           "scheduled sampling close the gap?", "tasks.lab.exposure_bias", ("4.3",),
           "曝光偏差：教师强制与自由生成",
           "贪心解码的准确率逐个位置比教师强制低多少？计划采样（scheduled sampling）能否缩小这个差距？"),
    Lesson("extrapolation", "Reading a language model past its training length", "position",
           "Trained at L, what perplexity does each position scheme give at 2L, 4L and 8L: which break, by how much?",
           "tasks.lab.extrapolation", ("7.5",), "让语言模型读超出训练长度的文本",
           "在长度 L 上训练后，各种位置方案在 2L、4L、8L 上的困惑度是多少：哪些会失效，差多少？"),
    Lesson("sampling", "Temperature on generated text", "decoding",
           "What do greedy decoding and T = 0.7, 1.0, 1.3 do to a language model's text: its looping, diversity and "
           "likelihood?", "tasks.lab.sampling", ("7.4",), "温度对生成文本的影响",
           "贪心解码以及 T = 0.7、1.0、1.3 会怎样改变语言模型生成的文本：重复打转、多样性和似然？"),
    Lesson("causal-mask", "A causal mask filled with 0: training looks fine, generation collapses", "attention",
           "How low does the leaking model's training loss go, and what are its honest loss and generated text?",
           "tasks.lab.causal_mask", ("4.2", "7.2"), "因果掩码填 0：训练看着正常，生成却崩了",
           "泄漏未来的模型训练损失能降到多低？它真实的损失和生成的文本又是什么样？"),
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
        verdict_zh: the verdict in Chinese, from the same numbers formatted the same way.
        body_zh: the body in Chinese: the same tables and numbers, Chinese headings and notes (``lesson.zh.md``).
    """

    verdict: tuple[str, str]
    holds: bool
    findings: dict[str, Any]
    body: str = ""
    figures: list[str] = field(default_factory=list)
    verdict_zh: tuple[str, ...] = ()
    body_zh: str = ""


# The fixed words of lesson.md in each language (LANGS of tasks.i18n); the English ones are lesson.md's since the lab
# began, and a test keeps them byte for byte.
_WORDS = {
    "en": {"title": "# Lesson: {title}", "part": "*Part of the architecture:* `{part}`. {question}",
           "verdict": "## Verdict", "holds": "Expected direction **holds**.",
           "fails": "Expected direction **does not hold** in this run.",
           "reproduce": "Reproduce: `{command}` ({seconds:.0f} s here)."},
    "zh": {"title": "# 实验课：{title}", "part": "*架构部分：* `{part}`。{question}",
           "sections": "*对应文章：* {sections}", "verdict": "## 结论", "holds": "预期的方向**成立**。",
           "fails": "预期的方向在这次运行中**不成立**。",
           "reproduce": "复现：`{command}`（本机用时 {seconds:.0f} 秒）。"},
}


def lesson_markdown(lesson: Lesson, result: LessonResult, lang: str, command: str, seconds: float) -> str:
    """``lesson.md`` (``lang`` "en") or ``lesson.zh.md`` ("zh") of ``result``: title, question, verdict, body,
    figures and the command that reproduces it. The one writer of both, so the two cannot drift; the Chinese page
    also names the article's sections the lesson measures (by number and title)."""
    words = _WORDS[check_lang(lang)]
    zh = lang == "zh"
    verdict, body = (result.verdict_zh, result.body_zh) if zh else (result.verdict, result.body)
    lines = [words["title"].format(title=lesson.title_zh if zh else lesson.title), "",
             words["part"].format(part=lesson.part, question=lesson.question_zh if zh else lesson.question), ""]
    if zh and lesson.sections:
        named = "；".join(f"§{number} {section(number).zh}" for number in lesson.sections)
        lines += [words["sections"].format(sections=named), ""]
    lines += [words["verdict"], "", *(f"> {line}  " for line in verdict), "",
              words["holds" if result.holds else "fails"], ""]
    if body:
        lines += [body.rstrip(), ""]
    lines += [f"![{figure}]({figure})" for figure in result.figures]
    lines += ["", words["reproduce"].format(command=command, seconds=seconds), ""]
    return "\n".join(lines)


def run_lesson(name: str, settings: LabSettings) -> LessonResult:
    """Run lesson ``name`` and write ``lesson.md``, ``lesson.zh.md`` and ``result.json`` under ``settings.out``."""
    lesson = get_lesson(name)
    run = lesson.load()
    settings.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = run(settings)
    seconds = time.perf_counter() - start
    for field_name in ("verdict", "verdict_zh"):
        lines = getattr(result, field_name)
        if len(lines) != 2:
            raise ValueError(f"lesson {name!r} must give a two-line {field_name}, got {len(lines)} lines: set "
                             f"LessonResult.{field_name} (the Chinese one from the same numbers as the English)")
    scale = f" --scale {settings.scale:g}" if settings.scale != 1 else ""  # the tests' and notebooks' smaller budgets
    command = f"zoo lab {name}{' --quick' if settings.quick else ''}{scale} --seed {settings.seed}"
    for lang, file_name in (("en", "lesson.md"), ("zh", "lesson.zh.md")):
        write_text_atomic(settings.out / file_name, lesson_markdown(lesson, result, lang, command, seconds))
    plain = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()}
    record = {"lesson": name, "settings": plain, "seconds": seconds, **asdict(result)}
    record.pop("body")
    record.pop("body_zh")
    write_text_atomic(settings.out / "result.json", json.dumps(record, indent=2, default=float) + "\n")
    return result
