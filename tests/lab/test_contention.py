"""`lab.machine.contention`: the CPU other processes took while we timed.

Oracles: hand arithmetic on given snapshots; and real CPU burners (busy-loop processes this
test starts and stops) against the same window with none.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

from lab.machine import contention as C


def _snap(stat, own, wall, load1=1.0, cores=2):
    return {"stat": stat, "cores": cores, "own": own, "wall": wall, "load1": load1}


def test_other_cores_is_machine_busy_time_less_our_own_over_wall():
    # 10 s of wall: the machine was busy 14 CPU-s, we took 6 of them → others 0.8 cores
    c = C.contention(_snap(100.0, 5.0, 0.0), _snap(114.0, 11.0, 10.0))
    assert c.exact and c.other_cores == pytest.approx(0.8) and c.busy and c.cores == 2
    assert c.line() == "busy: other processes used 0.8 of 2 cores (load average 1.0)"
    quiet = C.contention(_snap(100.0, 5.0, 0.0), _snap(105.0, 9.9, 10.0))
    assert quiet.other_cores == pytest.approx(0.01) and not quiet.busy
    edge = C.contention(_snap(0.0, 0.0, 0.0), _snap(5.0, 0.0, 10.0))
    assert edge.other_cores == pytest.approx(C.BUSY_CORES) and edge.busy  # ≥ is busy
    # our children counted as ours: never below zero
    assert C.contention(_snap(0.0, 0.0, 0.0), _snap(1.0, 2.0, 1.0)).other_cores == 0.0


def test_without_proc_stat_the_load_average_less_our_threads_stands_in():
    c = C.contention(_snap(None, 0.0, 0.0, load1=2.5), _snap(None, 10.0, 10.0))
    assert not c.exact and c.other_cores == pytest.approx(1.5) and c.busy
    assert "estimated from the load average" in c.line()


def test_the_busy_fields_of_proc_stat(monkeypatch, tmp_path):
    """user nice system irq softirq steal count; idle and iowait do not (ticks → seconds)."""
    text = "cpu  100 20 30 5000 40 1 2 7 0 0\ncpu0 50 10 15 2500 20 0 1 3 0 0\ncpu1 1 1 1 1 1 1 1 1 0 0\n"
    stat = tmp_path / "stat"
    stat.write_text(text)
    real_open = open
    monkeypatch.setattr(
        "builtins.open", lambda p, *a, **k: real_open(stat if p == "/proc/stat" else p, *a, **k)
    )
    busy, cpus = C._proc_stat()
    ticks = __import__("os").sysconf("SC_CLK_TCK")
    assert cpus == 2 and busy == pytest.approx((100 + 20 + 30 + 1 + 2 + 7) / ticks)


_BURN = "import time\nt = time.time() + {s}\nwhile time.time() < t: pass\n"


def test_real_burners_are_seen_and_a_quiet_window_is_not():
    """Two busy-loop processes over a 1.5 s window are seen (busy, whatever else runs); where
    the machine had a core to spare before, they add at least ~1 core of others' use."""
    quiet = C.probe(1.0).other_cores
    procs = [subprocess.Popen([sys.executable, "-c", _BURN.format(s=4)]) for _ in range(2)]
    try:
        time.sleep(0.5)  # let them start
        loaded = C.probe(1.5)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert loaded.exact and math.isfinite(loaded.other_cores) and loaded.busy
    if quiet < loaded.cores - 1:  # a core was free: the burners must show up in the difference
        assert loaded.other_cores - quiet > 0.8
