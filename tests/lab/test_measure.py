"""`lab.machine.measure` on CPU: sleeps of known length timed within tolerance, the repetition policy
counted call by call, the /proc reader and the peak of a known allocation, the child runner."""

import math
import mmap
import os
import time

import pytest

from lab.machine import measure as M

SLEEP = 0.02
SLACK = 0.25  # a loaded machine oversleeps; it never undersleeps


def _counted(fn=None):
    calls = []

    def f():
        calls.append(time.perf_counter())
        if fn is not None:
            fn()

    return f, calls


def test_sleep_is_timed_within_tolerance():
    f, calls = _counted(lambda: time.sleep(SLEEP))
    t = M.time_fn(f, "cpu", warmup=1, reps=3)
    assert len(calls) == 4 and t.reps == 3 and t.warmup == 1  # one untimed warm-up
    assert all(SLEEP <= x < SLEEP + SLACK for x in t.times_s), t.times_s
    assert t.min_s <= t.median_s and t.stat("min") == t.min_s and t.stat() == t.median_s
    assert t.rate(10) == pytest.approx(10 / t.median_s)
    assert (t.clock, t.device) == ("wall", "cpu")


def test_cpu_clock_ignores_sleep():
    t = M.time_fn(lambda: time.sleep(0.05), warmup=0, reps=2, clock="cpu")
    assert t.warmup == 0 and t.reps == 2
    assert t.median_s < 0.02  # process time: sleeping uses no CPU


def test_min_time_and_max_reps_policy():
    # at least `reps`, more while the total is under min_time_s: each call ≥ 10 ms, so a 50 ms
    # total is reached within 5 calls
    t = M.time_fn(lambda: time.sleep(0.01), reps=1, max_reps=50, min_time_s=0.05)
    assert sum(t.times_s) >= 0.05 and 1 <= t.reps <= 5
    # capped by max_reps when the time target is out of reach
    f, calls = _counted()
    t = M.time_fn(f, warmup=2, reps=2, max_reps=4, min_time_s=100.0)
    assert t.reps == 4 and len(calls) == 6
    # default max_reps = reps: exactly reps calls whatever min_time_s says
    assert M.time_fn(f, warmup=0, reps=3, min_time_s=100.0).reps == 3


def test_round_robin_interleaves_calls():
    order = []
    fns = {"a": lambda: order.append("a"), ("b", 1): lambda: order.append("b")}
    got = M.time_round_robin(fns, "cpu", warmup=1, reps=2)
    assert order == ["a", "b"] * 3
    assert list(got) == ["a", ("b", 1)] and all(t.reps == 2 for t in got.values())


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(reps=0), "reps=0"),
        (dict(warmup=-1), "warmup=-1"),
        (dict(reps=3, max_reps=2), "max_reps=2"),
        (dict(clock="gpu"), "clock='gpu'"),
    ],
)
def test_bad_policy(kw, needle):
    with pytest.raises(ValueError, match=needle):
        M.time_fn(lambda: None, **kw)
    with pytest.raises(ValueError, match="stat='mean'"):
        M.time_fn(lambda: None).stat("mean")


def _proc_status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                out[key] = int(rest.split()[0])
    return out


needs_proc = pytest.mark.skipif(
    not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux /proc (clear_refs)"
)


@needs_proc
def test_status_reader():
    assert M.status_kib("VmHWM") >= M.status_kib("VmRSS") > 0
    assert abs(M.status_kib("VmRSS") - _proc_status()["VmRSS"]) < 4096  # KiB, read twice
    with pytest.raises(RuntimeError, match="NoSuchField"):
        M.status_kib("NoSuchField")


@needs_proc
def test_peak_of_a_known_allocation():
    mib = 64

    def touch():
        # fresh pages from the kernel, every one written: an allocator's freed but resident heap
        # (which an earlier test may leave behind) cannot serve them, so the order of the suite
        # does not matter
        m = mmap.mmap(-1, mib * 2**20)
        for off in range(0, mib * 2**20, mmap.PAGESIZE):
            m[off] = 1
        m.close()

    p = M.peak_growth(touch, "cpu")
    assert p.method == "VmHWM" and p.measured and p.device == "cpu"
    assert mib - 4 <= p.mib <= mib + 32, p.mib
    idle = M.peak_growth(lambda: None, "cpu")
    assert 0 <= idle.mib < 8


def test_unmeasurable_device_gives_nan_and_skips_the_call():
    f, calls = _counted()
    p = M.peak_growth(f, "meta")
    assert math.isnan(p.bytes) and not p.measured and p.method == "unavailable" and not calls


def test_run_child_environment_and_errors():
    code = (
        "import os; print('first line'); e = os.environ; "
        "print(e['PYTHONPATH'].split(os.pathsep)[0], e['MALLOC_MMAP_THRESHOLD_'], os.getcwd())"
    )
    path, threshold, cwd = M.run_child(["-c", code]).split()
    assert threshold == M.MMAP_THRESHOLD == "65536"
    assert os.path.samefile(path, M.ROOT) and os.path.samefile(cwd, M.ROOT)  # this checkout
    assert os.path.samefile(M.ROOT / "lab" / "machine" / "measure.py", M.__file__)
    with pytest.raises(RuntimeError, match="(?s)probe subprocess failed.*ZeroDivisionError"):
        M.run_child(["-c", "1 / 0"], "probe")
