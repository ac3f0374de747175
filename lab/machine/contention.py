"""How busy the machine was while we timed something: the CPU that *other* processes used.

    with watch() as w:                 # around any timing
        step_times = ...
    w.result.other_cores               # cores' worth of CPU other processes used, on average
    w.result.busy                      # True at ≥ BUSY_CORES: the timings are likely high
    w.result.line()                    # "quiet: other processes used 0.1 of 2 cores (load 0.4)"

Why: a timing taken beside a running test suite is slow, and nothing in the numbers says so
(`fiblab doctor` once estimated the main job at 2 h 49 min from 5-second steps taken beside the
suite).  The load average lags by a minute and counts our own threads; what we want is the CPU
time everyone *else* took from the same cores during the window.  On Linux that is exact:
the machine's busy time from /proc/stat (user, nice, system, irq, softirq, and steal — time a
hypervisor gave to other guests) minus this process's own CPU time (`resource.getrusage`,
children included).  Elsewhere the 1-minute load average stands in (``exact`` is False).
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

BUSY_CORES = 0.5  # other processes' average use, in cores, from which a timing is flagged
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (idle 3, iowait 4)


@dataclass(frozen=True)
class Contention:
    """Other processes' CPU use over one timed window."""

    other_cores: float  # cores' worth of CPU time other processes used, on average
    cores: int  # CPUs of the machine (the window's capacity is cores × wall)
    wall_s: float
    load1: float  # 1-minute load average at the window's start (our own threads included)
    exact: bool  # from /proc/stat (True) or the load average (False)

    @property
    def busy(self) -> bool:
        return self.other_cores >= BUSY_CORES

    def line(self) -> str:
        state = "busy" if self.busy else "quiet"
        how = "" if self.exact else " (estimated from the load average)"
        return (
            f"{state}: other processes used {self.other_cores:.1f} of {self.cores} cores"
            f"{how} (load average {self.load1:.1f})"
        )

    def to_dict(self) -> dict:
        return {
            "other_cores": self.other_cores,
            "cores": self.cores,
            "wall_s": self.wall_s,
            "load1": self.load1,
            "exact": self.exact,
            "busy": self.busy,
        }


def _proc_stat() -> tuple[float, int] | None:
    """(busy CPU seconds of the whole machine since boot, CPUs) from /proc/stat; None where
    it cannot be read."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    head = lines[0].split()
    if head[0] != "cpu":
        return None
    fields = [int(x) for x in head[1:]]
    busy = sum(fields[i] for i in _BUSY_FIELDS if i < len(fields))
    cpus = sum(1 for ln in lines if ln.startswith("cpu") and ln[3:4].isdigit())
    return busy / ticks, max(1, cpus)


def _own_cpu_s() -> float:
    """CPU seconds of this process and its waited-for children."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def _load1() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def contention(before: dict, after: dict) -> Contention:
    """The `Contention` between two `snapshot`s (pure arithmetic: tested by hand)."""
    wall = max(after["wall"] - before["wall"], 1e-9)
    cores = before["cores"]
    if before["stat"] is not None and after["stat"] is not None:
        others = (after["stat"] - before["stat"]) - (after["own"] - before["own"])
        return Contention(max(0.0, others / wall), cores, wall, before["load1"], True)
    # no /proc/stat: the load average over and above our own threads' share
    own_cores = (after["own"] - before["own"]) / wall
    others = before["load1"] - own_cores if before["load1"] == before["load1"] else 0.0
    return Contention(max(0.0, others), cores, wall, before["load1"], False)


def snapshot() -> dict:
    """What `contention` compares: machine busy time, own CPU time, wall clock, load."""
    stat = _proc_stat()
    cores = stat[1] if stat else (os.cpu_count() or 1)
    return {
        "stat": stat[0] if stat else None,
        "cores": cores,
        "own": _own_cpu_s(),
        "wall": time.perf_counter(),
        "load1": _load1(),
    }


class watch:
    """Context manager: ``result`` is the window's `Contention` once it exits."""

    def __enter__(self) -> watch:
        self.result: Contention | None = None
        self._before = snapshot()
        return self

    def __exit__(self, *exc) -> None:
        self.result = contention(self._before, snapshot())


def probe(seconds: float = 0.5) -> Contention:
    """Other processes' CPU use over `seconds` of this process sleeping."""
    with watch() as w:
        time.sleep(seconds)
    return w.result
