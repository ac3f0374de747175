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
    Its runs folder goes too: every check had left one in /tmp (up to 0.5 GB).  Oracle: psutil —
    the load is the check's child running the script's LOAD, and it is gone; the folder named
    on its command line is gone from the disk."""
    import shutil
    import signal
    import sys
    import time

    import psutil

    # repetitions that select no test (pytest exit 5, counted as passed): the check loops on
    # cheap runs while its load runs beside
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "flake_check.py"), "--repeat", "1000",
           "--group", "jobs", "--workers", "0", "--", "-k", "no_test_has_this_name"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    load = runs = None
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
        runs = next(a for a in load.cmdline() if os.path.basename(a).startswith("flake-load-"))
        assert os.path.isdir(runs)
        time.sleep(1.0)  # inside a repetition (or between two): either way the load must go
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        assert not load.is_running(), "the load outlived the check"  # reaped by the check
        assert not os.path.exists(runs), "the load's runs folder outlived the check"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if load is not None and load.is_running():  # the defect itself: leave no loop behind
            os.killpg(load.pid, signal.SIGKILL)
        if runs is not None:  # … nor its folder
            shutil.rmtree(runs, ignore_errors=True)


def test_a_terminated_flake_check_takes_its_repetitions_workers_with_it(tmp_path):
    """`kill` of a running check ends its repetition's pytest whole: the xdist workers too, not
    pytest alone — one went on with a Ray test beside the next check — and what a test started
    in a session of its own (a browser test's JupyterLab server and the job its notebook
    launched outlived a stopped check; 2026-12-06).  A test of this file's own (selected by its
    name) starts such a process and sleeps in a worker; oracle: both PIDs are gone."""
    import signal
    import sys
    import time

    import psutil

    pid_file = tmp_path / "worker.pid"
    test = tmp_path / "test_sleeps_in_a_worker.py"
    test.write_text(
        "import os, subprocess, sys, time\n\n\ndef test_sleeps_in_a_worker():\n"
        "    server = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
        "                              start_new_session=True)\n"
        f"    open({str(pid_file)!r} + '.tmp', 'w').write(f'{{os.getpid()}} {{server.pid}}')\n"
        f"    os.rename({str(pid_file)!r} + '.tmp', {str(pid_file)!r})\n"
        "    end = time.monotonic() + 120\n"
        "    while time.monotonic() < end:  # deaf to the interrupt xdist sends when its\n"
        "        try:  # controller goes, as a test waiting in C code is (ray.get)\n"
        "            time.sleep(1)\n"
        "        except KeyboardInterrupt:\n"
        "            pass\n"
    )
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "flake_check.py"), "--repeat", "1",
           "--group", "jobs", "--workers", "1", "--no-load", "--", str(test), "-k",
           "test_sleeps_in_a_worker", "--rootdir", str(tmp_path)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = server = None
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert pid_file.exists(), "no worker started the sleeping test within 120 s"
        time.sleep(0.2)
        worker, server = (psutil.Process(int(p)) for p in pid_file.read_text().split())
        assert worker.pid != proc.pid and worker.is_running() and server.is_running()
        assert os.getsid(server.pid) == server.pid  # outside the repetition's group
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        worker.wait(timeout=10)  # psutil.TimeoutExpired: the worker outlived the check
        server.wait(timeout=10)  # … or what it started in a session of its own did
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in (worker, server):  # the defect itself: leave none behind
            if p is not None and p.is_running():
                p.kill()


def test_a_load_that_cannot_start_leaves_no_runs_folder(tmp_path, monkeypatch):
    """The load's runs folder is made inside the check's `try`: a load whose start fails (here
    Popen raising, as for a missing interpreter) leaves no folder, and the check puts back the
    SIGTERM handler it found.  Oracle: the temporary directory's listing."""
    import signal
    import tempfile

    import pytest

    fc = _script()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def no_start(*a, **k):
        raise OSError("planted: the load cannot start")

    monkeypatch.setattr(fc.subprocess, "Popen", no_start)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(OSError, match="planted"):
        fc.main(["--repeat", "1"])
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is before
