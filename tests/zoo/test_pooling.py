"""``zoo compare TASK --runs``: only seeds of one experiment are pooled into a variant's mean.

The run folders are written by hand (run.json, metrics.json, predictions/index.json as ``zoo train`` and
``zoo evaluate`` write them, configs from the task's own config class): the refusals happen before any record
is read, so no training is needed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.cifar.task import CifarConfig
from tasks.cli.main import main
from tasks.compare.run_results import group_by_variant, read_result
from tasks.runs.run import RUN_FORMAT
from tasks.translation.task import TranslationConfig


def fake_run(folder: Path, config, precision: str = "fp32", budget: dict | None = None,
             data_hash: str = "sha256:own", preset_model: dict | None = None) -> Path:
    """A finished run folder of ``config`` (a task config), with its test records' hash."""
    folder.mkdir(parents=True)
    info = {"format": RUN_FORMAT, "task": config.task, "variant": config.variant, "config": config.to_dict(),
            "variant_config": preset_model or {"d_model": 32}, "preprocessing": {}, "precision": precision}
    (folder / "run.json").write_text(json.dumps(info))
    metrics = {"task": config.task, "variant": config.variant, "final": {}}
    if budget is not None:
        metrics["budget"] = budget
    (folder / "metrics.json").write_text(json.dumps(metrics))
    evaluated(folder, data_hash)
    return folder


def evaluated(folder: Path, data_hash: str, run: Path | None = None, data: str | None = None) -> Path:
    """``folder`` with records of the test split scored on ``data_hash`` (a `zoo evaluate` output of ``run``)."""
    (folder / "predictions").mkdir(parents=True)
    (folder / "predictions" / "index.json").write_text(
        json.dumps({"test": {"file": "test.jsonl", "examples": 0, "data_hash": data_hash}}))
    (folder / "predictions" / "test.jsonl").write_text("")
    if run is not None:
        (folder / "metrics.json").write_text(json.dumps({"run": str(run), "data": data, "final": {}}))
    return folder


def pool(*folders: Path):
    return group_by_variant([read_result(f) for f in folders])


