"""Lesson "sampling": what the temperature does to generated text, on a character language model of Shakespeare.

A language model gives a distribution over the next token; how a token is *picked* from it is the ``decoding``
part. Greedy decoding (T = 0) takes the argmax; sampling draws from softmax(logits / T) (Ackley et al. 1985;
Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration", on what it does to generation). For open
text there is no single right answer, so the pitfall runs the other way from translation's (lesson
``temperature``): the mode is *not* the best text. Greedy and low-temperature text is the model's most likely
text and loops ("the the the ..."); high temperatures buy variety with tokens the model itself finds unlikely.

One model is trained once on the embedded Shakespeare subset (:mod:`tasks.lm.corpus`, the ``lm`` task's own
batches and optimizer) and continues the same prompts of the validation play greedily and at T = 0.7, 1.0 and
1.3, all draws from one seeded generator. Measured per decoding, over every sample (and, as a yardstick, over the
real text that follows each prompt):

* **distinct-1/2** over *words* (whitespace-separated; :func:`tasks.lab.temperature.distinct_n`): unique word
  n-grams / all word n-grams over all samples;
* **repeated n-grams**: the share of a sample's word 4-grams, and of its character 8-grams (which also see a loop
  inside one long "word", eeeeeeee), that already occurred earlier in the same sample, averaged over samples;
* **NLL per token** (nats per character) of the generated tokens under the model itself at T = 1 (its plain
  softmax), given the prompt: the text's likelihood, lower = more likely.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.generation import generate
from core.language_model import build_language_model
from plumbing.tables import markdown_table
from tasks.engine.distributed import DistInfo
from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.temperature import distinct_n
from tasks.lab.toolkit import figure, save, train_lm, translated
from tasks.lm.task import LMConfig, LMTask

TEMPERATURES = (0.7, 1.0, 1.3)
CONTEXT = 128  # training length: a prompt and its continuation stay inside it (no extrapolation mixed in)
PROMPT_TOKENS = 32  # characters of each prompt, taken from the validation play
NEW_TOKENS = CONTEXT - PROMPT_TOKENS  # characters generated per prompt
REPEAT_N = 4  # the word n-gram whose repeats within a sample measure looping
REPEAT_CHARS = 8  # the same in characters: also sees a loop inside one long "word" (eeeeeeee)


def lm_task(context: int, seed: int, batch_size: int = 32) -> LMTask:
    """The ``lm`` task on the embedded corpus with a character tokenizer, set up (text read and encoded), with the
    settings the lab's short runs use: AdamW at 3e-3, 30 warm-up steps."""
    task = LMTask(LMConfig(context=context, batch_size=batch_size, lr=3e-3, warmup=30, seed=seed, progress=False),
                  torch.device("cpu"), DistInfo())
    task.setup()
    return task


