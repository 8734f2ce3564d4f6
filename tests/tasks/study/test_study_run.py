"""A whole study trained end to end (small runs): its reading of the runs, the tuned regime, the report, resuming."""

from __future__ import annotations

import json

import pytest

from tasks.study.study import run_study
from tasks.sweeps.plan import config_hash, read_sweep_file

pytestmark = pytest.mark.slow

SETTINGS = {"num_threads": 1, "translation.n_train": 512, "translation.eval_size": 100}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    results = run_study(["rmsnorm", "gelu"], ["translation", "cifar"], out, seeds=2, budget="epochs=1",
                        tune="lr=1e-3,3e-3", settings=SETTINGS)
    return out, results


def test_cells_read_the_runs_test_metric_per_seed(study):
    out, results = study
    # an independent path: each cifar run's own metrics.json test top-1, against the study's per-seed differences
    for regime in ("shared", "tuned"):
        row = next(r for r in results["analyses"]["rmsnorm"][regime]["cells"] if r["cell"].startswith("cifar"))
        top1 = {role: [json.loads((out / name / "metrics.json").read_text())["final"]["test"]["top1"]
                       for name in names] for role, names in row["runs"].items()}
        assert row["classic"]["per_seed"] == pytest.approx(top1["classic"], abs=1e-12)
        assert row["new"]["per_seed"] == pytest.approx(top1["new"], abs=1e-12)
        assert row["noise"]["per_seed"] == pytest.approx(top1["noise"], abs=1e-12)
        configs = {role: [json.loads((out / name / "config.json").read_text()) for name in names]
                   for role, names in row["runs"].items()}
        assert [c["seed"] for c in configs["classic"]] == [c["seed"] for c in configs["new"]] == [0, 1]
        assert [c["seed"] for c in configs["noise"]] == [2, 3]
        assert all(c["model"] == {"norm": "rmsnorm"} for c in configs["new"])
        assert all(c["model"] == {} for c in configs["classic"] + configs["noise"])
    shared = next(r for r in results["analyses"]["rmsnorm"]["shared"]["cells"] if r["cell"].startswith("cifar"))
    assert shared["classic"]["lr"] == shared["new"]["lr"] == 1e-3  # cifar's default


def test_the_tuned_regime_trains_at_the_rates_chosen_on_validation(study):
    out, results = study
    choices = {(c["cell"], c["side"]): c for c in results["choices"]}
    # translation: base, rmsnorm, gelu; ViT: base (= gelu's new side), rmsnorm, no-gelu (ReLU)
    assert sorted(choices) == sorted([("translation/easy/tiny", s) for s in ("base", "rmsnorm", "gelu")]
                                     + [("cifar/fmnist/tiny", s) for s in ("base", "rmsnorm", "no-gelu")])
    for (cell, side), choice in choices.items():
        assert choice["valid_hash"].startswith("sha256:")
        best = max(choice["valid"], key=lambda lr: choice["valid"][lr])  # both tasks: higher is better
        assert choice["chosen"] == float(best)
        row = next(r for r in results["analyses"]["rmsnorm" if side in ("base", "rmsnorm") else "gelu"]["tuned"]
                   ["cells"] if r["cell"] == cell)
        assert choice["chosen"] in (row["classic"]["lr"], row["new"]["lr"])
    # the tuning runs count: every run folder of the study, and no more
    folders = [p for p in out.iterdir() if (p / "metrics.json").is_file()]
    assert results["cost"]["total"]["runs"] == len(folders)
    assert results["cost"]["tuning"]["runs"] > 0


def test_report_and_forest_plots(study):
    out, results = study
    report = (out / "report.md").read_text()
    assert "tuning changes the verdict" in report and "## Learning rates chosen on validation" in report
    for change in ("rmsnorm", "gelu"):
        for regime in ("shared", "tuned"):
            analysis = results["analyses"][change][regime]
            assert analysis["scope"]["scope"] in ("general", "task-specific", "no effect", "inconclusive")
            assert (out / f"forest-{change}-{regime}.png").stat().st_size > 1000
            assert f"forest-{change}-{regime}.png" in report
    written = json.loads((out / "results.json").read_text())
    assert written["declared"] == {"rmsnorm": "general", "gelu": "general"}
    assert written["analyses"]["gelu"]["shared"]["pooled"]["q_df"] == 1


def test_rerun_reuses_every_run_and_gives_the_same_verdicts(study):
    out, results = study
    before = {p.name: (p / "metrics.json").stat().st_mtime_ns for p in out.iterdir() if (p / "metrics.json").is_file()}
    again = run_study(["rmsnorm", "gelu"], ["translation", "cifar"], out, seeds=2, budget="epochs=1",
                      tune="lr=1e-3,3e-3", settings=SETTINGS)
    after = {p.name: (p / "metrics.json").stat().st_mtime_ns for p in out.iterdir() if (p / "metrics.json").is_file()}
    assert after == before  # nothing retrained
    assert again["analyses"]["rmsnorm"]["shared"]["cells"] == results["analyses"]["rmsnorm"]["shared"]["cells"]
    assert again["choices"] == results["choices"]
    # a run folder's name carries its config hash: another budget is other runs, never a silent reuse
    with pytest.raises(ValueError, match="a zoo study's sweep; resume it by running the study again"):
        read_sweep_file(out / "sweep.json")
    name = results["analyses"]["gelu"]["shared"]["cells"][0]["runs"]["new"][0]
    config = json.loads((out / name / "config.json").read_text())
    assert name.endswith(config_hash(config["task"], config, "epochs=1"))
