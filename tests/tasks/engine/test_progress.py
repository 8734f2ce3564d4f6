"""Progress bars: tqdm on a terminal; in a log file or CI, a readable line at intervals, never a carriage return."""

from __future__ import annotations

import io

import pytest
from tqdm import tqdm

from tasks.engine import progress
from tasks.engine.progress import LineProgress, progress_bar
from tasks.engine.trainer import Trainer
from tests.toy_task import ToyConfig, ToyTask


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    """A stand-in for time.monotonic that the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_training_logged_to_a_file_writes_a_line_per_epoch_and_no_carriage_return(tmp_path, capfd):
    config = ToyConfig(out=str(tmp_path / "run"), epochs=3, progress=True)  # 64 examples, batches of 8: 8 steps
    Trainer(ToyTask, config).fit()
    err = capfd.readouterr().err  # stderr is a file here, as in a log or CI
    assert "\r" not in err and "\x1b[" not in err
    lines = [line for line in err.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 3, err  # the closing line of each epoch (30 s between lines: no line before it)
    for epoch, line in enumerate(lines, 1):
        assert line.startswith(f"epoch {epoch}/3: 8/8 step (100 %), "), line
        assert "step/s" in line and "elapsed 00:" in line and "loss=" in line and "lr=" in line


def test_a_line_every_interval_with_the_rate_and_the_time_left(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    out = io.StringIO()
    bar = progress_bar(total=400, desc="epoch 2/10", unit="batch", file=out, interval=30)
    assert isinstance(bar, LineProgress)
    for _ in range(399):
        clock.now += 0.25  # 4 batches a second
        bar.update(1)
        bar.set_postfix(loss="0.412")
    bar.close()
    bar.close()  # once only
    finished = io.StringIO()
    with progress_bar(range(2), desc="slow", file=finished, interval=30) as slow:
        for _ in slow:
            clock.now += 40
    lines = out.getvalue().splitlines()
    assert finished.getvalue().splitlines() == ["slow: 1/2 it (50 %), 40.0 s/it, elapsed 00:40, ETA 00:40",
                                                "slow: 2/2 it (100 %), 40.0 s/it, elapsed 01:20"]  # not twice
    assert lines[0] == "epoch 2/10: 120/400 batch (30 %), 4.0 batch/s, elapsed 00:30, ETA 01:10, loss=0.412"
    assert len(lines) == 4  # at 30, 60 and 90 s, then the closing line (without an ETA)
    assert lines[-1] == "epoch 2/10: 399/400 batch (100 %), 4.0 batch/s, elapsed 01:39, loss=0.412"
    assert "\r" not in out.getvalue()


def test_a_loop_left_early_reports_where_it_stopped_and_slow_steps_read_as_seconds_each(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    out = io.StringIO()
    for step in progress_bar(range(10), desc="train", file=out):
        clock.now += 4.0
        if step == 2:
            break
    assert out.getvalue() == "train: 2/10 it (20 %), 6.0 s/it, elapsed 00:12\n"
    silent = io.StringIO()
    for _ in progress_bar(range(3), file=silent, disable=True):
        pass
    with progress_bar(total=5, file=silent) as bar:  # nothing counted: nothing to say
        bar.set_postfix_str("preset tiny")
    assert silent.getvalue() == ""


def test_a_terminal_gets_the_tqdm_bar():
    screen = Terminal()
    bar = progress_bar(range(3), desc="epoch 1/1", file=screen)
    assert isinstance(bar, tqdm)
    assert list(bar) == [0, 1, 2]
    assert "\r" in screen.getvalue() and "epoch 1/1" in screen.getvalue()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="interval=0: give the seconds between two progress lines"):
        LineProgress(total=3, interval=0)
    with pytest.raises(TypeError, match="counts steps given to update"):
        iter(LineProgress(total=3)).__next__()
