"""The numeric precision of a run: ``--precision default|fp32|bf16|auto``, resolved once per run.

* ``default`` keeps the package's historical behaviour: bf16 autocast on CUDA, float32 on the CPU (CPU runs
  stay bit for bit what they were).
* ``fp32`` runs without autocast.
* ``bf16`` trains in bfloat16 with float32 master weights: the optimizer and its state see only the float32
  parameters; the forward uses a bfloat16 copy of them (:func:`bf16_weights`), taken once per forward,
  instead of autocast's cast at each use, so that the whole stream between the matrix products (embedding,
  residual sums, layer norm, softmax inside SDPA, dropout) stays in bfloat16 and only the loss is computed in
  float32 (the tasks cast their logits). Gradients flow back through the casts into the float32 parameters.
  Refused on a CPU without native bfloat16 (AMX or AVX512-BF16): there it is emulated, slower than float32,
  and only loses precision, so nothing is gained by insisting.
* ``auto`` times a few training steps of the run's own model in both precisions, interleaved, and picks
  bf16 only if it is clearly faster (:data:`AUTO_MIN_SPEEDUP`); the answer is cached per (machine, model,
  batch) in ``$ZOO_CACHE/precision-probe.json`` (default ``~/.cache/transformer-zoo``), so a second run of
  the same model on the same machine skips the probe.

Evaluation runs in the precision the run trained in (the trainer records it in ``run.json`` and
``metrics.json`` as ``precision``; ``zoo evaluate`` reads it back through :func:`eval_context`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from plumbing.errors import unknown_name
from tasks.engine.config import PRECISIONS, cache_root
from tasks.engine.mfu import machine_key

log = logging.getLogger(__name__)

USED = ("fp32", "bf16")  # what a run can end up computing in (``Trainer.precision_used``)
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of native bfloat16 arithmetic
AUTO_MIN_SPEEDUP = 1.10  # auto picks bf16 only when its median step is at least this much faster
AUTO_ROUNDS = 5  # timed rounds of the probe (after one warm-up step each), fp32/bf16 order flipping each round
CACHE_FILE = "precision-probe.json"


# --- what the hardware offers ------------------------------------------------------------------------
def cpu_bf16_flags() -> tuple[str, ...]:
    """The native-bfloat16 flags this CPU has (subset of :data:`CPU_BF16_FLAGS`).

    Read from ``/proc/cpuinfo`` on Linux; elsewhere from torch's own CPU feature probes (the same cpuinfo
    library oneDNN uses to pick AMX kernels). ``ATEN_CPU_CAPABILITY`` does not change the answer: it only
    limits torch's element-wise kernels, while the matrix products (oneDNN) still use AMX.
    """
    for line in _cpuinfo_lines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return tuple(f for f in CPU_BF16_FLAGS if f in flags)
    probes = {"amx_bf16": "_is_amx_tile_supported", "avx512_bf16": "_is_avx512_bf16_supported"}
    return tuple(f for f, name in probes.items() if getattr(torch.cpu, name, lambda: False)())


def native_bf16(device: torch.device) -> tuple[bool, str]:
    """Whether ``device`` computes in bfloat16 natively, and a few words saying why (for errors and logs)."""
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return True, f"{torch.cuda.get_device_name(device)} supports bf16"
        return False, f"{torch.cuda.get_device_name(device)} lacks bf16 (needs compute capability 8.0+)"
    if device.type == "cpu":
        found = cpu_bf16_flags()
        if found:
            return True, f"CPU flags {', '.join(found)}"
        return False, f"this CPU lacks the {' and '.join(CPU_BF16_FLAGS)} flags"
    return False, f"bf16 training is supported on cpu and cuda, not {device.type}"


# --- the policy ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Precision:
    """How a run computes: ``used`` is ``"fp32"`` or ``"bf16"``; ``reason`` says why, for the log and summary.

    ``cast_weights`` selects the bf16 path: a bfloat16 copy of the weights per forward (explicit ``bf16``
    and ``auto``), rather than plain autocast, which is what ``default`` has always done on CUDA.
    """

    requested: str
    used: str
    reason: str
    cast_weights: bool = True

    def context(self, model: nn.Module, device: torch.device) -> AbstractContextManager:
        """The context a forward (training or evaluation) of ``model`` runs in."""
        if self.used == "fp32":
            return nullcontext()
        autocast = torch.autocast(device.type, dtype=torch.bfloat16)
        if not self.cast_weights:
            return autocast
        return _both(autocast, bf16_weights(model))


@contextmanager
def _both(first: AbstractContextManager, second: AbstractContextManager) -> Iterator[None]:
    with first, second:
        yield


def resolve(requested: str, device: torch.device, probe: Callable[[], Precision] | None = None,
            distributed: bool = False) -> Precision:
    """The :class:`Precision` of a run asked for ``requested`` on ``device``.

    ``probe`` runs the ``auto`` timing (see :func:`probe_training`); it is called only when needed.
    ``distributed`` runs (DDP) keep plain autocast for bf16: swapping the parameters inside DDP's forward
    (whose hooks and buckets are built on the parameters themselves) has not been tested.
    """
    if requested not in PRECISIONS:
        raise unknown_name("precision", requested, PRECISIONS)
    if requested == "default":
        if device.type == "cuda":
            return Precision("default", "bf16", "default: bf16 autocast on CUDA", cast_weights=False)
        return Precision("default", "fp32", f"default: float32 on {device.type}")
    if requested == "fp32":
        return Precision("fp32", "fp32", "asked for fp32")
    native, why = native_bf16(device)
    if requested == "bf16":
        if not native:
            raise ValueError(f"--precision bf16: {why}, so bf16 would be emulated and slower than fp32; "
                             "use --precision fp32, or auto to let a probe decide")
        return Precision("bf16", "bf16", f"asked for bf16 ({why})", cast_weights=not distributed)
    if not native:
        return Precision("auto", "fp32", f"auto: fp32, {why}")
    if probe is None:
        raise ValueError("--precision auto needs a probe of the model's training step; give resolve() one")
    chosen = probe()
    return Precision("auto", chosen.used, chosen.reason, cast_weights=not distributed)


def eval_context(precision: str | None, model: nn.Module, device: torch.device) -> AbstractContextManager:
    """The context that evaluates ``model`` in the precision its run trained in (``run.json``'s
    ``precision``; runs written before it was recorded evaluated in float32)."""
    if precision in (None, "fp32"):
        return nullcontext()
    if precision not in USED:
        raise ValueError(f"run.json says precision {precision!r}; expected one of {', '.join(USED)}")
    return Precision("recorded", precision, "as trained").context(model, device)


# --- the bf16 path -------------------------------------------------------------------------------------
def _keeps_float32(module: nn.Module) -> bool:
    """Modules whose parameters stay float32 under :func:`bf16_weights`: batch norm updates its running
    statistics in place during the forward, and these must keep updating the module's own buffers."""
    return isinstance(module, nn.modules.batchnorm._NormBase)


