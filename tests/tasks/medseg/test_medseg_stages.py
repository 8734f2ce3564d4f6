"""MedsegTask is composed of its pipeline stages, each owning its state: the cases (preprocessing), the training
examples and the evaluator. Nothing the stages own is kept a second time on the task, a replaced config reaches every
stage, and the cases stage restores from run.json what it recorded there."""

import dataclasses
import json

import pytest
import torch

from tasks.engine.distributed import DistInfo
from tasks.medseg.reading.phantom import write_phantom
from tasks.medseg.task import MedsegConfig, MedsegTask

# What the three mixins used to share through attributes of the task itself
STAGE_STATE = ("data", "volumes", "class_names", "dataset_name", "in_channels", "nifti_info", "split_info", "folds",
               "patch_size", "voxel_spacing", "train_images", "train_labels", "criterion", "sampler", "_augment",
               "_zoomed_valid", "_mirror_warnings")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Three training and two test cases of 4 slices of 40–48 pixels, in the Synapse layout."""
    root = tmp_path_factory.mktemp("synapse") / "tiny"
    return write_phantom(root, seed=5, slices=4, size=(40, 48), train_cases=("case0005", "case0006", "case0007"),
                         test_cases=("case0001", "case0002"))


def _task(root, **settings) -> MedsegTask:
    config = MedsegConfig(data=str(root), image_size=32, variant="basicunet", progress=False, **settings)
    return MedsegTask(config, torch.device("cpu"), DistInfo())


def test_each_piece_of_state_lives_in_one_stage(tiny):
    task = _task(tiny, valid_cases=1, flip_prob=0.5)
    task.setup()
    assert not set(vars(task)) & set(STAGE_STATE), "state kept on the task besides its stage"
    assert task.evaluator.cases is task.cases and len(task.training) == sum(v.shape[0] for v in task.volumes["train"])
    for name in ("volumes", "class_names", "num_classes", "in_channels", "patch_size"):  # read-only views of the cases
        with pytest.raises(AttributeError):
            setattr(task, name, getattr(task, name))
    assert task.volumes is task.cases.volumes and task.class_names is task.cases.class_names
    # zoo evaluate --data, zoo predict's and a bundle's options replace a restored task's config: every stage sees it
    replaced = dataclasses.replace(task.config, tta="mirror")
    task.config = replaced
    assert task.config is replaced
    assert all(stage.config is replaced for stage in (task.cases, task.training, task.evaluator))


def test_the_cases_stage_restores_what_it_recorded(tiny):
    """A fold run's preprocessing, as run.json holds it, restores classes, channels and the fold: the restored task
    reads the same cases into the same splits and records the same preprocessing, without a training stage."""
    trained = _task(tiny, folds=3, fold=1)
    trained.setup()
    recorded = json.loads(json.dumps(trained.preprocessing()))
    assert recorded["split"]["fold"] == 1 and len(recorded["split"]["valid"]) == 1
    restored = _task(tiny, folds=3, fold=1)
    restored.restore(recorded, "run")
    assert restored.cases.data is None and restored.class_names == trained.class_names
    assert restored.reference_args() == trained.reference_args() == (1, 9, 32)
    restored.setup()
    assert restored.training is None  # evaluation needs no training examples
    assert json.loads(json.dumps(restored.preprocessing())) == recorded  # as run.json would hold it again
    assert {split: [v.case for v in cases] for split, cases in restored.volumes.items()} == \
        {split: [v.case for v in cases] for split, cases in trained.volumes.items()}
