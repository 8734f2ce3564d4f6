"""One form of the 3D patch (issue 36): ``--patch-size 16,32,32`` is a tuple ``(D, H, W)`` of ints from the flag
onward (the config, the task, the model's argument, a restored run), read by one parser (``zoo.vision.patch_sides``);
JSON files hold it as a list, and the text of runs written before still reads as the same tuple.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

import tasks.medseg.config
import tasks.medseg.preprocessing.cases
import tasks.medseg.training.patches
import zoo.vision
from plumbing.configs import config_from_dict
from tasks.engine.config import add_config_arguments, config_from_args
from tasks.engine.distributed import DistInfo
from tasks.medseg.config import MedsegConfig
from tasks.medseg.reading.volume import Volume
from tasks.medseg.task import MedsegTask
from tasks.medseg.training.patches import PatchSampler
from zoo.registry import get_variant
from zoo.vision import patch_sides, volume_patch

PATCH = (16, 32, 32)


def _from_flags(*argv: str) -> MedsegConfig:
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, MedsegConfig)
    return config_from_args(MedsegConfig, parser.parse_args(list(argv)), variant="dynunet", preset="tiny")


def _planned(config: MedsegConfig) -> MedsegTask:
    """A task whose patch is planned from two synthetic cases, as ``setup`` plans it (no data on disk)."""
    task = MedsegTask(config, torch.device("cpu"), DistInfo())
    cases = [Volume(f"c{i}", np.zeros((20, 40, 48), np.float32), np.zeros((20, 40, 48), np.uint8), (2.0, 1.0, 1.0))
             for i in range(2)]
    task.cases.in_channels, task.cases.class_names, task.cases.dataset_name = 1, ["background", "a", "b"], "phantom"
    task.cases.plan_patches(cases, task.variant)
    return task


def _same_tuple(value: object) -> None:
    assert type(value) is tuple and value == PATCH and all(type(side) is int for side in value), repr(value)


def test_the_patch_is_one_tuple_from_the_flag_to_the_model_and_back():
    config = _from_flags("--patch-size", "16,32,32")
    _same_tuple(config.patch_size)  # the config holds the tuple, not the flag's text
    task = _planned(config)
    _same_tuple(task.patch_size)
    overrides = task.model_overrides()
    _same_tuple(overrides["patch_size"])  # the model's argument, passed on as it is
    _same_tuple(get_variant("dynunet", "medseg").config("tiny", **overrides).patch_size)
    # JSON holds a list (config.json, run.json); what is read back is the same tuple
    recorded = json.loads(json.dumps({"config": config.to_dict(), "preprocessing": task.preprocessing()}))
    assert recorded["config"]["patch_size"] == recorded["preprocessing"]["patch_size"] == list(PATCH)
    assert config.to_dict() == recorded["config"]  # so a recorded config compares equal to the one asked for
    restored = MedsegTask(config_from_dict(MedsegConfig, recorded["config"]), torch.device("cpu"), DistInfo())
    _same_tuple(restored.config.patch_size)
    restored.restore(recorded["preprocessing"], "run")
    _same_tuple(restored.patch_size)


@pytest.mark.parametrize("old", ["16,32,32", [16, 32, 32], (16, 32, 32)])
def test_a_config_of_any_recorded_form_reads_as_the_tuple(old):
    """Runs written before this change hold the flag's text ("16,32,32") in their config.json and run.json."""
    _same_tuple(config_from_dict(MedsegConfig, {"variant": "dynunet", "patch_size": old}).patch_size)


def test_one_parser_reads_every_patch():
    """The config, a restored run, the patch sampler and the 3D model configs share ``patch_sides``: the old
    property ``MedsegConfig.patch`` and the sampler's own check are gone, and a bad patch reads the same
    everywhere."""
    assert not hasattr(MedsegConfig, "patch")
    for module in (tasks.medseg.config, tasks.medseg.preprocessing.cases, tasks.medseg.training.patches):
        assert module.patch_sides is zoo.vision.patch_sides, module.__name__
    message = "must be three positive integers D,H,W in voxels, e.g. --patch-size 32,64,64"
    volumes = [np.zeros((1, 20, 40, 48), np.float32)], [np.zeros((20, 40, 48), np.uint8)]
    for build in (lambda: MedsegConfig(patch_size="32,64"), lambda: volume_patch("32,64", None),
                  lambda: PatchSampler(*volumes, patch=(32, 64)), lambda: patch_sides([32, 64])):
        with pytest.raises(ValueError, match=message):
            build()


@pytest.mark.parametrize("bad", ["32,64", "0,64,64", "a,b,c", "32,64,64,8", "32.5,64,64", [32, 64, 64.0],
                                 [True, 64, 64], ""])
def test_a_bad_patch_names_the_value_and_the_form_to_use(bad):
    with pytest.raises(ValueError, match="patch_size must be three positive integers") as error:
        MedsegConfig(patch_size=bad)
    assert repr(bad) in str(error.value) and "--patch-size 32,64,64" in str(error.value)


def test_a_patch_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match="patch_size must be three positive integers.*got int 32"):
        patch_sides(32)
