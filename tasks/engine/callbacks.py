"""What a training run does besides training, handed to the trainer instead of imported by it.

The :class:`~tasks.engine.trainer.Trainer` trains: batches, steps, evaluation, checkpoints. Writing the run
folder's report (:class:`tasks.runs.training.RunFolder`) and the doctor's watch over the curve
(:class:`zoo.analysis.doctor.training.TrainingDoctor`) reach it as callbacks, called on the main process only,
in the order given:

* ``on_start(trainer, step)``: the model is built (and resumed at optimizer step ``step``), before the first step;
* ``on_step(trainer, step, loss, lr)``: after every optimizer step (``loss`` per item);
* ``on_epoch_end(trainer, history)``: after every epoch's evaluation, ``history`` holding every epoch's row;
* ``section(trainer)``: the callback's section of ``report.md`` ("" for none);
* ``on_finish(trainer, summary, sections)``: after the test evaluation; ``sections`` are the task's report
  section and every callback's, in order.

A callback needs not subclass :class:`Callback` (the doctor, in a lower layer, does not); it must have the five.
"""

from __future__ import annotations

from typing import Any


class Callback:
    """Does nothing at every hook; subclass it and override what you need."""

    def on_start(self, trainer, step: int) -> None:
        pass

    def on_step(self, trainer, step: int, loss: float, lr: float) -> None:
        pass

    def on_epoch_end(self, trainer, history: list[dict[str, Any]]) -> None:
        pass

    def section(self, trainer) -> str:
        return ""

    def on_finish(self, trainer, summary: dict[str, Any], sections: list[str]) -> None:
        pass
