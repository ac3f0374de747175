"""Time and peak memory of a callable, on CPU and CUDA: the one harness every measurement uses.

Time (`time_fn`, `time_round_robin`): ``warmup`` untimed calls (compilation, caches, thread
pools), then timed calls — at least ``reps``, more while their total is under ``min_time_s``, at
most ``max_reps`` (default ``reps``: exactly ``reps`` calls).  Each call is timed between two
device synchronisations (`sync`: CUDA kernels are asynchronous) on the ``clock``: "wall"
(`time.perf_counter`) or "cpu" (`time.process_time`, this process's CPU time over all threads:
it ignores time spent descheduled on a busy machine).  The record (`Timing`) keeps every time;
its ``median_s`` is what the tables report.

Peak memory (`peak_growth`): the growth of the peak over what is held just before one call.
CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``.  CPU: the peak
resident set (Linux VmHWM in /proc/self/status, `status_kib`) reset through
/proc/self/clear_refs just before the call, minus VmRSS then; NaN where /proc is missing or not
writable (and on other devices).  On CPU the resident set also holds the allocator's free
lists, so a clean number needs a fresh process whose glibc returns freed blocks to the system:
`run_child` runs ``python ARGV…`` with ``MALLOC_MMAP_THRESHOLD_=65536`` and the repository on
PYTHONPATH and returns its last line of output.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
ROOT = Path(__file__).resolve().parents[2]  # the repository (what `run_child` puts on the path)
MMAP_THRESHOLD = "65536"  # bytes: larger blocks go to mmap, and back to the system when freed


# --------------------------------------------------------------------------------------------
# time
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Timing:
    """Seconds of each timed call of one callable, and how they were taken."""

    times_s: tuple[float, ...]
    warmup: int
    clock: str
    device: str

    @property
    def reps(self) -> int:
        return len(self.times_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    def stat(self, name: str = "median") -> float:
        """The summary `name`: "median" or "min" (steadier on a busy machine)."""
        if name not in ("median", "min"):
            raise ValueError(f"stat={name!r} must be 'median' or 'min'")
        return self.median_s if name == "median" else self.min_s

    def rate(self, items: float) -> float:
        """Items per second at the median time (e.g. tokens/s for items = B·T)."""
        return items / self.median_s


def sync(device: torch.device | str) -> None:
    """Wait for the device's queued work (CUDA); a no-op elsewhere."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _clock(clock: str) -> Callable[[], float]:
    if clock not in CLOCKS:
        raise ValueError(f"clock={clock!r} is unknown: use one of {list(CLOCKS)}")
    return CLOCKS[clock]


def _count(value, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        kind = "a positive integer" if least == 1 else f"an integer >= {least}"
        raise ValueError(f"{name}={value!r} must be {kind}")
    return value


def time_call(fn: Callable[[], object], device: torch.device | str = "cpu", clock="wall") -> float:
    """Seconds of one call of fn(), between two synchronisations of `device`."""
    now = _clock(clock)
    sync(device)
    t0 = now()
    fn()
    sync(device)
    return now() - t0


def time_fn(
    fn: Callable[[], object],
    device: torch.device | str = "cpu",
    *,
    warmup: int = 1,
    reps: int = 3,
    max_reps: int | None = None,
    min_time_s: float = 0.0,
    clock: str = "wall",
) -> Timing:
    """Time fn() (see the module docstring for the policy)."""
    _count(warmup, "warmup", 0)
    _count(reps, "reps", 1)
    max_reps = reps if max_reps is None else _count(max_reps, "max_reps", reps)
    _clock(clock)
    for _ in range(warmup):
        fn()
    sync(device)
    times: list[float] = []
    while len(times) < max_reps and (len(times) < reps or sum(times) < min_time_s):
        times.append(time_call(fn, device, clock))
    return Timing(tuple(times), warmup, clock, str(device))


def time_round_robin(
    fns: Mapping[Hashable, Callable[[], object]],
    device: torch.device | str = "cpu",
    *,
    warmup: int = 1,
    reps: int = 3,
    clock: str = "wall",
) -> dict[Hashable, Timing]:
    """Time several callables in turns — one call of each, in order, per round — so that a
    change in background load hits them alike.  ``warmup`` untimed rounds, then ``reps``."""
    _count(warmup, "warmup", 0)
    _count(reps, "reps", 1)
    _clock(clock)
    times: dict[Hashable, list[float]] = {key: [] for key in fns}
    for rnd in range(warmup + reps):
        for key, fn in fns.items():
            t = time_call(fn, device, clock)
            if rnd >= warmup:
                times[key].append(t)
    return {key: Timing(tuple(ts), warmup, clock, str(device)) for key, ts in times.items()}


# --------------------------------------------------------------------------------------------
# peak memory
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Peak:
    """Peak memory growth of one call, in bytes (NaN where it cannot be measured)."""

    bytes: float
    device: str
    method: str  # "cuda.max_memory_allocated" | "VmHWM" | "unavailable"

    @property
    def mib(self) -> float:
        return self.bytes / 2**20

    @property
    def measured(self) -> bool:
        return math.isfinite(self.bytes)


def status_kib(field: str) -> int:
    """A "kB" field of /proc/self/status (VmRSS, VmHWM, …) in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_resident_peak() -> int | None:
    """Reset VmHWM to VmRSS; return VmRSS in KiB, or None where /proc does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return status_kib("VmRSS")
    except (OSError, RuntimeError):
        return None


def peak_growth(fn: Callable[[], object], device: torch.device | str = "cpu") -> Peak:
    """The peak memory growth of one call of fn() over what is held just before it (see the
    module docstring).  fn is not called where the peak cannot be measured."""
    dev = torch.device(device)
    gc.collect()
    if dev.type == "cuda":
        sync(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        fn()
        sync(dev)
        return Peak(
            float(torch.cuda.max_memory_allocated(dev) - base),
            str(dev),
            "cuda.max_memory_allocated",
        )
    if dev.type != "cpu":
        return Peak(math.nan, str(dev), "unavailable")
    base = _reset_resident_peak()
    if base is None:
        return Peak(math.nan, str(dev), "unavailable")
    fn()
    return Peak(float((status_kib("VmHWM") - base) * 1024), str(dev), "VmHWM")


def child_env() -> dict[str, str]:
    """This process's environment with glibc's mmap threshold at 64 KiB and the repository on
    PYTHONPATH: what a memory-measuring subprocess runs under."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, MALLOC_MMAP_THRESHOLD_=MMAP_THRESHOLD, PYTHONPATH=path)


def run_child(argv: Sequence[str], what: str = "memory measurement") -> str:
    """Run ``python ARGV…`` in a fresh process under `child_env` (in the repository) and return
    the last line it printed; a RuntimeError with its stderr if it fails."""
    res = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=child_env(), cwd=ROOT
    )
    if res.returncode != 0:
        raise RuntimeError(f"{what} subprocess failed:\n{res.stderr[-2000:]}")
    lines = res.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"{what} subprocess printed nothing:\n{res.stderr[-2000:]}")
    return lines[-1]
