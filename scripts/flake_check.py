"""The flake check a developer runs before submitting work that touches jobs, launchers, panels,
Ray or the browser tests: those test files, N times, on two workers, with a second job loading
the machine beside them.  A test that fails one run in five is a defect (usually a race in the
product); this finds it before CI does.

    .venv/bin/python scripts/flake_check.py --repeat 10            # the whole set, loaded
    .venv/bin/python scripts/flake_check.py --repeat 20 --group jobs --no-load

Every test of those files runs, the slow-marked ones too.  Prints one line per repetition (passed / failed and which tests) and, at the end, each failing
test with its count: the rate that goes in benchmarks/RESULTS.md; a failed repetition's whole
output is kept (``--logs``).  Exit code 1 when any
repetition failed.  The load is a real lab job (a tiny training run, looped), not a spin loop,
so it also takes the CPU-share registry's slots as a second notebook would.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GROUPS = {
    "jobs": [
        "tests/fiblab/test_handles.py",
        "tests/fiblab/test_runlist.py",
        "tests/fiblab/test_search_stop.py",
        "tests/fiblab/test_launch.py",
        "tests/fiblab/test_probe_launch.py",
        "tests/lab/test_procs.py",
        "tests/lab/test_cpu_share.py",
    ],
    "panels": [
        "tests/fiblab/test_search_panel.py",
        "tests/fiblab/test_probe_panel.py",
        "tests/fiblab/test_train_panel_recovery.py",
        "tests/fiblab/test_ui.py",
    ],
    "ray": ["tests/fiblab/test_ray_sweep.py", "tests/fiblab/test_search_ray.py"],
    "browser": [
        "tests/fiblab/test_browser.py",
        "tests/fiblab/test_browser_02_probes.py",
        "tests/fiblab/test_browser_03_train.py",
        "tests/fiblab/test_browser_06_search.py",
        "tests/fiblab/test_browser_wait_idle.py",
    ],
}
LOAD = (  # a tiny training run, again and again, in the runs folder given as its argument
    "import os, shutil, subprocess, sys\n"
    "runs = sys.argv[1]\n"
    "for i in range(10**6):\n"
    "    subprocess.run([sys.executable, '-m', 'fiblab.cli', 'train', '--preset', 'tiny',\n"
    "                    '--steps', '40', '--store', '', '--name', f'load{i}',\n"
    "                    '--override', 'run_dir=' + runs], env={**os.environ, 'FIBLAB_RUNS': runs},\n"
    "                   capture_output=True)\n"
    "    shutil.rmtree(os.path.join(runs, f'load{i}'), ignore_errors=True)  # disk use stays flat\n"
)


def pytest_command(files: list[str], workers: str = "2", extra=()) -> list[str]:
    """The pytest run of one repetition.  ``-m ""``: every test of ``files``, the slow-marked
    too (the browser walks of notebooks 02, 03 and 06, the Ray cluster tests) — the suite's
    default ``-m 'not slow'`` had left 10 of them out of every flake check before 2026-12-05."""
    return [sys.executable, "-m", "pytest", "-q", "-m", "", "-n", workers,
            "-p", "no:cacheprovider", *files, *extra]  # fmt: skip


# in the environment of each repetition's processes, so a stop finds those that left its group
FLAKE_ENV = "FIBLAB_FLAKE_CHECK"


def run_repetition(cmd: list[str]) -> subprocess.CompletedProcess:
    """One repetition's pytest, in a session of its own, so that a stop ends all of it: the
    SIGKILL `subprocess.run` sends on the way out reached pytest alone, and its xdist workers
    went on with their tests (a Ray cluster among them) beside the next check (2026-12-06).
    What left the group (a browser test's JupyterLab server, its kernel, the job a notebook
    launched: each in a session of its own) is found by a token in its environment
    (`lab.machine.procs.carriers`): three of them outlived a stopped check the same day."""
    from lab.machine.procs import carriers, signal_carrier

    token = secrets.token_hex(8)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            env={**os.environ, FLAKE_ENV: token})  # fmt: skip
    try:
        out, err = proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in carriers(FLAKE_ENV, token):
            signal_carrier(pid, FLAKE_ENV, token, signal.SIGKILL)
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10, help="repetitions of the set")
    ap.add_argument(
        "--group", nargs="+", choices=sorted(GROUPS), default=sorted(GROUPS), help="which files"
    )
    ap.add_argument("--workers", default="2", help="pytest-xdist workers (-n)")
    ap.add_argument("--no-load", action="store_true", help="no second job beside the tests")
    ap.add_argument("--logs", default="/tmp/flake-logs", help="where a failed run's output goes")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = ap.parse_args(argv)
    files = [f for g in args.group for f in GROUPS[g]]
    load = load_runs = None
    failures: collections.Counter[str] = collections.Counter()
    bad_runs = 0
    # SIGTERM (a `kill`, a session's end) unwinds like Ctrl-C: the repetition's pytest group is
    # killed (`run_repetition`) and the load's group in `finally` — the default action ended
    # this process alone and left the load looping for ever
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        # the load's runs folder goes with it (up to 0.5 GB; every check had left one in /tmp
        # until 2026-12-06), made inside `try` so that a load that cannot start leaves none
        load_runs = tempfile.mkdtemp(prefix="flake-load-")
        if not args.no_load:
            load = subprocess.Popen(
                [sys.executable, "-c", LOAD, load_runs],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        for i in range(1, args.repeat + 1):
            t0 = time.monotonic()
            cmd = pytest_command(files, args.workers, args.pytest_args)
            out = run_repetition(cmd)
            failed = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", out.stdout, re.M)))
            summary = (out.stdout.strip().splitlines() or ["(no output)"])[-1]
            if out.returncode not in (0, 5):
                bad_runs += 1
                failures.update(failed or [f"pytest exit {out.returncode}"])
                os.makedirs(args.logs, exist_ok=True)  # the whole output, to read the cause
                with open(os.path.join(args.logs, f"run{i:02d}.log"), "w") as f:
                    f.write(out.stdout + out.stderr)
            print(
                f"run {i:2d}/{args.repeat}: {summary}  ({time.monotonic() - t0:.0f} s)", flush=True
            )
            for f in failed:
                print(f"    {f}", flush=True)
    finally:
        if load is not None:
            os.killpg(load.pid, 9)
            load.wait()
        if load_runs is not None:
            shutil.rmtree(load_runs, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
    print(
        f"\n{bad_runs} of {args.repeat} repetitions failed "
        f"({'loaded by a tiny training loop' if load else 'no load'}, -n {args.workers}; "
        f"groups: {', '.join(args.group)})"
    )
    for name, n in failures.most_common():
        print(f"  {n:2d}× {name}")
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
