"""Reports in Chinese, on reports their generators really write here from planted inputs, so nothing trains: medseg
comparisons and an ablation (per-case scores), a cross-validation over two datasets, cifar and translation comparisons
(per-example records), a study (planted cells through the study's own meta-analysis), and the delta analysis of
registered variants.

The no-English-left test is what ties the phrase table to the generators: a template that changes (a reworded
sentence, a new column) and has no rule leaves English prose in the translation, and fails here.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import tasks.compare.report
import tasks.runs.run
from tasks.compare import sweep
from tasks.compare.folds import across_datasets, fold_scores, report_lines
from tasks.compare.meta import Cell
from tasks.compare.paired import task_metrics
from tasks.compare.run_results import RunResult
from tasks.engine.registry import task_class, task_shape
from tasks.i18n.glossary import check_terms
from tasks.i18n.reports_zh import numbers, translate_report
from tasks.study.report import write_report
from tasks.study.study import analyse
from tasks.sweeps.state import SWEEP_FILE
from tests.plugin_helpers import isolated_registry
from zoo.analysis.delta import measure
from zoo.analysis.report import render_markdown
from zoo.changes import get_change
from zoo.registry import get_variant, register
from zoo.vit.config import ViTConfig

CASES = [f"case{i:04d}" for i in range(12)]
PROTECTED = re.compile(r"`[^`]*`|!?\[[^\]]*\]\([^)]*\)")  # code spans and links (image links too) stay English
# English prose: four or more plain words in a row (a CamelCase module name or a code word is not prose)
PROSE = re.compile(r"[A-Za-z][a-z'’-]*(?: +[A-Za-z][a-z'’-]*){3,}")


def english_left(markdown: str) -> list[str]:
    """Every run of >= 4 consecutive English words outside code spans and links."""
    return [run for line in markdown.split("\n") for run in PROSE.findall(PROTECTED.sub(" ", line))]


def _finished(folder: Path, task: str, label: str, config: dict, preprocessing: dict, records: list[dict],
              data: str, budget: dict | None = None) -> RunResult:
    """A finished run as a comparison reads it: its run.json, metrics.json and test records (scored on ``data``)."""
    (folder / "predictions").mkdir(parents=True)
    (folder / "predictions" / "index.json").write_text(json.dumps({"test": {}}))
    info = {"task": task, "variant": label, "config": {"epochs": 2, **config}, "preprocessing": preprocessing}
    training = {"parameters": 1000, "history": [{"step": 40}], "items_per_s": 12.5, "train_seconds": 30.0,
                "budget": budget or {"kind": "epochs", "value": 2}, "peak_memory": {"mb": 512.0}}
    return RunResult(folder, folder, info, training, {"test": (records, data)})


def _run(root: Path, label: str, seed: int, shift: float, recipe: str, rng: np.random.Generator) -> RunResult:
    """A medseg run of ``label``: per-case Dice, HD95 and NSD (within 1 mm) of two organs."""
    organs = ("liver", "spleen")
    records = [{"case": case, "papers": {organ: {"dice": float(np.clip(0.6 + shift + rng.normal(0, 0.05), 0, 1)),
                                                 "hd95": float(abs(8 - 20 * shift + rng.normal(0, 1)))}
                                         for organ in organs},
                "mm": {organ: {"nsd": float(np.clip(0.7 + shift + rng.normal(0, 0.05), 0, 1))} for organ in organs}}
               for case in CASES]
    preprocessing = {"class_names": ["background", "liver", "spleen"],
                     "recipe": {"name": "nnunet" if recipe == "own" else recipe}}
    config = {"hd95": "papers", "nsd_tolerance": 1.0, "seed": seed, "recipe": recipe}
    return _finished(root / f"{label}-seed{seed}", "medseg", label, config, preprocessing, records, "sha256:" + "1" * 8)


def _other_tasks(root: Path) -> dict[str, str]:
    """Reports of the other tasks' tests: cifar (top-1 with McNemar beside, 1 seed; then a sign-flip test, 3 seeds)
    and translation (BLEU with sacreBLEU's paired_bs beside; its data follow the seed, so seeds are strata; a time
    budget)."""
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 10, 200)
    reports = {}
    for seeds in (1, 3):
        groups = {}
        for variant, right in (("vit", 0.7), ("linear", 0.5)):
            runs = []
            for seed in range(seeds):
                guess = np.where(rng.random(200) < right, labels, rng.integers(0, 10, 200))
                records = [{"id": i, "label": int(y), "prediction": int(g)}
                           for i, (y, g) in enumerate(zip(labels, guess, strict=True))]
                flops = {"kind": "flops", "value": 2e12} if variant == "linear" else None  # budgets that differ
                runs.append(_finished(root / f"cifar{seeds}" / f"{variant}-{seed}", "cifar", variant, {"seed": seed},
                                      {"class_names": [str(k) for k in range(10)]}, records, "sha256:" + "2" * 64,
                                      flops))
            groups[variant] = runs
        out = root / f"cifar{seeds}" / "out"
        _build(groups, out, task="cifar", reference="vit")
        reports[f"cifar, {seeds} seed(s)"] = (out / "report.md").read_text()
    words = ["the", "cat", "sat", "on", "a", "mat", "while", "dogs", "ran", "far", "away", "from", "home"]
    groups = {}
    for variant, noise in (("classic", 0.1), ("rope", 0.4)):
        runs = []
        for seed in range(2):
            sentences = [" ".join(np.random.default_rng(100 * seed + i).choice(words, 8)) for i in range(40)]
            records = [{"id": i, "reference": ref, "greedy": " ".join(w if rng.random() > noise else "x"
                                                                      for w in ref.split())}
                       for i, ref in enumerate(sentences)]
            runs.append(_finished(root / "translation" / f"{variant}-{seed}", "translation", variant, {"seed": seed},
                                  {}, records, f"sha256:{seed}" * 8, {"kind": "time", "value": 60}))
        groups[variant] = runs
    _build(groups, root / "translation" / "out", task="translation", reference="classic")
    reports["translation"] = (root / "translation" / "out" / "report.md").read_text()
    return reports


def _groups(root: Path, seeds: int, recipes: dict[str, str], offset: float = 0.0) -> dict[str, list[RunResult]]:
    """Planted runs: unetr clearly worse than the dynunet reference, missformer within noise."""
    rng = np.random.default_rng(0)
    shifts = {"dynunet": 0.0, "unetr": -0.2, "missformer": 0.005}
    return {label: [_run(root, label, s, shift + offset, recipes[label], rng) for s in range(seeds)]
            for label, shift in shifts.items()}


def _build(groups: dict[str, list[RunResult]], out: Path, task: str = "medseg", reference: str = "dynunet",
           **options) -> dict:
    """:func:`tasks.compare.sweep.build_comparison` of planted runs; a run's cost (which loads its model) is planted."""
    cost = {"parts changed": "attention, stacking", "params": 1000, "GFLOPs": 1.5, "steps": 40.0,
            "train_TFLOPs": None, "items/s": 12.5, "wall s": 30.0, "peak MiB": 512.0}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep, "_cost", lambda task, runs, run, parts: {**cost, "parts changed": parts or "attention"})
        patch.setattr(sweep, "_run_undeclared", lambda *args: [])
        patch.setattr(tasks.runs.run, "load_run", lambda path: SimpleNamespace(task=SimpleNamespace(variant=None)))
        return sweep.build_comparison(task, groups, reference, out, **options)


