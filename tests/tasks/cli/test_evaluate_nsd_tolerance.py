"""``zoo evaluate medseg --pred DIR --labels DIR --nsd-tolerance MM`` (issue 39): the normalised surface Dice at the
tolerance given (1 mm without the flag, as before), recorded in metrics.json and named in the printed summary; a
tolerance that is not positive, or the flag on a run folder, gets a one-line error and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from tasks.cli.main import main
from tasks.medseg.evaluation.folder_eval import score_folders


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """One 1 mm case: a reference cube and a prediction shifted 2 voxels along one axis (its surface within 2 mm of
    the reference's, part of it farther than 1 mm)."""
    label = np.zeros((16, 16, 16), dtype=np.uint8)
    label[4:11, 4:11, 4:11] = 1
    for name, mask in (("labels", label), ("pred", np.roll(label, 2, axis=0))):
        (tmp_path / name).mkdir()
        nib.save(nib.Nifti1Image(mask, np.eye(4)), tmp_path / name / "c1.nii.gz")
    return tmp_path / "pred", tmp_path / "labels"


def _evaluate(folders: tuple[Path, Path], out: Path, *flags: str) -> int:
    return main(["evaluate", "medseg", "--pred", str(folders[0]), "--labels", str(folders[1]), "--out", str(out),
                 *flags])


def test_the_nsd_tolerance_is_used_recorded_and_printed(folders, tmp_path, capsys):
    assert _evaluate(folders, tmp_path / "a", "--nsd-tolerance", "2.5") == 0
    printed = capsys.readouterr().out
    written = json.loads((tmp_path / "a" / "metrics.json").read_text())
    expected, _, _ = score_folders(*folders, out=tmp_path / "ref", nsd_tolerance=2.5)
    assert written["nsd_tolerance_mm"] == 2.5 and written["nsd"] == pytest.approx(expected["nsd"], abs=1e-12)
    assert written["nsd"] == pytest.approx(1.0)  # a 2-voxel shift at 1 mm lies within 2.5 mm everywhere
    assert "NSD @ 2.5 mm" in printed
    assert _evaluate(folders, tmp_path / "b") == 0  # without the flag: 1 mm, as a training run scores it
    default = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert default["nsd_tolerance_mm"] == 1.0 and default["nsd"] < written["nsd"] - 0.1


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_a_tolerance_that_is_not_positive_is_refused_on_one_line(folders, tmp_path, capsys, value):
    assert _evaluate(folders, tmp_path / "bad", "--nsd-tolerance", value) == 2
    err = capsys.readouterr().err.strip()
    assert "nsd_tolerance" in err and value.lstrip("-") in err and "\n" not in err
    assert not (tmp_path / "bad").exists() and not (folders[0] / "metrics.json").exists()  # nothing written


def test_the_flag_on_a_run_folder_is_refused(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path), "--nsd-tolerance", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "a run's NSD is scored at the tolerance it was trained with" in err and "\n" not in err
