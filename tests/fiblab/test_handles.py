"""The launchers' handles share one base (`fiblab.jobs.detached.Handle`): each saves and reads
back as JSON, tells a live process from a dead one (and from a reused PID), tails its log,
and names itself in a timeout.  Oracles: real processes (`sleep`, `python -m fiblab.cli`),
the JSON written and read back, a log written by hand."""

import contextlib
import io
import os
import re
import socket
import subprocess
import sys
import tempfile

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


# -- the three launchers, started for real and killed at once (no training waited for) --------
ENV = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def _launcher(kind: str, runs: str):
    """(folder, launch(**kw) -> handle, resume(handle) -> handle) of one launcher, each launch
    a long job under the name "j" (its process is killed by the test long before it ends)."""
    from fiblab.jobs import launch as LA
    from fiblab.jobs import probe_launch as PL
    from fiblab.jobs import search_launch as SL
    from probes.gridspec import GridSpec

    if kind == "run":
        return (
            os.path.join(runs, "j"),
            lambda **kw: LA.launch(
                "tiny", name="j", steps=100_000, store="", runs_dir=runs, nproc=1, **kw
            ),
            LA.resume,
        )
    if kind == "grid":
        spec = GridSpec(scale="tiny", mechanisms=("blur",), depths=(2,), seeds=(0,),
                        steps=50_000)  # fmt: skip
        return (
            os.path.join(PL.grids_dir(runs), "j"),
            lambda **kw: PL.launch_grid(spec, "j", store="", runs_dir=runs, **kw),
            PL.resume,
        )
    return (
        os.path.join(SL.searches_dir(runs), "j"),
        lambda **kw: SL.launch_search(
            "linear", ["distinct"], trials=100_000, name="j", store="", runs_dir=runs, **kw
        ),
        SL.resume,
    )


