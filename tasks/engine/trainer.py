"""The shared training loop of every task runner.

It owns what is the same for all tasks: device choice, seeds and determinism, bf16 autocast on CUDA,
gradient accumulation and clipping, the auxiliary losses and statistics the model's layers report
(:mod:`core.sidechannels`, whatever those layers are), progress bars, evaluation each epoch, checkpoints
(atomic, resumable bit for bit), Ctrl-C and non-finite-loss handling, ``torchrun`` scale-out, an optional
budget that may stop a run after any optimizer step (:mod:`tasks.engine.budget`: time, training FLOPs),
pre-emption (SIGTERM or SIGUSR1: checkpoint after the current step, then :class:`PreemptedError`; a cluster requeues the
run with ``--resume``, which starts from the beginning when no checkpoint was written yet), and the training's own
files: ``checkpoints/`` and ``metrics.jsonl``. What a run writes besides (``run.json``,
``config.json``, ``metrics.json``, ``report.md``, ``curves.png``) and the doctor's watch are callbacks it is given
(:mod:`tasks.engine.callbacks`); :func:`tasks.runs.training.train` gives it those of a ``zoo train`` run.
"""

from __future__ import annotations

import json
import logging
import math
import random
import signal
import time
from collections.abc import Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import fields
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from core.sidechannels import auxiliary_loss
from plumbing.atomic import write_text_atomic
from tasks.engine.budget import TrainingFlopCounter, parse_budget
from tasks.engine.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from tasks.engine.distributed import all_reduce_sum, gather_records, init_distributed, select_device, shard
from tasks.engine.memory import peak_memory
from tasks.engine.mfu import run_utilisation
from tasks.engine.precision import Precision, probe_training, resolve, training_step
from tasks.engine.pretrained import freeze, initialise
from tasks.engine.progress import progress_bar
from tasks.engine.same_run import timing_settings
from tasks.engine.sessions import Session, totals
from tasks.engine.task import Task

log = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the run stops and keeps its last good checkpoint."""


# The exit status of a run stopped by a signal after saving its checkpoint: "try again" (sysexits' EX_TEMPFAIL).
# `zoo train` returns it; the sweeps requeue a run that ends with it, resuming from the checkpoint.
REQUEUE_EXIT = 75
STOP_SIGNALS = ("SIGTERM", "SIGUSR1")  # what a scheduler sends before it pre-empts or times out a job


class PreemptedError(Exception):
    """A stop signal arrived; the run saved ``last.pt`` after the step it was in and stopped. ``--resume`` continues
    it exactly."""

    def __init__(self, signal_name: str, step: int, checkpoint) -> None:
        super().__init__(f"{signal_name} received: checkpoint saved at optimizer step {step} in {checkpoint}; "
                         "continue with --resume")
        self.signal_name, self.step, self.checkpoint = signal_name, step, checkpoint


@contextmanager
def stop_signals(on_signal):
    """Call ``on_signal(name)`` on SIGTERM and SIGUSR1 inside the block (main thread only: elsewhere Python cannot
    install handlers, and the block runs without them); the previous handlers come back after it."""
    previous = {}
    try:
        for name in STOP_SIGNALS:
            number = getattr(signal, name, None)
            if number is not None:
                previous[number] = signal.signal(number, lambda signum, frame: on_signal(signal.Signals(signum).name))
    except ValueError:  # not the main thread
        log.debug("stop signals not handled: not in the main thread")
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global random streams (every device's)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@contextmanager
def deterministic_algorithms(enabled: bool):
    """Inside the block, torch uses deterministic algorithms where ``enabled`` (warning where an op has none);
    after it, the process's previous setting comes back, so a run with ``--deterministic`` does not change the
    numerics or speed of what the same process does next (another run, a test)."""
    previous = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    if enabled:
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])


class Trainer:
    """Runs ``task`` to completion: ``Trainer(task_class, config, callbacks=[...]).fit()`` returns the final
    metrics (the summary); ``callbacks`` follow :mod:`tasks.engine.callbacks`."""

    def __init__(self, task_class: type[Task], config, budget=None, callbacks: Sequence = ()) -> None:
        self.config = config
        self.callbacks = list(callbacks)
        # optional tasks.engine.budget.Budget: consulted after each optimizer step, may stop the run
        self.budget = budget
        self.stopped_by_budget = False
        self.device = select_device(config.device)
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        seed_everything(config.seed)
        self.dist = init_distributed(self.device)
        if self.dist.enabled and self.device.type == "cuda":
            self.device = torch.device("cuda", self.dist.local_rank)
        # auto is probed in fit(), on the built model; the others are known (or refused) before any data loads
        self.precision: Precision | None = (None if config.precision == "auto" else
                                            resolve(config.precision, self.device, distributed=self.dist.enabled))
        self.precision_used: str = self.precision.used if self.precision else "fp32"  # "fp32" or "bf16"
        self.task = task_class(config, self.device, self.dist)
        self.out = config.out_dir
        self.ckpt_dir = self.out / "checkpoints"
        self.history: list[dict[str, Any]] = []
        # the run's costs (tasks.engine.sessions): the sessions before this one, from the checkpoint, and this one
        self.earlier_sessions: list[dict[str, Any]] = []
        self.session = Session.begin(0)
        self.stop_signal: str | None = None  # the stop signal received (see STOP_SIGNALS), if any

    # --- helpers ---------------------------------------------------------------------------------
    @property
    def main(self) -> bool:
        return self.dist.is_main

    def _autocast(self):
        """The precision context of every forward, training and evaluation alike (:mod:`tasks.engine.precision`)."""
        return self.precision.context(self.model, self.device)

    def _probe_precision(self, saved: str | None) -> Precision:
        """``--precision auto``: time this model's training step in both precisions (a resumed run keeps
        the choice its checkpoint recorded)."""
        if saved is not None:
            return resolve("auto", self.device, lambda: Precision("auto", saved, f"auto: {saved}, as the run began"),
                           self.dist.enabled)
        c, task = self.config, self.task
        key = {"task": task.name, "model": getattr(task, "model_config", None),
               "config": timing_settings(c.to_dict())}  # what changes the step's time (tasks.engine.same_run)
        step = training_step(task, task.train_batches(0)[0], self.device)  # the first batch the run trains on
        return resolve("auto", self.device, lambda: probe_training(step, self.model, task.make_optimizer,
                                                                   self.device, key), self.dist.enabled)

    def _state(self, epoch: int, batch_in_epoch: int, step: int, rng: dict, best: float | None,
               epoch_sums: tuple[float, float] = (0.0, 0.0)) -> dict:
        """Everything a resume needs; ``epoch_sums`` are the running (loss, items) of a checkpoint saved mid-epoch,
        so that the resumed epoch reports the same training loss."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rng,
            "epoch": epoch,
            "batch_in_epoch": batch_in_epoch,
            "step": step,
            "best": best,
            "epoch_sums": list(epoch_sums),
            "history": self.history,
            "config": self.config.to_dict(),
            "task": self.task.name,
            "precision": self.precision_used,
            # a resume stops where the uninterrupted run stops: the same budget, schedule and costs so far
            "budget": _budget_record(self.budget),
            "planned_steps": self.planned_steps,
            "sessions": self.sessions(),
        }

    def _call(self, hook: str, *args) -> None:
        """Call ``hook`` of every callback, in order, on the main process."""
        if self.main:
            for callback in self.callbacks:
                getattr(callback, hook)(self, *args)

    def _save(self, name: str, state: dict) -> None:
        if self.main:
            save_checkpoint(self.ckpt_dir / name, state)

    def _is_better(self, value: float, best: float | None) -> bool:
        if best is None:
            return True
        return value > best if self.task.higher_is_better else value < best

    # --- the loop --------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train (or resume) the run, evaluate it on the test data and return its summary (metrics.json)."""
        with deterministic_algorithms(self.config.deterministic):
            return self._fit()

    def _fit(self) -> dict[str, Any]:
        c, task = self.config, self.task
        last = self.ckpt_dir / "last.pt"
        if not c.resume and last.exists():  # before the data loads: a refused run should cost no time
            raise ValueError(
                f"{self.out} already holds a checkpoint ({last}); pass --resume to continue it, "
                "or choose another --out folder"
            )
        resuming = c.resume and last.exists()
        if c.resume and not resuming:  # e.g. a job pre-empted before its first checkpoint, requeued with --resume
            log.warning("--resume: %s holds no checkpoint yet; training from the beginning", self.out)
        c.check_paths()
        state = load_checkpoint(last, c.to_dict()) if resuming else None
        task.setup()
        self.model = task.build_model()
        # --init-from (a resumed run's checkpoint holds its weights) and --freeze: tasks.engine.pretrained
        self.initialisation = initialise(self.model, c, task.variant) if c.init_from and not resuming else None
        self.frozen = freeze(self.model, c)
        self.model = self.model.to(self.device)
        self.optimizer = task.make_optimizer(self.model)
        self.planned_steps = self._plan(state)
        self.scheduler = task.make_scheduler(self.optimizer, self.planned_steps)
        self.scaler = torch.amp.GradScaler(enabled=False)  # bf16 needs no loss scaling; kept for fp16 users
        wrapped = DistributedDataParallel(self.model) if self.dist.enabled else self.model
        self.eval_model = self.model  # what evaluation calls: the plain module, or its compiled forward
        if c.compile:  # checkpoints keep holding self.model; the compiled modules share its parameters
            from tasks.engine.compiled import compile_for_trainer

            wrapped, self.eval_model = compile_for_trainer(wrapped, self.model, task.dynamic_shapes, c.variant)

        epoch, batch_in_epoch, step, best, epoch_sums = 0, 0, 0, None, (0.0, 0.0)
        if resuming:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.scaler.load_state_dict(state["scaler"])
            set_rng_state(state["rng"])
            epoch, batch_in_epoch, step = state["epoch"], state["batch_in_epoch"], state["step"]
            best, self.history = state["best"], list(state["history"])
            # the epoch's loss so far (all ranks' sum under DDP: the main rank carries it, the others start at 0)
            epoch_sums = tuple(state.get("epoch_sums", (0.0, 0.0))) if self.main else (0.0, 0.0)
            log.info("resumed from %s at epoch %d, step %d", last, epoch + 1, step)
        if self.precision is None:
            self.precision = self._probe_precision(state.get("precision") if resuming else None)
            self.precision_used = self.precision.used
        log.info("precision: %s", self.precision.reason)
        if self.main:
            self.out.mkdir(parents=True, exist_ok=True)
            # the rows of the checkpoint's history: none for a fresh start (a run killed before its first checkpoint
            # left none that count), and none past the checkpoint for a resumed one
            write_text_atomic(self.out / "metrics.jsonl", "".join(json.dumps(row) + "\n" for row in self.history))
        self._call("on_start", step)

        if self.budget is not None:
            self.budget.start(self)
        self.flop_counter = getattr(self.budget, "counter", None) or TrainingFlopCounter().start(self)  # for MFU
        self.earlier_sessions = list(state.get("sessions", [])) if resuming else []
        self.flop_counter.flops = totals(self.earlier_sessions)["flops"]  # a FLOP budget counts on from there
        self.session = Session.begin(step)
        self._session_start = time.perf_counter()
        if resuming and self.budget is not None:  # saved at the step that spent it: a signal came then, or it ended
            self._budget_spent()
        with stop_signals(self._on_stop_signal):
            try:
                # a run whose budget is spent has nothing left to train, but the epoch it stopped in may lack its row
                while epoch < c.epochs and not (self.stopped_by_budget and batch_in_epoch == 0):
                    step, train_loss = self._train_epoch(wrapped, epoch, batch_in_epoch, step, best, epoch_sums)
                    epoch_sums = (0.0, 0.0)
                    row = {"epoch": epoch + 1, "step": step, "train_loss": train_loss,
                           "lr": self.optimizer.param_groups[0]["lr"], **self._evaluate("valid")}
                    row["elapsed_s"] = self.cost_totals()["train_seconds"]  # all sessions'
                    self.history.append(row)
                    self._call("on_epoch_end", self.history)
                    epoch, batch_in_epoch = epoch + 1, 0
                    value = row[task.main_metric]
                    improved = self._is_better(value, best)
                    best = value if improved else best
                    state = self._state(epoch, 0, step, rng_state(), best)
                    self._save("last.pt", state)
                    if improved:
                        self._save("best.pt", state)
                    if self.main:
                        with (self.out / "metrics.jsonl").open("a") as f:
                            f.write(json.dumps(row) + "\n")
                        log.info(_epoch_line(row, task.main_metric))
            except KeyboardInterrupt:
                log.warning("interrupted: checkpoint saved to %s; continue with --resume", last)
                raise
        return self._finish(best)

    def _on_stop_signal(self, name: str) -> None:
        if self.stop_signal is None:
            log.warning("%s received: saving a checkpoint after this step, then stopping", name)
        self.stop_signal = name

    def _stop_requested(self) -> bool:
        """Whether a stop signal arrived, on any rank (every rank stops at the same step)."""
        flag = float(self.stop_signal is not None)
        return (all_reduce_sum([flag], self.dist, self.device)[0] if self.dist.enabled else flag) > 0

    def _train_epoch(self, wrapped: nn.Module, epoch: int, skip: int, step: int, best,
                     sums: tuple[float, float] = (0.0, 0.0)) -> tuple[int, float]:
        """Train epoch ``epoch`` from its optimizer step ``skip`` on (``sums``: the (loss, items) of the steps
        before it, from a mid-epoch checkpoint); returns (the optimizer step reached, the epoch's training loss)."""
        c, task = self.config, self.task
        self.model.train()
        batches = task.train_batches(epoch)
        groups = [batches[i : i + c.accumulate] for i in range(0, len(batches), c.accumulate)]
        if self.stopped_by_budget:  # resumed from the step that spent the budget: only the epoch's row is left
            skip = len(groups)
        done_groups = skip
        bar = progress_bar(groups[skip:], desc=f"epoch {epoch + 1}/{c.epochs}", unit="step",
                           disable=not (c.progress and self.main), leave=False, dynamic_ncols=True)
        loss_sum, items_sum = sums
        tic = time.perf_counter()
        for group in bar:
            rng = rng_state()  # where this step starts: Ctrl-C mid-step resumes exactly from here
            step_start = time.perf_counter()
            try:
                group_loss, group_items = self._train_step(wrapped, group)
            except KeyboardInterrupt:
                self._save("last.pt", self._state(epoch, done_groups, step, rng, best, (loss_sum, items_sum)))
                raise
            # the step alone is training time; callbacks, FLOP counting, checkpoints and evaluation are not
            self.session.step_seconds += time.perf_counter() - step_start
            self.session.steps += 1
            self.flop_counter.update(self.model)
            done_groups, step = done_groups + 1, step + 1
            loss_sum, items_sum = loss_sum + group_loss, items_sum + group_items
            self._call("on_step", step, group_loss / max(group_items, 1), self.optimizer.param_groups[0]["lr"])
            bar.set_postfix(loss=f"{group_loss / max(group_items, 1):.3f}",
                            lr=f"{self.optimizer.param_groups[0]['lr']:.2e}",
                            items_s=f"{items_sum / (time.perf_counter() - tic):.0f}")
            stop = self._stop_requested()
            if stop or (c.checkpoint_every and step % c.checkpoint_every == 0):  # mid-epoch: resumable exactly
                sums = all_reduce_sum([loss_sum, items_sum], self.dist, self.device) if self.dist.enabled else None
                self._save("last.pt", self._state(epoch, done_groups, step, rng_state(), best,
                                                  sums or (loss_sum, items_sum)))
            if stop:
                bar.close()
                raise PreemptedError(self.stop_signal or "a stop signal (on another rank)", step,
                                     self.ckpt_dir / "last.pt")
            if self.budget is not None and self._budget_spent():
                break  # stop here; fit() evaluates and checkpoints as at an epoch end
        bar.close()
        loss_sum, items_sum = all_reduce_sum([loss_sum, items_sum], self.dist, self.device)
        return step, loss_sum / max(items_sum, 1.0)

    def _train_step(self, wrapped: nn.Module, group: list) -> tuple[float, float]:
        """One optimizer step over ``group`` micro-batches; the gradient is the mean over all items."""
        c = self.config
        total_loss, total_items = 0.0, 0.0
        for i, rows in enumerate(group):
            sync = i == len(group) - 1 or not self.dist.enabled
            with (nullcontext() if sync else wrapped.no_sync()), self._autocast():
                loss, items = self.task.loss(wrapped, shard(list(rows), self.dist))
                # Side channel: auxiliary losses the model's layers recorded in this forward (e.g. MoE
                # balancing and z-loss; zero for other models), as a per-item mean like the task loss.
                loss = loss + items * auxiliary_loss(self.model, auxiliary_weights(c))
            if not torch.isfinite(loss):
                raise NonFiniteLossError(
                    f"the training loss became {loss.item()} at step {self.optimizer_steps_done() + 1}; "
                    f"the last good checkpoint is {self.ckpt_dir / 'last.pt'}. Lower --lr, raise --warmup, "
                    "or enable --grad-clip"
                )
            loss.backward()
            total_loss, total_items = total_loss + loss.item(), total_items + items
        # Gradients hold Σ loss; DDP averaged them over ranks. Divide by the global item count.
        global_items = all_reduce_sum([total_items], self.dist, self.device)[0]
        self.session.items += global_items
        scale = self.dist.world / max(global_items, 1.0)
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.mul_(scale)
        if c.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total_loss, total_items

    def _budget_spent(self) -> bool:
        """Whether the budget is spent after this step, counting every session; every rank stops at the same step."""
        spent = self.budget.exhausted(self, self.cost_totals()["step_seconds"])
        self.stopped_by_budget = all_reduce_sum([float(spent)], self.dist, self.device)[0] > 0
        return self.stopped_by_budget

    def optimizer_steps_done(self) -> int:
        return int(getattr(self.scheduler, "last_epoch", 0))

    def sessions(self) -> list[dict[str, Any]]:
        """Every session of the run so far, this one up to now (:mod:`tasks.engine.sessions`)."""
        self.session.train_seconds = time.perf_counter() - self._session_start
        self.session.flops = self.flop_counter.flops - totals(self.earlier_sessions)["flops"]
        return [*self.earlier_sessions, self.session.to_dict()]

    def cost_totals(self) -> dict[str, float]:
        """The run's steps, items, seconds and training FLOPs so far, summed over its sessions."""
        return totals(self.sessions())

    def _plan(self, state: dict[str, Any] | None) -> int:
        """The optimizer steps the learning-rate schedule is planned for: epochs × steps per epoch, or fewer where
        a FLOP budget buys fewer (:meth:`tasks.engine.budget.Budget.planned_steps`).

        A resumed run (``state``: its checkpoint) keeps the plan and the budget it began with, the budget even when
        the requeue command omits ``--budget``, and refuses another budget: its steps so far were scheduled and
        counted for the first one.
        """
        c = self.config
        default = math.ceil(len(self.task.train_batches(0)) / c.accumulate) * c.epochs
        if state is None or "planned_steps" not in state:  # a fresh run, or a checkpoint of an older version
            return default if self.budget is None else self.budget.planned_steps(self, default)
        saved = state["budget"]
        given = _budget_record(self.budget)
        if given is None and saved is not None:
            self.budget = parse_budget(_budget_text(saved))
            log.info("resumed under the checkpoint's budget: %s", self.budget.describe())
        elif _budget_key(given) != _budget_key(saved):
            again = "without --budget" if saved is None else f"with --budget {_budget_text(saved)} or without --budget"
            raise ValueError(f"--budget {_budget_text(given)} differs from the budget ({_budget_text(saved)}) that "
                             f"{self.ckpt_dir / 'last.pt'} was trained under; resume {again}, or train the new budget "
                             "into a new --out folder")
        return int(state["planned_steps"])

    @torch.no_grad()
    def _evaluate(self, split: str) -> dict[str, float]:
        self.model.eval()
        with self._autocast():
            records = gather_records(self.task.evaluate(self.eval_model, split), self.dist)
        self.model.train()
        return self.task.score(records, split)

    def _finish(self, best: float | None) -> dict[str, Any]:
        """Evaluate the best checkpoint on the test data, write metrics.json, report.md, curves.png."""
        sessions = self.sessions()  # the training's, before the test evaluation
        costs = totals(sessions)
        best_path = self.ckpt_dir / "best.pt"
        if best_path.exists():
            self.model.load_state_dict(load_checkpoint(best_path)["model"])
        self.model.eval()
        with self._autocast():
            final, section = self.task.final_report(self.eval_model, self.out)
        summary = {
            "task": self.task.name,
            "variant": self.config.variant,
            "epochs": len(self.history),
            "best_valid": best,
            "main_metric": self.task.main_metric,
            "train_seconds": costs["train_seconds"],  # every session's training loop, evaluation included
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "items_per_s": costs["items"] / max(costs["step_seconds"], 1e-9),
            "peak_memory": peak_memory(self.device),  # MiB and its kind (tasks.engine.memory)
            "precision": self.precision_used,
            "precision_reason": self.precision.reason,
            "utilisation": run_utilisation(self),  # training FLOP/s and MFU (tasks.engine.mfu)
            "final": final,
            "history": self.history,
            "sessions": sessions,
        }
        if self.budget is not None:
            summary["budget"] = {**self.budget.spent(), "stopped_by_budget": self.stopped_by_budget,
                                 "steps": self.history[-1]["step"] if self.history else 0}
        if self.main:
            sections = [section, *(callback.section(self) for callback in self.callbacks)]
            self._call("on_finish", summary, [s for s in sections if s])
        return summary


