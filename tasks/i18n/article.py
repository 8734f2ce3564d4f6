"""The outline of the article the package teaches, in the package's own words, and which variant pages measure which
of its sections.

The article (a Chinese blog post, November 2026: see ``ARTICLE.md`` beside the repository) takes the classic
Transformer apart and reads its variants against it. A lesson names the sections whose claim it measures
(``Lesson.sections`` in :mod:`tasks.lab.lesson`), a variant page those of :data:`VARIANT_SECTIONS`, and the site's
index lists the outline with each section's lessons and pages, so a reader can go from a section to the experiment
that tests it. The titles here paraphrase the article's; they are not its sentences.
"""

from __future__ import annotations

from dataclasses import dataclass

from plumbing.errors import unknown_name


@dataclass(frozen=True)
class Section:
    """One section of the article: its number as the article numbers it ("2.3") and its title in each language."""

    number: str
    zh: str
    en: str

    def title(self, lang: str) -> str:
        """The title in ``lang`` ("en" or "zh")."""
        from tasks.i18n import check_lang

        return self.zh if check_lang(lang) == "zh" else self.en


SECTIONS: tuple[Section, ...] = (
    Section("1", "回顾：Transformer 为什么能用于各种任务", "Looking back: why the Transformer fits every task"),
    Section("2.1", "一句话说清自注意力", "Self-attention in a sentence"),
    Section("2.2", "查询、键、值各管什么", "What the query, key and value each do"),
    Section("2.3", "为什么要除以 √d_k", "Why the scores are divided by √d_k"),
    Section("2.4", "多头注意力的取舍", "The trade-offs of multi-head attention"),
    Section("3.1", "注意力本身不知道顺序", "Attention alone knows no order"),
    Section("3.2", "正余弦位置编码及其替代方案", "Sinusoidal positional encoding and its alternatives"),
    Section("3.3", "位置编码为什么相加而不拼接", "Why positions are added, not concatenated"),
    Section("4.1", "编码器的一层", "One encoder layer"),
    Section("4.2", "解码器多了什么", "What the decoder adds"),
    Section("4.3", "从输入到输出走一遍", "One pass from input to output"),
    Section("5.1", "为什么值得亲手实现一次", "Why implement it by hand once"),
    Section("5.2", "四个模块里容易出错的地方", "Where the four modules go wrong"),
    Section("5.3", "损失不下降时怎么排查", "Debugging a loss that does not fall"),
    Section("5.4", "参数量都花在了哪里", "Where the parameters are spent"),
    Section("6.1", "ViT：把图像块当作 token", "ViT: image patches as tokens"),
    Section("6.2", "Swin：窗口注意力与层级结构", "Swin: window attention and a hierarchy"),
    Section("6.3", "MISSFormer 与轻量化模型", "MISSFormer and lightweight models"),
    Section("6.4", "读变体论文时问的三个问题", "Three questions to ask of any variant"),
    Section("7.1", "学习率离不开预热", "The learning rate needs a warm-up"),
    Section("7.2", "掩码要填 −1e9，不能填 0", "Fill the mask with −1e9, not 0"),
    Section("7.3", "Pre-LN 与 Post-LN 不要混用", "Keep to one of Pre-LN and Post-LN"),
    Section("7.4", "推理时的温度", "Temperature at inference"),
    Section("7.5", "位置编码的外推能力有限", "Positional encodings extrapolate poorly"),
)
_BY_NUMBER = {s.number: s for s in SECTIONS}

# variant name -> the sections its page measures: where the article discusses the part the variant changes
VARIANT_SECTIONS: dict[str, tuple[str, ...]] = {
    "classic": ("1", "4.1", "4.2"),
    "pre-ln": ("4.1", "7.3"),
    "rmsnorm": ("1", "4.1"),
    "learned-pos": ("3.2", "7.5"),
    "rope": ("3.2", "7.5"),
    "alibi": ("3.2", "7.5"),
    "t5-bias": ("3.2", "7.5"),
    "nope": ("3.1",),
    "gelu": ("4.1",),
    "geglu": ("4.1",),
    "reglu": ("4.1",),
    "moe": ("4.1", "6.4"),  # the article's introduction names MoE as the large-model variant; its FFN is §4.1's
    "linear": ("6.3",),  # linear attention: §6.3's lightweight route
    "vit": ("6.1",),
    "deit": ("6.1",),
    "swin": ("6.2",),
    "missformer": ("6.3",),
    "missformer3d": ("6.3",),
    "unetr": ("6.1", "6.3"),  # a ViT encoder for medical segmentation
    "swinunetr3d": ("6.2", "6.3"),
    "swinunetr-v2": ("6.2", "6.3"),
    "dynunet": ("6.3",),  # the CNN baselines §6.3's medical Transformers must beat
    "resenc": ("6.3",),
    "segresnet": ("6.3",),
    "mednext": ("6.3",),
}


def section(number: str) -> Section:
    """The section numbered ``number`` ("2.3"); a ValueError naming the known numbers otherwise."""
    if number not in _BY_NUMBER:
        raise unknown_name("article section", number, _BY_NUMBER)
    return _BY_NUMBER[number]


def variant_sections(variant: str) -> tuple[Section, ...]:
    """The sections variant ``variant``'s page measures; a ValueError for a variant with no entry."""
    if variant not in VARIANT_SECTIONS:
        raise unknown_name("variant (no entry in tasks/i18n/article.py VARIANT_SECTIONS)", variant,
                           VARIANT_SECTIONS)
    return tuple(section(number) for number in VARIANT_SECTIONS[variant])
