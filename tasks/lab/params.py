"""Lesson ``params``: where the parameters of the classic Transformer go.

The pitfall: counting parameters "per layer" as if every layer were an encoder layer. The source article
estimates 3.15 M per layer (multi-head attention 4·D² + 4·D plus FFN 2·D·F + F + D at D = 512, F = 2048) and
multiplies by 12 layers, which forgets each decoder layer's cross-attention, every LayerNorm, and the
vocabulary matrices, which at the paper's 37k shared BPE vocabulary (Vaswani et al. 2017, §5.1 and Table 3;
three-way weight tying, §3.4, after Press & Wolf 2017) are the largest single block of the model.

The lesson needs no training: every model is built on the ``meta`` device (shapes only), so even ``big``
costs nothing, and the exact counts come from the built modules (:func:`core.parts.parameters_by_part`),
checked against the hand formulas of :mod:`core.accounting`.
"""

from __future__ import annotations

import torch

from core.accounting import article_estimate, attention_parameters, classic_parameters
from core.model import Transformer, build_transformer
from core.parts import parameters_by_part
from plumbing.tables import markdown_table
from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.toolkit import figure, save, translated

VOCABULARIES = (1_000, 8_000, 32_000, 37_000, 64_000)
PAPER_VOCABULARY = 37_000  # the paper's shared EN-DE BPE vocabulary
# How the three vocabulary matrices (source embedding, target embedding, pre-softmax projection) are shared.
TYINGS: dict[str, dict[str, bool]] = {
    "three-way tied": dict(share_embeddings=True, tie_output=True),  # the paper's choice (§3.4)
    "shared, separate output": dict(share_embeddings=True, tie_output=False),
    "untied": dict(share_embeddings=False, tie_output=False),
}
VOCABULARY_PARTS = ("embedding", "head")  # the parts whose size is V·D


def meta_model(preset: str, **overrides) -> Transformer:
    """The classic model with shapes only (no memory, no initialisation cost)."""
    with torch.device("meta"):
        return build_transformer(preset, **overrides)


def exact_count(preset: str, **overrides) -> dict:
    """Parameters per part of the built model, its total, and whether the hand formula agrees with it."""
    return count_model(meta_model(preset, **overrides))


def count_model(model: Transformer) -> dict:
    """See :func:`exact_count`."""
    by_part = parameters_by_part(model)
    total = sum(p.numel() for p in model.parameters())  # named/unique parameters: tied matrices count once
    vocabulary = sum(by_part[part] for part in VOCABULARY_PARTS)
    return {"by_part": {k: v for k, v in by_part.items() if v}, "total": total, "vocabulary": vocabulary,
            "vocabulary_share": vocabulary / total,
            "formula_matches": classic_parameters(model.config) == by_part and sum(by_part.values()) == total}


def article_vs_exact(preset: str) -> dict:
    """The article's per-layer estimate against the exact count, and what the difference is made of."""
    model = meta_model(preset)
    exact, config = count_model(model), model.config
    estimate = article_estimate(config)
    by_part = exact["by_part"]
    cross_attention = config.decoder_layers * attention_parameters(config.d_model)
    norms = by_part.get("norm", 0)
    return {**estimate, "exact": exact, "cross_attention": cross_attention, "norms": norms,
            "missed": estimate["exact_layers"] - estimate["article_total"],
            "missed_is_cross_attention_and_norms":
                estimate["exact_layers"] - estimate["article_total"] == cross_attention + norms}


def vocabulary_sweep(preset: str = "base") -> list[dict]:
    """Share of the model spent on V·D matrices as the vocabulary grows, for each way of tying them."""
    rows = []
    for tying, flags in TYINGS.items():
        for vocab in VOCABULARIES:
            count = exact_count(preset, src_vocab=vocab, **flags)
            rows.append({"tying": tying, "vocab": vocab, "total": count["total"], "vocabulary": count["vocabulary"],
                         "share": count["vocabulary_share"], "formula_matches": count["formula_matches"]})
    return rows


def _sweep_holds(rows: list[dict]) -> bool:
    """The share grows with V under every tying, and at every V tying more matrices gives a smaller share."""
    shares = {(r["tying"], r["vocab"]): r["share"] for r in rows}
    grows = all(shares[t, a] < shares[t, b] for t in TYINGS for a, b in zip(VOCABULARIES, VOCABULARIES[1:]))
    names = list(TYINGS)
    tying_helps = all(shares[a, v] < shares[b, v] for v in VOCABULARIES for a, b in zip(names, names[1:]))
    return grows and tying_helps


