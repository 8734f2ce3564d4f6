"""Reports in Chinese: ``zoo compare`` / ``zoo ablate`` / ``zoo study`` reports and the delta analysis's markdown,
translated by a phrase table built from their generators' own templates.

The generators write English from f-string templates (:mod:`tasks.compare.report`, :mod:`tasks.compare.sweep`,
:mod:`tasks.compare.paired`, :mod:`tasks.study.report`, :mod:`tasks.compare.meta`, :mod:`zoo.analysis.report`). Each
template has a rule here: a regular expression whose groups keep the numbers, names and code spans, and the Chinese
sentence that puts them back, so numbers, code spans, variant names and image links stay byte for byte. A variant's
own story (its summary, each change's section) is looked up in :mod:`tasks.i18n.variants_zh` by name, line for line.

A template that changes without its rule leaves English in the Chinese report: ``tests/tasks/i18n/test_reports_zh.py``
translates reports its generators really write and fails on any English prose left, so the table cannot drift from
the templates unnoticed.
"""

from __future__ import annotations

import re

_NUM = r"([+-]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"  # one number of a sentence, as a group
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*(?:e[-+]?\d+)?")

# --- table cells: a header row's cells and a body's cells, whole-cell words first, then rules inside a cell ------
HEADERS: dict[str, str] = {
    "variant": "变体", "recipe": "训练配方", "parts changed": "改动的部分", "params": "参数量", "steps": "步数",
    "train TFLOPs": "训练 TFLOPs", "verdict": "结论", "with the change vs without": "有改动 vs 无改动",
    "seeds agreeing": "方向一致的种子", "seed-aware verdict": "计入种子的结论", "items/s": "样本/秒",
    "wall s": "墙钟秒数", "peak MiB": "峰值 MiB", "metric": "指标", "seeds": "种子数", "change": "改动",
    "declared": "声明", "cell": "单元", "classic side (lr)": "经典一方（学习率）",
    "change's side (lr)": "改动一方（学习率）",
    "p (task's test)": "p（任务的检验）", "effect (seed SDs)": "效应（种子 SD）", "p Holm (seeds)": "p Holm（种子）",
    "tuning changes the verdict": "调参是否改变结论", "side": "一方", "validation metric": "验证指标",
    "chosen lr": "选定的学习率", "validation split": "验证划分", "part": "部分", "structure": "结构",
    "removed": "移除", "added": "新增", "params classic": "经典参数量", "params variant": "变体参数量",
    "Δ params": "Δ 参数量", "MFLOPs classic": "经典 MFLOPs", "MFLOPs variant": "变体 MFLOPs",
    "in its own part": "在自身部分", "in other parts": "在其他部分", "pooled effect [CI]": "合并效应 [置信区间]",
    "scope": "适用范围", "cells": "单元",
}
CELLS: dict[str, str] = {
    "better": "更好", "worse": "更差", "no significant difference": "无显著差异", "baseline": "基线",
    "full variant": "完整变体", "general": "通用", "task-specific": "特定于任务", "dataset-specific": "特定于数据集",
    "inconclusive": "无定论",
    "no effect": "无效果", "not measured": "未测量", "yes": "是", "no": "否", "**yes**": "**是**",
    "replaced": "替换", "added": "新增", "removed": "移除", "same": "不变", "FLOPs only": "仅 FLOPs",
    "procedure, no modules": "训练过程，无模块",
    "**total**": "**合计**", "(the base)": "（基础模型）", "its own": "自己的", "shared": "共用",
}
_CELL_RULES: list[tuple[str, str]] = [
    # an ablation's rows (tasks.compare.sweep.ablate and recipe_entry): a change reverted, the recipe's own row
    (r"^without (.+)$", r"去掉 \1"),
    (r"^own vs shared recipe \(this row: shared (\S+)\)$", r"自己的配方 vs 共用配方（本行：共用 \1）"),
    (r"^recipe: own (\S+) -> shared (\S+) \(training only, the network unchanged\)$",
     r"配方：自己的 \1 -> 共用的 \2（只改训练，网络不变）"),
    (r"^test-set noise only, (\d+) seeds?$", r"仅测试集噪声，\1 个种子"),
    (r"\[(\S+%) CI, seeds and test set\]", r"[\1 置信区间，种子与测试集]"),
    (r"\[(\S+%) CI, test set\]", r"[\1 置信区间，测试集]"),
    (r"\[(\S+%) CI\]", r"[\1 置信区间]"),
    (r"^Δ vs (.+?) \[", r"相对 \1 的 Δ ["),
    (r"^bought by the change \[", "改动带来的收益 ["),
    (r"^mean \[", "均值 ["),
    (r" over folds \(mean ± SD\)$", "，各折（均值 ± SD）"),
    (r"^measured \(shared learning rate\)$", "实测（共用学习率）"),
    (r"^measured \(each side's tuned learning rate\)$", "实测（各方调好的学习率）"),
    (r"^pooled effect \((\w+)\)$", lambda m: f"合并效应（{_REGIMES[m.group(1)]}）"),
    (r"^@ lr (\S+)$", r"学习率 \1"),
    (r"^↳ by (.+?)(?: \((sizes|also here|token count|undeclared!)\))?$",
     lambda m: f"↳ 来自 {m.group(1)}" + (f"（{_KINDS[m.group(2)]}）" if m.group(2) else "")),
    (r"^↳ (\S+), resized by (\S+)(?: \((\S+)\))?$",
     lambda m: f"↳ {m.group(1)}，尺寸由 {m.group(2)} 决定" + (f"（{m.group(3)}）" if m.group(3) else "")),
    (r" \((sizes|also here|token count|undeclared!)\)", lambda m: f"（{_KINDS[m.group(1)]}）"),
    (r"\bundeclared differences\b", "未声明的差异"),
    (r" \(lower\)$", "（越低越好）"),
    (r"^needs (--seeds \d+) or more: the noise floor is baseline vs baseline with another seed \(got (\d+)\)$",
     r"需要 \1 或更多：噪声基底要用基线与换了种子的基线相比（现有 \2 个）"),  # tasks.compare.folds.across_datasets
]
_KINDS = {"sizes": "尺寸", "also here": "此处也有", "token count": "token 数", "undeclared!": "未声明！"}
_REGIMES = {"shared": "共用", "tuned": "调参后"}
# metric titles and units, in cells and sentences alike (the task runners' PairedMetric titles and units)
_METRIC_RULES: list[tuple[str, str]] = [
    (r"\blong BLEU\b", "长句 BLEU"), (r"\bbits/char\b", "比特/字符"), (r"^loss\b", "损失"),
    (r" ?\(voxels\)", "（体素）"), (r" ?\(nats/token\)", "（nats/token）"),
    (r" ?\(within (\S+) mm\)", r"（\1 mm 以内）"),
]

