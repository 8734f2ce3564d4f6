"""Model FLOPs utilisation (MFU): how close a run comes to what this machine's matrix multiplies can do.

MFU = achieved FLOP/s ÷ peak FLOP/s, both in the precision the run computed in. The numerator is the run's
training FLOPs (:class:`tasks.engine.budget.TrainingFlopCounter`: 3 × forward FLOPs of every step, counted by
``zoo diff``'s counter) over its training time; it counts the model's useful matrix work only, so
elementwise ops, softmax, the optimizer and data loading all show up as lost utilisation.

The denominator is *measured*, not read off a datasheet: a short GEMM probe (square matrix products, 2048²
on CPU, 8192² on CUDA, a few of them, the median) at the current thread count, in float32 and, where the
hardware multiplies bfloat16 natively (AVX512-BF16 / AMX on x86, any CUDA device that supports it), in
bfloat16. A square product of that size is the best case for the BLAS, so the peak is what this machine,
this torch and this many threads actually reach, and an MFU near 1 means the model is as matmul-bound as
it can be. The probe takes about a second and is cached per machine (CPU model and flags or GPU name,
torch version, thread count, device, matmul precision) as JSON under ``$ZOO_CACHE/matmul-peak/`` (default
``~/.cache/transformer-zoo``): a run pays it once. A machine busy with other work at probe time measures a
low peak and so overstates every later MFU: re-measure on a quiet machine with
``python -m tasks.engine.mfu --refresh``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tasks.engine.config import cache_root

log = logging.getLogger(__name__)

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}
PROBE_SIZE = {"cpu": 2048, "cuda": 8192}  # big enough for the BLAS's best blocking, short enough for ~1 s
PROBE_REPEATS = 5
PROBE_INNER = {"cpu": 1, "cuda": 20}  # products per timed sample: one CUDA product is too short to time alone
CACHE_FORMAT = 1


def cache_dir() -> Path:
    """``$ZOO_CACHE/matmul-peak`` (default ``~/.cache/transformer-zoo/matmul-peak``)."""
    return cache_root() / "matmul-peak"


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


def native_bf16(device: torch.device | str) -> bool:
    """Whether ``device`` multiplies bfloat16 in hardware (else a bf16 product is emulated: no peak to speak of)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private torch helpers: absent elsewhere
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def _cpu_identity() -> tuple[str, str]:
    """(CPU model name, a short hash of its feature flags) from ``/proc/cpuinfo``, else ``platform``'s words."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():  # the first core's lines stand for all
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    flags = " ".join(sorted(fields.get("flags", fields.get("Features", "")).split()))
    return name, hashlib.sha256(flags.encode()).hexdigest()[:12]


def machine_key(device: torch.device | str = "cpu") -> dict[str, Any]:
    """What a measured peak depends on: the hardware, the software and the thread count."""
    device = torch.device(device)
    key: dict[str, Any] = {"device": device.type, "torch": torch.__version__, "threads": torch.get_num_threads(),
                           "matmul_precision": torch.get_float32_matmul_precision()}
    if device.type == "cuda":
        key["gpu"] = torch.cuda.get_device_name(device)
    else:
        key["cpu"], key["cpu_flags"] = _cpu_identity()
        key["capability"] = torch.backends.cpu.get_cpu_capability()
        key.update({name: os.environ[name] for name in ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
                    if name in os.environ})  # they cap the instructions the BLAS may use
    return key


def probe_matmul(device: torch.device | str = "cpu", precision: str = "fp32", size: int | None = None,
                 repeats: int = PROBE_REPEATS, clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Measure ``size``² × ``size``² products in ``precision``: median FLOP/s (2·n³ per product) and the samples."""
    _check_precision(precision)
    device = torch.device(device)
    size = PROBE_SIZE.get(device.type, PROBE_SIZE["cpu"]) if size is None else size
    inner = PROBE_INNER.get(device.type, 1)
    if size < 1 or repeats < 1:
        raise ValueError(f"size and repeats must be >= 1, got size={size}, repeats={repeats}")
    gen = torch.Generator().manual_seed(0)  # leaves the global random stream alone
    a, b = (torch.randn(size, size, generator=gen).to(device, PRECISIONS[precision]) for _ in range(2))
    out = torch.empty_like(a)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def sample() -> float:
        sync()
        start = clock()
        for _ in range(inner):
            torch.mm(a, b, out=out)
        sync()
        return (clock() - start) / inner

    for _ in range(2):  # warm-up: thread pool, kernel choice, first-touch of the output
        sample()
    seconds = [sample() for _ in range(repeats)]
    flops = 2.0 * size**3
    return {"flop_per_s": flops / max(statistics.median(seconds), 1e-12), "size": size, "repeats": repeats,
            "seconds": seconds, "measured": time.strftime("%Y-%m-%dT%H:%M:%S")}


