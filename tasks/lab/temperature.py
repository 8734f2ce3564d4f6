"""Lesson "temperature": greedy decoding vs sampling from softmax(logits / T) at T = 0.7, 1.0 and 1.3.

The decoder gives a distribution over the next token; how a token is *picked* from it is a separate choice
(the ``decoding`` part). Greedy decoding takes the argmax and is deterministic; sampling draws from
softmax(logits / T) (``core.decoding.sample_decode``; Ackley et al. 1985 for the temperature, Holtzman et al.
2020 on its use in generation). T < 1 sharpens the distribution towards greedy, T > 1 flattens it. The classic
mistake is to reach for sampling (or a high temperature) where a single faithful output is wanted: for
translation there is one right answer per source, so every step away from the mode trades accuracy for
variety. Here one small model is trained once and decoded both ways with the same seed: sacreBLEU falls as T
rises while diversity — distinct-1/2 (unique n-grams over all generated n-grams) and the number of different
outputs over several samples of the same source — rises, past the diversity of the real references.
"""

from __future__ import annotations

import statistics

import torch

from core.decoding import greedy_decode, sample_decode, strip_special
from core.model import Transformer
from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.toolkit import (
    Seq2SeqData,
    batch,
    figure,
    save,
    small_transformer,
    train,
    translated,
    translation_data,
)

TEMPERATURES = (0.7, 1.0, 1.3)