# --- headings -----------------------------------------------------------------------------------------------------
HEADINGS: dict[str, str] = {
    "Across seeds": "跨种子", "Other metrics": "其他指标", "Per class": "逐类别", "Verdicts": "结论",
    "Learning rates chosen on validation": "在验证集上选定的学习率", "Not applied": "未应用",
    "How to read it": "如何阅读", "Cost": "代价", "Measured, part by part": "逐部分测量",
    "Each change measured in turn": "逐个改动依次测量", "Undeclared differences": "未声明的差异",
    "Across datasets": "跨数据集",
}
_HEADING_RULES: list[tuple[str, str]] = [
    (r"^zoo ablate (\S+) on (\S+)$", r"zoo ablate \1（任务 \2）"),
    (r"^zoo compare (\S+) --folds (\d+) on (\d+) datasets$", r"zoo compare \1 --folds \2（\3 个数据集）"),
    (r"^zoo compare (\S+) --folds (\d+) on (\S+)$", r"zoo compare \1 --folds \2（数据集 \3）"),
    (r"^(\S+): shared learning rate$", r"\1：共用学习率"),
    (r"^(\S+): each side's tuned learning rate$", r"\1：各方调好的学习率"),
    (r"^What changed: (`[^`]+`) vs the classic Transformer$", r"改了什么：\1 对比经典 Transformer"),
    (r"^(\S+(?:: [^()]+)?) \((general|task-specific)\)$", lambda m: f"{m.group(1)}（{CELLS[m.group(2)]}）"),
]

# --- sentences: applied in order, anywhere in a line; each is one template of a generator -----------------------
_TEST = (r"paired bootstrap of the test set \((\d+) resamples drawn as sacreBLEU's paired_bs, the same for every "
         r"variant; (.+?) averaged over seeds in each\): Δ's percentile interval at 1 − α and the p-value it inverts "
         r"\(p < α exactly when the interval excludes 0\) decide the verdict")
