"""One definition of "the same run" (tasks.engine.same_run), used by the sweep's hash, --resume, --runs pooling and
the precision probe's key: each consumer is checked field by field against the one list (issue 35: four lists
disagreed on epochs, compile, device and deterministic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.cifar.task import CifarConfig
from tasks.compare.run_results import RunResult, training_settings
from tasks.engine.checkpoint import check_same_run
from tasks.engine.same_run import (
    CHANGING,
    TIMED,
    UNCHANGING,
    UNTIMED,
    describe_differences,
    result_settings,
    setting_differences,
    timing_settings,
)
from tasks.medseg.config import MedsegConfig
from tasks.sweeps.plan import config_hash

# a value of each field of UNCHANGING other than its default (every field of some task's config)
UNCHANGED_VALUES = {"out": "elsewhere", "resume": True, "progress": False, "figures": False, "num_threads": 3,
                    "checkpoint_every": 7,
                    "doctor": True, "track": "tensorboard", "eval_batch_size": 9, "sw_batch_size": 5,
                    "attention_images": 0, "overlay_slices": 1, "download": True,
                    "init_partial": True}
CHANGED_VALUES = {"epochs": 3, "device": "cpu", "compile": True, "deterministic": False, "lr": 0.5, "preset": "tiny"}


def _config(**changes) -> dict:
    """Every field any task has: cifar's config with medseg's own fields added."""
    return {**MedsegConfig().to_dict(), **CifarConfig().to_dict(), **changes}


def _pooled_settings(config: dict) -> dict:
    return training_settings(RunResult(Path("run"), Path("run"), {"config": config, "precision": "fp32"}, None))


def test_every_field_has_a_reason_and_none_is_both_changing_and_unchanging():
    assert set(UNCHANGED_VALUES) == set(UNCHANGING)
    assert all(isinstance(why, str) and len(why) > 20 for why in [*UNCHANGING.values(), *CHANGING.values()])
    assert not set(CHANGING) & set(UNCHANGING) and set(TIMED) <= set(UNCHANGING)
    assert not set(UNTIMED) & set(UNCHANGING)


@pytest.mark.parametrize("field", sorted(UNCHANGING))
def test_a_field_that_cannot_change_a_result_is_the_same_run_for_every_consumer(field):
    base, other = _config(), _config(**{field: UNCHANGED_VALUES[field]})
    assert base[field] != other[field], "the test value must differ from the default"
    assert config_hash("cifar", base) == config_hash("cifar", other)  # the sweep reuses the run
    assert setting_differences(base, other) == {}  # --resume continues it, zoo cv reuses the fold
    check_same_run(Path("last.pt"), base, other)
    assert _pooled_settings(base) == _pooled_settings(other)  # --runs pools it as a seed


@pytest.mark.parametrize("field", sorted(CHANGED_VALUES))
def test_a_field_that_changes_the_result_is_another_run_for_every_consumer(field):
    base, other = _config(), _config(**{field: CHANGED_VALUES[field]})
    assert config_hash("cifar", base) != config_hash("cifar", other)
    assert setting_differences(base, other) == {field: (base[field], other[field])}
    with pytest.raises(ValueError, match=f"{field}: checkpoint "):
        check_same_run(Path("last.pt"), base, other)
    assert _pooled_settings(base)[field] != _pooled_settings(other)[field]


def test_the_timing_key_keeps_what_changes_a_steps_time():
    base = _config()
    assert timing_settings({**base, "num_threads": 4}) != timing_settings(base)  # TIMED
    for field in ("compile", "device", "deterministic", "batch_size", "seed"):
        assert timing_settings({**base, field: CHANGED_VALUES.get(field, 2)}) != timing_settings(base), field
    for field, value in (("epochs", 3), ("lr", 0.5), ("warmup", 1), ("precision", "bf16"), ("out", "x"),
                         ("eval_batch_size", 9), ("checkpoint_every", 5)):
        assert timing_settings({**base, field: value}) == timing_settings(base), field
    assert set(result_settings(base)) - set(timing_settings(base)) == set(UNTIMED)


def test_differences_are_described_with_their_reason():
    line = describe_differences({"epochs": (1, 2), "lr": (0.1, 0.2)}, "checkpoint")
    assert line == f"epochs: checkpoint 1 vs now 2 ({CHANGING['epochs']}); lr: checkpoint 0.1 vs now 0.2"


def test_a_cifar_run_resumed_with_more_epochs_is_refused(tmp_path):
    """Issue 35: a 1-epoch cifar run resumed with --epochs 2 continued on the 1-epoch schedule (loss 1.899 where a
    fresh 2-epoch run reaches 1.814). cifar's warm-up + cosine schedule is planned over the total steps, so the
    resume is refused, naming both values and the fixes; the same epochs still resume (a finished run finishes)."""
    import torch

    from tasks.cifar.task import CifarTask
    from tasks.engine.trainer import Trainer
    from tests.tasks.cifar.test_cifar import write_fake_cifar

    write_fake_cifar(tmp_path / "data", per_batch=20)  # 90 training images: 6 steps of 16 an epoch

    def config(**changes) -> CifarConfig:
        return CifarConfig(**{"variant": "vit", "preset": "tiny", "data": str(tmp_path / "data"),
                              "out": str(tmp_path / "run"), "epochs": 1, "batch_size": 16, "warmup": 1,
                              "num_threads": 1, "progress": False, **changes})

    trainer = Trainer(CifarTask, config())
    trainer.fit()
    steps = trainer.history[-1]["step"]
    schedules = []
    for total in (steps, 2 * steps):  # what the steps already taken were planned over, and what 2 epochs plan
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        scheduler = trainer.task.make_scheduler(optimizer, total)
        learning_rates = []
        for _ in range(steps):
            learning_rates.append(scheduler.get_last_lr()[0])
            optimizer.step()
            scheduler.step()
        schedules.append(learning_rates)
    assert schedules[0] != schedules[1]  # the first epoch's learning rates depend on the total
    expected = (r"epochs: checkpoint 1 vs now 2 \(the learning-rate schedule.*\); resume with --epochs 1 \(the run as "
                r"planned\), or train 2 epochs into a new --out folder \(a fresh run of that length\)")
    with pytest.raises(ValueError, match=expected):
        Trainer(CifarTask, config(epochs=2, resume=True)).fit()
    assert Trainer(CifarTask, config(resume=True)).fit()["epochs"] == 1


def test_a_recorded_config_is_compared_in_the_form_its_config_class_gives_it_now():
    """Runs written before issue 36 recorded medseg's ``patch_size`` as the flag's text ("16,32,32"); the config now
    holds a tuple and writes a list. Every consumer sees the old record and today's config as the same run: the sweep
    reuses it, --resume continues it, zoo cv reuses the fold, --runs pools it."""
    now = MedsegConfig(variant="dynunet", preset="tiny", patch_size=(16, 32, 32)).to_dict()
    assert now["patch_size"] == [16, 32, 32]
    recorded = {**now, "patch_size": "16,32,32"}  # what the old code wrote into config.json, run.json, last.pt
    assert config_hash("medseg", recorded) == config_hash("medseg", now)
    assert setting_differences(recorded, now) == {}
    check_same_run(Path("last.pt"), recorded, now)
    assert _pooled_settings(recorded) == _pooled_settings(now)
    assert result_settings(recorded)["patch_size"] == [16, 32, 32]
    # another patch is another run, named in today's form on both sides
    assert setting_differences({**recorded, "patch_size": "8,32,32"}, now) == {"patch_size": ([8, 32, 32],
                                                                                            [16, 32, 32])}


def test_a_record_this_code_cannot_rebuild_is_compared_as_it_was_written():
    """A config of a task not registered here (a plugin not loaded), or with a value this code refuses, cannot be put
    in today's form: it is compared as recorded, so a difference is still reported and nothing raises."""
    now = MedsegConfig(patch_size=(16, 32, 32)).to_dict()
    assert setting_differences({**now, "patch_size": "0,32,32"}, now) == {"patch_size": ("0,32,32", [16, 32, 32])}
    plugin = {"task": "not-registered-here", "patch_size": "16,32,32", "lr": 0.1}
    assert result_settings(plugin) == plugin
    assert setting_differences(plugin, {**plugin, "lr": 0.2}) == {"lr": (0.1, 0.2)}


def test_a_field_added_later_keeps_the_runs_recorded_before_it_the_same_runs():
    from tasks.engine.same_run import ADDED_LATER, result_settings, setting_differences
    from tasks.medseg.config import MedsegConfig
    from tasks.sweeps.plan import config_hash

    now = MedsegConfig(epochs=1).to_dict()
    before = {k: v for k, v in now.items() if k not in ADDED_LATER}  # as recorded before recipe and NSD existed
    assert setting_differences(before, now) == {}
    assert config_hash("medseg", before) == config_hash("medseg", now)  # the sweep finds the old folder by name
    assert "recipe" not in result_settings(now) and "nsd_tolerance" not in result_settings(now)
    nnunet = {**now, "recipe": "nnunet"}
    assert setting_differences(before, nnunet) == {"recipe": ("default", "nnunet")}
    assert config_hash("medseg", nnunet) != config_hash("medseg", now)
    assert config_hash("medseg", {**now, "nsd_tolerance": 2.0}) != config_hash("medseg", now)
