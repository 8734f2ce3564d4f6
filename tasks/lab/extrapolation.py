"""Lesson "extrapolation": train a language model at one context length, read it at 2×, 4× and 8× that length.

The pitfall: a model only ever sees positions 0 … L − 1 in training, and nothing in the loss says what it should
do at position 4L. Press et al. (2022, "Train Short, Test Long") measure it as this lesson does: train at L,
report perplexity as the evaluation length grows (:mod:`tasks.lm.extrapolation`, their protocol; a sliding
window of stride L, so that at length L_eval every token past the first window is scored at a position in
L_eval − L … L_eval − 1, past anything training showed). Each of the six position schemes of the
core (:data:`core.position.POSITIONAL_SCHEMES`) trains the same tiny character model on the embedded
Shakespeare subset (the ``lm`` task's batches, optimizer and schedule) with the same seeds and budget:

* **sinusoidal** (Vaswani et al. 2017) and **RoPE** (Su et al. 2021) give unseen positions unseen angles;
* **learned** (Gehring et al. 2017) has no row for a position past its table: "not defined", never a wrap;
* **ALiBi** (Press et al. 2022) and **T5**'s bucketed bias (Raffel et al. 2020) are relative penalties that
  extend to any distance; **none** (NoPE, Haviv et al. 2022; Kazemnejad et al. 2023) leaves order to the causal
  mask alone.

The verdict reads the ratio ppl(8L) / ppl(L) per scheme: above :data:`BREAKS` the scheme breaks past its
training length.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

from core.language_model import build_language_model
from core.position import POSITIONAL_SCHEMES
from plumbing.tables import markdown_table
from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.sampling import lm_task
from tasks.lab.toolkit import train_lm, translated
from tasks.lm.curves import plot_curves, schemes_markdown
from tasks.lm.extrapolation import MULTIPLES, compare_schemes, headline, perplexity_at_lengths
from tasks.lm.task import LMTask

CONTEXT = 32  # the training length L (tokens = characters)
STRIDE = CONTEXT  # the sliding window's stride: each token is scored with at least L_eval − L tokens before it
BREAKS = 1.25  # ppl(8L) / ppl(L) above this: the scheme breaks past its training length


def ratio(rows: list[dict[str, Any]], multiple: int = MULTIPLES[-1]) -> float | None:
    """Perplexity at ``multiple`` × the training length over perplexity at the training length (rows of
    :func:`~tasks.lm.extrapolation.perplexity_at_lengths`); None where the longer length is not defined."""
    at = {row["length"]: headline(row) for row in rows}
    high = at[CONTEXT * multiple]
    return None if high is None else high["perplexity"] / at[CONTEXT]["perplexity"]


def train_and_measure(scheme: str, task: LMTask, steps: int, eval_tokens: int, settings: LabSettings) -> list[dict]:
    """One run: the tiny model with ``scheme`` trained on ``task`` (at ``CONTEXT``, from the task's seed), its
    perplexity at 1×–8× L on the first ``eval_tokens`` characters of the validation play."""
    seed = task.config.seed
    torch.manual_seed(seed)
    model = build_language_model("tiny", vocab_size=task.tokenizer.vocab_size, max_len=CONTEXT, position=scheme,
                                 dropout=0.0)
    train_lm(model, task, steps, progress=settings.progress, desc=f"{scheme}, seed {seed}")
    tokens = task.ids["valid"][:eval_tokens]
    return perplexity_at_lengths(model, tokens, [CONTEXT * m for m in MULTIPLES], STRIDE, batch_size=32,
                                 n_chars=len(tokens))  # one token per character


def run(settings: LabSettings) -> LessonResult:
    steps = settings.steps(1000, 300)
    seeds = [settings.seed + i for i in range(1 if settings.quick else 3)]
    eval_tokens = 4096 if settings.quick else 16_384
    tasks = [lm_task(CONTEXT, seed) for seed in seeds]  # one per seed: its batches, shared by the schemes
    measured = {s: [train_and_measure(s, task, steps, eval_tokens, settings) for task in tasks]
                for s in POSITIONAL_SCHEMES}
    table = compare_schemes(measured, CONTEXT, MULTIPLES, STRIDE)
    shown = [{**entry, "note": "not defined past L" if entry["mean"] is None else ""} for entry in table]
    ratios = {s: [ratio(rows) for rows in runs] for s, runs in measured.items()}
    mean = {s: None if None in r else statistics.fmean(r) for s, r in ratios.items()}
    undefined = [s for s, r in mean.items() if r is None]
    holds = (mean["alibi"] is not None and mean["sinusoidal"] is not None and mean["alibi"] < mean["sinusoidal"]
             and undefined == ["learned"])
    findings = {"steps": steps, "seeds": seeds, "train_length": CONTEXT, "stride": STRIDE,
                "eval_tokens": eval_tokens, "breaks_above": BREAKS, "ratio_8x": mean, "ratio_8x_by_seed": ratios,
                "table": table, "runs": measured}
    ratio_rows = [{"scheme": s, **{f"seed {seed}": r for seed, r in zip(seeds, ratios[s], strict=True)},
                   "mean": mean[s], "reading": "not defined past L" if mean[s] is None
                   else ("breaks" if mean[s] > BREAKS else "holds")} for s in POSITIONAL_SCHEMES]
    texts = {lang: _text(lang, mean, seeds, steps, eval_tokens, shown, ratio_rows) for lang in ("en", "zh")}
    plot_curves({s: runs[0] for s, runs in measured.items()}, CONTEXT, settings.out / "curves.png")
    (verdict, body), (verdict_zh, body_zh) = texts["en"], texts["zh"]
    return LessonResult(verdict, holds, findings, body, ["curves.png"], verdict_zh, body_zh)


# The Chinese of the tables' words (the notes are written per language in _text).
WORDS_ZH = {"not defined past L": "超出 L 后无定义", "breaks": "失效", "holds": "保持", "scheme": "位置方案",
            "mean": "均值", "reading": "判读"}


def _text(lang: str, mean: dict[str, float | None], seeds: list[int], steps: int, eval_tokens: int,
          shown: list[dict], ratio_rows: list[dict]) -> tuple[tuple[str, str], str]:
    """The verdict and the body in ``lang`` ("en" or "zh") from the same numbers."""
    broken = [s for s, r in mean.items() if r is not None and r > BREAKS]
    kept = [s for s, r in mean.items() if r is not None and r <= BREAKS]
    undefined = [s for s, r in mean.items() if r is None]
    by = ", ".join(f"{s} {mean[s]:.2f}×" for s in sorted(broken + kept, key=mean.get))
    if lang == "zh":
        words = {**WORDS_ZH, **{f"seed {seed}": f"种子 {seed}" for seed in seeds}}
        shown = [{**entry, "note": words.get(entry["note"], entry["note"])} for entry in shown]
        # tasks.lm.curves writes the table's fixed words in English: its two headings and the one-seed note
        schemes = (schemes_markdown(shown).replace("| scheme | seeds |", "| 位置方案 | 种子数 |", 1)
                   .replace("1 (no interval)", "1（无区间）"))
        verdict = (
            f"在 L = {CONTEXT} 上训练、在 8L = {8 * CONTEXT} 上读（8L 与 L 处困惑度之比，{len(seeds)} 个种子的均值）："
            f"{by}；{'、'.join(undefined) or '没有方案'}在超出 L 后无定义（可学习的位置表在那里没有对应的行）。",
            f"超出训练长度后，{'、'.join(broken) or '没有方案'}失效（比值 > {BREAKS:g}），"
            f"{'、'.join(kept) or '没有方案'}保持住了：要读多长就按多长训练"
            + (f"；输入会超过训练长度时，改用在这里保持住的方案（{'、'.join(kept)}）。" if kept else "。"),
        )
        body = (f"## 训练长度 1×–8× 处的困惑度（每次运行 {steps} 步，种子 {seeds}）\n\n"
                f"在验证集剧本的前 {eval_tokens:,} 个字符上用步长 {STRIDE} 的滑动窗口评估；"
                "给出各种子的均值和 95 % Student-t 区间（只有一个种子时不给区间）。\n\n"
                f"{schemes}\n\n## ppl(8L) / ppl(L)\n\n"
                f"{markdown_table(translated(ratio_rows, words))}\n\n"
                "正余弦位置编码和 RoPE 给超出 L 的位置分配的角度，训练中从未出现过；T5 的偏置按距离分桶学习，"
                "训练没碰到过的距离所在的桶保持初始值；ALiBi 的惩罚是距离的一条固定直线；不加位置时，"
                "顺序只靠因果掩码携带，窗口变长只改变多少个 token 分享注意力。\n\n"
                f"`curves.png` 画的是种子 {seeds[0]}。\n")
        return verdict, body
    verdict = (
        f"Trained at L = {CONTEXT} and read at 8L = {8 * CONTEXT} (perplexity at 8L / at L, mean of {len(seeds)} "
        f"seed{'s' * (len(seeds) > 1)}): {by}; {', '.join(undefined) or 'no scheme'} not defined past L "
        "(a learned table has no row there).",
        f"{', '.join(broken) or 'No scheme'} break{'s' * (len(broken) < 2)} past the training length (ratio > "
        f"{BREAKS:g}), {', '.join(kept) or 'none'} hold{'s' * (len(kept) < 2)}: train at the length you will read"
        + (f", or use a scheme that held here ({', '.join(kept)}) when inputs grow past it." if kept else "."),
    )
    body = (f"## Perplexity at 1×–8× the training length ({steps} steps per run, seeds {seeds})\n\n"
            f"Sliding window of stride {STRIDE} on the first {eval_tokens:,} characters of the validation play; "
            "mean over seeds with a 95 % Student-t interval (none with one seed).\n\n"
            f"{schemes_markdown(shown)}\n\n## ppl(8L) / ppl(L)\n\n{markdown_table(ratio_rows)}\n\n"
            "Sinusoidal and RoPE give positions past L angles no training step produced; T5's bias is learned per "
            "distance bucket, so the buckets of distances training never reached keep their initial values; ALiBi's "
            "penalty is a fixed line in the distance; with no positions the causal mask alone carries order, and "
            "a longer window changes only how many tokens share the attention.\n\n"
            f"`curves.png` shows seed {seeds[0]}.\n")
    return verdict, body