def test_seeds_of_one_experiment_are_pooled(tmp_path):
    runs = [fake_run(tmp_path / f"vit-seed{s}", CifarConfig(seed=s, out=f"x{s}", num_threads=t, progress=p,
                                                            doctor=p, eval_batch_size=b, attention_images=b // 100))
            for s, t, p, b in ((0, 1, False, 500), (1, 0, True, 200), (2, 2, False, 100))]
    evaluation = evaluated(tmp_path / "eval-seed2", "sha256:own", runs[2], data="the run's own data")
    groups = pool(runs[0], runs[1], evaluation, fake_run(tmp_path / "linear", CifarConfig(variant="linear")))
    assert [len(g) for g in groups.values()] == [3, 1]  # what cannot change a result may differ (same_run.UNCHANGING)
    # translation's generated corpus follows the seed: its seeds differ in data hash and are still one source
    seeds = [fake_run(tmp_path / f"tr{s}", TranslationConfig(seed=s), data_hash=f"sha256:corpus{s}") for s in (0, 1)]
    assert len(pool(*seeds)["classic"]) == 2


def test_two_runs_of_one_seed_are_refused(tmp_path):
    a = fake_run(tmp_path / "a", CifarConfig(seed=0, out="a"))
    b = fake_run(tmp_path / "b", CifarConfig(seed=0, out="b", num_threads=2))
    with pytest.raises(ValueError) as error:
        pool(a, fake_run(tmp_path / "c", CifarConfig(seed=1)), b)
    message = str(error.value)
    assert f"runs {a} and {b} are both 'vit' seed 0" in message and "count one seed twice" in message
    assert "give one run per seed (train more with --seed N)" in message


@pytest.mark.parametrize("other, named", [
    (dict(epochs=4), "epochs: 20 in {a} vs 4 in {b}"),
    (dict(lr=2e-3, warmup=10), "lr: 0.001 in {a} vs 0.002 in {b}, warmup: 36 in {a} vs 10 in {b}"),
    (dict(mixup=0.8), "mixup: 0.0 in {a} vs 0.8 in {b}"),
    (dict(preset="tiny"), "preset: None in {a} vs 'tiny' in {b}"),
    # issue 35: one definition of the same run (tasks.engine.same_run); these were pooled before
    (dict(device="cuda"), "device: 'auto' in {a} vs 'cuda' in {b}"),
    (dict(compile=True), "compile: False in {a} vs True in {b}"),
    (dict(deterministic=False), "deterministic: True in {a} vs False in {b}"),
])
def test_runs_trained_with_other_settings_are_refused(tmp_path, other, named):
    a = fake_run(tmp_path / "a", CifarConfig(seed=0))
    b = fake_run(tmp_path / "b", CifarConfig(seed=1, **other), preset_model={"d_model": 64})
    with pytest.raises(ValueError) as error:
        pool(a, b)
    message = str(error.value)
    assert f"runs {a} and {b} are both 'vit' but trained with different settings" in message
    assert named.format(a=a, b=b) in message
    assert message.endswith("compare them in separate invocations or retrain with the same settings")


def test_runs_of_other_recipes_or_nsd_tolerances_are_not_pooled_as_seeds(tmp_path):
    """A field added later (same_run.ADDED_LATER) is left out of a run's settings at its earlier value: a default-recipe
    run and an nnunet one were pooled as seeds of one dynunet. Now each recipe is a group of its own (a comparison
    pairs them), runs of other NSD tolerances are refused, and `own` and the recipe it resolves to still pool."""
    from tasks.medseg.config import MedsegConfig

    def run(name: str, seed: int, trained: str = "default", **settings) -> Path:
        folder = fake_run(tmp_path / name, MedsegConfig(variant="dynunet", seed=seed, **settings))
        info = json.loads((folder / "run.json").read_text())
        info["preprocessing"]["recipe"] = {"name": trained}  # as a medseg run records the recipe it resolved
        (folder / "run.json").write_text(json.dumps(info))
        return folder

    default, nnunet = run("default", 0), run("nnunet", 1, "nnunet", recipe="nnunet")
    groups = pool(default, nnunet, run("nnunet-seed2", 2, "nnunet", recipe="nnunet"))  # a group per recipe: pairable
    assert {k: len(v) for k, v in groups.items()} == {"dynunet (recipe default)": 1, "dynunet (recipe nnunet)": 2}
    with pytest.raises(ValueError, match=r"nsd_tolerance: 1.0 in .* vs 2.0 in"):
        pool(default, run("tolerance", 1, nsd_tolerance=2.0))
    assert len(pool(nnunet, run("own", 0, "nnunet", recipe="own"))["dynunet"]) == 2  # own resolves to dynunet's nnunet


def test_runs_with_other_model_overrides_are_refused(tmp_path):
    a = fake_run(tmp_path / "a", CifarConfig(seed=0))
    b = fake_run(tmp_path / "b", CifarConfig(seed=1, model={"depth": 2}))
    with pytest.raises(ValueError, match=r"are both 'vit' but with different model overrides \(depth\); compare them"):
        pool(a, b)


def test_precision_budget_and_the_preset_it_resolved_to(tmp_path):
    a = fake_run(tmp_path / "a", CifarConfig(seed=0))
    bf16 = fake_run(tmp_path / "bf16", CifarConfig(seed=1, precision="bf16"), precision="bf16")
    with pytest.raises(ValueError, match=r"precision: 'fp32' in .* vs 'bf16' in "):
        pool(a, bf16)
    fp32 = fake_run(tmp_path / "fp32", CifarConfig(seed=2, precision="fp32"))  # what "default" used on the CPU
    timed = fake_run(tmp_path / "timed", CifarConfig(seed=3), budget={"kind": "time", "value": 60.0})
    with pytest.raises(ValueError, match=r"budget: None in .* vs 'time=60.0' in "):
        pool(a, fp32, timed)
    epochs = fake_run(tmp_path / "epochs", CifarConfig(seed=4), budget={"kind": "epochs", "value": 20})
    preset = fake_run(tmp_path / "preset", CifarConfig(seed=5, preset="cpu"))  # the same model as preset None
    assert len(pool(a, fp32, epochs, preset)["vit"]) == 4


def test_runs_on_different_data_are_refused(tmp_path):
    embedded = fake_run(tmp_path / "embedded", TranslationConfig(seed=0))
    folder = fake_run(tmp_path / "folder", TranslationConfig(seed=1, data=str(tmp_path / "wmt")))
    with pytest.raises(ValueError) as error:
        pool(embedded, folder)
    message = str(error.value)
    assert (f"runs {embedded} (trained on the task's default data) and {folder} (trained on --data "
            f"{tmp_path / 'wmt'}) are both 'classic' but on different data") in message
    assert message.endswith("compare them in separate invocations or train and evaluate them on the same data")
    (tmp_path / "wmt").mkdir()  # one folder written two ways is one source
    again = fake_run(tmp_path / "again", TranslationConfig(seed=2, data=str(tmp_path / "wmt" / ".." / "wmt")))
    assert len(pool(folder, again)["classic"]) == 2
    cifar10 = fake_run(tmp_path / "cifar10", CifarConfig(seed=0, dataset="cifar10"))
    with pytest.raises(ValueError, match=r"\(trained on the task's default data \(cifar10\)\)"):
        pool(fake_run(tmp_path / "fmnist", CifarConfig(seed=1)), cifar10)


def test_a_seed_scored_on_other_data_is_refused(tmp_path):
    runs = [fake_run(tmp_path / f"run{s}", CifarConfig(seed=s)) for s in (0, 1)]
    other = evaluated(tmp_path / "on-x", "sha256:x", runs[1], data="/data/x")
    with pytest.raises(ValueError, match=r"\(trained on the task's default data, scored on /data/x\) are both 'vit'"):
        pool(runs[0], other)
    both = evaluated(tmp_path / "also-on-x", "sha256:x", runs[0], data="/data/x")
    assert len(pool(both, other)["vit"]) == 2  # both seeds scored on the same other data


def test_the_cli_refuses_on_one_line(tmp_path, capsys):
    a = fake_run(tmp_path / "a", CifarConfig(seed=0))
    b = fake_run(tmp_path / "b", CifarConfig(seed=0))
    assert main(["compare", "cifar", "--runs", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo compare: error: runs ") and "seed 0" in err and "\n" not in err
    assert not (tmp_path / "cmp").exists()