_SENTENCES: list[tuple[str, str]] = [
    # tasks.compare.sweep: the preamble
    (r"Each variant against the baseline (`[^`]+`), trained with ", r"每个变体与基线 \1 对比，训练时使用"),
    (r"Leave-one-out: each row is (`[^`]+`) with one declared change reverted to the classic choice; 'bought by the "
     r"change' is (`[^`]+`) minus the row, trained with ",
     r"逐一剔除（leave-one-out）：每一行是把 \1 的一个声明改动还原为经典选择后的模型；“改动带来的收益”是 \2 减去该行，"
     r"训练时使用"),
    (r"the same budget for every run: (.+?); ([\d/]+) seed\(s\) per variant\. ",
     r"所有运行相同的预算：\1；每个变体 \2 个种子。"),
    (r"budgets that differ: (.+?); ([\d/]+) seed\(s\) per variant\. ", r"各不相同的预算：\1；每个变体 \2 个种子。"),
    (r"(\d+) epoch\(s\) per run", r"每次运行 \1 个 epoch"),
    (rf"{_NUM} s of training per run \(optimizer steps; evaluation not counted\)",
     r"每次运行训练 \1 秒（只计优化器步骤，不计评估）"),
    (r", at most (\d+) epochs", r"，最多 \1 个 epoch"),
    (r"(\S+) training FLOPs per run \(training FLOPs = (\d+) × forward FLOPs of each step's batches, counted by zoo "
     r"diff's counter \(2·MACs of matmuls/convolutions/attention, math attention backend\)\)",
     r"每次运行 \1 训练 FLOPs（训练 FLOPs = \2 × 每一步批次的前向 FLOPs，用 zoo diff 的计数器计数："
     r"矩阵乘/卷积/注意力的 2·MACs，math 注意力后端）"),
    (r"Metric: (\w+) (.+?), paired on the same test examples\.", r"指标：\1 划分上的 \2，在相同的测试样本上配对。"),
    (r"Metric: (.+?) on the (\d+) folds' validation cases together \((.+?); each case once, predicted by the fold "
     r"that did not train on it; folds: (.+?)\), paired case by case\.",
     r"指标：\2 折验证病例合在一起的 \1（\3；每个病例只出现一次，由没有用它训练的那一折预测；折：\4），逐病例配对。"),
    (r"the task's embedded data", "任务自带的数据"),
    (r" Recipes: each side trains with its own recipe \((.+?)\)\.", r"训练配方：每一方用自己的配方（\1）。"),
    (r" Recipes: one shared recipe for every side: (\S+?)\.(?= |$)", r"训练配方：所有方共用一个配方：\1。"),
    (r" Recipes: every side trains with (\S+?)\.(?= |$)", r"训练配方：每一方都用 \1 训练。"),
    (r" Recipes differ between the rows: (.+?)\.(?= The runs|$)", r"各行的训练配方不同：\1。"),
    (r" \((its own|shared)\)", lambda m: f"（{CELLS[m.group(1)]}）"),
    (r" The runs trained one after another in one process\.", "各次运行在同一个进程中依次训练。"),
    (r" The runs trained on this machine, up to (\d+) at once, (\d+) thread\(s\) each \((`[^`]+`); (`[^`]+`) lists "
     r"every run's state\)\.",
     r"各次运行在本机训练，最多 \1 个同时进行，每个 \2 个线程（\3；\4 列出每次运行的状态）。"),
    (r" The runs trained as submitit jobs \((\S+) executor\), up to (\d+) at once, (\d+) thread\(s\) each "
     r"\((`[^`]+`); (`[^`]+`) lists every run's state\)\.",
     r"各次运行作为 submitit 作业训练（\1 执行器），最多 \2 个同时进行，每个 \3 个线程（\4；\5 列出每次运行的状态）。"),
    (r" The runs trained as Ray tasks on (.+?), up to (\d+) at once, (\d+) thread\(s\) each \((`[^`]+`); (`[^`]+`) "
     r"lists every run's state\)\.",
     r"各次运行作为 Ray 任务在 \1 上训练，最多 \2 个同时进行，每个 \3 个线程（\4；\5 列出每次运行的状态）。"),
    (r" \*\*Undeclared differences\*\* from the classic counterpart, which no declared change reverts: (.+?)\. Such a "
     r"row's Δ measures its declared changes in a model that also differs in these\.",
     r"与经典对应模型之间存在**未声明的差异**，没有任何声明的改动会还原它们：\1。这样一行的 Δ 测量的是其声明改动在一个"
     r"同时还有这些差异的模型里的效果。"),
    # tasks.compare.paired.describe_test, inside tasks.compare.report.explain_tests's line
    (r"^- \*(.+?)\* \((higher|lower) is better\): ",
     lambda m: f"- *{m.group(1)}*（{'越高越好' if m.group(2) == 'higher' else '越低越好'}）："),
    (_TEST,
     r"测试集的配对 bootstrap（\1 次重采样，按 sacreBLEU 的 paired_bs 方式抽取，所有变体相同；每次重采样中 \2 "
     r"先在种子间平均）：Δ 在 1 − α 下的百分位区间及其对应的 p 值（区间不含 0 时恰好 p < α）决定结论"),
    (r"; each seed was scored on its own data \(the task's data follow the seed\), so each seed is paired with the "
     r"reference's run on the same data: Δ is the mean of the per-seed Δ, the bootstrap resamples each seed's test set",
     "；每个种子在自己的数据上评分（任务的数据随种子而定），所以每个种子与参照方在相同数据上的运行配对：Δ 是各种子 Δ 的"
     "均值，bootstrap 对每个种子的测试集分别重采样"),
    (r"; reported beside, not deciding: ", "；并列报告、不参与决定："),
    (r"sacreBLEU's paired_bs p from the same resamples \(its rule: \|Δ\*\| shifted by its mean against \|Δ\|; "
     r"(`sacrebleu --paired-bs`) gives this number for one seed each\)",
     r"sacreBLEU 的 paired_bs p 值，来自同样的重采样（它的规则：|Δ*| 减去其均值后与 |Δ| 比较；每方一个种子时 \1 "
     r"给出同一个数）"),
    (r"McNemar's exact test on per-image correctness \(one seed\), a sign-flip randomisation test \((\S+) flips\) "
     r"on correctness averaged over seeds \(several\)",
     r"逐图像正确与否上的 McNemar 精确检验（一个种子），或对种子平均后的正确率做符号翻转随机化检验（\1 次翻转；"
     r"多个种子）"),
    (r"Wilcoxon signed-rank test \(SciPy\) on per-case (.+?) averaged over seeds \(and over a case's organs for the "
     r"mean over organs\): a test of the median shift, which can disagree with the mean's Δ",
     r"对逐病例、种子平均后的 \1 做 Wilcoxon 符号秩检验（SciPy；器官均值时也在病例的器官间平均）："
     r"检验的是中位数的偏移，可能与均值的 Δ 不一致"),
    # tasks.compare.report.explain_tests
    (r"^- No comparison: only the baseline was run\. Intervals of the means: (.+)\.$",
     r"- 没有比较：只运行了基线。均值的区间：\1。"),
    (r"^- p-values Holm-corrected over the (\d+) comparisons? of each metric; verdicts at α = (\S+): better or "
     r"worse only when the corrected p is below α and the \(uncorrected, (\S+)\) interval of Δ excludes 0 on the side "
     r"of Δ\.$",
     r"- p 值在每个指标的 \1 个比较上做 Holm 校正；结论的水平 α = \2：只有校正后的 p 低于 α，且 Δ 的（未校正的 \3）"
     r"区间在 Δ 那一侧不含 0 时，才判为更好或更差。"),
    (r"^- What each number's uncertainty covers\. \*Mean \[95% CI\]\* \((.+?)\): with seeds, the seeds' spread \(on a "
     r"test set every seed shares, not the test set's own sampling; where the data follow the seed, both\); with one "
     r"seed, the test set's\. \*Δ \[CI\], p, p \(Holm\), verdict\*: test-set noise only, the seed-averaged systems "
     r"held fixed\. \*Seed-aware\* interval, p and verdict: the seeds' spread and the test set's: a t interval, "
     r"Welch's over each variant's per-seed scores with the test set's bootstrap variance added \(where the data "
     r"follow the seed, a paired t over the seed pairs' Δ\); with fewer than (\d+) seeds a side it is not computed and "
     r"the verdict says 'test-set noise only'\. \*Seeds agreeing\*: the seeds whose Δ alone \(against the "
     r"reference's mean on the same data\) has the sign of the mean Δ, a count, no test\.$",
     r"- 每个数字的不确定性涵盖什么。*均值 [95% 置信区间]*（\1）：多个种子时是种子间的离散（在所有种子共用的测试集上，"
     r"不含测试集本身的抽样；数据随种子而定时两者都含）；一个种子时是测试集的。*Δ [置信区间]、p、p (Holm)、结论*："
     r"只含测试集噪声，种子平均后的系统视为固定。*计入种子的*区间、p 和结论：种子间的离散加上测试集的：一个 t 区间，"
     r"对每个变体的各种子得分做 Welch 检验并加上测试集的 bootstrap 方差"
     r"（数据随种子而定时，对种子对的 Δ 做配对 t 检验）；每方少于 \2 个种子时不计算，结论写作“仅测试集噪声”。"
     r"*方向一致的种子*：单独看自己的 Δ（相对参照方在相同数据上的"
     r"均值）与平均 Δ 同号的种子，只是计数，不是检验。"),
    (r"Student t over (\d+) seeds", r"\1 个种子上的 Student t"),
    (r"bootstrap of the test set \((\d+) resamples; one seed\)", r"测试集 bootstrap（\1 次重采样；一个种子）"),
    (r"^- Cost: GFLOPs = forward FLOPs of one input at the task's size \(zoo diff's counter: 2·MACs of matmuls, "
     r"convolutions and attention\); steps = optimizer steps; train TFLOPs \(FLOP budgets\) = 3 × the forward FLOPs "
     r"of every step's batches; items/s and wall s = training throughput and time \(under (--folds): of all folds "
     r"together\); peak MiB = the largest peak memory of the runs \((\S+) on a GPU, else the process's peak RSS, "
     r"which under (--launcher serial) includes the runs before it in the process\)\. All means over seeds\.",
     r"- 代价：GFLOPs = 任务尺寸下一个输入的前向 FLOPs（zoo diff 的计数器：矩阵乘、卷积和注意力的 2·MACs）；"
     r"步数 = 优化器步数；训练 TFLOPs（FLOP 预算）= 3 × 每一步批次的前向 FLOPs；样本/秒和墙钟秒数 = 训练吞吐量和时间"
     r"（\1 时：所有折合计）；峰值 MiB = 各次运行中最大的峰值内存（GPU 上是 \2，否则是进程的峰值 RSS，在 \3 下包括同一"
     r"进程中之前的运行）。全部是种子上的均值。"),
    (r" Here one input is one slice at (--image-size) for a 2D model and one patch of (--patch-size) for a 3D one: a "
     r"case costs its slices, or its sliding-window windows, times that\.",
     r"这里一个输入对 2D 模型是 \1 下的一张切片，对 3D 模型是 \2 的一个图像块："
     r"一个病例的代价是它的切片数（或滑动窗口数）"
     r"乘以它。"),
    (r"^Holm-corrected over the variants within each class and metric \(not over the classes\)\.$",
     "在每个类别和指标内部对各变体做 Holm 校正（不跨类别校正）。"),
    (r"^In the papers' HD95 convention an organ predicted nowhere scores Dice 0 and HD95 0: read an organ's HD95 "
     r"verdict together with its Dice\.$",
     "按论文的 HD95 约定，一个器官若完全没被预测出来，Dice 记 0、HD95 也记 0："
     "请把器官的 HD95 结论和它的 Dice 一起看。"),
    (r"^Per case, each variant against the reference \(one point per case; above the diagonal: the variant scores "
     r"higher\):$", "逐病例，每个变体对比参照方（每个病例一个点；在对角线上方表示该变体得分更高）："),
    (r"^Each variant against the baseline on (.+?), one cell per dataset: the per-case differences \(seed-averaged, "
     r"positive = better\) standardised by the baseline's seed-to-seed SD per case \(its seeds paired two by two\), "
     r"pooled by a random-effects meta-analysis \((`zoo study`)'s statistics, tasks\.compare\.meta; intervals at "
     r"(\S+) %\)\.$",
     r"每个变体在 \1 上与基线对比，每个数据集一个单元：逐病例的差（在种子间平均，正值表示更好）除以基线在每个病例上的"
     r"种子间 SD（它的种子两两配对）进行标准化，再用随机效应元分析合并（\2 的统计方法，tasks.compare.meta；"
     r"区间为 \3 %）。"),
    (r"^Details: (\[[^]]+\]\([^)]+\))$", r"详情：\1"),
    # tasks.study.report
    (r"^Cells: (\d+) \((.+?)\); (\d+) seeds a side and (\d+) more of the classic side for the noise floor; budgets: "
     r"(.+?); α = (\S+)\.$",
     r"单元：\1 个（\2）；每方 \3 个种子，另有经典一方的 \4 个种子用于噪声基底；预算：\5；α = \6。"),
    (r"^- Pooled effect \((\w+)\): (.+?) seed SDs; τ² (\S+), I² (\S+) %, Cochran's Q (\S+) on (\d+) df \(p (\S+)\)\.$",
     r"- 合并效应（\1）：\2 个种子 SD；τ² \3，I² \4 %，Cochran Q \5，自由度 \6（p \7）。"),
    (r"^- Signs by task: (.+?) \((\d+) agree with the pooled sign\); by preset: (.+)\.$",
     r"- 各任务的符号：\1（\2 个与合并效应同号）；各预设：\3。"),
    (r"^- Scope: \*\*(.+?)\*\*: ", lambda m: f"- 适用范围：**{CELLS[m.group(1)]}**："),
    # tasks.compare.meta.measured_scope's reasons, in a study's "Scope" line and a cross-dataset line; the sentence's
    # full stop is left to the rule that ends a Chinese sentence, or to the sentence that follows (Signs by dataset)
    (r"\. Signs by dataset: (.+?) \((\d+) of (\d+) agree with the pooled sign\)\.$",
     r"。各数据集的符号：\1（\3 个中有 \2 个与合并效应同号）。"),
    (r"^- (\S+): \*\*(.+?)\*\* across datasets: ", lambda m: f"- {m.group(1)}：跨数据集为 **{CELLS[m.group(2)]}**："),
    (rf"pooled {_NUM} \[{_NUM}, {_NUM}\]; significant with that sign in (\d+) of (\d+) (task|dataset)s \((.+?)\)",
     lambda m: f"合并 {m.group(1)} [{m.group(2)}, {m.group(3)}]；在 {m.group(5)} 个{_UNITS[m.group(6)]}中的 "
               f"{m.group(4)} 个里以该符号显著（{m.group(7)}）"),
    (rf"significant ([+-]) in (.+?); null or opposite in (.+?); the two groups differ by {_NUM} \(p {_NUM}\)",
     r"在 \2 中显著为 \1；在 \3 中为零或相反；两组相差 \4（p \5）"),
    (rf"no cell significant; pooled interval \[{_NUM}, {_NUM}\] within ±{_NUM}",
     r"没有显著的单元；合并区间 [\1, \2] 落在 ±\3 以内"),
    (rf"(\d+) significant cell\(s\); pooled {_NUM} \[{_NUM}, {_NUM}\]; (about|more than) (\d+) seeds a side would "
     rf"give each cell {_NUM} % power against ±{_NUM}",
     lambda m: f"{m.group(1)} 个显著单元；合并 {m.group(2)} [{m.group(3)}, {m.group(4)}]；每方"
               f"{'约' if m.group(5) == 'about' else '超过'} {m.group(6)} 个种子才能让每个单元对 ±{m.group(8)} "
               f"有 {m.group(7)} % 的检验功效"),
    (r"the change reached (\d+) task\(s\) \((.+?)\); general against task-specific needs cells of at least (\d+) "
     r"tasks", r"改动只覆盖了 \1 个任务（\2）；要区分通用与特定于任务，至少需要 \3 个任务的单元"),
    (r"^Each side of each cell trained once \(seed 0\) per rate; the best validation value of the task's main metric "
     r"chose \(the test split is not read by the choice\)\.$",
     "每个单元的每一方在每个学习率下训练一次（种子 0）；由任务主指标的最佳验证值来选（选择时不读测试划分）。"),
    (r"^- (\S+) on (\S+): (.+)$", lambda m: f"- {m.group(1)} 用于 {m.group(2)}：{_why_not(m.group(3))}"),
    (r"^- Δ test-set: the change's side minus the classic side on the test examples, paired example by example over "
     r"the same seeds \(the test (`zoo compare`) reports\); p its two-sided p-value\.$",
     r"- Δ 测试集：改动一方减去经典一方在测试样本上的差，在相同的种子上逐样本配对（\1 报告的检验）；"
     r"p 是它的双侧 p 值。"),
    (r"^- Effect: the mean per-seed difference in units of one base run's seed-to-seed SD, estimated from the noise "
     r"floor \(the classic side against itself with other seeds\); positive is better\.$",
     "- 效应：每个种子的平均差，以一次基础运行的种子间 SD 为单位，SD 由噪声基底估计（经典一方与它自己换种子后的对比）；"
     "正值表示更好。"),
    # tasks.compare.meta.rule_text
    (r"(?:^- |^The scope's rule, across datasets: )?A cell is \*significant\* when its paired t test's p, "
     r"Holm-corrected over all the study's cells, is below (\S+); a (task|dataset)'s \*direction\* is the sign "
     r"of its significant cells \(none, or both signs: no direction\)\. Effects are mean differences in units of "
     r"one base run's seed-to-seed SD \(the noise floor\)\. \*\*general\*\*: the pooled random-effects (\S+) % "
     r"interval excludes 0, more than half of the \2s have the pooled sign as their direction, every \2's mean "
     r"effect has that sign and no cell is significant the other way\. \*\*\2-specific\*\*: not general, and "
     r"every \2 the change was proposed on \(if none is declared: every \2 with a direction\) has the same "
     r"direction, every other \2 has none or the opposite one, and the two groups' inverse-variance mean effects "
     r"differ that way by a z test at (\S+)\. \*\*no effect\*\*: no cell is significant and the pooled interval "
     r"lies within ±(\S+)\. \*\*inconclusive\*\*: anything else; it says how many seeds a side would give each "
     r"cell's paired test (\S+) % power at Holm's strictest level \((\S+) / cells\) against an effect of the "
     r"pooled size or ±(\S+), whichever is larger, at the observed variances\.$",
     lambda m: _rule(m.group(0), *m.groups())),
    (r"^- (\d+) run\(s\), (\S+) s of training, (\S+) s of run wall time; the study took (\S+) s end to end \(runs "
     r"reused from an earlier invocation cost it nothing\)\.$",
     r"- \1 次运行，训练 \2 秒，运行墙钟时间 \3 秒；整个研究从头到尾用了 \4 秒（复用先前调用的运行不计代价）。"),
    (r"^- Of these, (\d+) run\(s\) only chose learning rates \((\S+) s of training\) and (\d+) gave the verdicts "
     r"\((\S+) s\)\.$", r"- 其中 \1 次运行只用于选择学习率（训练 \2 秒），\3 次给出结论（\4 秒）。"),
    # zoo.analysis.report.render_markdown
    (r"^Paper: (\[[^]]+\]\([^)]+\)) \((\d+)\)\. Task (`[^`]+`), preset (`[^`]+`), measured on (.+)\.$",
     r"论文：\1（\2）。任务 \3，预设 \4，测量的输入：\5。"),
    # the task runners' TaskShape descriptions: the input the delta analysis measures on
    (r"one 32×32 single-channel image \(the embedded Fashion-MNIST, padded\)",
     "一张 32×32 单通道图像（自带的 Fashion-MNIST，经过填充）"),
    (r"one window of (\d+) tokens \(max_len, the model's context\)",
     r"一个 \1 个 token 的窗口（max_len，模型的上下文）"),
    (r"one (\S+) single-channel slice \(the embedded phantom\)", r"一张 \1 的单通道切片（自带的体模）"),
    (r"one sentence pair of (\d+) source and (\d+) target tokens",
     r"一个句对，源语言 \1 个 token、目标语言 \2 个 token"),
    (r"^The classic side is (`[^`]+`) at preset (`[^`]+`) with every declared change reverted\.",
     r"经典一方是预设为 \2、还原了所有声明改动的 \1。"),
    (r"^The variant's config differs from the classic side where none of its declared changes says so; every number "
     r"below includes what these differences do \(the lines \*by undeclared differences\*\), which no declared change "
     r"may be credited with:$",
     "变体的配置在其声明的改动都未提及之处与经典一方不同；下面的每个数字都包含这些差异的作用（即*来自未声明差异*的行），"
     "这部分不能算到任何声明的改动头上："),
    (r"^- (`[^`]+` .+ → .+): no declared change reverts it; declare it or use the (\S+) value$",
     r"- \1：没有声明的改动会还原它；请声明它，或使用 \2 的取值"),
    (r"^- (`[^`]+` .+ → .+): no declared change reverts it; declare it or use (\S+)'s default$",
     r"- \1：没有声明的改动会还原它；请声明它，或使用 \2 的默认值"),
    (r" Note: no reference size: (\S+) has no preset ('[^']+'); compared at (\S+)'s own sizes, choices only\.$",
     r"注意：没有参照尺寸：\1 没有预设 \2；按 \3 自己的尺寸比较，只比较选择。"),
    (r"\bundeclared differences\b", "未声明的差异"),
    (r"^This \*is\* the classic base: nothing to compare\.$", "这*就是*经典基础模型：没有可比较的。"),
    (r"^The (.+?) changes? alters? a procedure \(how the model is trained or decoded\), not a layer: no parameters or "
     r"FLOPs of (?:its|their) own, so this diff shows none; training measures it \((`[^`]+`)\)\.$",
     r"\1 改动改变的是一个过程（模型如何训练或解码），而不是一层：没有自己的参数或 FLOPs，所以这份差异里看不到；"
     r"要靠训练来测量（\2）。"),
    (r"^A part that another change resizes is compared at the variant's sizes: its \*classic\* column is the classic "
     r"choice at those sizes, and the size difference is a line of its own \(↳ \*resized by\*\) under the part of the "
     r"change that sets it\. Every row and ↳ line is the measured difference of two built models; the rows sum to the "
     r"total\.$",
     "被另一个改动改变尺寸的部分按变体的尺寸比较：它的*经典*列是该尺寸下的经典选择，"
     "尺寸差单独列一行（↳ *尺寸由…决定*），"
     "放在决定尺寸的那个改动所在部分之下。每一行和每条 ↳ 行都是两个实际构建的模型之间测得的差；各行之和等于合计。"),
    (r"^Order: (.+?); method: the changes applied to the classic model one at a time, a change that resizes other "
     r"parts before the changes of those parts; each line is the measured difference of two built models, booked to "
     r"the change applied between them; a part's lines sum to its classic → variant difference\.$",
     r"顺序：\1；方法：把各改动逐个加到经典模型上，会改变其他部分尺寸的改动排在那些部分的改动之前；每一行都是两个实际"
     r"构建的模型之间测得的差，记在两者之间施加的那个改动上；一个部分的各行之和等于它从经典到变体的差。"),
    (r"^- attention kernel MFLOPs at (\S+) the tokens, (classic|variant): (.+?) \(∝ (N\^\S+)\)$",
     lambda m: f"- 注意力核在 {m.group(1)} token 数下的 MFLOPs，{_SIDES[m.group(2)]}：{m.group(3)}（∝ {m.group(4)}）"),
    (r"^- attention kernel FLOPs, (classic|variant): not counted$",
     lambda m: f"- 注意力核的 FLOPs，{_SIDES[m.group(1)]}：未计数"),
    (r"^- activation memory of a training step: classic (.+?), variant (.+)$",
     r"- 一个训练步的激活内存：经典 \1，变体 \2"),
    (r"^- parameters used per token \(active\): classic (\S+), variant (\S+) of (\S+) in total \(sparse layers count "
     r"what one token runs, e\.g\. k of E experts\)$",
     r"- 每个 token 用到的参数（激活参数）：经典 \1，变体 \2（总数 \3；稀疏层只计一个 token 实际运行的部分，例如 E 个"
     r"专家中的 k 个）"),
    (r"^Conventions: forward FLOPs = 2·MACs of matmuls/convolutions/attention \((torch\.utils\.flop_counter), math "
     r"attention backend\); elementwise ops, softmax and norms are not counted; activation memory = bytes of the "
     r"tensors saved for backward in one training step\.$",
     r"约定：前向 FLOPs = 矩阵乘/卷积/注意力的 2·MACs（\1，math 注意力后端）；逐元素运算、softmax 和归一化不计；"
     r"激活内存"
     r" = 一个训练步中为反向传播保存的张量字节数。"),
    (r"(?<=[\u4e00-\u9fff）])\.$", "。"),  # a sentence the rules above turned Chinese ends as Chinese does
]
_UNITS = {"task": "任务", "dataset": "数据集"}
_SIDES = {"classic": "经典", "variant": "变体"}