def _comparison(root: Path, kind: str, seeds: int, recipes: dict[str, str]) -> str:
    """``report.md`` of a comparison (``kind`` compare) or an ablation (ablate) of planted runs. An ablation's rows
    are labelled as ``zoo ablate`` labels them: a change reverted (``without NAME``, its f-string: ablate trains) and
    the recipe row of :func:`tasks.compare.sweep.recipe_entry` (dynunet declares its own recipe, nnunet)."""
    groups = _groups(root / kind, seeds, recipes)
    parts = {}
    if kind == "ablate":
        recipe = sweep.recipe_entry(task_class("medseg"), get_variant("dynunet", "medseg"), None)
        groups = {"dynunet": groups["dynunet"], recipe.label: groups["unetr"], "without stacking": groups["missformer"]}
        parts = {recipe.label: recipe.parts}
    _build(groups, root / kind / "out", kind=kind, parts=parts)
    return (root / kind / "out" / "report.md").read_text()


def _baseline_alone(root: Path) -> str:
    """``report.md`` of the baseline alone (nothing to test), its runs launched two at a time on this machine (as its
    ``sweep.json`` says)."""
    out = root / "alone"
    out.mkdir(parents=True)
    (out / SWEEP_FILE).write_text(json.dumps({"launcher": {"launcher": "local", "jobs": 2, "threads_per_run": 1}}))
    groups = _groups(root, 2, dict.fromkeys(("dynunet", "unetr", "missformer"), "default"))
    _build({"dynunet": groups["dynunet"]}, out, launch=SimpleNamespace())
    return (out / "report.md").read_text()


