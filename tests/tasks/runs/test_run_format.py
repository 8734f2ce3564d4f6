"""The run format shared by every task: run.json, load_run's errors, config round trips, per-example records."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import zoo
from tasks.runs.records import read_records, split_hash, write_records
from tasks.runs.run import RUN_FILE, RUN_FORMAT, config_from_dict, load_run, read_run_info
from zoo.registry import registrations


@pytest.mark.parametrize("name", zoo.list_variants())
def test_every_variant_config_survives_json(name):
    """run.json stores the variant's full config; every preset of every variant must come back equal."""
    for variant in registrations(name):
        for preset in variant.presets:
            config = variant.config(preset)
            text = json.dumps(dataclasses.asdict(config))
            assert config_from_dict(variant.config_class, json.loads(text)) == config, (name, preset)


def test_config_from_dict_refuses_unknown_fields():
    variant = zoo.get_variant("classic")
    values = {**dataclasses.asdict(variant.config("tiny")), "d_modle": 3}
    with pytest.raises(ValueError, match="d_modle"):
        config_from_dict(variant.config_class, values)


def _fake_run(tmp_path, **info):
    run = tmp_path / "run"
    run.mkdir(parents=True)
    base = {"format": RUN_FORMAT, "task": "translation", "variant": "classic", "config": {}, "preprocessing": {}}
    (run / RUN_FILE).write_text(json.dumps({**base, **info}))
    return run


def test_load_run_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run folder"):
        load_run(tmp_path / "missing")
    file = tmp_path / "file.txt"
    file.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        load_run(file)
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        load_run(tmp_path)
    old = tmp_path / "old"
    (old / "checkpoints").mkdir(parents=True)
    (old / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="older package version"):
        load_run(old)


def test_corrupt_and_newer_run_files_are_refused(tmp_path):
    run = _fake_run(tmp_path)
    (run / RUN_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="corrupt"):
        read_run_info(run)
    (run / RUN_FILE).write_text(json.dumps({"format": RUN_FORMAT}))
    with pytest.raises(ValueError, match="lacks"):
        read_run_info(run)
    newer = _fake_run(tmp_path / "b", format=RUN_FORMAT + 1)
    with pytest.raises(ValueError, match="upgrade"):
        read_run_info(newer)


def test_a_run_of_another_task_is_refused(tmp_path):
    run = _fake_run(tmp_path)
    with pytest.raises(ValueError, match="is a translation run, not a cifar run"):
        load_run(run, task="cifar")


def test_split_hash_separates_items_and_sees_every_byte():
    assert split_hash(["ab", "c"]) != split_hash(["a", "bc"])
    a = np.zeros((2, 3), np.uint8)
    b = a.copy()
    assert split_hash([a]) == split_hash([b])
    b[1, 2] = 1
    assert split_hash([a]) != split_hash([b])
    assert split_hash([a]) != split_hash([a.astype(np.int16)])  # same values, other dtype


def test_records_round_trip_and_truncation_is_caught(tmp_path):
    records = [{"id": 0, "score": np.float32(0.5)}, {"id": 1, "score": float("nan")}]
    write_records(tmp_path, "test", records, "sha256:x")
    write_records(tmp_path, "valid", records[:1], "sha256:y")
    back, digest = read_records(tmp_path, "test")
    assert back == [{"id": 0, "score": 0.5}, {"id": 1, "score": None}] and digest == "sha256:x"
    assert read_records(tmp_path, "valid")[1] == "sha256:y"  # a second split keeps the first's entry
    with pytest.raises(ValueError, match="no records of split 'train'"):
        read_records(tmp_path, "train")
    path = tmp_path / "predictions" / "test.jsonl"
    path.write_text(path.read_text().splitlines()[0] + "\n")
    with pytest.raises(ValueError, match="cut short"):
        read_records(tmp_path, "test")
    with pytest.raises(FileNotFoundError, match="zoo evaluate"):
        read_records(tmp_path / "nothing", "test")