def _compile(rules: list[tuple[str, object]]) -> list[tuple[re.Pattern[str], object]]:
    return [(re.compile(pattern), replacement) for pattern, replacement in rules]


_CELL_RES, _METRIC_RES = _compile(_CELL_RULES), _compile(_METRIC_RULES)
_HEADING_RES, _SENTENCE_RES = _compile(_HEADING_RULES), _compile(_SENTENCES)


def _apply(rules: list[tuple[re.Pattern[str], object]], text: str) -> str:
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return text


def _rule(line: str, alpha: str, unit: str, level: str, z_alpha: str, margin: str, power: str, holm: str,
          larger: str) -> str:
    """The measured-scope rule (:func:`tasks.compare.meta.rule_text`) across tasks or datasets, in Chinese."""
    g = _UNITS[unit]
    lead = "- " if line.startswith("- ") else "跨数据集的适用范围规则：" if line.startswith("The scope") else ""
    return (f"{lead}一个单元的配对 t 检验 p 值（在整个研究的所有单元上做 Holm 校正）低于 {alpha} 时，该单元为*显著*；"
            f"一个{g}的*方向*是它显著单元的符号（没有显著单元或两种符号都有：无方向）。"
            f"效应是以一次基础运行的种子间 SD（噪声基底）为单位的平均差。"
            f"**通用**：随机效应合并的 {level} % 区间不含 0，超过一半的{g}以合并符号为方向，"
            f"每个{g}的平均效应都是该符号，且没有单元在相反方向上显著。"
            f"**特定于{g}**：不是通用，且提出该改动的每个{g}（若未声明：每个有方向的{g}）方向相同，"
            f"其他{g}没有方向或方向相反，并且两组的逆方差加权平均效应在 {z_alpha} 水平的 z 检验下按该方向不同。"
            f"**无效果**：没有显著单元，且合并区间落在 ±{margin} 以内。"
            f"**无定论**：其他一切情况；它会说明每方需要多少个种子，才能让每个单元的配对检验"
            f"在 Holm 最严格的水平（{holm} / 单元数）下，对合并效应大小或 ±{larger}（取较大者）的效应"
            f"达到 {power} % 的功效，按观测到的方差计。")