def _plot(settings: LabSettings, stacks: dict[str, dict], rows: list[dict]) -> str:
    fig, axes = figure(1, 2, width=5.6, height=4.0)
    left, right = axes[0]
    parts = list(dict.fromkeys(p for s in stacks.values() for p in s["by_part"]))
    bottoms = [0.0] * len(stacks)
    for part in parts:  # one stacked bar per configuration, one colour per part
        heights = [s["by_part"].get(part, 0) / 1e6 for s in stacks.values()]
        left.bar(list(stacks), heights, bottom=bottoms, label=part)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    left.set_ylabel("parameters (M)")
    left.set_title(f"parameters by part at V = {PAPER_VOCABULARY // 1000}k")
    left.tick_params(axis="x", labelrotation=20)
    left.legend(fontsize=8)
    for tying in TYINGS:
        mine = [r for r in rows if r["tying"] == tying]
        right.plot([r["vocab"] / 1000 for r in mine], [100 * r["share"] for r in mine], marker="o", label=tying)
    right.axvline(PAPER_VOCABULARY / 1000, color="grey", linestyle=":", linewidth=1)
    right.set_xlabel("vocabulary V (thousands)")
    right.set_ylabel("V·D matrices, % of the base model")
    right.set_title("embedding share vs vocabulary (base)")
    right.legend(fontsize=8)
    return save(fig, settings.out / "params.png")


# The Chinese of the tables' headings and words (the notes are written per language in _text).
WORDS_ZH = {"quantity": "项目", "article": "文章估算", "exact": "精确值", "per encoder layer": "每个编码器层",
            "per decoder layer": "每个解码器层", "all 12 layers": "全部 12 层",
            "of which decoder cross-attention": "其中解码器交叉注意力", "of which LayerNorms": "其中层归一化",
            "embeddings and output (tied)": "嵌入与输出层（共享）", "model": "整个模型", "tying": "权重共享方式",
            "total (M)": "总量 (M)", "V·D matrices (M)": "V·D 矩阵 (M)", "share %": "占比 %", "part": "部分",
            "parameters": "参数量", "three-way tied": "三处共享", "shared, separate output": "嵌入共享、输出层单独",
            "untied": "不共享"}


