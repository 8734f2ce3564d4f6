"""``zoo cv medseg`` reports the normalised surface Dice beside Dice and HD95 (issue 39): per fold, mean ± SD over the
folds, per class, at the run's ``--nsd-tolerance``, which the report and the printed summary name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tasks.cli.main import main
from tasks.medseg.cv import fold_result, nsd_title, over_folds, report_lines
from tasks.medseg.evaluation.metrics import summarise

NAMES = ["background", "liver", "spleen"]


def _metrics(nsd: list[float] | None, tolerance: float = 1.0) -> dict:
    """A fold's metrics.json as a run writes it (summaries from :func:`summarise`), over two cases; ``nsd``: each
    case's liver NSD (spleen 0.5), None for a fold scored before NSD."""
    width = 3 if nsd is not None else 2
    per_case = {f"case{i}": {1: (0.8, 3.0, *([nsd[i]] if nsd else []))[:width], 2: (0.6, 5.0, 0.5)[:width]}
                for i in range(2)}
    conventions = {"papers": summarise({c: {k: v[:2] for k, v in s.items()} for c, s in per_case.items()}, NAMES,
                                       "papers"),
                   "mm": summarise(per_case, NAMES, "mm", nsd_tolerance=tolerance if nsd else None)}
    mm = conventions["mm"]
    scores = {"dice": 0.7, "hd95": 4.0, "dice_mm": mm["mean_dice"], "hd95_mm": mm["mean_hd95"], "nnunet_dice": 0.7,
              "conventions": conventions, **({"nsd": mm["mean_nsd"]} if nsd else {})}
    return {"final": {"test": scores}}


def _summary(results: list[dict]) -> dict:
    return {"variant": "basicunet", "folds": len(results), "data": "d", "splits": "s", "trained": [0, 1],
            "skipped": [], "class_names": NAMES, "per_fold": results, "over_folds": over_folds(results, NAMES),
            "nsd_title": nsd_title(results)}


def test_each_folds_nsd_and_its_mean_and_sd_over_the_folds(tmp_path):
    results = [fold_result(k, [f"case{k}"], tmp_path / f"fold_{k}", _metrics(nsd, 2.0))
               for k, nsd in enumerate(([0.2, 0.4], [0.6, 1.0]))]
    liver = [np.mean([0.2, 0.4]), np.mean([0.6, 1.0])]
    fold_nsd = [(liver[0] + 0.5) / 2, (liver[1] + 0.5) / 2]  # per organ over the cases, then over the organs
    assert [r["nsd"] for r in results] == pytest.approx(fold_nsd)
    over = over_folds(results, NAMES)
    assert over["nsd"]["mean"] == pytest.approx(np.mean(fold_nsd))
    assert over["nsd"]["sd"] == pytest.approx(np.std(fold_nsd, ddof=1))
    assert over["classes"]["mm"]["liver"]["nsd"]["values"] == pytest.approx(liver)
    assert "nsd" not in over["classes"]["papers"]["liver"]  # NSD needs the spacing: the mm convention only
    lines = "\n".join(report_lines(_summary(results), None))
    assert "| NSD @ 2 mm (%) |" in lines and f"{100 * np.mean(fold_nsd):.2f} ± {100 * np.std(fold_nsd, ddof=1):.2f}" \
        in lines
    assert "| NSD @ 2 mm % mean ± SD |" in lines  # the per-class table of the mm convention


def test_folds_scored_before_nsd_leave_the_column_out_and_tolerances_must_agree(tmp_path):
    old = [fold_result(k, [f"case{k}"], tmp_path, _metrics(None)) for k in range(2)]
    assert nsd_title(old) is None and over_folds(old, NAMES)["nsd"]["mean"] is None
    assert "NSD @" not in "\n".join(report_lines(_summary(old), None))
    mixed = [fold_result(0, ["a"], tmp_path, _metrics([0.5, 0.5], 1.0)),
             fold_result(1, ["b"], tmp_path, _metrics([0.5, 0.5], 2.0))]
    with pytest.raises(ValueError, match=r"the folds scored NSD at different tolerances \(NSD @ 1 mm \(%\), NSD @ 2 "
                                         r"mm \(%\)\); train them again at one --nsd-tolerance"):
        nsd_title(mixed)


@pytest.mark.slow  # trains two 2D folds of one epoch through the command line
def test_zoo_cv_prints_and_writes_nsd_at_the_runs_tolerance(tmp_path, monkeypatch, capsys):
    from tasks.medseg.reading.phantom_nifti import write_phantom_nifti

    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    dec = write_phantom_nifti(tmp_path / "dec", "decathlon", slices=6, size=(32, 36),
                              train_cases=("case0005", "case0006", "case0007", "case0008"), test_cases=("case0001",))
    shutil.copytree(dec / "imagesTr", tmp_path / "pairs" / "images")
    shutil.copytree(dec / "labelsTr", tmp_path / "pairs" / "labels")
    out = tmp_path / "cv"
    assert main(["cv", "medseg", "--data", str(tmp_path / "pairs"), "--out", str(out), "--folds", "2", "--variant",
                 "basicunet", "--image-size", "32", "--epochs", "1", "--batch-size", "4", "--progress", "false",
                 "--overlay-slices", "0", "--device", "cpu", "--num-threads", "1", "--nsd-tolerance", "2.5"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "cv.json").read_text())
    fold_nsd = [json.loads((out / f"fold_{k}" / "metrics.json").read_text())["final"]["test"]["nsd"] for k in (0, 1)]
    assert [r["nsd"] for r in summary["per_fold"]] == fold_nsd and None not in fold_nsd
    assert summary["nsd_tolerance_mm"] == 2.5 and summary["nsd_title"] == "NSD @ 2.5 mm (%)"
    over = summary["over_folds"]["nsd"]
    assert over["mean"] == pytest.approx(np.mean(fold_nsd)) and over["sd"] == pytest.approx(np.std(fold_nsd, ddof=1))
    assert f"NSD {100 * over['mean']:.2f} ± {100 * over['sd']:.2f} % @ 2.5 mm" in printed
    assert "| NSD @ 2.5 mm (%) |" in Path(out / "report.md").read_text()