def _why_not(reason: str) -> str:
    """A study's "Not applied" reason in Chinese (:func:`tasks.i18n.variants_zh.why_not_text`); a config's own refusal,
    which no table can know in advance, as it is."""
    from tasks.i18n.variants_zh import why_not_text

    try:
        return why_not_text(reason, "zh")
    except KeyError:
        return reason


def numbers(text: str) -> list[str]:
    """Every number written in ``text`` (``1,372``, ``0.004``, ``4.9e-04``), in order."""
    return _NUMBER.findall(text)


def _stories() -> dict[str, str]:
    """English line -> Chinese line of every registered variant's summary and declared change sections (the text
    :func:`zoo.registry.change_markdown` writes into a delta report), from :mod:`tasks.i18n.variants_zh`."""
    from tasks.i18n.variants_zh import change_markdown, variant_text
    from zoo.registry import list_variants, registrations

    lines: dict[str, str] = {}
    for name in list_variants():
        for registration in registrations(name):
            try:  # a plugin's variant has no Chinese text: its lines stay English
                lines[registration.summary] = variant_text(registration, "zh")
            except KeyError:
                continue
            for change in registration.changes:
                try:
                    english, chinese = (change_markdown(registration, change.name, lang).split("\n")
                                        for lang in ("en", "zh"))
                except KeyError:
                    continue
                lines.update((e, c) for e, c in zip(english, chinese, strict=True) if e and not e.startswith("#"))
    return lines


