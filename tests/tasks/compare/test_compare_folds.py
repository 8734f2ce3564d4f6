"""``zoo compare medseg --folds K``: every variant on the same folds (one sweep), each case predicted once by the
fold that held it out, the variants paired case by case over the union of the folds, the mean over folds, peak
memory and training time beside; several datasets: a table each and the meta-analysis across them; one-line
errors for a --folds that cannot be."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tasks.cli.main import main
from tasks.compare.folds import across_datasets, dataset_cell, datasets
from tasks.compare.meta import Cell, meta_analysis
from tasks.compare.run_results import RunResult, read_result
from tasks.medseg.evaluation.paired import paired_metrics
from tasks.medseg.reading.phantom import write_phantom

TRAIN = ("case0005", "case0006", "case0007", "case0008")
SETTINGS = ["--set", "image_size=32", "--set", "batch_size=4", "--set", "overlay_slices=0", "--set", "device=cpu",
            "--set", "num_threads=1", "--set", "preset=tiny", "--epochs", "1", "--quiet"]
VARIANTS = ["--variants", "basicunet,missformer"]


def _phantom(root: Path, seed: int) -> Path:
    """A tiny 2D phantom in the Synapse layout (the embedded data's layout): 4 training cases of 5 slices."""
    return write_phantom(root, seed=seed, slices=5, size=(48, 64), train_cases=TRAIN,
                         test_cases=("case0001", "case0002"))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("folds")
    return _phantom(root / "alpha", 3), _phantom(root / "beta", 4)


def _fold_runs(out: Path) -> dict[str, list[Path]]:
    """variant → its fold run folders, fold order (the sweep's folders: <variant>-seed0-fold<k>-<hash>)."""
    runs: dict[str, list[Path]] = {}
    for folder in sorted(out.glob("*-seed0-fold*")):
        runs.setdefault(folder.name.split("-seed")[0], []).append(folder)
    return runs


def _cases(folder: Path, split: str) -> list[str]:
    return [json.loads(line)["case"] for line in (folder / "predictions" / f"{split}.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def compared(data, tmp_path_factory):
    """One dataset, 2 folds, 2 variants (4 one-epoch runs), then the same command again: (out, stdout of both)."""
    out = tmp_path_factory.mktemp("compare") / "cv"
    command = ["compare", "medseg", "--folds", "2", *VARIANTS, "--data", str(data[0]), *SETTINGS, "--out", str(out)]
    assert main(command) == 0
    stamps = {f: (f / "checkpoints" / "best.pt").stat().st_mtime_ns for f in out.glob("*-fold*")}
    first = json.loads((out / "results.json").read_text())
    assert main(command) == 0
    assert {f: (f / "checkpoints" / "best.pt").stat().st_mtime_ns for f in out.glob("*-fold*")} == stamps
    return out, first


@pytest.mark.slow
def test_every_case_is_predicted_once_by_the_fold_that_held_it_out(compared):
    out, _ = compared
    folds = json.loads((out / "splits_final.json").read_text())
    assert sorted(c for f in folds for c in f["val"]) == list(TRAIN)
    runs = _fold_runs(out)
    assert set(runs) == {"basicunet", "missformer"} and all(len(r) == 2 for r in runs.values())
    for folders in runs.values():
        for k, folder in enumerate(folders):
            config = json.loads((folder / "config.json").read_text())
            assert (config["fold"], config["folds"], Path(config["splits"])) == (str(k), 2, out / "splits_final.json")
            assert sorted(_cases(folder, "valid")) == folds[k]["val"]  # scored on the cases it did not train on
            assert sorted(json.loads((folder / "run.json").read_text())["preprocessing"]["split"]["valid"]) == \
                folds[k]["val"]
    sweep = json.loads((out / "sweep.json").read_text())
    assert len(sweep["runs"]) == 4 and sweep["sweep"]["set"]["folds"] == 2  # one sweep of every variant's folds


@pytest.mark.slow
def test_variants_are_paired_case_by_case_over_the_union_of_the_folds(compared):
    out, comparison = compared
    rows = {r["variant"]: r for r in comparison["rows"]}
    metric = paired_metrics(read_result(_fold_runs(out)["basicunet"][0]).info)[0]
    for variant, folders in _fold_runs(out).items():
        results = [read_result(f) for f in folders]
        union = [rec for r in results for rec in r.records("valid")[0]]  # the folds' validation records together
        stats = metric.stats(union, results[0].info)
        assert len(stats) == len(TRAIN)
        np.testing.assert_allclose(rows[variant]["metrics"]["dice"]["mean"], metric.score(stats.sum(0))[0],
                                   rtol=1e-12)
        over = rows[variant]["over_folds"]["dice"]  # each fold's own Dice, as its metrics.json reports it
        fold_dice = [json.loads((f / "metrics.json").read_text())["final"]["valid"]["dice"] for f in folders]
        np.testing.assert_allclose(over["values"], fold_dice, rtol=1e-9)
        np.testing.assert_allclose(over["mean"], np.mean(fold_dice), rtol=1e-9)
        peaks = [json.loads((f / "metrics.json").read_text())["peak_memory"] for f in folders]
        assert all(p["kind"] == "process_rss" and p["mb"] > 0 for p in peaks)
        assert rows[variant]["peak MiB"] == max(p["mb"] for p in peaks)
        assert rows[variant]["wall s"] == pytest.approx(sum(r.training["train_seconds"] for r in results))
    per_case = rows["missformer"]["metrics"]["dice"]["per_case"]
    assert len(per_case["row"]) == len(per_case["reference"]) == len(TRAIN)  # one pair per case, not per fold
    delta = rows["missformer"]["metrics"]["dice"]["delta"]
    assert delta == pytest.approx(rows["missformer"]["metrics"]["dice"]["mean"] - rows["basicunet"]["metrics"]
                                  ["dice"]["mean"], abs=1e-12)
    report = (out / "report.md").read_text()
    assert "2 folds' validation cases together" in report and "over folds (mean ± SD)" in report
    assert "peak MiB" in report


@pytest.mark.slow
def test_a_rerun_reuses_every_run_and_reports_the_same(compared):
    out, first = compared  # the fixture checked that no checkpoint was written again
    again = json.loads((out / "results.json").read_text())
    assert [r["metrics"]["dice"] for r in again["rows"]] == [r["metrics"]["dice"] for r in first["rows"]]
    assert all(run["state"] == "done" for run in json.loads((out / "sweep.json").read_text())["runs"].values())
    stamps = {f: (f / "checkpoints" / "best.pt").stat().st_mtime_ns for f in out.glob("*-fold*")}
    assert main(["sweep", str(out / "sweep.json")]) == 0  # the recorded sweep (its --folds and --data): all reused
    assert {f: (f / "checkpoints" / "best.pt").stat().st_mtime_ns for f in out.glob("*-fold*")} == stamps
    assert json.loads((out / "results.json").read_text())["rows"][1]["metrics"]["dice"] == \
        first["rows"][1]["metrics"]["dice"]


@pytest.mark.slow
def test_two_datasets_get_a_table_each_and_the_statistics_across_them(data, tmp_path, capsys):
    out = tmp_path / "two"
    assert main(["compare", "medseg", "--folds", "2", *VARIANTS, "--data", str(data[0]), "--data", str(data[1]),
                 *SETTINGS, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "results.json").read_text())
    assert list(result["datasets"]) == ["alpha", "beta"]
    for name in ("alpha", "beta"):
        assert (out / name / "splits_final.json").is_file() and (out / name / "report.md").is_file()
        assert f"## {name}" in printed
    assert len(json.loads((out / "sweep.json").read_text())["runs"]) == 8  # both datasets: one sweep
    assert "needs --seeds 2 or more" in result["across_datasets"]["missformer"]["why"]  # one seed: no noise floor


def _result(values: list[float], case_names: list[str]) -> RunResult:
    """A pooled medseg result whose one organ scores ``values`` per case (Dice; HD95 0)."""
    records = [{"case": c, "papers": {"organ": {"dice": v, "hd95": 0.0}}} for c, v in zip(case_names, values)]
    info = {"task": "medseg", "variant": "x", "config": {"hd95": "papers"},
            "preprocessing": {"class_names": ["background", "organ"]}}
    return RunResult(Path("."), Path("."), info, None, {"test": (records, "h"), "valid": (records, "h")})


def test_the_cross_dataset_statistics_are_zoo_studys_on_per_case_differences():
    """Cells = datasets; differences = per case, the variant's seed mean minus the baseline's; the noise floor =
    per case, the baseline's seed 0 minus seed 1: the meta-analysis of those cells, as zoo study computes it."""
    rng = np.random.default_rng(0)
    cases = [f"c{i}" for i in range(6)]
    pooled, cells = {}, []
    for name, shift in (("alpha", 0.05), ("beta", 0.02), ("gamma", 0.04)):
        base = [rng.uniform(0.3, 0.7, 6) for _ in range(2)]
        variant = [b + shift + rng.normal(0, 0.02, 6) for b in base]
        pooled[name] = {"base": [_result(b.tolist(), cases) for b in base],
                        "new": [_result(v.tolist(), cases) for v in variant]}
        cells.append(Cell("medseg", name, "tiny", tuple(np.mean(variant, 0) - np.mean(base, 0)),
                          tuple(base[0] - base[1])))
    metric = paired_metrics(pooled["alpha"]["base"][0].info)[0]
    np.testing.assert_allclose(dataset_cell("medseg", "alpha", "tiny", metric, pooled["alpha"]["new"],
                                            pooled["alpha"]["base"]).differences, cells[0].differences, rtol=1e-12)
    found = across_datasets("medseg", "tiny", metric, pooled, "base", 0.05)["new"]
    expected = meta_analysis(cells, alpha=0.05, across="dataset")
    assert found["pooled_effect"] == pytest.approx(expected.pooled.estimate, rel=1e-12)
    assert found["interval"] == pytest.approx(list(expected.pooled.interval), rel=1e-12)
    assert found["scope"] == expected.scope.scope and set(found["cells"]) == {"alpha", "beta", "gamma"}
    hd95 = paired_metrics(pooled["alpha"]["base"][0].info)[1]  # lower is better: oriented so that + is better
    assert not hd95.higher_is_better


def _planted(shifts: dict[str, float], seed: int, cases: int = 20) -> dict[str, dict[str, list[RunResult]]]:
    """dataset → {"base", "new"} → two seeds' pooled results: per case the baseline's Dice, its second seed within
    0.02 of the first (the noise floor), the variant's the baseline's plus the dataset's shift (± 0.01)."""
    rng = np.random.default_rng(seed)
    names = [f"c{i}" for i in range(cases)]
    pooled = {}
    for name, shift in shifts.items():
        first = rng.uniform(0.3, 0.7, cases)
        base = [first, first + rng.normal(0, 0.02, cases)]
        pooled[name] = {"base": [_result(b.tolist(), names) for b in base],
                        "new": [_result((b + shift + rng.normal(0, 0.01, cases)).tolist(), names) for b in base]}
    return pooled


def test_several_datasets_of_one_task_pool_as_datasets_not_as_tasks():
    """Three datasets of medseg are three cells of ONE task: the scope, its reason, the signs and the rule the report
    prints read across the datasets by their names (the cells were once faked as tasks "medseg:DATASET")."""
    from tasks.compare.folds import report_lines

    metric = paired_metrics(_result([0.5, 0.5], ["a", "b"]).info)[0]
    everywhere = across_datasets("medseg", "tiny", metric, _planted(dict.fromkeys(("alpha", "beta", "gamma"), 0.05), 1),
                                 "base", 0.05)
    found = everywhere["new"]
    assert found["scope"] == "general" and found["signs"] == {"alpha": 1, "beta": 1, "gamma": 1}
    assert found["reason"].endswith("significant with that sign in 3 of 3 datasets (alpha, beta, gamma)")
    assert found["agreeing"] == 3
    only_alpha = across_datasets("medseg", "tiny", metric, _planted({"alpha": 0.06, "beta": 0.0, "gamma": 0.0}, 2),
                                 "base", 0.05)["new"]
    assert only_alpha["scope"] == "dataset-specific", only_alpha
    assert only_alpha["reason"].startswith("significant + in alpha; null or opposite in beta, gamma")
    report = "\n".join(report_lines({"title": "t", "across_datasets": everywhere}, {}, metric, 0.05))
    assert "- new: **general** across datasets: " in report
    assert "Signs by dataset: alpha +, beta +, gamma + (3 of 3 agree with the pooled sign)" in report
    assert "more than half of the datasets have the pooled sign" in report and "**dataset-specific**" in report
    assert "medseg:" not in report and not re.search(r"\btasks?\b(?!\.compare)", report), report  # but the module


def test_data_names_folders_or_the_embedded_data(data, tmp_path):
    from tasks.medseg.task import MedsegTask
    from tasks.translation.task import TranslationTask

    found = datasets(MedsegTask, ["embedded:phantom-nifti", str(data[0]), str(data[0]), "embedded"])
    assert [d.label for d in found] == ["phantom-nifti", "alpha-1", "alpha-2", "embedded"]
    assert found[0].fields == {"data": None, "dataset": "phantom-nifti"} and found[3].fields == {"data": None}
    assert found[1].fields == {"data": str(data[0].resolve())}
    assert datasets(MedsegTask, None)[0].fields == {}  # the config's own data
    with pytest.raises(FileNotFoundError, match=r"--data .*nope does not exist; pass a dataset folder, or embedded"):
        datasets(MedsegTask, [str(tmp_path / "nope")])
    if "dataset" not in TranslationTask.config_class.__dataclass_fields__:
        with pytest.raises(ValueError, match="has one embedded dataset; pass --data embedded"):
            datasets(TranslationTask, ["embedded:x"])


def test_bad_folds_get_one_line_errors(data, tmp_path, capsys):
    out = tmp_path / "out"
    cases = {
        "more folds than cases": (["compare", "medseg", "--folds", "5", "--data", str(data[0])],
                                  "--folds 5 needs at least 5 training cases, the data has 4; lower --folds"),
        "one fold": (["compare", "medseg", "--folds", "1", "--data", str(data[0])],
                     r"--folds must be >= 2 \(a cross-validation needs at least two folds; drop --folds for none\), "
                     "got 1"),
        "a task without folds": (["compare", "cifar", "--folds", "2"],
                                 r"--folds 2: task 'cifar' has no cross-validation \(tasks with folds: medseg\); drop "
                                 "--folds"),
        "folds of finished runs": (["compare", "medseg", "--runs", str(tmp_path), "--folds", "2"],
                                   "--runs compares finished runs and trains nothing; drop .*--folds"),
        "two datasets without folds": (["compare", "medseg", "--data", str(data[0]), "--data", str(data[1])],
                                       "--data given 2 times: several datasets are compared under cross-validation; "
                                       "add --folds K"),
    }
    for name, (command, message) in cases.items():
        assert main([*command, *VARIANTS, "--out", str(out)]) == 2, name
        err = capsys.readouterr().err.strip()
        assert err.startswith("zoo compare: error: ") and "\n" not in err, (name, err)
        assert re.search(message, err), (name, err)
        assert not list(out.glob("*-fold*")), name  # refused before any training
