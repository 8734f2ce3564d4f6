"""zoo compare with statistics, end to end on tiny cifar runs: the table, --runs, refusals, verdicts.

One tiny comparison is trained once (vit and linear, preset tiny, one epoch on the embedded images); the
tests rebuild it from its run folders, pair it with copies evaluated as other data or with reset weights.
Outcome assertions keep wide margins: one epoch of the tiny ViT reaches ~40 % top-1 (measured 41.7 %),
a model with freshly initialised weights ~10 %; the test set has 1,000 images.
"""

import json
import shutil

import pytest
import torch

from tasks.cli.main import main
from tasks.compare.run_results import read_result
from tasks.compare.sweep import build_comparison, compare, compare_runs


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The comparison `zoo compare cifar --variants vit,linear` trains: (folder, the table it prints)."""
    out = tmp_path_factory.mktemp("compare") / "c"
    result = compare("cifar", ["vit", "linear"], out, epochs=1, progress=False, preset="tiny")
    return out, result["table"]


def _run(out, label: str):
    """The folder of ``label``'s seed-0 run (named by label, seed and a hash of its config)."""
    (folder,) = out.glob(f"{label}-seed0-*")
    return folder


def _table(printed: str) -> str:
    return printed.split("\n\n")[0].strip()


def test_results_json_carries_the_statistics(trained):
    out, printed = trained
    results = json.loads((out / "results.json").read_text())
    assert results["reference"] == "vit" and results["headline"] == "top1" and results["alpha"] == 0.05
    vit, linear = results["rows"]
    for row in (vit, linear):
        for key in ("mean", "ci95", "delta", "delta_ci95", "p_value", "p_value_holm", "verdict", "test"):
            assert key in row, key
    assert vit["verdict"] == "baseline" and vit["delta"] == 0.0
    assert linear["test"] == "bootstrap" and 0 <= linear["p_value"] <= linear["p_value_holm"] <= 1
    top1 = linear["metrics"]["top1"]
    assert list(top1["other_p_values"]) == ["mcnemar_exact"]  # reported beside, not deciding
    assert top1["seed_verdict"] == "test-set noise only, 1 seed" and top1["seed_units"] == 1
    assert linear["delta"] == pytest.approx(linear["mean"] - vit["mean"], abs=1e-12)
    low, high = linear["delta_ci95"]
    assert low <= linear["delta"] <= high
    trained_top1 = json.loads((_run(out, "vit") / "metrics.json").read_text())["final"]["test"]["top1"]
    assert vit["mean"] == pytest.approx(trained_top1, abs=1e-12)  # the training's own number, from the records
    assert "macro_f1" in vit["metrics"] and results["budget"] == {"vit": "1 epoch(s) per run",
                                                                   "linear": "1 epoch(s) per run"}
    report = (out / "report.md").read_text()
    assert "McNemar's exact test" in report and "Holm-corrected" in report and "1 epoch(s) per run" in report
    assert "## Across seeds" in report and "test-set noise only" in report and "p (McNemar)" in report
    assert (out / "metric_vs_cost.png").is_file()
    assert "| verdict |" in printed and "| seed-aware verdict |" in printed


def test_runs_reproduce_the_trained_table(trained, capsys):
    out, printed = trained
    again = out.parent / "again"
    assert main(["compare", "cifar", "--runs", str(_run(out, "vit")), str(_run(out, "linear")),
                 "--out", str(again)]) == 0
    assert _table(capsys.readouterr().out) == _table(printed)
    rebuilt, original = (json.loads((d / "results.json").read_text()) for d in (again, out))
    assert rebuilt["rows"] == original["rows"]


def test_the_baseline_alone_is_tabulated_without_tests(trained, capsys):
    out, _ = trained
    assert main(["compare", "cifar", "--runs", str(_run(out, "vit")), "--out", str(out.parent / "alone")]) == 0
    printed = capsys.readouterr().out
    assert "No comparison: only the baseline was run" in printed and "Holm-corrected" not in printed


