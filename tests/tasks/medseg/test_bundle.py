"""A medseg run exported as a MONAI bundle: MONAI's bundle runner writes the label maps `zoo predict` writes, the
bundle's files are what MONAI's specification asks, inference.json's settings reach the run, bad inputs are refused.

One tiny NIfTI run (the Decathlon phantom, one epoch of a BasicUNet at 32 px), predicted on two of its cases and on
one of them stored flipped (another affine).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import monai
import nibabel as nib
import numpy as np
import pytest
import torch
from monai.bundle import ConfigParser

from tasks.engine.distributed import DistInfo
from tasks.engine.registry import task_class
from tasks.medseg.inference.bundle import BundleInference, export_bundle, load_bundle
from tasks.medseg.inference.predict import predict
from tasks.medseg.reading.phantom_nifti import write_phantom_nifti
from tasks.medseg.task import MedsegConfig, MedsegTask
from tasks.runs.run import load_run
from tasks.runs.training import train
from tests.tasks.medseg.test_medseg_nifti_task import SMALL, TINY

pytestmark = pytest.mark.slow  # trains a run and runs MONAI's bundle runner on it

FLIP_FIRST_AXIS = np.array([[0, -1], [1, 1], [2, 1]])  # nibabel orientation: axis 0 reversed, the others kept


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The trained run, its bundle, and a folder of three NIfTI images to predict."""
    root = tmp_path_factory.mktemp("bundle")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_CACHE", str(root / "cache"))  # the NIfTI cache of the training (it yields)
        data = write_phantom_nifti(root / "data", "decathlon", **TINY)
        train(MedsegTask, MedsegConfig(data=str(data), out=str(root / "run"), **SMALL))
        inputs = root / "inputs"
        inputs.mkdir()
        for file in (data / "imagesTs" / "case0001.nii.gz", data / "imagesTr" / "case0005.nii.gz"):
            shutil.copy(file, inputs / file.name)
        nib.save(nib.load(inputs / "case0001.nii.gz").as_reoriented(FLIP_FIRST_AXIS), inputs / "case0009.nii.gz")
        run = load_run(root / "run")
        yield SimpleNamespace(run=run, bundle=export_bundle(run, root / "bundle"), inputs=inputs)


