"""A lesson as a Jupyter notebook: ``zoo lab LESSON --notebook OUT.ipynb [--lang en|zh]``.

The notebook is generated from the lesson's own index entry and module, never written by hand, so it cannot drift
from ``zoo lab``: its title, article sections and question come from :data:`tasks.lab.lesson.LESSONS`; "the
mistake" is the source of the lesson's mistake code, read with :func:`inspect.getsource` from the lesson's module
when the notebook is written; the experiment runs through the package's API (:func:`tasks.lab.lesson.run_lesson`
with the same :class:`~tasks.lab.lesson.LabSettings` as the command line, one torch thread as its default), so the
findings the last cell prints are the ``findings`` of ``zoo lab LESSON`` 's ``result.json`` at the same settings.

Code cells are the same bytes in both languages; only the markdown cells and the lesson's own text change.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from plumbing.atomic import write_text_atomic
from plumbing.errors import check_bool, check_int, check_number, import_extra
from plumbing.tables import markdown_table
from tasks.i18n import check_lang
from tasks.lab.lesson import Lesson, get_lesson

# The code of each lesson's mistake (attributes of the lesson's module, so a mistake a lesson imports from another
# lesson is shown as that lesson wrote it). The notebook prints their source as it is when it is written; a test
# checks that every lesson has an entry and that every name exists.
MISTAKE_CODE: dict[str, tuple[str, ...]] = {
    "scale": ("UnscaledAttention", "use_kernel"),
    "mask": ("ZeroFilledMaskAttention", "use_zero_fill"),
    "norm": ("run_one",),  # Post-LN is TransformerConfig.norm_first=False, chosen where the run builds its model
    "warmup": ("run_one",),  # a constant rate where the warm-up should be
    "position": ("remove_positions", "swap_sin_cos", "use_swapped_sinusoids"),
    "temperature": ("decode_texts",),
    "init": ("reinit_qkv",),
    "params": ("article_vs_exact",),  # the article's per-layer estimates against exact accounting
    "small-data": ("build",),
    "swin-windows": ("unshifted",),
    "moe-routing": ("batch_ranked_dispatch", "use_batch_ranking"),
    "exposure-bias": ("train_run",),  # teacher forcing only, the mistake; scheduled sampling, the remedy
    "extrapolation": ("train_and_measure",),
    "sampling": ("sample_texts",),
    "causal-mask": ("train_arm", "use_zero_fill"),
}

# The notebook's fixed words per language (tasks.i18n.LANGS); the Chinese ones use the glossary's terms.
_WORDS: dict[str, dict[str, str]] = {
    "en": {"title": "# Lesson: {title}", "part": "*Part of the architecture:* `{part}`.",
           "sections": "*Article sections it measures:* {sections}", "question": "**The question.** {question}",
           "mistake": "## The mistake",
           "mistake_note": "The lesson's own code for the mistake, read from `{file}` when this notebook was written "
                           "(`zoo lab {name} --notebook` writes it again from the current code):",
           "run": "## Run the experiment",
           "run_note": "The parameters: `quick` is `zoo lab {name} --quick`, `scale` shrinks every training budget "
                       "further, `out` is the folder of `lesson.md`, `result.json` and the plots, `threads` the "
                       "torch threads (one, as `zoo lab`), `lang` the language of the tables and verdict shown "
                       "(`en` or `zh`). The next cell "
                       "runs the lesson through the package's API, as `zoo lab {name}` does (a few minutes at "
                       "`quick=True`, `scale=1.0`).",
           "findings": "## What it measured", "body": "## Tables and notes", "figures": "## Plots",
           "verdict": "## Verdict", "json": "## The findings as JSON",
           "json_note": "The same numbers as `result.json`'s `findings` from `zoo lab {name}` at the same settings.",
           "finding": "finding", "value": "value", "values": "[{n} values]"},
    "zh": {"title": "# 实验课：{title}", "part": "*架构部分：* `{part}`。",
           "sections": "*对应文章的章节：* {sections}", "question": "**问题。** {question}",
           "mistake": "## 错误的写法",
           "mistake_note": "本课中犯这个错误的代码，在生成本笔记本时从 `{file}` 读取"
                           "（用 `zoo lab {name} --notebook` 可按当前代码重新生成）：",
           "run": "## 运行实验",
           "run_note": "参数：`quick` 即 `zoo lab {name} --quick`，`scale` 进一步按比例缩小每个训练预算，"
                       "`out` 是 `lesson.md`、`result.json` 和图所在的文件夹，"
                       "`threads` 是 torch 的线程数（与 `zoo lab` 一样用 1 个），"
                       "`lang` 是下面表格和结论的语言（`en` 或 `zh`）。下一个单元格通过本包的 API 运行本课，"
                       "与 `zoo lab {name}` 相同（`quick=True`、`scale=1.0` 时需要几分钟）。",
           "findings": "## 测得的数值", "body": "## 表格与说明", "figures": "## 图",
           "verdict": "## 结论", "json": "## 以 JSON 表示的测量结果",
           "json_note": "与相同设置下 `zoo lab {name}` 写出的 `result.json` 中的 `findings` 数值相同。",
           "finding": "测量项", "value": "数值", "values": "[{n} 个数值]"},
}


def mistake_source(name: str) -> str:
    """The source of lesson ``name``'s mistake code (:data:`MISTAKE_CODE`), read from the lesson's module now."""
    lesson = get_lesson(name)
    module = importlib.import_module(lesson.module)
    return "\n\n".join(inspect.getsource(getattr(module, attr)).rstrip() for attr in MISTAKE_CODE[name])


def findings_table(findings: dict[str, Any], lang: str = "en") -> str:
    """A two-column markdown table of a lesson's scalar findings, nested keys joined with ``.``, headed in ``lang``;
    lists are shown by their length (their values are in the notebook's last cell and in ``result.json``)."""
    words = _WORDS[check_lang(lang)]
    rows: list[dict[str, Any]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        else:
            shown = words["values"].format(n=len(value)) if isinstance(value, list | tuple) else value
            rows.append({words["finding"]: prefix, words["value"]: shown})

    walk("", findings)
    return markdown_table(rows)


def _sections(lesson: Lesson, lang: str) -> str:
    from tasks.i18n.article import section

    sep = "；" if lang == "zh" else "; "
    return sep.join(f"§{number} {getattr(section(number), lang)}" for number in lesson.sections)


def _code(source: str) -> str:
    return source.strip("\n")


def write_notebook(name: str, out: Path, lang: str = "en", quick: bool = True, seed: int = 0, *,
                   scale: float = 1.0) -> Path:
    """Write lesson ``name`` as a Jupyter notebook at ``out`` (a ``.ipynb`` path) in ``lang``; returns ``out``.

    The parameters cell holds ``quick``, ``seed`` and ``scale`` as given (the settings of ``zoo lab NAME [--quick]
    --seed SEED --scale SCALE``), the run folder ``runs/lab/NAME`` (relative to where the notebook runs) and one
    torch thread, the command line's default. Nothing is run here: the lesson runs when the notebook does.
    """
    nbformat = import_extra("nbformat", "zoo lab --notebook", "dev")
    lesson = get_lesson(name)
    words = _WORDS[check_lang(lang)]
    zh = lang == "zh"
    out = Path(out)
    if out.suffix != ".ipynb":
        raise ValueError(f"a notebook's path ends in .ipynb, got {str(out)!r}: name it e.g. {name}.ipynb")
    check_bool("quick", quick)
    check_int("seed", seed, low=0)
    check_number("scale", scale, low=0.0, low_open=True)
    fmt = {"name": name, "file": lesson.module.replace(".", "/") + ".py"}
    v4 = nbformat.v4
    head = [words["title"].format(title=lesson.title_zh if zh else lesson.title), "",
            words["part"].format(part=lesson.part)]
    if lesson.sections:
        head += ["", words["sections"].format(sections=_sections(lesson, lang))]
    head += ["", words["question"].format(question=lesson.question_zh if zh else lesson.question)]
    cells = [
        v4.new_markdown_cell("\n".join(head)),
        v4.new_markdown_cell(f"{words['mistake']}\n\n{words['mistake_note'].format(**fmt)}\n\n"
                             f"```python\n{mistake_source(name)}\n```"),
        v4.new_markdown_cell(f"{words['run']}\n\n{words['run_note'].format(**fmt)}"),
        v4.new_code_cell(_code(f"""
quick = {quick!r}
seed = {seed!r}
scale = {float(scale)!r}
out = "runs/lab/{name}"
threads = 1
lang = {lang!r}
"""), metadata={"tags": ["parameters"]}),
        v4.new_code_cell(_code(f"""
from pathlib import Path

import torch
from IPython.display import Image, Markdown, display

from tasks.lab.lesson import LabSettings, run_lesson
from tasks.lab.notebook import findings_table

torch.set_num_threads(threads)
settings = LabSettings(out=Path(out), quick=quick, seed=seed, progress=False, scale=scale)
result = run_lesson({name!r}, settings)
""")),
        v4.new_markdown_cell(words["findings"]),
        v4.new_code_cell("display(Markdown(findings_table(result.findings, lang)))"),
        v4.new_markdown_cell(words["body"]),
        v4.new_code_cell('display(Markdown(result.body_zh if lang == "zh" else result.body))'),
        v4.new_markdown_cell(words["figures"]),
        v4.new_code_cell(_code("""
for figure in result.figures:
    display(Image(filename=str(settings.out / figure)))
""")),
        v4.new_markdown_cell(words["verdict"]),
        v4.new_code_cell(_code("""
verdict = result.verdict_zh if lang == "zh" else result.verdict
display(Markdown("\\n".join(f"> {line}  " for line in verdict)))
""")),
        v4.new_markdown_cell(f"{words['json']}\n\n{words['json_note'].format(**fmt)}"),
        v4.new_code_cell(_code("""
import json

print(json.dumps(result.findings, indent=2, default=float))
""")),
    ]
    notebook = v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}, "zoo": {"lesson": name, "lang": lang}})
    nbformat.validate(notebook)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, nbformat.writes(notebook) + "\n")
    return out