def _folds(root: Path) -> str:
    """``report.md`` of a cross-validation on two datasets (:func:`tasks.compare.folds.report_lines`): each dataset's
    comparison of its pooled folds (each run's mean over folds beside), then the statistics across the datasets, and a
    one-seed comparison that cannot have them."""
    recipes = dict.fromkeys(("dynunet", "unetr", "missformer"), "default")
    pooled = {name: _groups(root / name, 2, recipes, offset) for name, offset in (("alpha", 0.0), ("beta", 0.01))}
    metrics = task_metrics("medseg", pooled["alpha"]["dynunet"][0].info, {"test"})
    comparisons = {}
    for name, groups in pooled.items():
        extra = {label: {"over_folds": {m.key: fold_scores(m, [[r] for r in runs]) for m in metrics
                                        if m.role != "per-class"}} for label, runs in groups.items()}
        # the sentence compare_folds writes (it trains, so it is not called here): what the cases are
        scored_on = (f"the 2 folds' validation cases together (--data {name}; each case once, predicted by the fold "
                     f"that did not train on it; folds: {root / name / 'splits_final.json'})")
        comparisons[name] = _build(groups, root / name / "out", title=f"zoo compare medseg --folds 2 on {name}",
                                   scored_on=scored_on, extra=extra)
    across = across_datasets("medseg", "tiny", metrics[0], pooled, "dynunet", 0.05)
    one_seed = {name: {label: runs[:1] for label, runs in groups.items()} for name, groups in pooled.items()}
    across |= {f"{label} (1 seed)": m for label, m in
               across_datasets("medseg", "tiny", metrics[0], one_seed, "dynunet", 0.05).items()}
    result = {"title": "zoo compare medseg --folds 2 on 2 datasets", "across_datasets": across}
    return "\n".join(report_lines(result, comparisons, metrics[0], 0.05))


