"""The site's fixed words in Chinese, keyed by their English text (see :func:`tasks.i18n.ui`).

Keyed by the English string itself, so the page code reads in English and a changed English string without a new
entry fails the Chinese site's build in the tests. Placeholders (``{command}``) are filled after the lookup and
appear in both forms. The Chinese uses the glossary's terms (:mod:`tasks.i18n.glossary`); a test runs
:func:`tasks.i18n.glossary.check_terms` over every value.
"""

from __future__ import annotations

UI: dict[str, str] = {
    # the frame: navigation and the index
    "Transformer variant zoo": "Transformer 变体动物园",
    "The Transformer variant zoo": "Transformer 变体动物园",
    "Variants": "变体",
    "Lessons": "实验课",
    "Comparisons": "对比实验",
    "The article": "文章",
    "The article, section by section": "文章，逐节对照",
    "The classic Transformer and its famous variants, each a declared patch on it: what each changed and why, the "
    "code beside the classic code, and what the change measures. Every number here was computed by the package "
    "that wrote this site.":
        "经典 Transformer 与它的著名变体，每个变体都是在经典模型上声明过的一处补丁：改了什么、为什么改，变体的代码与"
        "经典代码并排对照，以及这处改动实测的结果。本站的每个数字都由生成本站的这个软件包算出。",
    "The article this package teaches reads the classic Transformer part by part, then its variants against it. "
    "Each of its sections with the lessons that measure its claims and the variant pages that show its parts:":
        "本软件包所讲的文章先逐个部分拆解经典 Transformer，再拿各个变体与之对照。下面是文章的每一节，以及检验该节"
        "论断的实验课和展示相关部分的变体页面：",
    "no lesson or variant page measures it yet": "暂无实验课或变体页面对应这一节",
    "Studies: general or task-specific?": "研究：通用还是特定于任务？",
    "One change across tasks, datasets and presets against a noise floor, its pooled effect and its measured scope "
    "beside the declared one.":
        "同一处改动在多个任务、数据集和预设上与噪声基线比较：汇总后的效应，以及实测的适用范围与声明的范围对照。",
    "None given (zoo site --runs DIR, DIR a {command} output)":
        "未提供（zoo site --runs DIR，DIR 为 {command} 的输出）",
    "variant": "变体",
    "paper": "论文",
    "parts changed": "改动的部分",
    "tasks": "任务",
    "parameters per preset": "各预设的参数量",
    "zoo check": "zoo check",
    "(the base)": "（基线）",
    "lesson": "实验课",
    "part": "部分",
    "question": "问题",
    "expected direction": "预期方向",
    "holds": "成立",
    "does not hold in this run": "在这次运行中不成立",
    "not run yet: {command}": "尚未运行：{command}",
    "A lesson not run yet shows the command that runs it (minutes each); {site} runs every missing one into the "
    "site's {lab} folder (or {runs}).":
        "尚未运行的实验课列出运行它的命令（每个需要几分钟）；{site} 会把缺少的实验课都运行一遍，结果写入本站的 {lab} "
        "文件夹（或 {runs}）。",
    "training": "训练",
    "decoding": "解码",
    ", ": "、",
    "; ": "；",
    ": ": "：",
    "lessons: {names}": "实验课：{names}",
    "variant pages: {names}": "变体页面：{names}",
    # the article's sections on a page
    "The article: {sections}": "对应文章：{sections}",
    "The article: no section measures this page.": "对应文章：文章中没有哪一节对应这个页面。",
    # a variant's page
    "{variant}: what changed": "{variant}：改了什么",
    "preset": "预设",
    "parameters": "参数量",
    "none (the base)": "无（基线）",
    "What changed, and the code": "改了什么，以及代码",
    "Code of the modules each change builds, read from the source (at preset {preset}), beside the classic code the "
    "change replaces.": "每处改动所构建模块的代码（取自源码，预设 {preset}），与它替换掉的经典代码并排对照。",
    "The classic model itself: the base every variant patches. Its code, part by part:":
        "这就是经典模型本身：每个变体都在它上面打补丁。它的代码，逐个部分：",
    "Classic": "经典做法",
    "The flaw it addresses": "它要解决的缺陷",
    "It also reaches the {part} part:": "它还影响到{part}部分：",
    "The setting": "设置",
    "no classic side: {why}": "不显示经典一侧的代码：{why}",
    "({part}, {scope})": "（{part}，{scope}）",
    "Library classes:": "库中的类：",
    "No module of its own for this part.": "这个部分没有自己的模块。",
    "Measured": "实测",
    "The delta analysis ({command}) at preset {preset} on {task}.":
        "差异分析（{command}），预设 {preset}，任务 {task}。",
    "parameters and FLOPs per part, classic vs {variant}": "各部分的参数量与 FLOPs：经典模型对比 {variant}",
    "Conformance": "一致性检查",
    "{passed} of {applied} checks passed": "{applied} 项检查中通过 {passed} 项",
    ", {count} n/a": "，{count} 项不适用",
    "check": "检查",
    "result": "结果",
    "measured": "实测值",
    "reason": "原因",
    # a lesson's page
    "Lesson: {title}": "实验课：{title}",
    "The measured numbers": "实测数字",
    "This result has no Chinese text (it was written before the lessons had one); run {command} again to get it. "
    "The English page follows.":
        "这份结果没有中文内容（它写于实验课有中文之前）；重新运行 {command} 即可得到中文。下面是英文页面。",
}
