"""``--compile``: the model's forward through ``torch.compile`` for training and evaluation.

What is compiled, and why that callable:

* **the model's forward** (``model(...)``, as ``Task.loss`` and ``Task.evaluate`` call it), and through
  AOTAutograd its backward. The task's loss code around it is not: it builds the batch from Python lists
  (which would break the graph anyway) and adds one cross-entropy over the logits, a small part of a step.
  The optimizer step stays eager too (``foreach`` Adam is already a handful of fused kernels).
* **shapes**: length-bucketed translation batches change both lengths (and the last bucket the batch size)
  from batch to batch. Compiled with static shapes, the first new length recompiles the whole model once more
  with symbolic sizes (PyTorch's automatic dynamic shapes), which doubles a cost of minutes on a CPU; tasks
  in :data:`DYNAMIC_TASKS` are therefore compiled with ``dynamic=True`` from the first batch, so one set of
  graphs serves every length. Image tasks keep static shapes (faster code): only a smaller last batch, or an
  evaluation batch, changes the batch size, which recompiles once with a symbolic batch size.
* **what stays eager**: everything that does not go through ``forward``. Translation's evaluation decodes
  through ``model.encode`` / ``model.decode`` with a KV cache that grows by one position per step and stops
  on data (all sentences ended): compiled, it would recompile per cache length or need a padded static cache,
  for a loop whose cost is mostly Python and small matrix products. It stays eager, so ``--compile`` speeds
  up translation's training, not its evaluation.

The plain module is never replaced: the trainer keeps it for checkpoints, exports, the optimizer, gradient
clipping, side channels and the doctor, and :class:`CompiledModel` shares its parameters. Checkpoints
therefore hold the plain module's state dict (no ``_orig_mod.`` prefixes), and a run trained with
``--compile`` resumes without it and the other way round (``compile`` is a resumable change).

A compilation failure (``torch._dynamo`` cannot trace a construct, the backend cannot compile a graph, no C++
compiler) does not end the run: the model runs eagerly from then on, after one warning that names the model
and the reason. Numbers are unaffected either way (eager is the reference); only the speed is lost, and a
training run that took minutes to reach its first step should not die on an optimisation it asked for.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
import torch._dynamo  # torch.compile's tracer: its exceptions
from torch import nn

log = logging.getLogger(__name__)

# Tasks whose training batches change their sequence lengths from batch to batch (length buckets).
DYNAMIC_TASKS = frozenset({"translation"})


def dynamic_shapes(task_name: str) -> bool | None:
    """``torch.compile``'s ``dynamic`` for a task: ``True`` (symbolic sizes from the first batch) for
    :data:`DYNAMIC_TASKS`, ``None`` (static, symbolic once a size changes) for the others."""
    return True if task_name in DYNAMIC_TASKS else None


class CompiledModel(nn.Module):
    """``model`` whose forward runs through ``torch.compile``; everything else is ``model``'s own.

    Attributes and methods the wrapper lacks (``encode``, ``config``, ``no_sync`` of a DDP module...) are
    the wrapped module's, and :meth:`state_dict` / :meth:`load_state_dict` are its too, so even code that
    saves this wrapper writes plain keys.

    Args:
        model: the module to compile (the task's model, or its ``DistributedDataParallel`` wrapper).
        dynamic: ``torch.compile``'s ``dynamic``: see :func:`dynamic_shapes`.
        label: names the model in the fallback warning (e.g. the variant).
    """

    def __init__(self, model: nn.Module, dynamic: bool | None = None, label: str = "the model") -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module to compile, got {type(model).__name__}")
        self.module = model
        self.label = label
        self.fallback_reason: str | None = None  # why it runs eagerly, once compilation failed
        # Not registered as a child: it wraps the same module, whose parameters would be listed twice.
        object.__setattr__(self, "compiled", torch.compile(model, dynamic=dynamic))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.fallback_reason is None:
            try:
                with _backward_compiled_with_forward():
                    return self.compiled(*map(_plain, args), **{k: _plain(v) for k, v in kwargs.items()})
            except torch._dynamo.exc.TorchDynamoException as error:
                self.fallback_reason = _reason(error)
                log.warning("torch.compile failed on %s (%s); it runs eagerly from now on, at eager speed",
                            self.label, self.fallback_reason)
        return self.module(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)


def compile_for_trainer(wrapped: nn.Module, model: nn.Module, task_name: str, label: str
                        ) -> tuple[CompiledModel, CompiledModel]:
    """The compiled modules the trainer trains and evaluates with: ``(training, evaluation)``.

    ``wrapped`` is what the training step calls (``model`` itself, or its ``DistributedDataParallel``
    wrapper: compiling the DDP module lets its graph be split at the gradient buckets), ``model`` the plain
    module evaluation calls on each rank. Without DDP both are one module, compiled once (its evaluation mode
    and ``no_grad`` add their own graphs to the same cache).
    """
    dynamic = dynamic_shapes(task_name)
    training = CompiledModel(wrapped, dynamic, label)
    evaluation = training if wrapped is model else CompiledModel(model, dynamic, label)
    log.info("compiling %s's forward with torch.compile (dynamic shapes: %s); the first steps pay for it",
             label, "yes" if dynamic else "when a size changes")
    return training, evaluation


def _plain(value: Any) -> Any:
    """A tensor subclass as a plain tensor (same storage), anything else as it is.

    Compiled graphs run on plain tensors: a subclass with a Python ``__torch_function__`` (MONAI's
    ``MetaTensor``, which medseg's augmentation returns) re-enters its override around every compiled kernel
    and fails there in dispatch. The model's output then is a plain tensor, which the losses take as well.
    """
    return value.as_subclass(torch.Tensor) if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor \
        else value


@contextlib.contextmanager
def _backward_compiled_with_forward() -> Iterator[None]:
    """Compile the backward graph when the forward is compiled rather than at the first ``backward()``, so
    that a backend failure on it surfaces inside :meth:`CompiledModel.forward`, where the fallback catches it."""
    config = torch._functorch.config
    if not hasattr(config, "force_non_lazy_backward_lowering"):  # an older torch: backward failures raise
        yield
        return
    with config.patch(force_non_lazy_backward_lowering=True):
        yield


def _reason(error: BaseException) -> str:
    """The first line of a compilation error, with its type, and of the backend's own error inside it (a
    ``BackendCompilerFailed`` says only which backend raised): enough to search for, short enough to log."""
    def first_line(e: BaseException) -> str:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return f"{type(e).__name__}: {lines[0][:300] if lines else 'no message'}"

    inner = getattr(error, "inner_exception", None)
    return first_line(error) + (f" ({first_line(inner)})" if isinstance(inner, BaseException) else "")
