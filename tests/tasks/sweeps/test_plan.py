"""The parts of a sweep that train nothing: run names and hashes, sweep files, launch options, --config files."""

from __future__ import annotations

import json
import sys

import pytest

from tasks.engine.config import read_config_file
from tasks.sweeps.launchers import Launch, parse_resources
from tasks.sweeps.plan import RunSpec, config_hash, read_sweep_file
from tasks.sweeps.state import folder_state
from tasks.translation.task import TranslationConfig


def test_run_names_carry_label_seed_fold_and_the_hash_of_what_the_run_computes():
    config = TranslationConfig(preset="tiny", seed=1).to_dict()
    spec = RunSpec("translation", "without rope", config)
    assert spec.name == f"without-rope-seed1-{spec.key}" and len(spec.key) == 10
    assert RunSpec("translation", "x", {**config, "fold": "3"}).name.startswith("x-seed1-fold3-")
    for unhashed in ({"out": "elsewhere"}, {"num_threads": 7}, {"progress": False}, {"checkpoint_every": 5},
                     {"track": "tensorboard"}, {"resume": True}):
        assert config_hash("translation", {**config, **unhashed}) == spec.key, unhashed
    for changed in ({"lr": 1e-4}, {"preset": "mini"}, {"model": {"dropout": 0.0}}, {"seed": 2}):
        assert config_hash("translation", {**config, **changed}) != spec.key, changed
    assert config_hash("translation", config, "time=60") != spec.key  # a budget changes the run
    assert config_hash("cifar", config) != spec.key


def test_a_folder_trained_with_other_settings_is_refused(tmp_path):
    config = TranslationConfig(preset="tiny").to_dict()
    spec = RunSpec("translation", "classic", config)
    folder = tmp_path / spec.name
    assert folder_state(spec, folder) == "new"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**config, "lr": 0.5}))
    with pytest.raises(ValueError, match="holds a run with other settings"):
        folder_state(spec, folder)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="TOML sweep files need Python 3.11's tomllib")
def test_sweep_files_in_toml_and_json(tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text('task = "cifar"\nvariants = ["vit", "swin"]\nseeds = 3\nlauncher = "local"\njobs = 2\n'
                    '[set]\npreset = "tiny"\n[model_set]\ndropout = 0.0\n')
    spec = read_sweep_file(toml)
    assert spec == {"task": "cifar", "variants": ["vit", "swin"], "seeds": 3, "launcher": "local", "jobs": 2,
                    "set": {"preset": "tiny"}, "model_set": {"dropout": 0.0}, "kind": "compare"}
    as_json = tmp_path / "s.json"
    as_json.write_text(json.dumps({"kind": "ablate", "task": "translation", "variant": "rope"}))
    assert read_sweep_file(as_json)["variant"] == "rope"
    for text, message in (('task = "x"\nkind = "grid"\n', "unknown kind"), ('seeds = 2\n', "names no task"),
                          ('task = "t"\nset = 3\n', "set must be a table"), ('task = [\n', "not valid TOML"),
                          ('kind = "ablate"\ntask = "t"\n', "needs variant")):
        toml.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_sweep_file(toml)


def test_launch_options_are_checked_before_anything_trains():
    assert parse_resources("cpu=2,gpu=1") == {"cpu": 2.0, "gpu": 1.0}
    assert parse_resources(None) == {"cpu": 1.0, "gpu": 0.0}
    for bad, message in (("cpu", "KEY=VALUE"), ("tpu=1", "unknown resource 'tpu'"), ("cpu=x", "expected a number"),
                         ("gpu=-1", "0 or more")):
        with pytest.raises(ValueError, match=message):
            parse_resources(bad)
    for kwargs, message in (({"launcher": "slurm"}, "unknown launcher 'slurm'"), ({"jobs": 0}, "jobs"),
                            ({"launcher": "serial", "jobs": 2}, "needs a parallel launcher"),
                            ({"launcher": "local", "slurm": {"partition": "gpu"}}, "--slurm-\\* options are for"),
                            ({"launcher": "local", "retry": -1}, "--retry")):
        with pytest.raises(ValueError, match=message):
            Launch(**kwargs)


def test_config_files_of_zoo_train(tmp_path):
    good = tmp_path / "run"
    good.mkdir()
    TranslationConfig(preset="tiny", lr=5e-4).save(good / "config.json")
    assert read_config_file(TranslationConfig, good)["lr"] == 5e-4  # a run folder or its config.json
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_config_file(TranslationConfig, tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        read_config_file(TranslationConfig, tmp_path / "bad.json")
    (tmp_path / "cifar.json").write_text(json.dumps({"task": "cifar", "variant": "vit"}))
    with pytest.raises(ValueError, match="config of a cifar run.*zoo train cifar --config"):
        read_config_file(TranslationConfig, tmp_path / "cifar.json")
    (tmp_path / "odd.json").write_text(json.dumps({"task": "translation", "learning_rate": 1}))
    with pytest.raises(ValueError, match="learning_rate"):
        read_config_file(TranslationConfig, tmp_path / "odd.json")
