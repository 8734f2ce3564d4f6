"""Lesson "causal-mask": a language model whose causal mask fills with 0 instead of −∞ trains well and generates badly.

Vaswani et al. 2017, §3.2.3: the decoder's self-attention masks illegal connections "by masking out (setting to
−∞)" their scores. Fill them with 0 instead and exp(0) = 1 is a real weight: every position still sees the tokens
after it. In a language model the token after position t *is* position t's target, so training learns to read
its answers through the leak and the training loss falls lower than an honest model's of the same seed and
budget. Generation has no future to read: it feeds one token at a time, and a single query has nothing masked,
so the buggy kernel computes what the correct one does and the model meets the world it was never trained in
(only the prompt, read in one pass, still leaks inside itself).

The same tiny model is trained twice on the embedded Shakespeare subset (the ``lm`` task's batches, optimizer and
schedule; same seed, data order and budget), once with :class:`tasks.lab.mask.ZeroFilledMaskAttention` in every
self-attention (the lesson ``mask`` shows the kernel on translation). Side by side:

* the **training loss** and the validation loss as training sees it (the future visible through the leak);
* the validation loss **scored honestly**, the same weights with the −∞ kernel put back: the loss of
  predicting each character from the past alone, which is what generation does;
* **generated text**: the continuations of the same prompts (greedy and T = 1), their likelihood under the
  *honest* model (a judge that never saw the future) and their looping (repeated word 4-grams) and diversity.
"""

from __future__ import annotations

import torch
from torch import nn

from core.language_model import LanguageModel, build_language_model
from plumbing.tables import markdown_table
from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.mask import use_zero_fill
from tasks.lab.sampling import lm_task, measure
from tasks.lab.toolkit import TrainLog, figure, save, smooth, train_lm, translated
from tasks.lm.extrapolation import token_nll
from tasks.lm.task import LMTask

CONTEXT = 64
VALID_TOKENS = 16_384  # of the validation play, scored in windows of CONTEXT
PROMPT = 16  # characters of each generation prompt; the continuation fills the context


def train_arm(task: LMTask, zero_fill: bool, steps: int, settings: LabSettings) -> tuple[LanguageModel, TrainLog]:
    """One arm: the tiny model built from the seed, its self-attention kernels switched (``zero_fill``), trained."""
    torch.manual_seed(settings.seed)
    model = build_language_model("tiny", vocab_size=task.tokenizer.vocab_size, max_len=CONTEXT, dropout=0.0)
    use_zero_fill(model, on=zero_fill)  # LanguageModel.decoder.layers[i].self_attn, as on the translation model
    log = train_lm(model, task, steps, progress=settings.progress, desc="0-filled mask" if zero_fill else "−∞ mask")
    return model, log


def validation_loss(model: nn.Module, task: LMTask, honest: bool) -> float:
    """Mean NLL per token of the validation play's first tokens in windows of ``CONTEXT``; ``honest``: with the
    core's −∞ kernel in every self-attention (the model's own kernel is put back afterwards)."""
    kernels = [layer.self_attn.kernel for layer in model.decoder.layers]
    if honest:
        use_zero_fill(model, on=False)
    try:
        return float(token_nll(model, task.ids["valid"][:VALID_TOKENS], CONTEXT).nanmean())
    finally:
        for layer, kernel in zip(model.decoder.layers, kernels, strict=True):
            layer.self_attn.kernel = kernel


def run(settings: LabSettings) -> LessonResult:
    task = lm_task(CONTEXT, settings.seed)
    steps = settings.steps(1500, 400)
    (right, right_log), (zero, zero_log) = (train_arm(task, leak, steps, settings) for leak in (False, True))
    n_prompts, draws = (8, 2) if settings.quick else (16, 4)
    arms = {}
    for name, model, log in (("−∞ (correct)", right, right_log), ("0 (the leak)", zero, zero_log)):
        generated, shown = measure(model, task, n_prompts, draws, CONTEXT - PROMPT, settings.seed, right, PROMPT,
                                   temperatures=(1.0,))
        arms[name] = {"train_loss": log.final(), "valid_loss_as_trained": validation_loss(model, task, False),
                      "valid_loss_honest": validation_loss(model, task, True),
                      "greedy": generated["greedy"], "sampled": generated["T=1.0"],
                      "samples": {k: shown[k] for k in ("prompt", "greedy", "T=1.0")}, "loss": log.loss}
    r, z = arms["−∞ (correct)"], arms["0 (the leak)"]
    holds = (z["train_loss"] < r["train_loss"] and z["valid_loss_honest"] > r["valid_loss_honest"]
             and z["sampled"]["nll"] > r["sampled"]["nll"])
    findings = {"steps": steps, "context": CONTEXT, "prompts": n_prompts, "draws": draws,
                **{("right" if arm is r else "zero_filled"): {k: v for k, v in arm.items() if k != "loss"}
                   for arm in (r, z)}}
    table = [{"mask fill": name, "training loss": a["train_loss"],
              "valid loss (as trained)": a["valid_loss_as_trained"], "valid loss (past only)": a["valid_loss_honest"],
              "generated NLL, T=1 (honest judge)": a["sampled"]["nll"],
              "generated NLL, greedy (honest judge)": a["greedy"]["nll"],
              "repeated char 8-grams, greedy": a["greedy"]["repeated_char_8grams"],
              "repeated char 8-grams, T=1": a["sampled"]["repeated_char_8grams"]} for name, a in arms.items()]
    verdict, body = _text(arms, table, steps, "en")
    verdict_zh, body_zh = _text(arms, translated(table, WORDS_ZH), steps, "zh")
    return LessonResult(verdict, holds, findings, body, [_plot(arms, settings)], verdict_zh, body_zh)