def monai_run(bundle: Path, cli: bool, **overrides) -> subprocess.CompletedProcess:
    """MONAI's bundle runner on ``bundle``: ``python -m monai.bundle run --KEY VALUE ...`` (``cli``), or the function
    that command calls, ``monai.bundle.run(KEY=VALUE, ...)``, in a fresh interpreter either way."""
    args = {"config_file": str(bundle / "configs" / "inference.json"),
            "meta_file": str(bundle / "configs" / "metadata.json"), **overrides}
    if cli:
        command = [sys.executable, "-m", "monai.bundle", "run", *(x for k, v in args.items() for x in (f"--{k}", v))]
    else:
        command = [sys.executable, "-c", f"from monai.bundle import run; run(**{args!r})"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def assert_same_label_maps(found: Path, expected: Path) -> None:
    names = sorted(p.name for p in expected.glob("*.nii.gz"))
    assert names and sorted(p.name for p in found.glob("*.nii.gz")) == names
    for name in names:
        a, b = nib.load(found / name), nib.load(expected / name)
        assert np.array_equal(a.affine, b.affine), name
        assert a.get_data_dtype() == b.get_data_dtype() == np.uint8, name
        assert np.array_equal(np.asarray(a.dataobj), np.asarray(b.dataobj)), name


def zoo_predict(run, inputs: Path, out: Path, **options) -> Path:
    """What `zoo predict RUN INPUTS --out OUT [--tta ...]` writes."""
    run.task.config = dataclasses.replace(run.task.config, **options)
    predict(run, [inputs], out, progress=False)
    return out


def test_monai_runner_writes_the_label_maps_zoo_predict_writes(exported, tmp_path):
    """`python -m monai.bundle run` (MONAI's command line: the `bundle` extra's fire, in the dev install)."""
    result = monai_run(exported.bundle, True, dataset_dir=str(exported.inputs), output_dir=str(tmp_path / "bundle"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "wrote 3 label maps" in result.stdout  # the summary line of zoo predict, through the bundle's logging
    expected = zoo_predict(load_run(exported.run.path), exported.inputs, tmp_path / "zoo")
    assert_same_label_maps(tmp_path / "bundle", expected)


def test_inference_json_settings_reach_the_run(exported, tmp_path):
    """Parsed by MONAI's ConfigParser: the defaults are the run's own settings; overrides replace them, and the
    prediction is zoo predict's with the same options; bundle_root points a copied bundle at its own files."""
    parser = ConfigParser()
    parser.read_config(str(exported.bundle / "configs" / "inference.json"))
    default = parser.get_parsed_content("inference").load()
    assert default.config == exported.run.config and isinstance(default.model, type(exported.run.model))
    parser.update({"tta": "mirror", "overlap": 0.25, "sw_batch_size": 3, "dataset_dir": str(exported.inputs),
                   "output_dir": str(tmp_path / "bundle")})
    inference = parser.get_parsed_content("inference")
    config = inference.load().config
    assert (config.tta, config.overlap, config.sw_batch_size, config.sw_mode) == ("mirror", 0.25, 3, "gaussian")
    inference.run()
    expected = zoo_predict(load_run(exported.run.path), exported.inputs, tmp_path / "zoo", tta="mirror")
    assert_same_label_maps(tmp_path / "bundle", expected)
    moved = shutil.copytree(exported.bundle, tmp_path / "moved")  # a copied bundle, run with --bundle_root
    parser.update({"bundle_root": str(moved)})
    assert parser.get_parsed_content("inference").load().weights == (moved / "models" / "model.pt").resolve()


def test_the_bundle_holds_the_weights_metadata_and_run(exported):
    bundle, run = exported.bundle, exported.run
    state = torch.load(bundle / "models" / "model.pt", weights_only=True)
    assert state.keys() == run.model.state_dict().keys()
    for name, tensor in run.model.state_dict().items():
        torch.testing.assert_close(state[name], tensor, rtol=0, atol=0)
    meta = json.loads((bundle / "configs" / "metadata.json").read_text())
    assert meta["version"] == "0.1.0" and meta["monai_version"] == monai.__version__
    assert meta["pytorch_version"] == torch.__version__.split("+")[0] and meta["numpy_version"] == np.__version__
    assert "transformer-zoo" in meta["required_packages_version"] and meta["authors"] == "transformer-zoo"
    assert "liver" in meta["task"] and meta["description"]
    image, pred = meta["network_data_format"]["inputs"]["image"], meta["network_data_format"]["outputs"]["pred"]
    assert (image["num_channels"], image["spatial_shape"], image["channel_def"]) == (1, [32, 32], {"0": "CT"})
    assert image["modality"] == "CT" and image["value_range"] == [0, 1]
    classes = run.preprocessing["class_names"]
    assert pred["num_channels"] == len(classes) == 9 and list(pred["channel_def"].values()) == classes
    info = json.loads((bundle / "configs" / "run.json").read_text())
    assert info["weights"] == "../models/model.pt" and info["preprocessing"] == run.preprocessing
    assert (bundle / "configs" / "metrics.json").read_text() == (run.path / "metrics.json").read_text()
    loaded = load_bundle(bundle)
    assert loaded.metrics == run.metrics and loaded.weights == (bundle / "models" / "model.pt").resolve()


def test_bad_runs_folders_and_settings_are_refused(exported, tmp_path):
    cifar = task_class("cifar")
    other = dataclasses.replace(exported.run, task=cifar(cifar.config_class(), torch.device("cpu"), DistInfo()))
    with pytest.raises(ValueError, match="is a cifar run; MONAI bundles are exported from medseg runs"):
        export_bundle(other, tmp_path / "cifar")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="file is a file; give a folder"):
        export_bundle(exported.run, tmp_path / "file")
    with pytest.raises(ValueError, match="no dataset_dir: run the bundle with --dataset_dir DIR"):
        BundleInference(exported.bundle, output_dir=tmp_path / "out").run()
    with pytest.raises(ValueError, match="test-time augmentation"):  # the run's config checks the value
        BundleInference(exported.bundle, tta="flip").load()
    with pytest.raises(ValueError, match="unknown bundle inference option"):
        BundleInference(exported.bundle, overlaps=0.3)
    with pytest.raises(FileNotFoundError, match="give its folder with --bundle_root"):
        BundleInference(tmp_path / "moved", dataset_dir=exported.inputs, output_dir=tmp_path / "out").run()
    broken = Path(shutil.copytree(exported.bundle, tmp_path / "broken"))
    (broken / "models" / "model.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="model.pt is missing, corrupt or not this model's state_dict"):
        load_bundle(broken)


def test_zoo_export_writes_the_bundle(exported, tmp_path, capsys):
    from tasks.cli.main import main

    assert main(["export", str(exported.run.path), "--format", "monai-bundle", "--out", str(tmp_path / "b")]) == 0
    assert "python -m monai.bundle run --config_file" in capsys.readouterr().out
    for name in ("models/model.pt", "configs/inference.json", "configs/metadata.json"):
        assert (tmp_path / "b" / name).is_file(), name