def _study(out: Path) -> str:
    """``report.md`` of :func:`tasks.study.report.write_report`: two changes on three tasks in both regimes, analysed
    by the study's own :func:`tasks.study.study.analyse` (one general, one inconclusive), one change measured on one
    task only, a learning-rate choice and a change that does not apply."""
    rng = np.random.default_rng(1)
    labels = ("translation:embedded:tiny", "lm:embedded:tiny", "cifar:embedded:tiny")

    def row(label: str, change: str) -> dict:
        return {"cell": label, "metric_title": "BLEU", "higher_is_better": not label.startswith("lm"),
                "classic": {"label": "classic", "mean": 20.5, "lr": 0.001},
                "new": {"label": change, "mean": 21.25, "lr": 0.003},
                "paired_test": {"delta": 0.75, "delta_ci95": [0.1, 1.4], "p_value": 0.02}}

    analyses: dict = {}
    for change, shift in (("rmsnorm", 0.0), ("gelu", 0.8)):
        for regime in ("shared", "tuned"):
            cells = [Cell(label.split(":")[0], "embedded", "tiny", tuple(shift + rng.normal(0, 0.3, 3)),
                          tuple(rng.normal(0, 1, 3))) for label in labels]
            analyses.setdefault(change, {})[regime] = analyse(change, cells, [row(label, change) for label in labels],
                                                              (), "dl", 0.05)
    analyses["untied-output"] = {"shared": analyse("untied-output", [Cell("translation", "embedded", "tiny",
                                                                          (0.1, 0.3), (0.2, -0.4))],
                                                   [row(labels[0], "untied-output")], (), "dl", 0.05)}
    results = {
        "changes": list(analyses), "command": "zoo study rmsnorm,gelu,untied-output --seeds 3", "cells": list(labels),
        "seeds": 3, "budgets": {"translation": "epochs=1", "lm": "epochs=1", "cifar": "epochs=1"}, "alpha": 0.05,
        "declared": {"rmsnorm": "general", "gelu": "general", "untied-output": "general"}, "analyses": analyses,
        "choices": [{"cell": labels[0], "side": "classic", "metric": "BLEU", "higher_is_better": True,
                     "valid": {"0.001": 20.1, "0.003": 21.4}, "chosen": 0.003, "valid_hash": "sha256:" + "ab" * 32}],
        "not_applied": [{"change": "untied-output", "cell": labels[2],
                         "reason": get_change("untied-output").why_not(ViTConfig)}],
        "cost": {"verdict": {"runs": 54, "train_seconds": 300.0}, "tuning": {"runs": 12, "train_seconds": 60.0},
                 "total": {"runs": 66, "train_seconds": 360.0, "wall_seconds": 400.0}, "study_seconds": 420.0}}
    return write_report(results, out)


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("reports")
    own = {"dynunet": "own", "unetr": "own", "missformer": "own"}
    return {"compare": _comparison(root, "compare", 3, own),
            "ablate": _comparison(root, "ablate", 1, {**own, "unetr": "default"}),
            "shared recipe": _comparison(root, "shared", 1, dict.fromkeys(own, "default")),
            "baseline alone": _baseline_alone(root / "alone"), "study": _study(root / "study"),
            "folds": _folds(root / "folds"), **_other_tasks(root / "tasks"),
            "delta linear": render_markdown(measure("linear", task_shape("lm")))}


def _check(english: str) -> str:
    chinese = translate_report(english)
    assert english_left(chinese) == []
    pairs = list(zip(english.split("\n"), chinese.split("\n"), strict=True))  # one Chinese line per English line
    assert [sorted(numbers(c)) for _, c in pairs] == [sorted(numbers(e)) for e, _ in pairs]  # each number kept
    assert sorted(PROTECTED.findall(chinese)) == sorted(PROTECTED.findall(english))  # code spans, links: same bytes
    assert check_terms(chinese) == []
    return chinese


def test_the_fixtures_write_what_the_translation_must_cover(reports):
    """The planted inputs reach the templates the phrase table is tested on (each a different generator path)."""
    compare, ablate, shared, study = (reports[k] for k in ("compare", "ablate", "shared recipe", "study"))
    assert "| NSD (within 1 mm) |" in compare and "| liver NSD (within 1 mm) |" in compare
    assert "each side trains with its own recipe" in compare and "| worse |" in compare and "## Per class" in compare
    assert "| own vs shared recipe (this row: shared default) | default | recipe: own nnunet -> shared" in ablate
    assert "Recipes differ between the rows" in ablate and "test-set noise only, 1 seed" in ablate
    assert "one shared recipe for every side" in shared
    assert "No comparison: only the baseline was run" in reports["baseline alone"]
    assert "The runs trained on this machine, up to 2 at once" in reports["baseline alone"]
    assert all(scope in study for scope in ("**general**", "**inconclusive**", "**not measured**", "## Not applied"))
    assert "across datasets" in reports["folds"] and "needs --seeds 2 or more" in reports["folds"]
    cifar, translation = reports["cifar, 1 seed(s)"], reports["translation"]
    assert "budgets that differ" in cifar and "training FLOPs per run" in cifar and "McNemar's exact test" in cifar
    assert "| p (sign-flip) |" in reports["cifar, 3 seed(s)"]
    assert "each seed was scored on its own data" in translation and "s of training per run" in translation
    assert len(english_left(compare)) > 20 and english_left(reports["delta linear"])  # the check finds English


@pytest.mark.parametrize("name", ["compare", "ablate", "shared recipe", "baseline alone", "study", "folds",
                                  "cifar, 1 seed(s)", "cifar, 3 seed(s)", "translation", "delta linear"])
