"""The flake check (`scripts/flake_check.py`) repeats every test of the job, launcher, panel,
Ray and browser files — the slow-marked ones too.  Oracle: pytest's own collection of the
command it runs, against a count of the test functions in the files by hand."""

import importlib.util
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script():
    spec = importlib.util.spec_from_file_location(
        "flake_check", os.path.join(ROOT, "scripts", "flake_check.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_repetition_runs_the_slow_marked_tests_of_its_files_too():
    fc = _script()
    files = ["tests/fiblab/test_browser_02_probes.py", "tests/fiblab/test_browser.py"]
    by_hand = sum(
        len(re.findall(r"^def test_", open(os.path.join(ROOT, f)).read(), re.M)) for f in files
    )
    assert "pytest.mark.slow" in open(os.path.join(ROOT, files[0])).read()  # notebook 02's walk
    cmd = fc.pytest_command(files, "0", ["--collect-only"])
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    collected = re.search(r"(\d+) tests? collected", out.stdout)
    assert collected and int(collected.group(1)) == by_hand, out.stdout[-500:]
    assert "deselected" not in out.stdout


def test_a_terminated_flake_check_takes_its_load_with_it():
    """`kill` (SIGTERM) of a running check ends its load job too; before, the default action
    ended the script alone and its tiny-training loop ran on, loading the machine for ever.
    Oracle: psutil — the load is the check's child running the script's LOAD, and it is gone."""
    import signal
    import sys
    import time

    import psutil

    # repetitions that select no test (pytest exit 5, counted as passed): the check loops on
    # cheap runs while its load runs beside
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "flake_check.py"), "--repeat", "1000",
           "--group", "jobs", "--workers", "0", "--", "-k", "no_test_has_this_name"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    load = None
    try:
        deadline = time.monotonic() + 60
        while load is None and time.monotonic() < deadline:
            for c in psutil.Process(proc.pid).children():
                try:
                    if any("flake-load-" in a for a in c.cmdline()):
                        load = c
                except psutil.NoSuchProcess:
                    continue
            time.sleep(0.1)
        assert load is not None, "the check started no load within 60 s"
        time.sleep(1.0)  # inside a repetition (or between two): either way the load must go
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        assert not load.is_running(), "the load outlived the check"  # reaped by the check
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if load is not None and load.is_running():  # the defect itself: leave no loop behind
            os.killpg(load.pid, signal.SIGKILL)
