"""Optional experiment tracking: ``--track tensorboard`` and ``--track mlflow`` (off by default).

``metrics.jsonl`` and ``metrics.json`` stay the run's record; a tracker copies the same numbers to a tool people
already browse. Each is a training callback (:mod:`tasks.engine.callbacks`):

* ``tensorboard``: event files in ``RUN/tensorboard/`` (``tensorboard --logdir runs/``): the training loss and the
  learning rate at every optimizer step, every epoch's validation metrics, the final test metrics, and the config
  as text. Needs the ``tensorboard`` package.
* ``mlflow``: one MLflow run per training run, on ``MLFLOW_TRACKING_URI`` when it is set, else a local file store in
  ``RUN/mlruns/`` (``mlflow ui --backend-store-uri RUN/mlruns``): the config as parameters, every epoch's metrics,
  the final test metrics. A resumed run continues the same MLflow run (its id is kept in ``RUN/tracking.json``).
  Needs ``mlflow`` (or ``mlflow-skinny``).

``pip install -e '.[track]'`` installs both.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from plumbing.atomic import write_json_atomic
from plumbing.errors import import_extra
from tasks.engine.callbacks import Callback
from tasks.engine.config import tracker_names

TRACKING_FILE = "tracking.json"


def numbers(values: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of a nested dict, flattened to ``a/b/c`` names (strings, lists and None left out)."""
    out: dict[str, float] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(numbers(value, f"{name}/"))
        elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


class TensorBoardTracker(Callback):
    """Writes the run's numbers as TensorBoard event files in ``RUN/tensorboard/``."""

    def __init__(self) -> None:
        self.SummaryWriter = import_extra("torch.utils.tensorboard", "--track tensorboard", "track",
                                          package="tensorboard").SummaryWriter
        self.writer = None

    def on_start(self, trainer, step: int) -> None:
        self.writer = self.SummaryWriter(log_dir=str(trainer.out / "tensorboard"), purge_step=step or None)
        if step == 0:
            self.writer.add_text("config", "```\n" + json.dumps(trainer.config.to_dict(), indent=2) + "\n```")

    def on_step(self, trainer, step: int, loss: float, lr: float) -> None:
        self.writer.add_scalar("train/loss", loss, step)
        self.writer.add_scalar("train/lr", lr, step)

    def on_epoch_end(self, trainer, history: list[dict[str, Any]]) -> None:
        row = history[-1]
        for name, value in numbers({k: v for k, v in row.items() if k not in ("epoch", "step")}).items():
            self.writer.add_scalar(f"epoch/{name}", value, row["step"])
        self.writer.flush()

    def on_finish(self, trainer, summary: dict[str, Any], sections: list[str]) -> None:
        step = summary["history"][-1]["step"] if summary["history"] else 0
        for name, value in numbers(summary["final"]).items():
            self.writer.add_scalar(f"final/{name}", value, step)
        self.writer.close()


class MlflowTracker(Callback):
    """Logs the run to MLflow (see the module docstring)."""

    def __init__(self) -> None:
        self.mlflow = import_extra("mlflow", "--track mlflow", "track")

    def on_start(self, trainer, step: int) -> None:
        out = Path(trainer.out)
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # the local file store is chosen on purpose
            self.mlflow.set_tracking_uri((out / "mlruns").resolve().as_uri())
        record = out / TRACKING_FILE
        known = json.loads(record.read_text()).get("mlflow_run_id") if record.is_file() and step else None
        if self.mlflow.active_run() is not None:  # left by a run of this process that stopped early
            self.mlflow.end_run()
        run = self.mlflow.start_run(run_id=known, run_name=None if known else out.name)
        if not known:
            write_json_atomic(record, {"mlflow_run_id": run.info.run_id})
            config = trainer.config.to_dict()
            self.mlflow.log_params({k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in config.items()})

    def on_epoch_end(self, trainer, history: list[dict[str, Any]]) -> None:
        row = history[-1]
        self.mlflow.log_metrics(numbers({k: v for k, v in row.items() if k not in ("epoch", "step")}),
                                step=row["step"])

    def on_finish(self, trainer, summary: dict[str, Any], sections: list[str]) -> None:
        step = summary["history"][-1]["step"] if summary["history"] else 0
        final = {name.replace("/", "."): value for name, value in numbers(summary["final"]).items()}
        self.mlflow.log_metrics({f"final.{k}": v for k, v in final.items()}, step=step)
        self.mlflow.end_run()


def trackers(text: str) -> list[Callback]:
    """The callbacks ``--track text`` asks for (refused, naming the extra, when its package is missing)."""
    return [{"tensorboard": TensorBoardTracker, "mlflow": MlflowTracker}[name]() for name in tracker_names(text)]
