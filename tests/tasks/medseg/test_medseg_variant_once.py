"""The medseg task reads its variant from the registration the run resolved once (``Task.variant``, issue 36): planning
a 3D patch, ``spatial_dims`` (read at every batch) and the model's overrides look nothing up by name, and the patch
planned from what the network divides by is the one it was before.
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
import pytest
import torch

import zoo.registry
from tasks.engine.distributed import DistInfo
from tasks.medseg.config import MedsegConfig
from tasks.medseg.reading.volume import Volume
from tasks.medseg.task import MedsegTask


@pytest.fixture
def asked(monkeypatch) -> Counter:
    """Lookups by name (``get_variant``/``list_variants``) made from ``tasks/medseg``, counted from now on."""
    counts: Counter = Counter()
    originals = {"get_variant": zoo.registry.get_variant, "list_variants": zoo.registry.list_variants}

    def counting(name, original):
        def lookup(*args, **kwargs):
            if "/tasks/medseg/" in sys._getframe(1).f_code.co_filename.replace("\\", "/"):
                counts[name] += 1
            return original(*args, **kwargs)
        return lookup

    for module in [m for m in list(sys.modules.values()) if m is not None]:
        for name, original in originals.items():
            if getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counting(name, original))
    return counts


# (variant, preset): the patch planned for cases of 20 × 40 × 40 voxels with no --patch-size, from the network's
# multiple and min_side (MISSFormer3D's multiple, 32, is a property of its four stages; MONAI's are class constants)
PLANNED = [("missformer3d", "tiny", (32, 64, 64)), ("dynunet", "tiny", (32, 48, 48)), ("unetr", "tiny", (32, 48, 48))]


@pytest.mark.parametrize(("variant", "preset", "patch"), PLANNED)
def test_a_3d_task_plans_its_patch_and_model_without_looking_its_variant_up(variant, preset, patch, asked):
    task = MedsegTask(MedsegConfig(variant=variant, preset=preset), torch.device("cpu"), DistInfo())
    task.cases.in_channels, task.cases.class_names, task.cases.dataset_name = 1, ["background", "organ"], "phantom"
    cases = [Volume(f"c{i}", np.zeros((20, 40, 40), np.float32), np.zeros((20, 40, 40), np.uint8), None)
             for i in range(2)]
    task.cases.plan_patches(cases, task.variant)
    assert task.patch_size == patch
    assert [task.spatial_dims for _ in range(10)] == [3] * 10  # as every batch reads it
    assert task.model_overrides()["patch_size"] == patch
    assert dict(asked) == {}  # all of it from task.variant, resolved once (by the engine, not by tasks/medseg)
    assert task.variant is zoo.registry.get_variant(variant, "medseg")


def test_a_reference_model_is_2d_and_has_no_registration():
    task = MedsegTask(MedsegConfig(variant="basicunet"), torch.device("cpu"), DistInfo())
    assert task.variant is None and task.spatial_dims == 2