# The Chinese of the table's headings and the arms' names (the notes are written per language in _text).
WORDS_ZH = {"−∞ (correct)": "−∞（正确）", "0 (the leak)": "0（泄漏）", "greedy": "贪心", "T=1.0": "T=1.0",
            "mask fill": "掩码填充值", "training loss": "训练损失", "valid loss (as trained)": "验证损失（同训练）",
            "valid loss (past only)": "验证损失（只看过去）",
            "generated NLL, T=1 (honest judge)": "生成文本 NLL，T=1（诚实评判）",
            "generated NLL, greedy (honest judge)": "生成文本 NLL，贪心（诚实评判）",
            "repeated char 8-grams, greedy": "重复的字符 8-gram，贪心",
            "repeated char 8-grams, T=1": "重复的字符 8-gram，T=1"}


def _text(arms: dict[str, dict], table: list[dict], steps: int, lang: str) -> tuple[tuple[str, str], str]:
    """The verdict and the body in ``lang`` ("en" or "zh") from the same numbers; ``table`` in that language."""
    r, z = arms["−∞ (correct)"], arms["0 (the leak)"]
    words = WORDS_ZH if lang == "zh" else {}
    samples = "\n".join(f"- **{words.get(name, name)}, {words.get(how, how)}**: `{' '.join(a['samples'][how].split())}`"
                        for name, a in arms.items() for how in ("greedy", "T=1.0"))
    if lang == "zh":
        verdict = (
            f"因果掩码填 0 会把下一个字符泄漏给模型：训练损失 {z['train_loss']:.2f}，而掩码正确的模型是 "
            f"{r['train_loss']:.2f}（同一种子，{steps} 步）；可一旦像生成时那样只凭过去打分，它的验证损失是 "
            f"{z['valid_loss_honest']:.2f}，对方是 {r['valid_loss_honest']:.2f}。",
            f"用诚实的模型评判它生成的文本，T = 1 时每个字符 {z['sampled']['nll']:.2f} nats，对方 "
            f"{r['sampled']['nll']:.2f}（贪心：{z['greedy']['nll']:.2f} 对 {r['greedy']['nll']:.2f}）："
            "被掩码的分数要填 −∞；评价语言模型要看生成结果或诚实的留出集损失，不能只看训练损失。",
        )
        body = (f"## 同一种子、数据顺序和训练预算（{steps} 步，上下文 {CONTEXT}）\n\n{markdown_table(table)}\n\n"
                "*同训练*：用模型自己的注意力核，泄漏的模型因此能看到未来。*只看过去*：同一组权重换上填 −∞ 的核，"
                "这正是逐个 token 生成时算的东西。*生成文本 NLL*：续写出的字符由掩码正确的模型打分。重复的字符 8-gram "
                "与实验课 `sampling` 相同：一段样本中已经出现过的 8-gram 所占的比例（即原地打转）。\n\n"
                f"## 续写 \"{r['samples']['prompt']}\"（{CONTEXT - PROMPT} 个字符）\n\n{samples}\n")
        return verdict, body
    verdict = (
        f"Filled with 0, the causal mask leaks the next character: training loss {z['train_loss']:.2f} against "
        f"{r['train_loss']:.2f} for the correct mask (same seed, {steps} steps), but scored from the past alone, as "
        f"generation runs, its validation loss is {z['valid_loss_honest']:.2f} against {r['valid_loss_honest']:.2f}.",
        f"Its generated text costs the honest model {z['sampled']['nll']:.2f} nats per character at T = 1 against "
        f"{r['sampled']['nll']:.2f} (greedy: {z['greedy']['nll']:.2f} vs {r['greedy']['nll']:.2f}): fill masked "
        "scores with −∞, and judge a language model by generation or an honest held-out loss, never by its "
        "training loss alone.",
    )
    body = (f"## Same seed, data order and budget ({steps} steps, context {CONTEXT})\n\n{markdown_table(table)}\n\n"
            "*As trained*: the model's own kernel, so the leak sees the future. *Past only*: the same weights with "
            "the −∞ kernel, which is what one-token-at-a-time generation computes. *Generated NLL*: the "
            "continuations' characters scored by the correctly masked model. Repeated character 8-grams as in the "
            "lesson `sampling`: the share of a sample's 8-grams it already produced (loops).\n\n"
            f"## Continuations of \"{r['samples']['prompt']}\" "
            f"({CONTEXT - PROMPT} characters)\n\n{samples}\n")
    return verdict, body


def _plot(arms: dict[str, dict], settings: LabSettings) -> str:
    fig, axes = figure(1, 2, width=5.2)
    left, right = axes[0]
    for (name, arm), color in zip(arms.items(), ("C0", "C3")):
        left.plot(smooth(arm["loss"], 20), color=color, label=f"{name}: training loss")
        left.axhline(arm["valid_loss_honest"], color=color, ls="--", lw=1, label=f"{name}: valid, past only")
    left.set(xlabel="step", ylabel="cross-entropy (nats per character)", title="What training shows vs generation")
    left.legend(fontsize=7)
    keys = (("train_loss", "training loss"), ("valid_loss_honest", "valid loss\n(past only)"))
    xs = torch.arange(len(keys) + 1).float()
    for shift, (name, arm), color in zip((-0.2, 0.2), arms.items(), ("C0", "C3")):
        values = [arm[k] for k, _ in keys] + [arm["sampled"]["nll"]]
        bars = right.bar(xs + shift, values, width=0.4, color=color, label=name)
        right.bar_label(bars, fmt="%.2f", fontsize=8)
    right.set_xticks(xs.tolist(), [label for _, label in keys] + ["generated text,\nhonest judge"])
    right.set(ylabel="nats per character", title="Both numbers, side by side")
    right.legend(fontsize=7)
    return save(fig, settings.out / "causal_mask.png")