def execute_notebook(path: Path, timeout: int = 3600, env: dict[str, str] | None = None) -> Any:
    """Run the notebook at ``path`` top to bottom in a fresh kernel of this Python, in the notebook's folder, and
    write it back with its outputs (as ``jupyter nbconvert --execute --inplace`` would); returns the executed
    notebook (``zoo lab LESSON --notebook OUT.ipynb --execute``).

    The kernel is this interpreter, through a kernelspec written to a temporary folder: the ``python3`` kernelspec
    found on Jupyter's search path may belong to another Python (a user's ``~/.local/share/jupyter``, a system
    Jupyter) that lacks the package. ``env`` adds variables to the kernel's environment. A cell that raises stops the
    run with nbclient's ``CellExecutionError``, which quotes the cell and its traceback; nothing is written then.
    """
    nbformat = import_extra("nbformat", "zoo lab --notebook --execute", "dev")
    nbclient = import_extra("nbclient", "zoo lab --notebook --execute", "dev")
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no notebook at {path}: write one first with zoo lab LESSON --notebook {path}")
    check_int("timeout", timeout, low=1)
    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as kernels:
        spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (zoo lab)", "language": "python", "env": dict(env or {})}
        (Path(kernels) / "python3").mkdir()
        (Path(kernels) / "python3" / "kernel.json").write_text(json.dumps(spec))
        manager = KernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels]),
                                transport="ipc", connection_file=str(Path(kernels) / "connection.json"))
        try:
            nbclient.NotebookClient(notebook, km=manager, timeout=timeout,
                                    resources={"metadata": {"path": str(path.parent.resolve())}}).execute()
        finally:
            if manager.has_kernel:
                manager.shutdown_kernel(now=True)
    write_text_atomic(path, nbformat.writes(notebook) + "\n")
    return notebook