def _budget_record(budget) -> dict[str, Any] | None:
    """What a checkpoint records of a :class:`~tasks.engine.budget.Budget`: ``{"kind", "value"}`` (None: no budget)."""
    return None if budget is None else {"kind": budget.kind, "value": budget.value}


def _budget_key(budget: dict[str, Any] | None) -> tuple | None:
    return None if budget is None else (budget["kind"], float(budget["value"]))


def _budget_text(budget: dict[str, Any] | None) -> str:
    """``{"kind": "time", "value": 60.0}`` -> ``"time=60.0"``, as ``--budget`` takes it (``"none"`` for None)."""
    return "none" if budget is None else f"{budget['kind']}={budget['value']!r}"


def auxiliary_weights(config) -> dict[str, float]:
    """Weights of the auxiliary loss terms the model's layers report (:mod:`core.sidechannels`): each
    config field ``<term>_weight`` weighs the term ``<term>`` (``balance_weight`` -> ``"balance"``)."""
    return {f.name.removesuffix("_weight"): getattr(config, f.name)
            for f in fields(config) if f.name.endswith("_weight")}


def _epoch_line(row: dict[str, Any], main_metric: str) -> str:
    metrics = ", ".join(f"{k} {v:.4g}" for k, v in row.items() if k not in ("epoch", "step", "lr", "elapsed_s"))
    return f"epoch {row['epoch']}: {metrics} ({row['elapsed_s']:.0f} s)"