def _text(base: dict, big: dict, rows: list[dict], lang: str) -> tuple[tuple[str, str], str]:
    """The verdict and the body in ``lang`` ("en" or "zh") from the same counts; tables built once, in English."""
    exact, m = base["exact"], 1e6
    article = [
        {"quantity": "per encoder layer", "article": base["article_per_layer"], "exact": base["exact_encoder_layer"]},
        {"quantity": "per decoder layer", "article": base["article_per_layer"], "exact": base["exact_decoder_layer"]},
        {"quantity": "all 12 layers", "article": base["article_total"], "exact": base["exact_layers"]},
        {"quantity": "of which decoder cross-attention", "article": 0, "exact": base["cross_attention"]},
        {"quantity": "of which LayerNorms", "article": 0, "exact": base["norms"]},
        {"quantity": "embeddings and output (tied)", "article": 0, "exact": base["exact_embeddings_and_head"]},
        {"quantity": "model", "article": base["article_total"], "exact": exact["total"]},
    ]
    sweep = [{"V": r["vocab"], "tying": r["tying"], "total (M)": r["total"] / 1e6, "V·D matrices (M)":
              r["vocabulary"] / 1e6, "share %": 100 * r["share"]} for r in rows]
    by_part = [{"part": part, "parameters": n, "share %": 100 * n / exact["total"]}
               for part, n in exact["by_part"].items()]
    share = {(r["tying"], r["vocab"]): r["share"] for r in rows}
    tied, untied = share["three-way tied", PAPER_VOCABULARY], share["untied", PAPER_VOCABULARY]
    tied_64k, untied_64k = share["three-way tied", VOCABULARIES[-1]], share["untied", VOCABULARIES[-1]]
    if lang == "zh":
        verdict = (
            f"文章按每层 {base['article_per_layer'] / m:.2f} M × 12 = {base['article_total'] / m:.2f} M 估算，"
            f"漏掉了解码器的交叉注意力（{base['cross_attention'] / m:.2f} M）和层归一化（{base['norms'] / 1e3:.1f} k）"
            "："
            f"各层实际共有 {base['exact_layers'] / m:.2f} M，整个模型 {base['exact']['total'] / m:.2f} M，"
            f"其中嵌入 {base['exact_embeddings_and_head'] / m:.2f} M。",
            f"V = 37k 时，V·D 矩阵在不共享时占 base 模型的 {100 * untied:.1f} %，三处共享时占 {100 * tied:.1f} %"
            f"（V = {VOCABULARIES[-1] // 1000}k：{100 * untied_64k:.1f} % 对 {100 * tied_64k:.1f} %）："
            "每一组参数都要算上；源语言和目标语言共用词表时，就把嵌入权重共享起来。",
        )
        article, by_part, sweep = (translated(table, WORDS_ZH) for table in (article, by_part, sweep))
        body = "\n\n".join([
            "## 文章的逐层估算与实际搭建的 base 模型对比", markdown_table(article),
            "## base 模型各部分的参数（V = 37k，三处共享）", markdown_table(by_part),
            "## 词表 V 变大时的词表矩阵（base）", markdown_table(sweep),
            f"论文的表 3 给出 base 65 M、big 213 M 个参数；这里搭建出来的是 {base['exact']['total'] / 1e6:.1f} M 和 "
            f"{big['exact']['total'] / 1e6:.1f} M。参数量来自在 `meta` 设备上搭建的模型，并与 `core.accounting` "
            "的公式核对；共享的矩阵只算一次。另见 `zoo params classic --preset base`。",
        ])
        return verdict, body
    verdict = (
        f"The article's {base['article_per_layer'] / m:.2f} M per layer × 12 = {base['article_total'] / m:.2f} M "
        f"misses the decoder's cross-attention ({base['cross_attention'] / m:.2f} M) and the LayerNorms "
        f"({base['norms'] / 1e3:.1f} k): the exact layers hold {base['exact_layers'] / m:.2f} M, and the model "
        f"{base['exact']['total'] / m:.2f} M with its {base['exact_embeddings_and_head'] / m:.2f} M embedding.",
        f"The V·D matrices are {100 * untied:.1f} % of the base model untied at V = 37k vs {100 * tied:.1f} % "
        f"three-way tied (V = {VOCABULARIES[-1] // 1000}k: {100 * untied_64k:.1f} % vs {100 * tied_64k:.1f} %): "
        "count every stack, and tie the embeddings when the vocabulary is shared.",
    )
    body = "\n\n".join([
        "## The article's per-layer estimate vs the built base model", markdown_table(article),
        "## The base model by part (V = 37k, three-way tied)", markdown_table(by_part),
        "## The vocabulary matrices as V grows (base)", markdown_table(sweep),
        f"The paper's Table 3 lists 65 M parameters for base and 213 M for big; built here: "
        f"{base['exact']['total'] / 1e6:.1f} M and {big['exact']['total'] / 1e6:.1f} M. Counts come from models "
        "built on the `meta` device and are checked against `core.accounting`'s formulas; tied matrices are counted "
        "once. See also `zoo params classic --preset base`.",
    ])
    return verdict, body


def run(settings: LabSettings) -> LessonResult:
    """Count, do not train: the same few seconds at any ``settings`` (the first ``meta`` build imports
    ``torch._dynamo``, which is most of it)."""
    base, big = article_vs_exact("base"), article_vs_exact("big")
    rows = vocabulary_sweep("base")
    stacks = {f"{preset} {name}": exact_count(preset, **TYINGS[name])
              for preset in ("base", "big") for name in ("three-way tied", "untied")}
    holds = (all(r["formula_matches"] for r in rows) and all(s["formula_matches"] for s in stacks.values())
             and base["missed_is_cross_attention_and_norms"] and big["missed_is_cross_attention_and_norms"]
             and _sweep_holds(rows))
    (verdict, body), (verdict_zh, body_zh) = (_text(base, big, rows, lang) for lang in ("en", "zh"))
    findings = {"base": base, "big": big, "vocabulary_sweep": rows, "stacks": stacks}
    return LessonResult(verdict, holds, findings, body, [_plot(settings, stacks, rows)], verdict_zh, body_zh)