def repeated_ngrams(items: Sequence, n: int = REPEAT_N) -> float:
    """Share of the ``n``-grams of ``items`` (a text's words, or its characters) that already occurred earlier in it
    (0 when there are none): how much a sample loops."""
    grams = [tuple(items[i : i + n]) for i in range(len(items) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def prompts(tokens: Tensor, count: int, length: int = PROMPT_TOKENS, room: int = 0) -> tuple[Tensor, Tensor]:
    """``count`` prompts of ``length`` tokens spread evenly over ``tokens`` ``(N,)``, and the ``room`` real tokens
    that follow each: ``(count, length)``, ``(count, room)``."""
    last = len(tokens) - length - room
    if last < 0:
        raise ValueError(f"the text has {len(tokens)} tokens, fewer than a prompt of {length} plus {room} to follow; "
                         "give a longer split or shorter prompts")
    starts = torch.linspace(0, last, count).long().tolist()
    return (torch.stack([tokens[s : s + length] for s in starts]),
            torch.stack([tokens[s + length : s + length + room] for s in starts]))


@torch.no_grad()
def continuation_nll(model: nn.Module, ids: Tensor, prompt_length: int) -> Tensor:
    """Mean NLL per token (nats) of each row's tokens after its first ``prompt_length`` under ``model`` at T = 1.

    Shape:
        ids ``(B, N)`` -> ``(B,)``.
    """
    logits = model.eval()(ids[:, :-1]).double()  # (B, N - 1, V)
    nll = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (B, N - 1)
    return nll[:, prompt_length - 1 :].mean(1)


def text_scores(texts: Sequence[str], nll: Tensor) -> dict[str, float]:
    """Diversity (word distinct-1/2), looping (repeated word 4-grams and character 8-grams within a text) and
    likelihood (``nll``: mean NLL per token of each text) of ``texts``."""
    return {"distinct_1": distinct_n(list(texts), 1), "distinct_2": distinct_n(list(texts), 2),
            "repeated_4grams": statistics.fmean(repeated_ngrams(t.split()) for t in texts),
            "repeated_char_8grams": statistics.fmean(repeated_ngrams(t, REPEAT_CHARS) for t in texts),
            "nll": float(nll.mean())}


def sample_texts(model: nn.Module, task: LMTask, prompt_ids: Tensor, temperature: float, new_tokens: int,
                 draws: int, seed: int, judge: nn.Module | None = None) -> tuple[list[str], dict[str, float]]:
    """``draws`` continuations of each prompt (``temperature`` 0: greedy, one draw) from one generator seeded with
    ``seed``, as text, and their :func:`text_scores`, the likelihood under ``judge`` (default: ``model``)."""
    draws = 1 if temperature == 0 else draws
    batch = prompt_ids.repeat(draws, 1)  # (draws · P, prompt): every prompt once per draw
    generator = torch.Generator().manual_seed(seed)
    ids = generate(model.eval(), batch, new_tokens, temperature, generator=generator)  # (draws · P, prompt + new)
    texts = [task.tokenizer.decode(row) for row in ids[:, prompt_ids.shape[1] :].tolist()]
    return texts, text_scores(texts, continuation_nll(judge or model, ids, prompt_ids.shape[1]))


def measure(model: nn.Module, task: LMTask, n_prompts: int, draws: int, new_tokens: int, seed: int,
            judge: nn.Module | None = None, prompt_tokens: int = PROMPT_TOKENS,
            temperatures: Sequence[float] = TEMPERATURES) -> tuple[dict[str, dict], dict[str, str]]:
    """Scores of greedy decoding, of sampling at each of ``temperatures`` and of the real continuations of
    ``n_prompts`` prompts of the validation play, and the first prompt's continuation under each (the samples
    shown), keyed "real text", "greedy", "T=0.7", ..."""
    prompt_ids, real = prompts(task.ids["valid"], n_prompts, prompt_tokens, room=new_tokens)
    real_texts = [task.tokenizer.decode(row) for row in real.tolist()]
    rows = {"real text": text_scores(real_texts, continuation_nll(judge or model, torch.cat((prompt_ids, real), 1),
                                                                  prompt_ids.shape[1]))}
    shown = {"prompt": task.tokenizer.decode(prompt_ids[0].tolist()), "real text": real_texts[0]}
    for name, t in (("greedy", 0.0), *((f"T={t}", t) for t in temperatures)):
        texts, rows[name] = sample_texts(model, task, prompt_ids, t, new_tokens, draws, seed, judge)
        shown[name] = texts[0]
    return rows, shown


def _plot(rows: dict[str, dict], path) -> str:
    fig, axes = figure(1, 3, width=4.2)
    temps = list(TEMPERATURES)
    sampled = [rows[f"T={t}"] for t in temps]
    panels = (("distinct_1", "distinct-1 (words)"), ("repeated_char_8grams", "repeated character 8-grams in a sample"),
              ("nll", "NLL per token under the model (nats)"))
    for ax, (key, title) in zip(axes[0], panels):
        ax.plot(temps, [r[key] for r in sampled], marker="o", label="sampling")
        ax.axhline(rows["greedy"][key], color="k", ls="--", lw=1, label="greedy")
        ax.axhline(rows["real text"][key], color="C2", ls=":", lw=1, label="the real continuation")
        ax.set(xlabel="temperature T", title=title, xticks=temps)
        ax.legend(fontsize=7)
    return save(fig, path)


def _holds(rows: dict[str, dict]) -> bool:
    """Lower T: higher likelihood, and greedy loops more than T = 1.3; higher T: more diversity, lower likelihood.
    (Sampled text rarely repeats an 8-gram at all, so the sampled temperatures are not ranked by looping.)"""
    g, (low, mid, high) = rows["greedy"], (rows[f"T={t}"] for t in TEMPERATURES)
    return (g["nll"] < low["nll"] < mid["nll"] < high["nll"] and low["distinct_1"] < high["distinct_1"]
            and g["repeated_char_8grams"] > high["repeated_char_8grams"])


def run(settings: LabSettings) -> LessonResult:
    task = lm_task(CONTEXT, settings.seed, batch_size=16)  # 2,048 tokens a step, as the other lessons
    steps = settings.steps(2000, 500)
    torch.manual_seed(settings.seed)
    model = build_language_model("tiny", vocab_size=task.tokenizer.vocab_size, max_len=CONTEXT, dropout=0.0)
    log = train_lm(model, task, steps, progress=settings.progress, desc="model")
    n_prompts, draws, new_tokens = (8, 4, NEW_TOKENS) if settings.quick else (16, 8, NEW_TOKENS)
    rows, shown = measure(model, task, n_prompts, draws, new_tokens, settings.seed)
    findings = {"steps": steps, "train_loss": log.final(), "prompts": n_prompts, "draws": draws,
                "new_tokens": new_tokens, **rows, "samples": shown}
    table = [{"decoding": name, "NLL/token": r["nll"], "repeated word 4-grams": r["repeated_4grams"],
              "repeated char 8-grams": r["repeated_char_8grams"],
              "distinct-1": r["distinct_1"], "distinct-2": r["distinct_2"]} for name, r in rows.items()]
    (verdict, body), (verdict_zh, body_zh) = (_text(findings, log.final(), table, lang) for lang in ("en", "zh"))
    plot = _plot(rows, settings.out / "sampling.png")
    return LessonResult(verdict, _holds(rows), findings, body, [plot], verdict_zh, body_zh)


# The Chinese of the table's headings and the decodings' names (the notes are written per language in _text).
WORDS_ZH = {"decoding": "解码方式", "greedy": "贪心", "real text": "真实文本", "prompt": "提示",
            "repeated word 4-grams": "重复的词 4-gram", "repeated char 8-grams": "重复的字符 8-gram"}


def _text(f: dict, train_loss: float, table: list[dict], lang: str) -> tuple[tuple[str, str], str]:
    """The verdict and the body in ``lang`` ("en" or "zh") from the same numbers (``table``: English headings)."""
    g, (low, mid, high), real = f["greedy"], (f[f"T={t}"] for t in TEMPERATURES), f["real text"]
    shown, steps, n_prompts, new_tokens, draws = f["samples"], f["steps"], f["prompts"], f["new_tokens"], f["draws"]
    names = [name for name in shown if name in f]  # the decodings and the real text, as measured
    closest = min((n for n in names if n != "real text"), key=lambda n: abs(f[n]["nll"] - real["nll"]))
    words = WORDS_ZH if lang == "zh" else {}
    samples = "\n".join(f"- **{words.get(name, name)}**: `{' '.join(shown[name].split())}`" for name in shown)
    if lang == "zh":
        verdict = (
            f"贪心 / T = 0.7 / 1.0 / 1.3：生成文本在模型下每个字符的 NLL 为 {g['nll']:.2f} / {low['nll']:.2f} / "
            f"{mid['nll']:.2f} / {high['nll']:.2f}（真实文本 {real['nll']:.2f}），重复的字符 8-gram "
            f"{g['repeated_char_8grams']:.0%} / {low['repeated_char_8grams']:.0%} / {mid['repeated_char_8grams']:.0%} "
            "/ "
            f"{high['repeated_char_8grams']:.0%}，词的 distinct-1 {g['distinct_1']:.2f} / {low['distinct_1']:.2f} / "
            f"{mid['distinct_1']:.2f} / {high['distinct_1']:.2f}。",
            "可能性最高的文本并不是好文本：贪心解码会原地打转，而且比真实文本的似然高得多；温度越高，多样性越多，"
            f"代价是模型认为不太可能的字符；最接近真实文本似然的是 {words.get(closest, closest)}。开放式生成要采样；"
            "只有需要一个忠实答案时才用贪心解码。",
        )
        body = (f"## 同一个模型（{steps} 步，训练损失 {train_loss:.2f}）；从验证集剧本中取 {n_prompts} 个 "
                f"{PROMPT_TOKENS} 个字符的提示，生成 {new_tokens} 个字符，每个温度抽样 {draws} 次，一个种子\n\n"
                f"{markdown_table(translated(table, words))}\n\n"
                "*NLL/token*：生成字符在模型（T = 1）下的平均负对数似然（nats）。"
                f"*重复的 n-gram*：一段样本中词的 {REPEAT_N}-gram（字符的 {REPEAT_CHARS}-gram）在同一样本前文中"
                "已出现过的比例（各样本取均值）。*distinct-n*：所有样本中不重复的词 n-gram 占全部词 n-gram 的比例。"
                "*真实文本*：验证集剧本中每个提示原本的后续。\n\n"
                f"## 第一个提示的续写（空白已合并）\n\n{samples}\n")
        return verdict, body
    verdict = (
        f"Greedy / T = 0.7 / 1.0 / 1.3: NLL per character of the text under the model {g['nll']:.2f} / "
        f"{low['nll']:.2f} / {mid['nll']:.2f} / {high['nll']:.2f} (the real text {real['nll']:.2f}), repeated "
        f"character 8-grams {g['repeated_char_8grams']:.0%} / {low['repeated_char_8grams']:.0%} / "
        f"{mid['repeated_char_8grams']:.0%} / {high['repeated_char_8grams']:.0%}, word distinct-1 "
        f"{g['distinct_1']:.2f} / {low['distinct_1']:.2f} / {mid['distinct_1']:.2f} / {high['distinct_1']:.2f}.",
        f"The most likely text is not good text: greedy decoding loops and is far likelier than real text, higher "
        f"temperatures buy diversity with characters the model finds unlikely; {closest} comes closest to the real "
        "text's likelihood. Sample for open text; decode greedily only where one faithful answer is wanted.",
    )
    body = (f"## One model ({steps} steps, training loss {train_loss:.2f}); {n_prompts} prompts of {PROMPT_TOKENS} "
            f"characters from the validation play, {new_tokens} characters generated, {draws} draws per "
            f"temperature, one seed\n\n{markdown_table(table)}\n\n"
            "*NLL/token*: mean negative log-likelihood (nats) of the generated characters under the model at T = 1. "
            f"*Repeated n-grams*: share of a sample's word {REPEAT_N}-grams (character {REPEAT_CHARS}-grams) seen "
            "earlier in the same sample (mean over samples). *distinct-n*: unique word n-grams / all word n-grams "
            "over all samples. *real text*: the validation play's own continuation of each prompt.\n\n"
            f"## The first prompt's continuations (whitespace folded)\n\n{samples}\n")
    return verdict, body
