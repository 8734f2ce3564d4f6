"""Training recipes in ``zoo compare`` and ``zoo ablate`` (issue 39): a recipe column per row, a preamble that says
whether each side trains with its own recipe or all share one (``--recipe own|NAME``), and an ablation row of a
variant with its own recipe against the shared default, paired like every other row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.cli.main import main
from tasks.compare.report import main_table
from tasks.compare.run_results import RunResult
from tasks.compare.sweep import recipe_entry, recipe_text, run_specs
from tasks.engine.registry import task_class
from zoo.registry import get_variant

TRAIN = ("case0005", "case0006", "case0007", "case0008", "case0009")
# the smallest 3D runs (test_recipes' settings): one epoch, one patch per case, on fold 0 of the NIfTI phantom
SETTINGS = ["--set", "fold=0", "--set", "preset=tiny", "--set", "patch_size=16,32,32", "--set", "batch_size=2",
            "--set", "patches_per_case=1", "--set", "overlay_slices=1", "--set", "device=cpu", "--set", "num_threads=1",
            "--epochs", "1", "--quiet"]


def _result(variant: str, requested: str | None, trained: str | None) -> RunResult:
    """A medseg run as a comparison reads it, with only what the recipe text needs: the --recipe it was given
    (None: a run from before recipes) and the recipe run.json records it trained with."""
    config = {"variant": variant, **({"recipe": requested} if requested is not None else {})}
    preprocessing = {"recipe": {"name": trained}} if trained is not None else {}
    info = {"task": "medseg", "variant": variant, "config": config, "preprocessing": preprocessing}
    return RunResult(Path(variant), Path(variant), info, None)


def test_the_preamble_says_own_recipes_or_one_shared_recipe():
    own = {"dynunet": [_result("dynunet", "own", "nnunet")], "missformer": [_result("missformer", "own", "default")]}
    assert recipe_text(own) == " Recipes: each side trains with its own recipe (dynunet: nnunet, missformer: default)."
    shared = {"dynunet": [_result("dynunet", "nnunet", "nnunet")],
              "missformer": [_result("missformer", "nnunet", "nnunet")]}
    assert recipe_text(shared) == " Recipes: one shared recipe for every side: nnunet."
    before = {"unet": [_result("unet", None, None)], "missformer": [_result("missformer", None, None)]}
    assert recipe_text(before) == " Recipes: one shared recipe for every side: default."  # runs from before recipes
    mixed = {"dynunet": [_result("dynunet", "own", "nnunet")], "unetr": [_result("unetr", "default", "default")]}
    assert recipe_text(mixed) == " Recipes differ between the rows: `dynunet`: nnunet (its own); `unetr`: default " \
                                 "(shared)."
    # given otherwise, trained alike: not "differ"; a recipe given by the name the variant declares is its own
    alike = {"dynunet": [_result("dynunet", "default", "default")], "unetr": [_result("unetr", "own", "default")]}
    assert recipe_text(alike) == " Recipes: every side trains with default."
    named = {"dynunet": [_result("dynunet", "nnunet", "nnunet")], "unetr": [_result("unetr", "own", "default")]}
    assert recipe_text(named) == " Recipes differ between the rows: `dynunet`: nnunet (its own); `unetr`: default " \
                                 "(its own)."
    translation = RunResult(Path("r"), Path("r"), {"task": "translation", "variant": "classic", "config": {}}, None)
    assert translation.recipe is None and recipe_text({"classic": [translation]}) == ""  # a task without recipes


def _row(variant: str, recipe: str | None) -> dict:
    stat = {"mean": 0.5, "ci95": None}
    return {"variant": variant, "recipe": recipe, "parts changed": "", "params": 1, "GFLOPs": 0.0, "steps": 1,
            "verdict": "baseline", "metrics": {"dice": stat}, "items/s": 1.0, "wall s": 1.0}


def test_the_main_table_has_a_recipe_column_only_for_tasks_with_recipes():
    comparison = {"headline": "dice", "kind": "compare", "reference": "dynunet", "alpha": 0.05,
                  "metrics": {"dice": {"title": "Dice", "unit": "", "role": "headline"}},
                  "rows": [_row("dynunet", "nnunet"), _row("missformer", "default")]}
    header, _, first, second = main_table(comparison).splitlines()
    assert header.startswith("| variant | recipe | parts changed |")
    assert first.startswith("| dynunet | nnunet |") and second.startswith("| missformer | default |")
    comparison["rows"] = [_row("classic", None), _row("pre-ln", None)]
    assert "recipe" not in main_table(comparison).splitlines()[0]


def test_ablate_adds_an_own_vs_shared_recipe_row_for_a_variant_with_its_own_recipe():
    cls = task_class("medseg")
    dynunet = get_variant("dynunet", "medseg")
    row = recipe_entry(cls, dynunet, None)
    assert row.label == "own vs shared recipe (this row: shared default)" and row.variant == "dynunet"
    assert "own nnunet -> shared default" in row.parts and row.model == {}
    assert recipe_entry(cls, dynunet, "own") is not None
    assert recipe_entry(cls, dynunet, "nnunet") is None  # one recipe shared by every row: nothing to ablate
    assert recipe_entry(cls, get_variant("missformer", "medseg"), None) is None  # its own recipe is the default
    assert recipe_entry(task_class("cifar"), get_variant("vit", "cifar"), None) is None  # a task without recipes
    specs = run_specs("medseg", [row], 2, "epochs=1", recipe="own", preset="tiny")
    assert [(s.config["recipe"], s.config["seed"], s.config["variant"]) for s in specs] == \
        [("default", 0, "dynunet"), ("default", 1, "dynunet")]  # the row's settings override the shared ones


def test_recipe_flag_errors(capsys, tmp_path):
    out = str(tmp_path / "x")
    cases = [(["compare", "translation", "--recipe", "own", "--out", out], "translation task has no training recipes"),
             (["compare", "medseg", "--recipe", "nnunett", "--out", out], "Did you mean 'nnunet'"),
             (["ablate", "dynunet", "--task", "medseg", "--recipe", "own", "--set", "recipe=nnunet", "--out", out],
              "--recipe own and --set recipe=nnunet disagree"),
             (["compare", "medseg", "--runs", out, "--recipe", "own", "--out", out], "drop --recipe")]
    for command, message in cases:
        assert main(command) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()  # refused before anything was trained or written


@pytest.fixture(scope="module")
def nifti(tmp_path_factory) -> Path:
    from tasks.medseg.reading.phantom_nifti import write_phantom_nifti

    root = tmp_path_factory.mktemp("recipe")
    return write_phantom_nifti(root / "dec", "decathlon", slices=20, size=(40, 48), train_cases=TRAIN,
                               test_cases=("case0001",))


def _config(run: str) -> dict:
    return json.loads((Path(run) / "config.json").read_text())


@pytest.mark.slow  # trains two 3D runs of one epoch
def test_compare_with_own_recipes_shows_them_per_row_and_in_the_preamble(nifti, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "cmp"
    assert main(["compare", "medseg", "--variants", "dynunet,unetr", "--baseline", "dynunet", "--recipe", "own",
                 "--allow-undeclared", "--data", str(nifti), *SETTINGS, "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert {r["variant"]: r["recipe"] for r in results["rows"]} == {"dynunet": "nnunet", "unetr": "default"}
    assert all(_config(run)["recipe"] == "own" for r in results["rows"] for run in r["runs"])
    own = "each side trains with its own recipe (dynunet: nnunet, unetr: default)"
    report = (out / "report.md").read_text()
    assert own in report and "| variant | recipe |" in report and "| dynunet | nnunet |" in report
    runs = [run for r in results["rows"] for run in r["runs"]]
    capsys.readouterr()
    assert main(["compare", "medseg", "--runs", *runs, "--baseline", "dynunet", "--out", str(tmp_path / "again")]) == 0
    assert own in (tmp_path / "again" / "report.md").read_text()  # read back from the run folders alone


@pytest.mark.slow  # trains two 3D runs of one epoch
def test_ablate_pairs_the_own_recipe_against_the_shared_default(nifti, tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "abl"
    assert main(["ablate", "dynunet", "--task", "medseg", "--set", f"data={nifti}", *SETTINGS, "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    full, row = results["rows"]
    assert (full["variant"], full["recipe"]) == ("dynunet", "nnunet")
    assert (row["variant"], row["recipe"]) == ("own vs shared recipe (this row: shared default)", "default")
    (a,), (b,) = full["runs"], row["runs"]
    config_a, config_b = _config(a), _config(b)
    assert (config_a["recipe"], config_b["recipe"]) == ("own", "default")
    assert {k: v for k, v in config_a.items() if k not in ("recipe", "out")} == \
        {k: v for k, v in config_b.items() if k not in ("recipe", "out")}  # same seed, budget and every other setting
    stat = row["metrics"][results["headline"]]
    assert stat["p_value"] is not None and stat["delta"] == pytest.approx(full["mean"] - row["mean"])  # paired
    report = (out / "report.md").read_text()
    assert "`dynunet`: nnunet (its own)" in report and "(this row: shared default)`: default (shared)" in report
    # the same two runs given to zoo compare --runs: one variant, two recipes, a group per recipe, paired
    assert main(["compare", "medseg", "--runs", b, a, "--baseline", "dynunet (recipe default)",
                 "--out", str(tmp_path / "runs")]) == 0
    again = json.loads((tmp_path / "runs" / "results.json").read_text())
    assert [(r["variant"], r["recipe"]) for r in again["rows"]] == [("dynunet (recipe default)", "default"),
                                                                     ("dynunet (recipe nnunet)", "nnunet")]
    assert again["rows"][1]["metrics"][results["headline"]]["delta"] == pytest.approx(stat["delta"])  # own − shared


@pytest.mark.slow  # trains 2 variants x 2 folds of one 2D epoch
def test_a_cross_validated_comparison_shows_the_shared_recipe(tmp_path):
    from tasks.medseg.reading.phantom import write_phantom

    data = write_phantom(tmp_path / "data", seed=3, slices=5, size=(48, 64), train_cases=TRAIN[:4],
                         test_cases=("case0001", "case0002"))
    out = tmp_path / "cv"
    assert main(["compare", "medseg", "--folds", "2", "--variants", "basicunet,missformer", "--recipe", "nnunet",
                 "--data", str(data), "--set", "image_size=32", "--set", "batch_size=4", "--set", "overlay_slices=0",
                 "--set", "device=cpu", "--set", "num_threads=1", "--set", "preset=tiny", "--epochs", "1", "--quiet",
                 "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert [r["recipe"] for r in results["rows"]] == ["nnunet", "nnunet"]
    report = (out / "report.md").read_text()
    assert "one shared recipe for every side: nnunet" in report and "| basicunet | nnunet |" in report