def matmul_peak(device: torch.device | str = "cpu", precision: str = "fp32", *, refresh: bool = False,
                cache: Path | None = None, size: int | None = None) -> float | None:
    """Peak matmul FLOP/s of ``device`` in ``precision`` at the current thread count, probed once per machine.

    Returns None for bfloat16 on hardware without native bf16 products. ``cache``: the folder (default
    :func:`cache_dir`); ``refresh``: probe again even when cached.
    """
    _check_precision(precision)
    if precision == "bf16" and not native_bf16(device):
        return None
    key = machine_key(device)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = (cache if cache is not None else cache_dir()) / f"{key['device']}-{digest}.json"
    entry = _read_entry(path, key)
    if refresh or precision not in entry["peaks"]:
        log.info("probing the %s matmul peak of %s at %d thread(s)", precision, key["device"], key["threads"])
        entry["peaks"][precision] = probe_matmul(device, precision, size)
        from plumbing.atomic import write_json_atomic

        try:
            write_json_atomic(path, entry)
        except OSError as error:  # a read-only home still gets its MFU, just not cached
            log.warning("could not cache the matmul peak in %s: %s", path, error)
    return float(entry["peaks"][precision]["flop_per_s"])


def _read_entry(path: Path, key: dict[str, Any]) -> dict[str, Any]:
    """The cached peaks for ``key`` (a fresh entry if the file is missing, unreadable or for another machine)."""
    try:
        entry = json.loads(path.read_text())
        if entry.get("format") == CACHE_FORMAT and entry.get("key") == key and isinstance(entry.get("peaks"), dict):
            return entry
    except (OSError, ValueError):
        pass
    return {"format": CACHE_FORMAT, "key": key, "peaks": {}}


def utilisation(achieved: float, peak: float | None) -> float | None:
    """MFU: ``achieved`` FLOP/s as a share of ``peak`` FLOP/s (None when there is no peak to compare with)."""
    if achieved < 0 or not (peak is None or peak > 0):
        raise ValueError(f"FLOP rates must be achieved >= 0 and peak > 0, got achieved={achieved}, peak={peak}")
    return None if peak is None else achieved / peak


def training_utilisation(train_flops: float, seconds: float, steps: int, device: torch.device | str,
                         precision: str, devices: int = 1, peak: float | None = None) -> dict[str, Any]:
    """The ``utilisation`` section of a run's metrics.json: FLOPs, FLOP/s, the peak it is measured against, MFU.

    ``devices``: ranks of a ``torchrun`` job (the job's peak is ``devices`` × one device's); ``peak``: one
    device's peak FLOP/s (default: :func:`matmul_peak`, probed or cached).
    """
    peak = matmul_peak(device, precision) if peak is None else peak
    achieved = train_flops / seconds if seconds > 0 else 0.0
    job_peak = None if peak is None else peak * devices
    return {"train_flops": train_flops, "steps": steps, "flops_per_step": train_flops / max(steps, 1),
            "step_seconds": seconds, "train_flop_per_s": achieved, "precision": precision,
            "peak_flop_per_s": job_peak, "threads": torch.get_num_threads(), "devices": devices,
            "mfu": utilisation(achieved, job_peak)}


def run_utilisation(trainer) -> dict[str, Any] | None:
    """:func:`training_utilisation` of a :class:`tasks.engine.trainer.Trainer`'s run, every session of it
    (:mod:`tasks.engine.sessions`): its training FLOPs over the time inside its optimizer steps (evaluation,
    checkpoints and the FLOP counting excluded). None on ranks other than the first (they do not probe), or if
    measuring fails: a report must not cost the finished run.
    """
    if getattr(trainer, "flop_counter", None) is None or not trainer.main:
        return None
    try:
        costs = trainer.cost_totals()
        world = trainer.dist.world if trainer.dist.enabled else 1
        return training_utilisation(costs["flops"], costs["step_seconds"], int(costs["steps"]), trainer.device,
                                    getattr(trainer, "precision_used", "fp32"), world)
    except Exception as error:
        log.warning("training FLOP/s and MFU not measured: %s", error)
        return None


def utilisation_line(section: dict[str, Any] | None) -> str:
    """One line for the printed summary and report.md (empty when the run has no utilisation section)."""
    if not section:
        return ""
    rate = f"{section['train_flop_per_s'] / 1e9:.3g} GFLOP/s ({section['flops_per_step']:.3g} training FLOPs per step)"
    if section.get("mfu") is None:
        return f"{rate}; no {section['precision']} matmul peak on this hardware, so no MFU"
    devices, threads = section.get("devices", 1), section["threads"]
    where = f"{devices} devices" if devices > 1 else f"{threads} thread{'s' if threads != 1 else ''}"
    return (f"{rate}, MFU {100 * section['mfu']:.2g} % of the {section['precision']} matmul peak measured here "
            f"({section['peak_flop_per_s'] / 1e9:.4g} GFLOP/s, {where})")


def main(argv: list[str] | None = None) -> int:
    """``python -m tasks.engine.mfu [--threads 1,2] [--device cpu] [--refresh]``: print (and cache) the peaks."""
    parser = argparse.ArgumentParser(description="Measure and cache this machine's matmul peak per precision")
    parser.add_argument("--threads", default=str(torch.get_num_threads()), help="comma-separated thread counts")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--refresh", action="store_true", help="probe again even where a peak is cached")
    args = parser.parse_args(argv)
    try:
        threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        parser.error(f"--threads must be comma-separated whole numbers such as 1,2, got {args.threads!r}")
    for n in threads:
        torch.set_num_threads(n)
        for precision in PRECISIONS:
            peak = matmul_peak(args.device, precision, refresh=args.refresh)
            shown = "not native here" if peak is None else f"{peak / 1e9:8.1f} GFLOP/s"
            print(f"{args.device} {precision} {n} thread(s): {shown}")
    print(f"cached in {cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