def test_no_english_prose_is_left_and_every_number_is_kept(reports, name):
    _check(reports[name])


def test_verdicts_headings_and_stories_in_chinese(reports):
    assert "训练时使用所有运行相同的预算：每次运行训练 60 秒（" in _check(reports["translation"])
    compare = _check(reports["compare"])
    assert "| 更差 |" in compare and "| 无显著差异 |" in compare and "| 基线 |" in compare
    assert "## 跨种子" in compare
    assert "训练配方：每一方用自己的配方（dynunet: nnunet, unetr: nnunet, missformer: nnunet）" in compare
    study = _check(reports["study"])
    assert "适用范围：**通用**" in study and "| 否 |" in study and "| **是** |" in study
    delta = _check(reports["delta linear"])
    assert "用 φ = elu + 1 的线性注意力取代 softmax 注意力" in delta  # the summary, from variants_zh
    assert "经典做法：softmax(QKᵀ/√d)V" in delta and "## attention（通用）" in delta


@pytest.mark.parametrize("variant, task", [("deit", "cifar"), ("swin", "cifar"), ("moe", "translation"),
                                           ("classic", "translation")])
def test_delta_reports_of_other_variants(variant, task):
    """Resized parts and the by-change table (swin, deit), a procedure-only change (deit's objective), active
    parameters (moe), the classic base itself."""
    _check(render_markdown(measure(variant, task_shape(task), memory=False)))


def test_a_reworded_template_leaves_english_that_the_check_finds(tmp_path, monkeypatch):
    """What keeps the phrase table in step with the generators: reword one of their templates (the cost line), and
    the translation of the report it writes keeps English prose, which the tests above refuse."""
    reworded = "- Cost: the forward FLOPs of one input, counted by zoo diff."
    monkeypatch.setattr(tasks.compare.report, "COST_LINE", reworded)
    left = english_left(translate_report(_baseline_alone(tmp_path)))
    assert any("of one input" in run for run in left), left


def test_a_delta_report_with_undeclared_differences():
    """A variant whose presets differ from its classic counterpart where no change says so (one head, not four)."""
    rmsnorm = get_variant("rmsnorm", "translation")
    with isolated_registry():
        register(dataclasses.replace(rmsnorm, name="rmsnorm-one-head",
                                     presets={n: dict(v, heads=1) for n, v in rmsnorm.presets.items()}))
        english = render_markdown(measure("rmsnorm-one-head", task_shape("translation"), preset="tiny", memory=False))
    assert "## Undeclared differences" in english
    chinese = _check(english)
    assert "## 未声明的差异" in chinese and "- `heads` 4 → 1：没有声明的改动会还原它" in chinese


def test_a_variant_without_chinese_text_keeps_its_english_lines():
    """A plugin's variant has no entry in variants_zh: a report still translates, its own story stays English."""
    swin = get_variant("swin")
    with isolated_registry():
        register(dataclasses.replace(swin, name="swin-plugin", summary="A plugin's own words, never translated here."))
        text = "## attention (general)\n\nA plugin's own words, never translated here.\n\n## Across seeds"
        assert translate_report(text).split("\n") == ["## attention（通用）", "", text.split("\n")[2], "", "## 跨种子"]


def test_lines_no_rule_matches_stay_as_they_are():
    assert translate_report("## liver\n\nSome note no template writes, kept as it is.") == \
        "## liver\n\nSome note no template writes, kept as it is."
    with pytest.raises(TypeError, match="markdown text"):
        translate_report(None)


def test_every_recipe_sentence_of_the_preamble_is_translated():
    """Each of sweep.recipe_text's sentences, as the preamble ends with it."""
    for english, chinese in ((" Recipes: every side trains with default.", "训练配方：每一方都用 default 训练。"),
                             (" Recipes: one shared recipe for every side: nnunet.",
                              "训练配方：所有方共用一个配方：nnunet。"),
                             (" Recipes: each side trains with its own recipe (dynunet: nnunet, unetr: default).",
                              "训练配方：每一方用自己的配方（dynunet: nnunet, unetr: default）。")):
        translated = translate_report(f"Metric: test Dice.{english}")
        assert chinese in translated and "Recipes" not in translated
