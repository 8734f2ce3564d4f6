"""``zoo cv`` reuses a fold only when it was trained with the settings asked for (every field but those that cannot
change a result, :mod:`tasks.engine.same_run`): a fold trained for 2 epochs is never reported under a 1-epoch
command, nor retrained over; the refusal names the field and the fix."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tasks.cli.main import main
from tasks.medseg.config import MedsegConfig
from tasks.medseg.cv import fold_state
from tests.tasks.medseg.test_medseg_nifti_cli import FLAGS, root  # noqa: F401  (root: the NIfTI phantom fixture)

ASKED = MedsegConfig(variant="basicunet", fold="0", folds=2, epochs=1, device="cpu")


def _fold(tmp_path: Path, done: bool = True, **recorded) -> MedsegConfig:
    """A fold folder as a run leaves it, trained with ``ASKED`` changed by ``recorded``; returns ``ASKED`` pointed
    at it."""
    folder = tmp_path / "fold_0"
    asked = dataclasses.replace(ASKED, out=str(folder))
    trained = dataclasses.replace(asked, **recorded).to_dict()
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.pt").write_bytes(b"")
    (folder / "config.json").write_text(json.dumps(trained))
    if done:
        (folder / "run.json").write_text(json.dumps({"config": trained}))
        (folder / "metrics.json").write_text(json.dumps({"epochs": trained["epochs"], "final": {}}))
    return asked


@pytest.mark.parametrize("field, value", [("epochs", 2), ("compile", True), ("device", "auto"),
                                          ("deterministic", False), ("lr", 0.01)])
@pytest.mark.parametrize("done", [True, False], ids=["finished", "stopped"])
def test_a_fold_trained_with_other_settings_is_refused_naming_them(tmp_path, field, value, done):
    asked = _fold(tmp_path, done, **{field: value})
    with pytest.raises(ValueError, match=rf"fold_0 was trained with other settings \({field}: {value!r} -> "
                                         rf"{getattr(ASKED, field)!r}\); rerun zoo cv with the settings it was "
                                         r"trained with \(its config\.json\), give it another --out, or move"):
        fold_state(asked)


def test_a_fold_differing_only_where_results_cannot_is_reused(tmp_path):
    assert fold_state(_fold(tmp_path / "a", num_threads=4, progress=True, resume=True)) == "done"
    assert fold_state(_fold(tmp_path / "b", done=False, num_threads=4)) == "partial"
    assert fold_state(dataclasses.replace(ASKED, out=str(tmp_path / "none"))) == "new"


def test_a_finished_fold_with_a_cut_config_json_is_checked_through_run_json(tmp_path):
    asked = _fold(tmp_path / "a", epochs=2)
    (Path(asked.out) / "config.json").write_text('{"epochs": 2, "se')
    with pytest.raises(ValueError, match=r"epochs: 2 -> 1"):
        fold_state(asked)
    asked = _fold(tmp_path / "b")
    (Path(asked.out) / "config.json").write_text('{"epochs": 1, "se')
    assert fold_state(asked) == "done"


def test_zoo_cv_never_reports_a_2_epoch_fold_under_a_1_epoch_command(root, capsys):  # noqa: F811
    """Through the command line, on the NIfTI phantom: fold 0 trained for 2 epochs, then asked for with 1 epoch
    (or on another device): refused with one line naming the field, the fold and cv.json left as they were."""
    out = root / "cv-epochs"
    command = ["cv", "medseg", "--data", str(root / "pairs"), "--out", str(out), "--folds", "2", "--fold", "0",
               *FLAGS, "--num-threads", "1"]
    assert main([*command, "--epochs", "2"]) == 0  # the last --epochs wins over FLAGS' 1
    metrics = json.loads((out / "fold_0" / "metrics.json").read_text())
    assert metrics["epochs"] == 2
    summary = (out / "cv.json").read_text()
    capsys.readouterr()
    for flags, changed in ((["--epochs", "1"], "epochs: 2 -> 1"), (["--epochs", "2", "--device", "auto"],
                                                                   "device: 'cpu' -> 'auto'")):
        assert main([*command, *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert f"fold_0 was trained with other settings ({changed})" in err and "\n" not in err, err
    assert json.loads((out / "fold_0" / "metrics.json").read_text()) == metrics
    assert (out / "cv.json").read_text() == summary
    assert main([*command, "--epochs", "2"]) == 0  # the settings it was trained with: reused
    assert json.loads((out / "cv.json").read_text())["skipped"] == [0]
