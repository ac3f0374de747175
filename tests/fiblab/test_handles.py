"""The launchers' handles share one base (`fiblab.jobs.detached.Handle`): each saves and reads
back as JSON, tells a live process from a dead one (and from a reused PID), tails its log,
and names itself in a timeout.  Oracles: real processes (`sleep`, `python -m fiblab.cli`),
the JSON written and read back, a log written by hand."""

import io
import os
import socket
import subprocess
import sys

import optuna
import pytest

from fiblab.jobs import detached
from fiblab.jobs.launch import RunHandle
from fiblab.jobs.probe_launch import GridHandle
from fiblab.jobs.search_launch import SearchHandle
from lab.machine.procs import start_ticks

COMMON = dict(name="h", runs_dir="R", store="", pid=1, command=["python", "-m", "fiblab.cli"])


def _handles(tmp_path):
    return [
        RunHandle(**COMMON, preset="tiny", run_dir=str(tmp_path), steps=3, tokens_per_step=8,
                  learned=False, spec={"preset": "tiny"}),
        GridHandle(**COMMON, grid_dir=str(tmp_path), spec={}, keys=["a"], depths=[2], steps=5),
        SearchHandle(**COMMON, folder=str(tmp_path), space="ramp", objectives=["coverage"],
                     trials=2, seed=0, storage="s.db", env={"X": "1"}, cwd="/c"),
    ]  # fmt: skip


def test_each_handle_round_trips_through_its_json_and_logs_in_its_folder(tmp_path):
    for h, log in zip(_handles(tmp_path), ("launch.log", "grid.log", "search.log")):
        d = h.to_json()
        assert "proc" not in d and type(h)(**d) == h
        assert h.log_path == str(tmp_path / log) and h.out_dir == str(tmp_path)
        (tmp_path / log).write_text("one\r50%\r100%\nlast\n")
        assert h.log_tail(2) == "100%\nlast"  # carriage-return progress split into lines


def test_a_dead_process_a_live_one_and_a_reused_pid(tmp_path):
    h = _handles(tmp_path)[1]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ours = subprocess.Popen(  # in a session of its own, as `detached.start` starts one
        [sys.executable, "-c", "import time; time.sleep(30)", "fiblab.cli"],
        start_new_session=True,
    )
    try:
        began = start_ticks(ours.pid)
        assert began > 0
        assert not type(h)(**{**h.to_json(), "pid": dead.pid}).is_alive()
        # the PID alive, but its start time another process's: a reused PID is not ours
        reused = type(h)(**{**h.to_json(), "pid": ours.pid, "pid_start": began + 1})
        assert not reused.is_alive()
        attached = type(h)(**{**h.to_json(), "pid": ours.pid, "pid_start": began})  # a new kernel
        assert attached.is_alive()
        with pytest.raises(TimeoutError, match=r"probe grid 'h' still running after 0 s"):
            attached.wait_exit(timeout=0.0, poll=0.01)
        assert attached.kill(timeout=5) and not attached.is_alive()
        assert not attached.kill(timeout=5)  # nothing left to kill
        launched = type(h)(**{**h.to_json(), "pid": -1})
        launched.bind(ours)  # the launcher's: its Popen decides, its start time is recorded
        assert launched.proc is ours and launched.pid_start == began
        assert not launched.is_alive()
    finally:
        ours.kill()
        ours.wait()


def _scripted_proc(monkeypatch, stat: str | None):
    """/proc/7/stat reads ``stat`` (None: no such process); every other path is real.  The
    oracle for states a real process holds only for an instant (exiting, exec'ing)."""
    real_open, real_kill = open, os.kill

    def fake_open(path, *a, **k):
        if str(path).startswith("/proc/7/"):
            if stat is None:
                raise FileNotFoundError(path)
            if path == "/proc/7/stat":
                return io.StringIO(stat)
            return io.BytesIO(b"")  # cmdline and the rest: empty, as while exiting or exec'ing
        return real_open(path, *a, **k)

    def fake_kill(pid, sig):
        if pid == 7:
            if stat is None:
                raise ProcessLookupError
            return None
        return real_kill(pid, sig)

    monkeypatch.setattr("builtins.open", fake_open)
    monkeypatch.setattr(os, "kill", fake_kill)


def _stat_line(state: str, ticks: int) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
    # stime cutime cstime priority nice threads itrealvalue starttime …
    fields = [state] + ["0"] * 18 + [str(ticks)] + ["0"] * 10
    return "7 (python (x)) " + " ".join(fields) + "\n"


@pytest.mark.parametrize(
    "stat, alive",
    [
        (_stat_line("R", 500), True),  # exiting: memory (and command line) gone, still running
        (_stat_line("D", 500), True),  # exiting, in the kernel
        (_stat_line("S", 500), True),  # exec'ing: its command line not written yet
        (_stat_line("Z", 500), False),  # exited, not reaped
        (_stat_line("R", 501), False),  # another process got the PID
        (None, False),  # gone
    ],
    ids=["exiting", "exiting-in-kernel", "execing", "zombie", "reused-pid", "gone"],
)
def test_the_handle_the_launch_guard_and_the_searchs_clean_up_agree(
    monkeypatch, tmp_path, stat, alive
):
    """The racy version answered "not ours" for an exiting process (its command line reads
    empty) while the search's clean-up still saw it alive, so a stop left its trial RUNNING.
    One rule now answers all three, whatever the command line reads."""
    from analysis.experiments.search.search import DRIVER_ATTR, fail_abandoned

    meta = str(tmp_path / "launch.json")
    detached.write_json(meta, {"pid": 7, "pid_start": 500})
    study = optuna.create_study()
    trial = study.ask()
    trial.set_user_attr(DRIVER_ATTR, f"{socket.gethostname()}:7@500")
    _scripted_proc(monkeypatch, stat)
    h = type(_handles(tmp_path)[2])(**{**_handles(tmp_path)[2].to_json(), "pid": 7,
                                       "pid_start": 500})  # fmt: skip
    assert h.is_alive() is alive
    if alive:
        with pytest.raises(ValueError, match="already running"):
            detached.refuse_if_running(meta, "run 'x'")
    else:
        detached.refuse_if_running(meta, "run 'x'")
    assert fail_abandoned(study, "s") == ([] if alive else [trial.number])


def test_the_base_names_no_folder_of_its_own():
    with pytest.raises(NotImplementedError):
        _ = detached.Handle(**COMMON).log_path
