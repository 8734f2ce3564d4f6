"""``--compile``: the model's forward through ``torch.compile`` for training and evaluation.

What is compiled, and why that callable:

* **the model's forward** (``model(...)``, as ``Task.loss`` and ``Task.evaluate`` call it), and through
  AOTAutograd its backward. The task's loss code around it is not: it builds the batch from Python lists
  (which would break the graph anyway) and adds one cross-entropy over the logits, a small part of a step.
  The optimizer step stays eager too (``foreach`` Adam is already a handful of fused kernels).
* **shapes**: length-bucketed translation batches change both lengths (and the last bucket the batch size)
  from batch to batch. Compiled with static shapes, the first new length recompiles the whole model once more
  with symbolic sizes (PyTorch's automatic dynamic shapes), which doubles a cost of minutes on a CPU; tasks
  that declare ``Task.dynamic_shapes`` are therefore compiled with ``dynamic=True`` from the first batch, so one set of
  graphs serves every length. Image tasks keep static shapes (faster code): only a smaller last batch, or an
  evaluation batch, changes the batch size, which recompiles once with a symbolic batch size.
* **what stays eager**: everything that does not go through ``forward``. Translation's evaluation decodes
  through ``model.encode`` / ``model.decode`` with a KV cache that grows by one position per step and stops
  on data (all sentences ended): compiled, it would recompile per cache length or need a padded static cache,
  for a loop whose cost is mostly Python and small matrix products. It stays eager, so ``--compile`` speeds
  up translation's training, not its evaluation.

The plain module is never replaced: the trainer keeps it for checkpoints, exports, the optimizer, gradient
clipping, side channels and the doctor, and :class:`CompiledModel` shares its parameters. Checkpoints
therefore hold the plain module's state dict (no ``_orig_mod.`` prefixes) and load into the plain model; a run
resumes with the ``--compile`` it began with (:mod:`tasks.engine.same_run`: compiled code rounds differently).

A compilation failure (``torch._dynamo`` cannot trace a construct, the backend cannot compile a graph, no C++
compiler) does not end the run: the model runs eagerly from then on, after one warning that names the model
and the reason. Numbers are unaffected either way (eager is the reference); only the speed is lost, and a
training run that took minutes to reach its first step should not die on an optimisation it asked for.

**Checked against eager.** A compiler that compiles but computes something else is worse than one that fails:
the run goes on with wrong numbers and nothing says so. (Seen: on one CI machine's CPU, inductor's code for the
tiny float64 Transformer of ``tests/tasks/engine/test_compile.py`` gave a loss 1.3 % off eager's, while on the
developers' CPUs it matched to the last bit.) So the first compiled call in each mode (training / evaluation,
with / without gradients) is also run eagerly on the same inputs and the two outputs are compared, at a tolerance
scaled to the output's magnitude and set by its dtype (:data:`CHECK_TOLERANCE`: reordered sums, never a wrong
result, fit in it). A mismatch is treated like a compilation failure: one warning with the largest difference, and eager
from then on. The eager reference runs without gradients, its random numbers drawn from a forked generator, and
the model's buffers (batch-norm statistics) are put back afterwards, so the run continues exactly as if
it had not happened. A forward that draws random numbers that matter (dropout in training: two seeds give two
outputs, and compiled code draws other numbers than eager) cannot be compared; the same batch is then compared
in evaluation mode instead, at once (translation's evaluation never calls the forward, so this is the only check
it gets; it compiles the evaluation graph one batch early for the image tasks and adds it for translation).
Later shapes are not checked again: the check costs two or three eager forwards without gradients, once.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
import torch._dynamo  # torch.compile's tracer: its exceptions
from torch import Tensor, nn
from torch.utils._pytree import keystr, tree_flatten_with_path

log = logging.getLogger(__name__)

# The largest difference between compiled and eager outputs that is rounding, as a fraction of the eager output's
# largest magnitude, by the output's dtype (the reduced precisions: autocast's fused vs unfused roundings).
CHECK_TOLERANCE = {torch.float64: 1e-7, torch.float32: 1e-3, torch.bfloat16: 5e-2, torch.float16: 2e-2}


def dynamic_shapes(changing: bool) -> bool | None:
    """``torch.compile``'s ``dynamic`` for a task whose batches are ``changing`` shape from step to step
    (``Task.dynamic_shapes``): ``True`` (symbolic sizes from the first batch), else ``None`` (static, symbolic once
    a size changes)."""
    return True if changing else None


class CompiledModel(nn.Module):
    """``model`` whose forward runs through ``torch.compile``; everything else is ``model``'s own.

    Attributes and methods the wrapper lacks (``encode``, ``config``, ``no_sync`` of a DDP module...) are
    the wrapped module's, and :meth:`state_dict` / :meth:`load_state_dict` are its too, so even code that
    saves this wrapper writes plain keys.

    Args:
        model: the module to compile (the task's model, or its ``DistributedDataParallel`` wrapper).
        dynamic: ``torch.compile``'s ``dynamic``: see :func:`dynamic_shapes`.
        label: names the model in the fallback warning (e.g. the variant).
        check: compare the first compiled call of each mode with eager (see the module's docstring).
    """

    def __init__(self, model: nn.Module, dynamic: bool | None = None, label: str = "the model",
                 check: bool = True) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module to compile, got {type(model).__name__}")
        self.module = model
        self.label = label
        self.check = check
        self.fallback_reason: str | None = None  # why it runs eagerly, once compilation failed or miscomputed
        # (training, grad enabled) of each mode whose first call ran -> how it compared with eager: "matched",
        # "differed" (the fallback's reason says by how much) or "random" (dropout: not comparable)
        self.checked: dict[tuple[bool, bool], str] = {}
        # Not registered as a child: it wraps the same module, whose parameters would be listed twice.
        object.__setattr__(self, "compiled", torch.compile(model, dynamic=dynamic))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.fallback_reason is None:
            plain_args, plain_kwargs = tuple(map(_plain, args)), {k: _plain(v) for k, v in kwargs.items()}
            try:
                mode = (self.module.training, torch.is_grad_enabled())
                if self.check and mode not in self.checked:
                    return self._checked_call(mode, plain_args, plain_kwargs)
                with _backward_compiled_with_forward():
                    return self.compiled(*plain_args, **plain_kwargs)
            except torch._dynamo.exc.TorchDynamoException as error:
                self._fall_back("torch.compile failed on %s (%s)", _reason(error))
        return self.module(*args, **kwargs)

    def _checked_call(self, mode: tuple[bool, bool], args: tuple, kwargs: dict) -> Any:
        """The compiled call, compared with eager on the same inputs; eager's result if the two differ."""
        buffers = _snapshot(self.module)
        reference = _eager_reference(self.module, args, kwargs, buffers)
        with _backward_compiled_with_forward():
            out = self.compiled(*args, **kwargs)
        if reference is not None:
            mismatch = _mismatch(out, reference)
            self.checked[mode] = "matched" if mismatch is None else "differed"
        else:  # dropout in training: not comparable, so the same batch is compared in evaluation mode instead
            self.checked[mode] = "random"
            mismatch = self._evaluation_mismatch(args, kwargs)
        if mismatch is None:
            return out
        _restore(self.module, buffers)  # the compiled call's batch-norm update is undone; eager's replaces it
        self._fall_back("torch.compile miscomputed %s (%s)", f"its output differs from eager's: {mismatch}")
        return self.module(*args, **kwargs)

    def _evaluation_mismatch(self, args: tuple, kwargs: dict) -> str | None:
        """Compare the evaluation forward (no gradients) on these inputs, once; where it differs, in words."""
        mode = (False, False)
        if mode in self.checked:
            return None
        training = self.module.training
        self.module.eval()
        try:
            with torch.no_grad():
                reference = _eager_reference(self.module, args, kwargs, _snapshot(self.module))
                out = self.compiled(*args, **kwargs)
        finally:
            self.module.train(training)
        mismatch = _mismatch(out, reference)
        self.checked[mode] = "matched" if mismatch is None else "differed"
        return None if mismatch is None else f"in evaluation mode, {mismatch}"

    def _fall_back(self, message: str, reason: str) -> None:
        self.fallback_reason = reason
        log.warning(message + "; it runs eagerly from now on, at eager speed", self.label, reason)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)


def compile_for_trainer(wrapped: nn.Module, model: nn.Module, changing_shapes: bool, label: str
                        ) -> tuple[CompiledModel, CompiledModel]:
    """The compiled modules the trainer trains and evaluates with: ``(training, evaluation)``.

    ``wrapped`` is what the training step calls (``model`` itself, or its ``DistributedDataParallel``
    wrapper: compiling the DDP module lets its graph be split at the gradient buckets), ``model`` the plain
    module evaluation calls on each rank. Without DDP both are one module, compiled once (its evaluation mode
    and ``no_grad`` add their own graphs to the same cache).
    """
    dynamic = dynamic_shapes(changing_shapes)
    training = CompiledModel(wrapped, dynamic, label)
    evaluation = training if wrapped is model else CompiledModel(model, dynamic, label)
    log.info("compiling %s's forward with torch.compile (dynamic shapes: %s); the first steps pay for it",
             label, "yes" if dynamic else "when a size changes")
    return training, evaluation


def _eager_reference(module: nn.Module, args: tuple, kwargs: dict, buffers: dict[str, Tensor]) -> Any:
    """``module``'s eager output for these inputs, without gradients and with its buffers put back; ``None``
    when the forward draws random numbers that matter (in training mode it runs under two seeds, and the two
    outputs differ). The global random state is untouched (a forked generator)."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    outputs = []
    for seed in (0, 1) if module.training else (0,):
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            outputs.append(module(*args, **kwargs))
        _restore(module, buffers)
    if len(outputs) == 2 and _mismatch(outputs[1], outputs[0]) is not None:
        return None
    return outputs[0]


def _snapshot(module: nn.Module) -> dict[str, Tensor]:
    return {name: buffer.detach().clone() for name, buffer in module.named_buffers()}


def _restore(module: nn.Module, buffers: dict[str, Tensor]) -> None:
    with torch.no_grad():
        for name, buffer in module.named_buffers():
            buffer.copy_(buffers[name])


def _mismatch(out: Any, reference: Any) -> str | None:
    """Where ``out`` differs from ``reference`` beyond rounding (:data:`CHECK_TOLERANCE`), in words; ``None``
    if nowhere. Compares every tensor of the two (nested tuples, lists, dicts)."""
    outs, out_spec = tree_flatten_with_path(out)
    refs, ref_spec = tree_flatten_with_path(reference)
    if out_spec != ref_spec:
        return f"a different structure ({out_spec} vs {ref_spec})"
    for (_, o), (path, r) in zip(outs, refs):
        if not isinstance(r, Tensor):
            continue
        where = f"output{keystr(path)}" if path else "the output"
        if not isinstance(o, Tensor) or o.shape != r.shape or o.dtype != r.dtype:
            return f"{where}: {type(o).__name__} {getattr(o, 'shape', '')} vs {r.dtype} {tuple(r.shape)}"
        if not r.is_floating_point():
            if not torch.equal(o, r):
                return f"{where}: {(o != r).sum().item()} of {r.numel()} entries differ"
            continue
        o64, r64 = o.detach().double(), r.detach().double()
        finite = r64[torch.isfinite(r64)]
        scale = finite.abs().max().item() if finite.numel() else 1.0
        allowed = CHECK_TOLERANCE.get(r.dtype, 5e-2) * max(scale, 1e-12)
        if not torch.isclose(o64, r64, rtol=0.0, atol=allowed, equal_nan=True).all():
            difference = (o64 - r64).abs().nan_to_num(float("inf")).max().item()
            return f"{where}: largest difference {difference:.3g}, allowed {allowed:.3g} ({r.dtype}, |max| {scale:.3g})"
    return None


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