def distinct_n(texts: list[str], n: int) -> float:
    """Share of unique n-grams among all n-grams of ``texts`` (distinct-n, Li et al. 2016); 0 if there are none."""
    grams = [tuple(words[i : i + n]) for words in (t.split() for t in texts) for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def decode_texts(model: Transformer, data: Seq2SeqData, src: torch.Tensor, temperature: float | None,
                 generator: torch.Generator | None = None) -> list[str]:
    """Greedy (``temperature=None``) or sampled translations of ``src`` ``(B, S)``, as text."""
    tok = data.tokenizer
    # Every reference has at most longest_train words: the cap only stops a hot sample that never says EOS.
    max_len = 2 * data.longest_train + 2
    if temperature is None:
        ids = greedy_decode(model, src, max_len=max_len)
    else:
        ids = sample_decode(model, src, temperature=temperature, max_len=max_len, generator=generator)
    return [tok.decode(seq) for seq in strip_special(ids, tok.eos_id, tok.pad_id)]


def score(hyps: list[str], refs: list[str]) -> dict[str, float]:
    """sacreBLEU, exact match, distinct-1/2 and mean length (words) of one set of translations."""
    from tasks.translation.metrics import translation_metrics

    metrics = translation_metrics(hyps, refs)
    return {"bleu": metrics["bleu"], "exact_match": metrics["exact_match"], "distinct_1": distinct_n(hyps, 1),
            "distinct_2": distinct_n(hyps, 2), "length": statistics.fmean(len(h.split()) for h in hyps)}


def decode_draws(model: Transformer, data: Seq2SeqData, temperature: float | None, draws: int, seed: int,
                 sources: int) -> list[list[str]]:
    """``draws`` decodings of the first ``sources`` test sentences, all from one generator seeded with ``seed``."""
    src, _ = batch(data, data.pairs["test"][:sources])  # (B, S)
    generator = torch.Generator().manual_seed(seed)
    return [decode_texts(model, data, src, temperature, generator) for _ in range(draws)]


def summarise(draws: list[list[str]], refs: list[str]) -> dict:
    """Mean and spread over the draws of each score, and different outputs per source across the draws."""
    scores = [score(hyps, refs) for hyps in draws]
    out = {k: statistics.fmean(s[k] for s in scores) for k in scores[0]}
    out["bleu_std"] = statistics.pstdev(s["bleu"] for s in scores)
    out["outputs_per_source"] = statistics.fmean(len(set(outs)) for outs in zip(*draws))
    return out


def _plot(rows: dict[str, dict], reference: dict, draws: int, path) -> str:
    fig, axes = figure(1, 3, width=4.2)
    temps = list(TEMPERATURES)
    sampled = [rows[f"T={t}"] for t in temps]
    greedy = rows["greedy"]
    panels = (("bleu", "sacreBLEU (test)"), ("distinct", "distinct-n"), ("outputs_per_source",
              f"different outputs per source ({draws} draws)"))
    for ax, (key, title) in zip(axes[0], panels):
        if key == "distinct":
            for n, marker in ((1, "o"), (2, "s")):
                line, = ax.plot(temps, [r[f"distinct_{n}"] for r in sampled], marker=marker, label=f"distinct-{n}")
                ax.axhline(greedy[f"distinct_{n}"], color=line.get_color(), ls="--", lw=1, label=f"greedy d-{n}")
                ax.axhline(reference[f"distinct_{n}"], color=line.get_color(), ls=":", lw=1, label=f"references d-{n}")
        else:
            err = [r["bleu_std"] for r in sampled] if key == "bleu" else None
            ax.errorbar(temps, [r[key] for r in sampled], yerr=err, marker="o", capsize=3, label="sampling")
            ax.axhline(greedy[key], color="k", ls="--", lw=1, label="greedy")
        ax.set(xlabel="temperature T", title=title, xticks=temps)
        ax.legend(fontsize=7)
    return save(fig, path)


def measure(model: Transformer, data: Seq2SeqData, draws: int, sources: int, seed: int) -> dict[str, dict]:
    """Scores of greedy decoding (decoded twice, to check determinism) and of sampling at each temperature."""
    refs = [t for _, t in data.text["test"][:sources]]
    greedy = decode_draws(model, data, None, 2, seed, sources)
    rows = {"greedy": {**summarise(greedy, refs), "deterministic": greedy[0] == greedy[1]}}
    for t in TEMPERATURES:
        rows[f"T={t}"] = summarise(decode_draws(model, data, t, draws, seed, sources), refs)
    return rows


def run(settings: LabSettings) -> LessonResult:
    data = translation_data(3000, seed=settings.seed)
    steps = settings.steps(300, 250)  # a moderate model on purpose: a perfect one leaves sampling little room
    model = small_transformer(data, seed=settings.seed)
    train(model, data, steps, lr=3e-3, seed=settings.seed, progress=settings.progress, desc="model")
    draws = 4 if settings.quick else 10
    sources = min(len(data.pairs["test"]), max(50, round(200 * settings.scale)))
    rows = measure(model, data, draws, sources, settings.seed)
    refs = [t for _, t in data.text["test"][:sources]]
    reference = {"distinct_1": distinct_n(refs, 1), "distinct_2": distinct_n(refs, 2)}
    g, (low, mid, high) = rows["greedy"], (rows[f"T={t}"] for t in TEMPERATURES)
    holds = (g["deterministic"] and g["bleu"] >= low["bleu"] >= mid["bleu"] >= high["bleu"]
             and all(low[k] <= high[k] for k in ("distinct_1", "distinct_2", "outputs_per_source")))
    findings = {"steps": steps, "draws": draws, "sources": sources, "references": reference, **rows}
    table = [{"decoding": name, "BLEU": r["bleu"], "BLEU std over draws": r["bleu_std"],
              "exact match": r["exact_match"], "distinct-1": r["distinct_1"], "distinct-2": r["distinct_2"],
              "outputs per source": r["outputs_per_source"], "mean length": r["length"]} for name, r in rows.items()]
    table.append({**dict.fromkeys(table[0]), "decoding": "references", "distinct-1": reference["distinct_1"],
                  "distinct-2": reference["distinct_2"]})
    (verdict, body), (verdict_zh, body_zh) = (_text(findings, table, lang) for lang in ("en", "zh"))
    plot = _plot(rows, reference, draws, settings.out / "temperature.png")
    return LessonResult(verdict, holds, findings, body, [plot], verdict_zh, body_zh)


# The Chinese of the table's headings and rows (the notes are written per language in _text).
WORDS_ZH = {"decoding": "解码方式", "greedy": "贪心", "BLEU std over draws": "各次抽样 BLEU 的标准差",
            "exact match": "完全匹配", "outputs per source": "每个源句的不同输出数", "mean length": "平均长度",
            "references": "参考译文"}


def _text(findings: dict, table: list[dict], lang: str) -> tuple[tuple[str, str], str]:
    """The verdict and the body in ``lang`` ("en" or "zh") from the same numbers (``table``: English headings)."""
    from plumbing.tables import markdown_table

    g, (low, mid, high) = findings["greedy"], (findings[f"T={t}"] for t in TEMPERATURES)
    steps, draws, sources, reference = findings["steps"], findings["draws"], findings["sources"], findings["references"]
    if lang == "zh":
        verdict = (
            f"以 T = 0.7 / 1.0 / 1.3 采样，BLEU 为 {low['bleu']:.1f} / {mid['bleu']:.1f} / {high['bleu']:.1f}"
            f"（贪心 {g['bleu']:.1f}），同时 distinct-1 从 {low['distinct_1']:.3f} 变为 {high['distinct_1']:.3f}，"
            f"distinct-2 从 {low['distinct_2']:.3f} 变为 {high['distinct_2']:.3f}，"
            f"一个源句在 {draws} 次抽样中的不同输出从 {low['outputs_per_source']:.1f} 个变成 "
            f"{high['outputs_per_source']:.1f} 个。",
            f"贪心解码{'每次都给出同样的输出' if g['deterministic'] else '这次并不确定（输出有变化）'}；"
            "温度越高，多样性越多、准确度越低，所以只要一个忠实的翻译时就用贪心解码"
            f"（参考译文的 distinct-2 为 {reference['distinct_2']:.3f}）。",
        )
        body = (f"## 同一个模型（{steps} 步）；{sources} 个测试源句，每个温度解码 {draws} 次，种子相同\n\n"
                f"{markdown_table(translated(table, WORDS_ZH))}\n\n"
                "*distinct-n*：测试源句上所有生成的 n-gram 中不重复的比例（各次抽样取均值）。"
                "*每个源句的不同输出数*：一个源句在多次抽样中得到几种不同的译文（贪心：解码 2 次）。"
                "多样性超过参考译文本身的部分只是噪声，并不是更丰富的德语。\n")
        return verdict, body
    verdict = (
        f"Sampling at T = 0.7 / 1.0 / 1.3 gives BLEU {low['bleu']:.1f} / {mid['bleu']:.1f} / {high['bleu']:.1f} "
        f"(greedy {g['bleu']:.1f}) while distinct-1 goes {low['distinct_1']:.3f} → {high['distinct_1']:.3f}, "
        f"distinct-2 {low['distinct_2']:.3f} → {high['distinct_2']:.3f} and one source gets "
        f"{low['outputs_per_source']:.1f} → {high['outputs_per_source']:.1f} different outputs in {draws} draws.",
        f"Greedy decoding {'gives the same output every time' if g['deterministic'] else 'was NOT deterministic'}; "
        f"a higher temperature buys variety with accuracy, so decode greedily when one faithful translation is "
        f"wanted (references: distinct-2 {reference['distinct_2']:.3f}).",
    )
    body = (f"## One model ({steps} steps); {sources} test sources decoded {draws} times per temperature, "
            f"same seed\n\n{markdown_table(table)}\n\n"
            "*distinct-n*: unique n-grams / all generated n-grams over the test sources (mean over draws). "
            "*Outputs per source*: how many different translations one source gets across the draws (greedy: 2 "
            "decodings). Diversity above the references' own is noise, not richer German.\n")
    return verdict, body