def test_runs_on_different_data_are_refused(trained, capsys):
    out, _ = trained
    other = out.parent / "other-data"
    shutil.copytree(_run(out, "linear"), other)
    index = other / "predictions" / "index.json"
    entry = json.loads(index.read_text())
    entry["test"]["data_hash"] = "sha256:" + "0" * 64  # as if scored on another test set
    index.write_text(json.dumps(entry))
    assert main(["compare", "cifar", "--runs", str(_run(out, "vit")), str(other), "--out", str(out.parent / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "evaluated on different test data" in err
    assert str(other) in err and str(_run(out, "vit")) in err  # names both runs


def test_identical_variants_and_a_clearly_better_one(trained, tmp_path):
    out, _ = trained
    base = read_result(_run(out, "vit"))
    reset_dir = tmp_path / "reset"
    shutil.copytree(_run(out, "vit"), reset_dir, ignore=shutil.ignore_patterns("predictions", "evaluations"))
    best = reset_dir / "checkpoints" / "best.pt"
    state = torch.load(best, weights_only=True)
    torch.manual_seed(1)
    from tasks.runs.run import load_run

    fresh = load_run(reset_dir).task.build_saved_model("vit", json.loads((reset_dir / "run.json").read_text())[
        "variant_config"])
    state["model"] = fresh.state_dict()  # the same model with its weights reset
    torch.save(state, best)
    assert main(["evaluate", str(reset_dir), "--out", str(tmp_path / "reset-eval")]) == 0
    reset = read_result(tmp_path / "reset-eval")
    again = read_result(_run(out, "vit"))  # the same run read twice: two identical variants
    result = build_comparison("cifar", {"reset": [reset], "trained": [base], "identical": [again]}, "reset",
                              tmp_path / "cmp", alpha=0.05)
    trained_row, identical_row = result["rows"][1], result["rows"][2]
    assert trained_row["verdict"] == "better" and trained_row["p_value_holm"] < 0.05
    assert trained_row["delta"] > 0.15  # ~0.42 vs ~0.1 measured
    result = build_comparison("cifar", {"trained": [base], "identical": [again]}, "trained", tmp_path / "same")
    identical_row = result["rows"][1]
    assert identical_row["delta"] == 0.0 and identical_row["p_value"] == 1.0
    assert identical_row["verdict"] == "no significant difference"


def test_runs_flags_and_baseline_errors(trained, capsys):
    out, _ = trained
    runs = ["--runs", str(_run(out, "linear"))]
    assert main(["compare", "cifar", *runs, "--seeds", "2", "--out", str(out.parent / "y")]) == 2
    assert "--runs compares finished runs and trains nothing; drop --seeds" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no run of the baseline 'vit' among --runs"):
        compare_runs("cifar", [_run(out, "linear")], out.parent / "z")
    with pytest.raises(ValueError, match="is a cifar run, not a medseg one"):
        compare_runs("medseg", [_run(out, "linear")], out.parent / "z", baseline="linear")
    with pytest.raises(ValueError, match="come from the same training run"):
        compare_runs("cifar", [_run(out, "vit"), _run(out, "vit")], out.parent / "z")
    with pytest.raises(FileNotFoundError, match="neither a run folder"):
        read_result(out)  # the comparison's own folder is no run


def test_ablation_rows_are_the_independent_changes():
    import zoo
    from tasks.compare.sweep import ablation_entries

    entries = ablation_entries(zoo.get_variant("swin", "cifar"))
    labels = [e.label for e in entries]
    assert labels[0] == "swin" and len(set(labels)) == len(labels)
    assert "without head" not in labels  # the head only follows the hierarchy: its row reverts it
    assert all(e.model for e in entries[1:]) and "reaching" in entries[labels.index("without stacking")].parts
    names = [e.label for e in ablation_entries(zoo.get_variant("missformer", "medseg"))]
    assert {"without hierarchy", "without bridge"} <= set(names)  # one part changed twice: two named rows


def test_budget_sets_or_caps_the_epochs():
    from tasks.cifar.task import CifarTask
    from tasks.compare.sweep import COMPARE_EPOCHS, MAX_EPOCHS, resolve_budget

    assert resolve_budget(CifarTask, None, None) == (f"epochs={COMPARE_EPOCHS}", COMPARE_EPOCHS)
    assert resolve_budget(CifarTask, None, 5) == ("epochs=5", 5)
    assert resolve_budget(CifarTask, "epochs=3", None) == ("epochs=3", 3)
    assert resolve_budget(CifarTask, "time=60", None) == ("time=60", CifarTask.config_class().epochs)
    assert resolve_budget(CifarTask, "flops=1e12", None) == ("flops=1e12", MAX_EPOCHS)
    assert resolve_budget(CifarTask, "flops=1e12", 4) == ("flops=1e12", 4)
    with pytest.raises(ValueError, match="--epochs 2 and --budget epochs=3 disagree"):
        resolve_budget(CifarTask, "epochs=3", 2)
    with pytest.raises(ValueError, match="unknown budget kind 'steps'"):
        resolve_budget(CifarTask, "steps=3", None)
