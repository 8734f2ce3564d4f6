"""scripts/plot_medseg_baselines.py: the forest plot of README's "Measured: configured baselines" reads each
comparison's rows as results.json holds them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "plot_medseg_baselines.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("plot_medseg_baselines", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _comparison(reference: str, row: str, delta: float, interval: list[float] | None, verdict: str) -> dict:
    """A results.json with a reference row and one other, holding only what the plot reads."""
    base = {"delta": 0.0, "delta_ci95": None, "verdict": "baseline"}
    stat = {"delta": delta, "delta_ci95": interval, "verdict": verdict}
    metrics = {"dice": {"title": "Dice"}, "nsd": {"title": "NSD"}}
    return {"reference": reference, "metrics": metrics,
            "rows": [{"variant": reference, "metrics": {"dice": base, "nsd": base}},
                     {"variant": row, "metrics": {"dice": stat, "nsd": {**stat, "delta": delta / 2}}}]}


def test_forest_rows_are_the_non_reference_rows_with_their_intervals(script):
    comparison = _comparison("basicunet", "missformer", 0.25, [0.2, 0.3], "better")
    assert script.forest_rows(comparison, "2D", "dice") == [
        {"label": "2D: missformer vs basicunet", "delta": 0.25, "low": 0.2, "high": 0.3, "verdict": "better"}]
    no_interval = _comparison("a", "b", -0.1, None, "no significant difference")
    assert script.forest_rows(no_interval, "x", "nsd")[0] == {
        "label": "x: b vs a", "delta": -0.05, "low": -0.05, "high": -0.05, "verdict": "no significant difference"}
    with pytest.raises(ValueError, match="no metric 'hd99'.*it has dice, nsd"):
        script.forest_rows(comparison, "2D", "hd99")


def test_plot_writes_one_png_over_every_comparison(script, tmp_path):
    comparisons = {"2D": _comparison("basicunet", "missformer", 0.25, [0.2, 0.3], "better"),
                   "3D": _comparison("dynunet", "swinunetr3d", -0.1, [-0.2, -0.05], "worse")}
    # the 2D row's NSD Δ (0.125) lies outside its interval [0.2, 0.3], as a percentile interval may: drawn, not refused
    out = script.plot(comparisons, ["dice", "nsd"], tmp_path / "docs" / "fig.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_arguments_are_one_line_errors(script, tmp_path):
    with pytest.raises(ValueError, match="not NAME=VALUE"):
        script.split_pair("results.json", "results")
    results = tmp_path / "results.json"
    results.write_text(json.dumps(_comparison("a", "b", 0.1, [0.0, 0.2], "no significant difference")))
    with pytest.raises(ValueError, match="two comparisons named 'x'"):  # the second would hide the first
        script.main(["plot", f"x={results}", f"x={results}", "--out", str(tmp_path / "f.png")])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        script.main(["plot", f"x={tmp_path / 'missing.json'}", "--out", str(tmp_path / "f.png")])
