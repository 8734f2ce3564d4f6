"""zoo study's plan, without training: cells, sides, runs, learning-rate choice and every refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.engine.same_run import UNCHANGING
from tasks.study.grid import DATASETS, model_preset, parse_data, study_cells
from tasks.study.plan import BASE, Regime, default_lr, pairings, regime_runs, unique
from tasks.study.study import run_study, task_settings
from tasks.study.tune import choose, parse_tune, tuning_runs
from zoo.changes import get_change


def test_cells_cover_tasks_datasets_and_presets():
    cells = study_cells(["translation", "lm", "cifar"], ["tiny", "small"], "embedded")
    assert len(cells) == 3 * 2 * 2
    assert [c.label for c in cells[:4]] == ["translation/easy/tiny", "translation/easy/small",
                                            "translation/medium/tiny", "translation/medium/small"]
    # the study's "small" is 128 wide in every task: translation's mini, lm's small, ViT's cpu
    assert {(c.task, c.model_preset) for c in cells if c.preset == "small"} == {
        ("translation", "mini"), ("lm", "small"), ("cifar", "cpu")}
    assert model_preset("translation", "base") == "base"  # a model's own preset name
    assert [c.dataset for c in study_cells(["lm"], ["tiny"], "first")] == ["shakespeare-char"]
    # two embedded datasets per task, differing in difficulty or size
    for task, datasets in DATASETS.items():
        assert len(datasets) == 2 and len({json.dumps(d, sort_keys=True) for d in datasets.values()}) == 2, task


def test_bad_cells_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="medseg.*no base model built on the core"):
        study_cells(["translation", "medseg"], ["tiny"])
    with pytest.raises(ValueError, match="Did you mean 'translation'"):
        study_cells(["translaton"], ["tiny"])
    with pytest.raises(ValueError, match="twice"):
        study_cells(["lm", "lm"], ["tiny"])
    with pytest.raises(ValueError, match=r"preset of lm's base model \(--presets\) 'huge'.*Known: base, small, tiny"):
        model_preset("lm", "huge")
    with pytest.raises(ValueError, match="--presets is empty"):
        study_cells(["lm"], [])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        parse_data([f"lm={tmp_path / 'missing'}"], ["lm"])
    with pytest.raises(ValueError, match="not one of the study's tasks"):
        parse_data([f"cifar={tmp_path}"], ["lm"])
    with pytest.raises(ValueError, match="expected TASK=PATH"):
        parse_data([str(tmp_path)], ["lm"])
    with pytest.raises(ValueError, match="--datasets none needs --data lm=PATH"):
        study_cells(["lm"], ["tiny"], "none")


def test_user_data_is_a_dataset_of_its_own(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello " * 100)
    cells = study_cells(["lm"], ["tiny"], "first", [f"lm={corpus}", f"lm={corpus}"])
    assert [c.dataset for c in cells] == ["shakespeare-char", "corpus.txt", "corpus.txt-2"]
    assert cells[1].settings == {"data": str(corpus.resolve())}


def test_sides_are_overrides_of_the_base_and_share_the_base():
    cells = study_cells(["translation", "cifar"], ["tiny"], "first")
    pairs = pairings([get_change("rmsnorm"), get_change("pre-ln"), get_change("rope"), get_change("swiglu")], cells)
    by = {(p.change, p.cell.task): p for p in pairs}
    rms = by[("rmsnorm", "translation")]
    assert (rms.classic.label, rms.classic.overrides) == (BASE, {})
    assert rms.new.overrides == {"norm": "rmsnorm"}
    # ViT is Pre-LN already: the classic side reverts it and the new side is the base itself
    vit = by[("pre-ln", "cifar")]
    assert (vit.classic.label, vit.classic.overrides) == ("no-pre-ln", {"norm_first": False})
    assert (vit.new.label, vit.new.overrides) == (BASE, {})
    # a gated FFN travels at two thirds of the width: the tiny preset's d_ff 64 -> 43
    assert by[("swiglu", "translation")].new.overrides == {"activation": "swiglu", "d_ff": 43}
    assert "ViT adds absolute positions" in by[("rope", "cifar")].reason and by[("rope", "cifar")].new is None


def test_runs_pair_seeds_and_the_noise_floor_is_more_seeds_of_the_classic_side():
    cells = study_cells(["translation", "cifar"], ["tiny"], "first")
    pairs = pairings([get_change("rmsnorm"), get_change("gelu")], cells)
    runs = regime_runs(pairs, Regime("shared"), 3, "epochs=1", {"epochs": 1})
    classic = runs[("translation/easy/tiny", "rmsnorm", "classic")]
    new = runs[("translation/easy/tiny", "rmsnorm", "new")]
    noise = runs[("translation/easy/tiny", "rmsnorm", "noise")]
    assert [s.seed for s in classic] == [s.seed for s in new] == [0, 1, 2]
    assert [s.seed for s in noise] == [3, 4, 5] and noise[0].config["model"] == classic[0].config["model"] == {}
    assert new[0].config["model"] == {"norm": "rmsnorm"} and new[0].config["lr"] == default_lr("translation")
    assert new[0].config["difficulty"] == "easy" and new[0].config["preset"] == "tiny"
    # the base runs of both changes are one set of runs
    every = [s for specs in runs.values() for s in specs]
    assert runs[("translation/easy/tiny", "gelu", "classic")] == classic
    per_cell = {t: len([s for s in unique(every) if s.task == t]) for t in ("translation", "cifar")}
    # translation: the base 6 seeds, RMSNorm 3, GELU 3; ViT has GELU already: the base 6 seeds, RMSNorm 3, and the
    # classic side of GELU (ReLU) 6, whose new side is the base (seeds 0-2 again, not trained twice)
    assert per_cell == {"translation": 6 + 3 + 3, "cifar": 6 + 3 + 6}
    assert len({s.name for s in unique(every)}) == len(unique(every))


def test_task_settings_split_by_task_and_refuse_what_the_study_sets():
    found = task_settings({"num_threads": 1, "translation.n_train": 256}, ["cifar", "translation"])
    assert found["translation"] == {"progress": False, "num_threads": 1, "n_train": 256, "beam_size": 1,
                                    "figures": False}
    assert found["cifar"] == {"progress": False, "num_threads": 1, "figures": False}  # plots, not scores
    assert task_settings({"figures": True}, ["cifar"])["cifar"]["figures"] is True
    assert "figures" in UNCHANGING  # the study's default leaves each run's identity as it was
    with pytest.raises(ValueError, match="unknown cifar config field.*n_train"):
        task_settings({"n_train": 5}, ["cifar", "translation"])
    with pytest.raises(ValueError, match="the study sets lr itself"):
        task_settings({"lr": 0.1}, ["cifar"])
    with pytest.raises(ValueError, match="'lm' is not one of the study's tasks"):
        task_settings({"lm.context": 8}, ["cifar"])


def test_parse_tune():
    assert parse_tune("lr=3e-4,1e-3") == [3e-4, 1e-3]
    assert parse_tune(None) == []
    for bad, match in (("wd=1,2", "only the learning rate"), ("lr=a,b", "must be a number"),
                       ("lr=1e-3", "at least two"), ("lr=1e-3,1e-3", "at least two"), ("lr=0,1e-3", "> 0")):
        with pytest.raises(ValueError, match=match):
            parse_tune(bad)


def _finished(folder: Path, best_valid: float) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"best_valid": best_valid}))


def test_the_choice_reads_validation_in_the_task_direction(tmp_path):
    cells = study_cells(["lm", "cifar"], ["tiny"], "first")
    sides = [p.classic for p in pairings([get_change("gelu")], cells)]
    runs = tuning_runs(sides, [1e-3, 3e-3, 1e-2], "epochs=1", {"epochs": 1})
    lm = runs[("lm/shakespeare-char/tiny", BASE)]
    assert [s.seed for s in lm] == [0, 0, 0] and [s.config["lr"] for s in lm] == [1e-3, 3e-3, 1e-2]
    folders = {}
    for spec, value in zip(lm, (2.1, 1.9, 2.5), strict=True):  # lm's validation metric is a loss: lower wins
        folders[spec.name] = tmp_path / spec.name
        _finished(folders[spec.name], value)
    choice = choose("lm/shakespeare-char/tiny", BASE, lm, folders, "sha256:abc")
    assert choice.chosen == 3e-3 and not choice.higher_is_better and choice.to_dict()["valid_hash"] == "sha256:abc"
    cifar = runs[("cifar/fmnist/tiny", "no-gelu")]  # ViT has GELU: its classic side is ReLU
    for spec, value in zip(cifar, (0.5, 0.7, 0.7), strict=True):  # top-1: higher wins; a tie goes to the first
        folders[spec.name] = tmp_path / spec.name
        _finished(folders[spec.name], value)
    assert choose("cifar/fmnist/tiny", BASE, cifar, folders).chosen == 3e-3
    (tmp_path / "nan").mkdir()
    (tmp_path / "nan" / "metrics.json").write_text(json.dumps({"best_valid": None}))
    with pytest.raises(ValueError, match="no validation value"):
        choose("c", BASE, cifar[:1], {cifar[0].name: tmp_path / "nan"})


def test_bad_studies_fail_before_training(tmp_path):
    out = tmp_path / "study"
    with pytest.raises(ValueError, match="Did you mean 'rmsnorm'"):
        run_study(["rmsnorn"], ["translation", "cifar"], out)
    with pytest.raises(ValueError, match="seeds.*2 seeds a side"):
        run_study(["rmsnorm"], ["translation", "cifar"], out, seeds=1)
    with pytest.raises(ValueError, match="no change of rope applies to any cell.*ViT adds absolute"):
        run_study(["rope"], ["cifar"], out)
    with pytest.raises(ValueError, match="validation split is its test split"):
        run_study(["rmsnorm"], ["translation", "cifar"], out, tune="lr=1e-3,3e-3",
                  settings={"cifar.valid_fraction": 0.0, "translation.n_train": 64})
    assert not (out / "sweep.json").exists()  # nothing was trained