def _cell(text: str, header: bool) -> str:
    words = HEADERS if header else CELLS
    if text in words:
        return words[text]
    if text in CELLS:
        return CELLS[text]
    return _apply(_METRIC_RES, _apply(_CELL_RES, text))


def _table_row(line: str, header: bool) -> str:
    cells = line.strip()[1:-1].split("|")
    return "|" + "|".join(f" {_cell(c.strip(), header)} " if c.strip() else c for c in cells) + "|"


def _heading(line: str) -> str:
    marks, _, text = line.partition(" ")
    return f"{marks} {HEADINGS.get(text) or _apply(_HEADING_RES, text)}"


def translate_report(markdown: str) -> str:
    """The Chinese form of a ``zoo compare`` / ``zoo ablate`` / ``zoo study`` ``report.md`` or of a delta analysis's
    markdown (:func:`zoo.analysis.report.render_markdown`): headings, fixed sentences, table headings and verdict
    words translated; numbers, code spans, variant names and image links byte for byte.

    Each line is translated on its own: a table row cell by cell (its header row by :data:`HEADERS`), a heading by
    :data:`HEADINGS`, a variant's summary and change sections by :mod:`tasks.i18n.variants_zh`, any other line by
    the generators' sentence templates. What no rule matches stays as it is (a dataset's or an organ's name).
    """
    if not isinstance(markdown, str):
        raise TypeError(f"translate_report takes the markdown text of a report, got {type(markdown).__name__}")
    stories = _stories()
    lines = markdown.split("\n")
    out = []
    for i, line in enumerate(lines):
        if line in stories:
            out.append(stories[line])
        elif line.startswith("|") and set(line) <= set("|-"):
            out.append(line)
        elif line.startswith("|"):
            separator = i + 1 < len(lines) and lines[i + 1].startswith("|---")
            out.append(_table_row(line, header=separator))
        elif line.startswith("#"):
            out.append(_heading(line))
        else:
            out.append(_apply(_METRIC_RES, _apply(_SENTENCE_RES, line)))
    return "\n".join(out)