KINDS = ["run", "grid", "search"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_name_whose_process_still_runs_is_not_launched_twice(tmp_path, kind):
    """Two processes under one name write one folder (checkpoints, results, a study) at once;
    every launcher refuses the second while the first lives, and starts nothing."""
    _, launch, _ = _launcher(kind, str(tmp_path))
    first, second = launch(env=ENV), None
    try:
        with pytest.raises(ValueError, match=r"already running \(pid \d+\)"):
            second = launch(env=ENV)
    finally:
        for h in (first, second):
            if h is not None:
                h.kill(timeout=5)


@pytest.mark.parametrize("kind", KINDS)
def test_two_kernels_launching_one_name_at_once_start_one_process(tmp_path, monkeypatch, kind):
    """Two launches of one name in the same milliseconds (two notebook tabs, a double click)
    both passed the liveness check before either wrote its handle file, and two processes
    wrote one folder.  The check and the handle file now share one lock
    (`fiblab.jobs.detached.claim`).  Scripted: each launch, its check passed, waits up to 1 s
    for the other to pass it too, so the old code started two every time.  Oracle: the
    processes that ran (each appends its PID to a file) and the second launch's error."""
    import threading
    import time

    ran = tmp_path / "ran"
    sleeper = [sys.executable, "-c",
               f"import os, time; open({str(ran)!r}, 'a').write(f'{{os.getpid()}}\\n'); "
               "time.sleep(60)"]  # fmt: skip
    start, check = detached.Handle.start, detached.refuse_if_running
    both_checked = threading.Barrier(2)

    def checked(meta_path, what):
        check(meta_path, what)
        with contextlib.suppress(threading.BrokenBarrierError):
            both_checked.wait(1.0)  # the old code: both pass; with the lock, the other waits

    def start_sleeper(self, meta_path):
        self.command = sleeper
        start(self, meta_path)

    monkeypatch.setattr(detached, "refuse_if_running", checked)
    monkeypatch.setattr(detached.Handle, "start", start_sleeper)
    _, launch, _ = _launcher(kind, str(tmp_path))
    barrier, out = threading.Barrier(2), []

    def one():
        barrier.wait()
        try:
            out.append(launch(env=ENV))
        except ValueError as e:
            out.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    handles = [h for h in out if isinstance(h, detached.Handle)]
    try:
        errors = [str(e) for e in out if isinstance(e, ValueError)]
        assert len(handles) == 1 and len(errors) == 1, out
        assert re.search(r"already running \(pid \d+\)", errors[0]), errors[0]
        deadline = time.monotonic() + 30
        while not ran.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # a second process, had one started, has written by now
        assert [int(p) for p in ran.read_text().split()] == [handles[0].pid]
    finally:
        for h in handles:
            h.kill(timeout=5)


@pytest.mark.parametrize("kind", KINDS)
def test_a_launch_whose_lock_is_never_let_go_fails_naming_it(tmp_path, monkeypatch, kind):
    """A lock holder that never lets go (a kernel paused in a debugger mid-launch, a process
    forked from one) made every later launch of the folder wait for ever, silently.  It waits
    `CLAIM_WAIT_S`, then fails with one line naming the lock file; nothing starts and no
    handle file is written."""
    folder, launch, _ = _launcher(kind, str(tmp_path / "runs"))
    meta = os.path.join(folder, "launch.json")
    monkeypatch.setattr(detached, "CLAIM_WAIT_S", 1.0)
    started = []
    monkeypatch.setattr(detached, "start", lambda *a, **kw: started.append(a))
    with detached.launch_lock(meta):  # another kernel holds it
        lock = re.escape(detached.lock_path(meta))
        with pytest.raises(ValueError, match=rf"has held {lock} for 1 s: let it finish"):
            launch(env=ENV)
    assert started == [] and not os.path.exists(folder)


def test_where_the_runs_folder_cannot_lock_the_launch_lock_is_this_hosts(tmp_path, monkeypatch):
    """``flock`` fails on some shared storage (ENOLCK: NFS without lockd; a Ray cluster's
    runs folder lives there): a launch then locks a file in this user's temp folder, keyed by
    the runs folder, instead of failing.  Scripted: ``flock`` refuses the runs folder's file."""
    import errno
    import fcntl

    real = fcntl.flock
    runs = str(tmp_path / "runs")

    def no_locks_there(f, op):
        if f.name.startswith(runs):
            raise OSError(errno.ENOLCK, "No locks available")
        return real(f, op)

    monkeypatch.setattr(detached.fcntl, "flock", no_locks_there)
    meta = os.path.join(runs, "j", "launch.json")
    with detached.launch_lock(meta):
        local = detached.lock_path(meta, local=True)
        assert local.startswith(tempfile.gettempdir())
        assert os.stat(os.path.dirname(local)).st_mode & 0o777 == 0o700  # this user's only
        with open(local, "a") as other, pytest.raises(BlockingIOError):  # it is held
            real(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


@pytest.mark.parametrize("kind", KINDS)
def test_a_handles_start_time_is_taken_after_its_claim(tmp_path, monkeypatch, kind):
    """A handle's ``started`` bounds what its launch did (a search's stop fails the unmarked
    trials begun after it and before the next launch's).  Taken before the claim, a launch that
    waited there (the search before it still stopping) recorded a start earlier than the
    other's last trials.  Oracle: the time the claim was entered."""
    import time

    entered = []
    real = detached.claim

    @contextlib.contextmanager
    def timed(meta_path, what):
        with real(meta_path, what):
            entered.append(time.time())
            yield

    monkeypatch.setattr(detached, "claim", timed)
    monkeypatch.setattr(detached, "start", lambda *a, **kw: subprocess.Popen(["true"]))
    _, launch, _ = _launcher(kind, str(tmp_path))
    h = launch(env=ENV)
    h.proc.wait()
    assert h.started >= entered[0]


@pytest.mark.parametrize("kind", KINDS)
def test_a_stop_request_left_from_before_does_not_reach_the_new_process(tmp_path, kind):
    """A STOP left in the folder (asked after the last process had already ended) would stop
    the new launch at its first check, reading "stopping" at once: each launch removes it."""
    folder, launch, _ = _launcher(kind, str(tmp_path))
    os.makedirs(folder)
    with open(os.path.join(folder, "STOP"), "w") as f:
        f.write("stop requested long ago\n")
    h = launch(env=ENV)
    try:
        assert not os.path.exists(os.path.join(folder, "STOP"))
    finally:
        h.kill(timeout=5)


@pytest.mark.parametrize("kind", KINDS)
def test_a_resumed_process_keeps_the_env_and_cwd_it_was_launched_with(tmp_path, kind):
    """``env`` and ``cwd`` are part of what was launched (CUDA_VISIBLE_DEVICES='', the folder
    relative data paths resolve in): a resume that dropped them trained elsewhere, on other
    devices.  The oracle is the resumed process's own /proc environment and working folder."""
    _, launch, resume = _launcher(kind, str(tmp_path))
    cwd = tmp_path / "work"
    cwd.mkdir()
    h = launch(env={**ENV, "FIBLAB_TEST_MARK": kind}, cwd=str(cwd))
    h.kill(timeout=5)
    again = resume(h)
    try:
        with open(f"/proc/{again.pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
        assert f"FIBLAB_TEST_MARK={kind}".encode() in environ
        assert os.readlink(f"/proc/{again.pid}/cwd") == str(cwd)
    finally:
        again.kill(timeout=5)


@pytest.mark.parametrize("kind", KINDS)
def test_every_handle_file_records_the_env_and_cwd_it_was_launched_with(tmp_path, kind):
    """What a new kernel attaches to says how the process was started, for a run as for a grid
    or a search (a run's handle file said ``env: {}``, ``cwd: null`` whatever it was given)."""
    from fiblab.jobs import launch as LA
    from fiblab.jobs import probe_launch as PL
    from fiblab.jobs import search_launch as SL

    _, launch, _ = _launcher(kind, str(tmp_path))
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = {**ENV, "FIBLAB_TEST_MARK": kind}
    h = launch(env=env, cwd=str(cwd))
    h.kill(timeout=5)
    attach = {"run": LA.attach, "grid": PL.attach, "search": SL.attach}[kind]
    again = attach("j", str(tmp_path))
    assert (again.env, again.cwd) == (env, str(cwd))


@pytest.mark.parametrize("kind", ["grid", "search"])
def test_the_lists_show_the_most_recent_launch_first(tmp_path, kind):
    """A fresh kernel's panel offers the launch just made at the top, not the oldest one."""
    from fiblab.jobs import probe_launch as PL
    from fiblab.jobs import search_launch as SL

    h, top, meta, listing = {
        "grid": (_handles(tmp_path)[1], PL.grids_dir(str(tmp_path)), PL.META_NAME,
                 PL.list_grids),
        "search": (_handles(tmp_path)[2], SL.searches_dir(str(tmp_path)), SL.META_NAME,
                   SL.list_searches),
    }[kind]  # fmt: skip
    for name, started in [("old", 100.0), ("new", 300.0), ("mid", 200.0)]:
        d = {**h.to_json(), "name": name, "started": started}
        detached.write_json(os.path.join(top, name, meta), d)
    assert [x.name for x in listing(str(tmp_path))] == ["new", "mid", "old"]


@pytest.mark.parametrize("kind", KINDS)
def test_launch_fields_are_refused_before_any_process_starts(tmp_path, monkeypatch, kind):
    """A store that is no store and a Ray address nobody serves are one ValueError naming them,
    and no process starts: a run and a grid used to start and then fail (listed as a failed job
    the form could have refused), a grid's and a search's Ray address went unchecked, and a
    search's bad store was argparse's SystemExit, which a notebook catching ValueError missed."""
    from fiblab.jobs import launch as LA
    from fiblab.jobs import probe_launch as PL
    from fiblab.jobs import search_launch as SL
    from probes.gridspec import GridSpec

    started = []
    monkeypatch.setattr(detached, "start", lambda *a, **kw: started.append(a))
    runs = str(tmp_path / "runs")

    def launch(store="", ray=None):
        if kind == "run":
            return LA.launch("tiny", name="j", steps=5, store=store, runs_dir=runs, nproc=1,
                             ray=ray)  # fmt: skip
        if kind == "grid":
            spec = GridSpec(scale="tiny", mechanisms=("blur",), depths=(2,), seeds=(0,), ray=ray)
            return PL.launch_grid(spec, "j", store=store, runs_dir=runs)
        extra = ["--ray", ray] if ray else []
        return SL.launch_search("linear", ["distinct"], trials=2, name="j", store=store,
                                runs_dir=runs, extra=extra)  # fmt: skip

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(ValueError, match=r"notes\.txt.*is not an SQLite database"):
        launch(store=str(notes))
    assert notes.read_text() == "my notes\n"
    with socket.socket() as held:  # bound, never listening: nobody answers there
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        with pytest.raises(ValueError, match=f"nothing answers at 127.0.0.1:{port}"):
            launch(ray=f"127.0.0.1:{port}")
    assert started == []


def test_a_search_launch_refuses_extra_options_the_launch_owns(tmp_path, monkeypatch):
    """``extra=["--study", "other"]`` ran a study the handle never reads nor cleans; ``--jobs``
    beside ``--ray`` and ``--ray-parallel`` without it are refused as the CLI refuses them."""
    from fiblab.jobs import search_launch as SL

    monkeypatch.setattr(detached, "start", lambda *a, **kw: pytest.fail("started"))
    runs = str(tmp_path / "runs")
    bad = [
        (["--study", "other"], "extra --study: the launch sets it"),
        (["--runs=elsewhere"], "extra --runs: the launch sets it"),
        (["--stud", "other"], "extra --study: the launch sets it"),  # argparse takes a prefix
        (["--ray-parallel", "2"], "--ray-parallel 2 needs --ray ADDRESS"),
        (["--jobs", "2", "--ray", "local"], "--jobs 2 is for trials run here"),
        (["--trials", "0"], "must be an integer >= 1"),
    ]
    for extra, says in bad:
        with pytest.raises(ValueError, match=re.escape(says)):
            SL.launch_search("linear", ["distinct"], trials=2, name="j", store="",
                             runs_dir=runs, extra=extra)  # fmt: skip


def test_an_interrupt_between_start_and_record_ends_the_new_process(tmp_path, monkeypatch):
    """A notebook's stop button landing after the process started but before its handle file
    was written left it running unrecorded (a second launch was not refused beside it): the
    launchers' one `Handle.start` ends it and lets the interrupt through."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    h = GridHandle(**{**COMMON, "command": sleeper}, grid_dir=str(tmp_path), spec={},
                   keys=["a"], depths=[2], steps=5)  # fmt: skip

    def interrupted(path, d):
        raise KeyboardInterrupt

    monkeypatch.setattr(detached, "write_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        h.start(str(tmp_path / "grid.json"))
    assert h.pid > 0 and not detached.pid_alive(h.pid) and not (tmp_path / "grid.json").exists()
