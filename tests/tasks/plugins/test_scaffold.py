"""``zoo new-variant``: the plugin folder it writes loads, passes ``zoo check`` and ``zoo diff`` shows the module
replaced at its part, before a line is edited; its own pytest file runs the check; bad names and folders are
refused before anything is written."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

import zoo
from tasks.cli.main import main
from tasks.plugins.check import RTOL, check_variant, render
from tasks.plugins.check_decoding import lockstep_drift
from tasks.plugins.loader import load_user_dir
from tasks.plugins.scaffold import BASES, new_variant
from tests.plugin_helpers import isolated_registry
from zoo.analysis import probes

SCAFFOLDS = [(on, part) for on, base in BASES.items() for part in base.classic]


@pytest.fixture(autouse=True)
def _isolated():
    with isolated_registry():
        yield


@pytest.mark.slow
@pytest.mark.parametrize("on, part", SCAFFOLDS, ids=[f"{on}-{part}" for on, part in SCAFFOLDS])
def test_a_new_variant_is_a_fair_patch_before_it_is_edited(on, part, tmp_path, capsys):
    name = f"my-{on}-{part}"
    out = tmp_path / "plugin"
    assert main(["new-variant", name, "--on", on, "--part", part, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"zoo check {name} --user-dir {out}" in printed and "EDIT HERE" in printed
    pkg = name.replace("-", "_")
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == sorted(
        ["README.md", "pyproject.toml", f"test_{pkg}.py", f"{pkg}/__init__.py", f"{pkg}/config.py",
         f"{pkg}/{'ffn' if part == 'ffn' else 'attention'}.py"])
    load_user_dir(out)
    variant = zoo.get_variant(name)
    assert variant.tasks == (BASES[on].task,) and variant.parts_changed == (part,)
    (report,) = check_variant(name, presets=["tiny"])
    assert not report.failed, "\n" + render(report)
    assert main(["diff", name, "--preset", "tiny", "--format", "json", "--user-dir", str(out)]) == 0
    diff = json.loads(capsys.readouterr().out)
    (changed,) = [p for p in diff["parts"] if p["measured_change"]]
    cls = "".join(w.capitalize() for w in name.split("-")) + ("FFN" if part == "ffn" else "Attention")
    assert changed["part"] == part and changed["structure"] == "replaced" and cls in changed["added"]
    assert changed["params"]["delta"] == 0  # a faithful copy: the same weights under another name


def test_the_copied_ffn_decodes_as_the_classic_model_does_at_every_preset(tmp_path):
    # zoo check's kv cache row on the untouched scaffold, at every preset: cached greedy and beam decoding stay within
    # the logits' tolerance of recomputation (at base, AVX-512 rounding decided a near-tie between two beam tokens
    # one way with the cache and the other way without, which the token comparison of the past called a failure)
    new_variant("my-ffn", "classic", "ffn", tmp_path / "p")
    load_user_dir(tmp_path / "p")
    variant = zoo.get_variant("my-ffn")
    for preset in variant.presets:
        model = variant.build(variant.config(preset, dropout=0.0)).eval()
        src = probes.probe_batch(model, rows=2, src_len=8)[0]
        for beam in (None, 3):
            drift = lockstep_drift(model, src, beam, max_len=6)
            assert drift.magnitude > 0 and drift.max_abs <= RTOL * max(drift.magnitude, 1.0), (preset, beam, drift)


@pytest.mark.slow
def test_the_written_test_file_runs_the_check(tmp_path):
    out = tmp_path / "p"
    new_variant("relu2", "classic", "ffn", out)
    spec = importlib.util.spec_from_file_location("test_relu2_written", out / "test_relu2.py")

    def written_test() -> None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.test_relu2_is_a_fair_patch("tiny")

    with isolated_registry():
        written_test()
    # an edit that breaks causality (every position sees the mean of its sequence): the written test fails
    ffn = out / "relu2" / "ffn.py"
    ffn.write_text(ffn.read_text().replace("return super().forward(x)  # (..., D)",
                                           "return super().forward(x + x.mean(dim=1, keepdim=True))"))
    with isolated_registry(), pytest.raises(AssertionError, match=r"causal \(train\)\s+FAIL"):
        written_test()


@pytest.mark.skipif(shutil.which("ruff", path=str(Path(__file__).parents[3] / ".venv" / "bin")) is None,
                    reason="ruff is not installed in .venv")
def test_the_written_code_is_lint_clean(tmp_path):
    for on, part in SCAFFOLDS:  # the longest names allowed
        new_variant(f"{on}-{part}-".ljust(30, "x"), on, part, tmp_path / f"{on}-{part}")
    ruff = shutil.which("ruff", path=str(Path(__file__).parents[3] / ".venv" / "bin"))
    config = Path(__file__).parents[3] / "pyproject.toml"
    result = subprocess.run([ruff, "check", "--config", str(config), str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("name, on, part, expected", [
    ("MyFFN", "classic", "ffn", "variant name 'MyFFN' must be lowercase letters and digits"),
    ("-ffn", "classic", "ffn", "must be lowercase letters and digits"),
    ("classic", "classic", "ffn", "'classic' is already a registered variant"),
    ("dense", "classic", "ffn", "'dense' is already a registered ffn type"),
    ("reference", "classic", "attention", "'reference' is already a registered attention kernel"),
    ("lambda", "classic", "ffn", "'lambda' is a Python keyword"),
    ("json", "classic", "ffn", "the package name 'json' is taken by an importable module"),
    ("ok", "classicc", "ffn", "unknown base (--on) 'classicc'. Did you mean 'classic'?"),
    ("ok", "classic", "fnn", "unknown part 'fnn'. Did you mean 'ffn'?"),
    ("ok", "classic", "norm", "--part norm has no registration hook on classic: the scaffold patches a part through "
                              "its hook, and classic has them for attention (register_kernel), ffn (register_ffn)"),
    ("ok", "swin", "ffn", "--part ffn has no registration hook on swin"),
])
def test_bad_names_and_parts_are_refused(name, on, part, expected, tmp_path):
    with pytest.raises(ValueError, match=expected.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        new_variant(name, on, part, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_folders_that_would_be_overwritten_are_refused(tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine\n")
    assert main(["new-variant", "mine", "--on", "vit", "--part", "ffn", "--out", str(tmp_path / "full")]) == 2
    assert capsys.readouterr().err.strip() == (f"zoo new-variant: error: --out {tmp_path / 'full'} already exists and "
                                               "is not empty; give a new folder (or remove it)")
    (tmp_path / "a_file").write_text("x\n")
    with pytest.raises(NotADirectoryError, match="is a file"):
        new_variant("mine", "vit", "ffn", tmp_path / "a_file")
    (tmp_path / "empty").mkdir()
    assert len(new_variant("mine", "vit", "ffn", tmp_path / "empty")) == 6  # an empty folder is fine