@contextmanager
def bf16_weights(model: nn.Module, dtype: torch.dtype = torch.bfloat16) -> Iterator[None]:
    """Within the block, ``model``'s floating parameters are replaced by ``dtype`` copies, taken once.

    Why: autocast casts a weight where an op in its list uses it, and leaves everything else (embedding
    lookups, layer norm, residual sums) in float32, so activations go back and forth between the two types
    at every sublayer. With the weights themselves in bfloat16 the activations stay bfloat16 from the
    embedding to the logits. The copies are differentiable casts (``param.to(dtype)``): the backward
    returns float32 gradients to the parameters, so the optimizer keeps float32 master weights and state.
    Tied weights (one parameter in two modules) get one copy. Buffers are left alone (a module that needs
    them in the activations' type casts them, e.g. the sinusoid table).
    """
    copies: dict[int, torch.Tensor] = {}
    swapped: list[tuple[dict, str, torch.Tensor]] = []
    try:
        for module in model.modules():
            if _keeps_float32(module):
                continue
            store = module._parameters
            for name, param in store.items():
                if param is None or not param.is_floating_point() or param.dtype == dtype:
                    continue
                low = copies.get(id(param))
                if low is None:
                    low = copies[id(param)] = param.to(dtype)
                swapped.append((store, name, param))
                store[name] = low
        yield
    finally:
        for store, name, param in swapped:
            store[name] = param


# --- the auto probe ------------------------------------------------------------------------------------
def probe_training(step: Callable[[nn.Module, torch.optim.Optimizer, Precision], None], model: nn.Module,
                   make_optimizer: Callable[[nn.Module], torch.optim.Optimizer], device: torch.device,
                   key: dict[str, Any] | None = None, rounds: int = AUTO_ROUNDS) -> Precision:
    """Time ``step`` (one training step: forward, backward, optimizer) of a copy of ``model`` in fp32 and bf16.

    The rounds interleave the two precisions (the order flips each round) so that a load change on the
    machine hits both alike; each precision gets one untimed warm-up step first (oneDNN builds its bf16
    kernels on first use). The model, its optimizer and every random generator are left as they were.
    With ``key`` (what identifies the model and batch) the answer is cached per machine under ``$ZOO_CACHE``.
    """
    from tasks.engine.checkpoint import rng_state, set_rng_state

    cache_key = _cache_key(key, device) if key is not None else None
    cached = _read_cache().get(cache_key) if cache_key else None
    if cached is not None and cached.get("used") in USED:
        return Precision("auto", cached["used"], f"auto: {cached['used']} (cached probe: {cached['detail']})")
    rng = rng_state()
    probe_model = copy.deepcopy(model)
    optimizer = make_optimizer(probe_model)
    arms = {name: Precision("auto", name, "probe") for name in USED}
    times: dict[str, list[float]] = {name: [] for name in USED}
    try:
        for name in USED:
            step(probe_model, optimizer, arms[name])
        for r in range(rounds):
            for name in USED if r % 2 == 0 else USED[::-1]:
                _sync(device)
                tic = time.perf_counter()
                step(probe_model, optimizer, arms[name])
                _sync(device)
                times[name].append(time.perf_counter() - tic)
    finally:
        set_rng_state(rng)
    fp32, bf16 = (statistics.median(times[name]) for name in USED)
    speedup = fp32 / bf16
    used = "bf16" if speedup >= AUTO_MIN_SPEEDUP else "fp32"
    detail = (f"median step fp32 {fp32 * 1e3:.0f} ms, bf16 {bf16 * 1e3:.0f} ms, bf16 {speedup:.2f}x "
              f"{'>=' if used == 'bf16' else '<'} {AUTO_MIN_SPEEDUP:.2f}x over {rounds} rounds")
    if cache_key:
        _write_cache(cache_key, {"used": used, "detail": detail, "fp32_s": fp32, "bf16_s": bf16})
    return Precision("auto", used, f"auto: {used} ({detail})")


def training_step(task: Any, rows: Any, device: torch.device
                  ) -> Callable[[nn.Module, torch.optim.Optimizer, Precision], None]:
    """One training step of ``task`` on the micro-batch ``rows``, as :func:`probe_training` times it."""
    def step(model: nn.Module, optimizer: torch.optim.Optimizer, precision: Precision) -> None:
        with precision.context(model, device):
            loss, _ = task.loss(model, rows)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cache_path() -> Path:
    """``$ZOO_CACHE/precision-probe.json`` (default ``~/.cache/transformer-zoo``)."""
    return cache_root() / CACHE_FILE


def _cpuinfo_lines() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def _cache_key(key: dict[str, Any], device: torch.device) -> str:
    plain = {k: asdict(v) if is_dataclass(v) and not isinstance(v, type) else v for k, v in key.items()}
    # the machine as the matmul-peak cache knows it: processor and flags, torch, threads, kernel capability
    text = json.dumps({"machine": machine_key(device), "model": plain}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _read_cache() -> dict[str, Any]:
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}  # no cache yet, or a damaged one: probe again
    return data if isinstance(data, dict) else {}


def _write_cache(key: str, entry: dict[str, Any]) -> None:
    from plumbing.atomic import write_json_atomic

    try:
        write_json_atomic(cache_path(), {**_read_cache(), key: entry})
    except OSError as error:  # a read-only home must not stop the run
        log.warning("could not cache the precision probe in %s: %s", cache_path(), error)
