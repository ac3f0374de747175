"""The run list every panel shows on open (fiblab.ui.runlist) and the detached-process pieces
both launchers share (fiblab.jobs.detached): which runs are listed, which buttons are live, what the
buttons call; launch.json files found again by `fiblab.jobs.launch.list_runs`."""

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from fiblab.jobs import detached
from fiblab.jobs import launch as LA
from fiblab.ui.runlist import LMRuns, RunList, RunRow
from lab.machine.measure import ROOT
from lab.machine.procs import start_ticks


class FakeSource:
    def __init__(self, kind, rows):
        self.kind, self._rows, self.calls = kind, rows, []

    def rows(self):
        return list(self._rows)

    def stop(self, name):
        self.calls.append(("stop", name))

    def resume(self, name):
        self.calls.append(("resume", name))
        return name


def _buttons(row_widget):
    label, attach, stop, resume = row_widget.children
    return label, attach, stop, resume


def test_lists_live_and_resumable_runs_only_with_the_right_buttons():
    lm = FakeSource(
        "LM run",
        [
            RunRow("LM run", "a", "running", "step 3 / 10"),
            RunRow("LM run", "b", "done", "step 10 / 10"),
            RunRow("LM run", "c", "stopped", "step 5 / 10"),
        ],
    )
    pr = FakeSource("probe grid", [RunRow("probe grid", "g", "failed", "1 of 4 cells")])
    attached = []
    rl = RunList([lm, pr], on_attach={"LM run": attached.append}, where={"probe grid": "nb 02"})
    assert [r.name for r in rl.rows] == ["a", "c", "g"]  # the finished run is not listed
    assert "3 runs to pick up" in rl.title.value
    (_, att_a, stop_a, res_a), (_, att_c, stop_c, res_c), (_, att_g, stop_g, res_g) = [
        _buttons(w) for w in rl.table.children
    ]
    assert (att_a.disabled, stop_a.disabled, res_a.disabled) == (False, False, True)
    assert (att_c.disabled, stop_c.disabled, res_c.disabled) == (False, True, False)
    assert (att_g.disabled, stop_g.disabled, res_g.disabled) == (True, True, False)
    assert "nb 02" in att_g.tooltip
    att_a.click()
    assert attached == ["a"]
    stop_a.click()
    res_c.click()  # resuming a run the panel can show also attaches it
    res_g.click()
    assert lm.calls == [("stop", "a"), ("resume", "c")]
    assert pr.calls == [("resume", "g")]
    assert attached == ["a", "c"]
    assert rl.error is None


def test_the_watched_runs_row_follows_the_panels_snapshot_between_refreshes():
    """Issue 28 item 6, found again in a browser walk: while a run trained, the list (refreshed
    every 10 s) said step 782 while the status line said 1027.  The panel now shows its own
    snapshot's row in the list; a change of state re-reads the whole list."""
    lm = FakeSource("LM run", [RunRow("LM run", "a", "running", "step 3 / 10")])
    rl = RunList([lm])
    snap = {"state": "running", "step": 7, "steps": 10, "eta_s": 30.0}
    rl.show(LMRuns.row("a", snap))
    ((label, *_),) = [_buttons(w) for w in rl.table.children]
    assert "step 7 / 10 · about 30s left" in label.value and rl.rows[0].detail.startswith("step 7")
    assert lm.rows()[0].detail == "step 3 / 10"  # the source was not re-read
    lm._rows = [RunRow("LM run", "a", "stopped", "step 8 / 10")]
    rl.show(LMRuns.row("a", {"state": "stopped", "step": 8, "steps": 10}))
    assert [(r.state, r.detail) for r in rl.rows] == [("stopped", "step 8 / 10")]
    rl.show(LMRuns.row("b", {"state": "done", "step": 10, "steps": 10}))  # not listed: no-op
    assert [r.name for r in rl.rows] == ["a"]


def test_an_empty_list_says_what_to_do_and_errors_are_shown_not_raised():
    class Broken(FakeSource):
        def stop(self, name):
            raise ValueError(f"run {name!r} is gone: refresh the list")

    src = Broken("LM run", [RunRow("LM run", "x", "running", "")])
    rl = RunList([src])
    _, _, stop, _ = _buttons(rl.table.children[0])
    stop.click()
    assert rl.error == "run 'x' is gone: refresh the list"
    src._rows = []
    rl.refresh()
    assert "no run is running or stopped" in rl.title.value and rl.table.children == ()


def _meta(runs, name, pid, started, store=""):
    d = runs / name
    d.mkdir(parents=True)
    h = LA.RunHandle(
        name=name,
        preset="tiny",
        run_dir=str(d),
        runs_dir=str(runs),
        store=store,
        pid=pid,
        command=["python", "-m", "fiblab.cli", "train"],
        steps=10,
        tokens_per_step=64,
        learned=False,
        spec={"preset": "tiny", "name": name},
        started=started,
    )
    detached.write_json(str(d / LA.META_NAME), h.to_json())
    return h


def test_list_runs_finds_every_launch_json_newest_first(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _meta(tmp_path, "old", dead.pid, 100.0)
    _meta(tmp_path, "new", dead.pid, 200.0)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / LA.META_NAME).write_text("{not json")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / LA.META_NAME).write_text(json.dumps({"name": "o", "pid": 1, "x": 2}))
    assert [h.name for h in LA.list_runs(str(tmp_path))] == ["new", "old"]
    assert LA.list_runs(str(tmp_path / "missing")) == []
    rows = LMRuns(str(tmp_path)).rows()
    # a dead process without a store and without an exit code: failed (resumable), step 0
    assert [(r.name, r.state, r.detail) for r in rows] == [
        ("new", "failed", "step 0 / 10"),
        ("old", "failed", "step 0 / 10"),
    ]


def test_detached_start_log_alive_and_kill_group(tmp_path):
    log = str(tmp_path / "x" / "p.log")
    code = (  # a child in the job's process group, as a data loader or a torchrun rank is
        "import subprocess, time; c = subprocess.Popen(['sleep', '60']); "
        "print('child', c.pid); print('hello', flush=True); time.sleep(60)"
    )
    p = detached.start([sys.executable, "-c", code], log)
    try:
        assert os.getpgid(p.pid) == p.pid  # its own session: a kernel interrupt misses it
        deadline = time.monotonic() + 20
        while not detached.log_tail(log).endswith("hello") and time.monotonic() < deadline:
            time.sleep(0.05)
        tail = [line for line in detached.log_tail(log).splitlines() if line]
        assert tail[0].startswith("== ") and tail[-1] == "hello"
        child = int(next(x for x in tail if x.startswith("child ")).split()[1])
        assert detached.pid_alive(p.pid) and os.getpgid(child) == p.pid
        assert detached.kill_group(p.pid, lambda: p.poll() is None, timeout=5)
        assert p.poll() is not None and not detached.pid_alive(p.pid)
        deadline = time.monotonic() + 5  # the whole group was told, not the leader alone
        while detached.pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not detached.pid_alive(child)
        assert not detached.kill_group(p.pid, lambda: p.poll() is None)
    finally:
        if p.poll() is None:
            p.kill()


def test_refuse_if_running_names_the_run_and_the_fix(tmp_path):
    meta = str(tmp_path / "launch.json")
    detached.refuse_if_running(meta, "run 'x'")  # no file: nothing to refuse
    here = start_ticks(os.getpid())
    detached.write_json(meta, {"pid": os.getpid(), "pid_start": here + 1})
    detached.refuse_if_running(meta, "run 'x'")  # the PID lives, but as another process
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "fiblab.cli"])
    try:  # at once, while it may still be exec'ing
        detached.write_json(meta, {"pid": p.pid, "pid_start": start_ticks(p.pid)})
        with pytest.raises(ValueError, match=r"^run 'x' is already running \(pid \d+\): stop it"):
            detached.refuse_if_running(meta, "run 'x'")
    finally:
        p.kill()
        p.wait()
    detached.refuse_if_running(meta, "run 'x'")  # ended: nothing to refuse
    assert detached.read_json(str(tmp_path / "none.json")) is None


def test_kill_group_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path):
    """A job that ignores SIGTERM (a hung data loader, a handler that never returns) must still
    be ended: `kill_group` sends SIGKILL once ``timeout`` passes.  Without it, terminate()
    returned and the run kept its GPU and its name (a new launch refused as "still running")."""
    log = str(tmp_path / "deaf.log")
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('deaf', flush=True); time.sleep(60)"
    )
    p = detached.start([sys.executable, "-c", code], log)
    try:
        deadline = time.monotonic() + 20
        while not detached.log_tail(log).endswith("deaf") and time.monotonic() < deadline:
            time.sleep(0.05)  # its handler installed: SIGTERM alone will not end it
        assert detached.log_tail(log).endswith("deaf")
        assert detached.kill_group(p.pid, lambda: p.poll() is None, timeout=0.5)
        assert p.wait(timeout=5) == -signal.SIGKILL
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# a leader that starts a child deaf to SIGTERM (a data loader, a Ray worker with a handler of
# its own), prints its PID, and then exits at once on SIGTERM
LEADER = (
    "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    'print(\\"deaf\\", flush=True); time.sleep(60)\']); '
    "time.sleep(0.5); print('child', c.pid, flush=True); time.sleep(60)"
)


def _child_of(log: str, p) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # both lines: its PID, and the child's handler is in
        tail = detached.log_tail(log).splitlines()
        if "deaf" in tail and any(x.startswith("child ") for x in tail):
            break
        time.sleep(0.05)
    assert "deaf" in tail, tail  # its handler is installed: SIGTERM alone will not end it
    return int(next(x for x in tail if x.startswith("child ")).split()[1])


def test_kill_group_ends_a_child_that_outlives_its_leader(tmp_path):
    """A stop ends the whole job: `kill_group` waited on the leader alone, so when the leader
    exited on SIGTERM it returned at once, and a child deaf to SIGTERM went on writing the
    job's files beside a resume."""
    log = str(tmp_path / "group.log")
    p = detached.start([sys.executable, "-c", LEADER], log)
    try:
        child = _child_of(log, p)
        assert os.getpgid(child) == p.pid and detached.pid_alive(child)
        assert detached.kill_group(p.pid, lambda: p.poll() is None, timeout=0.5)
        assert not detached.pid_alive(child)  # when it returns, not some time later
        assert not detached.kill_group(p.pid, lambda: p.poll() is None)  # nothing left
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)


class _Job(detached.Handle):
    """The smallest handle: a process whose folder is ``runs_dir``."""

    KIND = "job"

    @property
    def out_dir(self) -> str:
        return self.runs_dir


# a leader that starts a child deaf to SIGTERM, prints its PID and then dies on its own (a
# crash, not a stop): the child stays in the job's group, writing its files; or, as a torchrun
# rank does, in a session of its own
CRASHING = LEADER.removesuffix("time.sleep(60)") + "sys.exit(3)"
OWN_SESSION = "], start_new_session=True); "
assert LEADER.count("]); ") == 1


def _leader(crash: bool, where: str) -> str:
    code = CRASHING if crash else LEADER
    return code if where == "group" else code.replace("]); ", OWN_SESSION)


def _end(h, child) -> None:
    """What a failed test must not leave running: the child, and the rest of the job's group."""
    if child is not None and detached.pid_alive(child):
        os.kill(child, signal.SIGKILL)
    if h.proc is not None and h.proc.poll() is None:
        h.proc.kill()
        h.proc.wait()
    if h.pid > 0:  # (0 would name this process's own group)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(h.pid, signal.SIGKILL)


@pytest.mark.parametrize("where", ["group", "session"])
def test_a_stale_handle_ends_what_a_crashed_job_left_running(tmp_path, where):
    """A job whose leader died on its own left a child: in its group (a data loader), or in a
    session of its own (a torchrun rank).  A new kernel's handle (no `Popen`, its leader gone)
    must still end it, and no launch may start beside it: the stop used to be a no-op, and a
    resume then ran beside the old child.  The child is told by the job's token in its
    environment; a handle with another token (another job that once had the number) or with
    none (an older file) leaves it alone."""
    meta = str(tmp_path / "job.json")
    cmd = [sys.executable, "-c", _leader(True, where)]
    h = _Job(name="j", runs_dir=str(tmp_path), store="", pid=0, command=cmd)
    h.start(meta)
    child = None
    try:
        child = _child_of(h.log_path, h.proc)
        assert (os.getpgid(child) == h.pid) == (where == "group")
        assert h.proc.wait(timeout=30) == 3 and detached.pid_alive(child)  # crashed, reaped
        stale = _Job(**detached.read_json(meta))  # what a new kernel attaches by
        assert stale.proc is None and not stale.is_alive() and len(stale.token) == 16
        for other in ("0" * 16, ""):  # another job's token, an older file's lack of one
            assert not dataclasses.replace(stale, token=other).kill(timeout=0.5)
            assert detached.pid_alive(child)
        with pytest.raises(ValueError, match=rf"^job 'j' has ended, but processes it started "
                           rf"still run: end them first \(kill -9 {child}\), or launch"):  # fmt: skip
            detached.refuse_if_running(meta, "job 'j'")
        assert stale.kill(timeout=0.5)
        assert not detached.pid_alive(child)  # deaf to SIGTERM: SIGKILL after the timeout
        assert not stale.kill(timeout=0.5)  # nothing left
        detached.refuse_if_running(meta, "job 'j'")  # a launch may start now
    finally:
        _end(h, child)


@pytest.mark.parametrize("leader", ["exits on SIGTERM", "deaf to SIGTERM"])
def test_a_stop_reaches_a_child_in_a_session_of_its_own(tmp_path, leader):
    """A live job's stop ends what it started outside its process group too (torchrun starts
    each rank in a session of its own): SIGTERM to the group alone left a rank deaf to it
    running after its leader exited, and a SIGKILL to a leader that ignored SIGTERM orphaned
    its ranks."""
    code = _leader(False, "session")
    if leader == "deaf to SIGTERM":
        code = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + code
    h = _Job(
        name="j", runs_dir=str(tmp_path), store="", pid=0, command=[sys.executable, "-c", code]
    )
    h.start(str(tmp_path / "job.json"))
    child = None
    try:
        child = _child_of(h.log_path, h.proc)
        assert os.getpgid(child) == child != h.pid and h.is_alive()
        assert h.kill(timeout=0.5)
        assert h.proc.poll() is not None and not detached.pid_alive(child)
    finally:
        _end(h, child)


def test_a_stop_waits_for_a_rank_that_no_longer_shows_its_token(tmp_path, monkeypatch):
    """An exiting process shows no environment while it still holds its files (and a GPU's
    memory): a rank seen once is waited on by its PID and start time, not by its token.
    Scripted: after the first scan no process shows the token, while the rank, deaf to
    SIGTERM, still runs; it must get the SIGKILL (the stop had returned with it running)."""
    real = detached.carriers
    scans = []

    def hidden_after_the_first(name, value):
        scans.append(1)
        return real(name, value) if len(scans) == 1 else []

    cmd = [sys.executable, "-c", _leader(False, "session")]
    h = _Job(name="j", runs_dir=str(tmp_path), store="", pid=0, command=cmd)
    h.start(str(tmp_path / "job.json"))
    child = None
    try:
        child = _child_of(h.log_path, h.proc)
        monkeypatch.setattr(detached, "carriers", hidden_after_the_first)
        assert h.kill(timeout=0.5)
        assert len(scans) > 1 and not detached.pid_alive(child)
    finally:
        _end(h, child)


def test_a_stale_handle_whose_pid_another_process_took_still_ends_the_jobs_rank(tmp_path):
    """The crashed leader's PID now names another process (its own group's leader): the
    handle's recorded start time tells them apart.  The job's rank is ended and a launch
    refused beside it; the other process and its group are left alone.  Asking only whether
    the PID lived had read "the leader runs": nothing was ended, and a launch started."""
    meta = str(tmp_path / "job.json")
    cmd = [sys.executable, "-c", _leader(True, "session")]
    h = _Job(name="j", runs_dir=str(tmp_path), store="", pid=0, command=cmd)
    h.start(meta)
    child = other = None
    try:
        child = _child_of(h.log_path, h.proc)
        assert h.proc.wait(timeout=30) == 3
        # started after the leader died, as a process that takes its number is: one started
        # beside it could share its start time, in clock ticks (1 in 7 flake-check runs did)
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 start_new_session=True)  # fmt: skip
        record = {**detached.read_json(meta), "pid": other.pid}  # the number, taken since
        assert start_ticks(other.pid) > record["pid_start"]
        detached.write_json(meta, record)
        stale = _Job(**record)
        assert not stale.is_alive() and detached.pid_alive(other.pid)
        with pytest.raises(ValueError, match=rf"end them first \(kill -9 {child}\)"):
            detached.refuse_if_running(meta, "job 'j'")
        assert stale.kill(timeout=0.5)
        assert not detached.pid_alive(child) and other.poll() is None
    finally:
        _end(h, child)
        if other is not None:
            other.kill()
            other.wait()


# a leader that starts two children in its group and dies on its own: one without the job's
# token in its environment (a Ray worker hides it by renaming itself) and deaf to SIGTERM, one
# with it that exits on SIGTERM
MIXED = """
import os, subprocess, sys, time
env = {k: v for k, v in os.environ.items() if k != "FIBLAB_JOB"}
deaf = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('deaf', flush=True); time.sleep(60)")
hidden = subprocess.Popen([sys.executable, "-c", deaf], env=env)
plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
time.sleep(0.5)
print("child", hidden.pid, flush=True)
print("plain", plain.pid, flush=True)
sys.exit(3)
"""


def test_a_stale_stop_follows_the_group_after_its_last_carrier_exits(tmp_path):
    """A stale handle finds the crashed job's group by the one member with the token; that
    member exits on SIGTERM, the other, without the token and deaf to it, still belongs to
    the job and gets SIGKILL.  The group had been followed only while a member carried the
    token: the stop returned at once, and the deaf member ran on beside the next launch."""
    meta = str(tmp_path / "job.json")
    h = _Job(
        name="j", runs_dir=str(tmp_path), store="", pid=0, command=[sys.executable, "-c", MIXED]
    )
    h.start(meta)
    hidden = plain = None
    try:
        hidden = _child_of(h.log_path, h.proc)
        tail = detached.log_tail(h.log_path).splitlines()
        plain = int(next(x for x in tail if re.fullmatch(r"plain \d+", x)).split()[1])
        assert h.proc.wait(timeout=30) == 3
        assert os.getpgid(hidden) == os.getpgid(plain) == h.pid
        stale = _Job(**detached.read_json(meta))
        assert stale.kill(timeout=0.5)
        assert not detached.pid_alive(plain) and not detached.pid_alive(hidden)
        detached.refuse_if_running(meta, "job 'j'")
    finally:
        _end(h, hidden)
        if plain is not None and detached.pid_alive(plain):
            os.kill(plain, signal.SIGKILL)


def test_a_handle_write_that_fails_leaves_the_old_file_whole(tmp_path):
    """launch.json is what refuses a second launch and what a new kernel attaches by: a write
    that fails part-way must leave the previous file as it was, never a truncated one that reads
    as "no run".  A full disk, made real: a process whose files may not grow past 64 bytes."""
    meta = str(tmp_path / "launch.json")
    detached.write_json(meta, {"name": "x", "pid": 123})  # 30 bytes
    code = (
        "import resource, signal, sys\n"
        "from fiblab.jobs import detached\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))\n"
        "try:\n"
        "    detached.write_json(sys.argv[1], {'name': 'x', 'pid': 124, 'log': 'y' * 200})\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, meta], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert done.stdout.startswith("refused"), done.stderr[-2000:]  # the write did fail
    assert detached.read_json(meta) == {"name": "x", "pid": 123}
    assert os.listdir(tmp_path) == ["launch.json"]  # and left no temporary beside it


def test_start_gives_the_callers_env_precedence_over_the_kernels(tmp_path, monkeypatch):
    """``env=`` is what the caller asked for (CUDA_VISIBLE_DEVICES='', a thread count): it must
    win over the same variable in the kernel's own environment, not be silently overridden."""
    monkeypatch.setenv("FIBLAB_TEST_WHO", "kernel")
    log = str(tmp_path / "env.log")
    code = "import os; print('who=' + os.environ['FIBLAB_TEST_WHO'], flush=True)"
    p = detached.start([sys.executable, "-c", code], log, env={"FIBLAB_TEST_WHO": "caller"})
    assert p.wait(timeout=30) == 0
    assert detached.log_tail(log).splitlines()[-1] == "who=caller"


def test_wait_exit_reads_the_process_once_more_after_it_ended():
    """A panel's ``wait`` shows what its last ``on_poll`` (a refresh) read: that read must come
    after the process ended, or the panel keeps "running" for a finished job (the search
    panel's ``run()`` then raised "ended running").  The oracle: the exit code each poll sees."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    seen = []
    detached.wait_exit(lambda: p.poll() is None, "job", p.pid, timeout=30, poll=0.05,
                       on_poll=lambda: seen.append(p.poll()))  # fmt: skip
    assert seen[0] is None and seen[-1] == 0


def test_terminate_ends_a_finished_runs_stray_and_keeps_its_state(tmp_path):
    """`fiblab.jobs.launch.terminate` on a run that had ended (its store row says done) but
    left a child running ends the child and keeps "done": marking it "failed … terminated"
    would misreport a run that finished."""
    from lab.store import Store

    store, runs = str(tmp_path / "s.db"), str(tmp_path / "runs")
    with Store(store) as st:
        st.start_run("r", {"steps": 10})
        st.set_status("r", "done")
    h = LA.RunHandle(
        name="r", runs_dir=runs, store=store, pid=0, command=[sys.executable, "-c", CRASHING],
        preset="tiny", run_dir=os.path.join(runs, "r"), steps=10, tokens_per_step=1,
        learned=False,
    )  # fmt: skip
    h.start(os.path.join(h.run_dir, "launch.json"))
    child = None
    try:
        child = _child_of(h.log_path, h.proc)
        assert h.proc.wait(timeout=30) == 3
        LA.terminate(LA.RunHandle(**detached.read_json(os.path.join(h.run_dir, "launch.json"))),
                     timeout=0.5)  # fmt: skip
        assert not detached.pid_alive(child)
        with Store(store) as st:
            assert st.runs()["status"].tolist() == ["done"]
            assert "terminated" not in st.events("r")["kind"].tolist()
    finally:
        if child is not None and detached.pid_alive(child):
            os.kill(child, signal.SIGKILL)


# a leader that exits (3) once the test has done what it needs while the leader lives
WAITS_THEN_EXITS = (
    "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.02)\nsys.exit(3)"
)


# a training process as far as its launcher can tell: its phase file (argv 2: its run folder,
# argv 3: the phase), then a wait for the test's word (argv 1), then an exit with no final status
WRITES_PHASE_THEN_DIES = (
    "import sys\n"
    "from lab.training.phases import write_phase\n"
    "write_phase(sys.argv[2], sys.argv[3])\n" + WAITS_THEN_EXITS
)


@pytest.mark.parametrize(
    "case",
    ["died alone", "died between the checks", "launched again since", "trained from a shell",
     "trained on another host", "its loop had ended"],
)  # fmt: skip
def test_terminate_marks_failed_a_run_whose_process_died_running(tmp_path, case):
    """A run killed from outside (SIGKILL, the kernel's OOM killer) writes no final status, and
    `fiblab.jobs.launch.terminate` left its row "running" for ever (only the run list computed
    "failed"); so did a run that died between the stop's liveness check and its kill.  It marks
    it failed now — but not when the row may be another process's (a later launch rewrote the
    handle file; a live process, or one on another host, writes the run's phase file) or its
    loop said it was over (a Ray task's journal says how it ended; a resume replays it)."""
    from lab.store import Store
    from lab.training.phases import EXITING, PHASE_FILE, TRAINING, read_phase, write_phase

    store, runs, go = str(tmp_path / "s.db"), str(tmp_path / "runs"), str(tmp_path / "go")
    run_dir = os.path.join(runs, "r")
    os.makedirs(run_dir)
    phase = EXITING if case == "its loop had ended" else TRAINING
    h = LA.RunHandle(
        name="r", runs_dir=runs, store=store, pid=0, preset="tiny", run_dir=run_dir, steps=10,
        command=[sys.executable, "-c", WRITES_PHASE_THEN_DIES, go, run_dir, phase],
        tokens_per_step=1, learned=False, started=time.time(),
    )  # fmt: skip
    meta = os.path.join(h.run_dir, "launch.json")
    h.start(meta)
    try:
        with Store(store) as st:
            st.start_run("r", {"steps": 10})  # what the process writes first
        deadline = time.monotonic() + 30
        while (read_phase(run_dir) or {}).get("pid") != h.pid:
            assert time.monotonic() < deadline, h.log_tail()
            time.sleep(0.02)
        if case == "died between the checks":  # alive when asked, gone when killed

            def dies_first(timeout):
                open(go, "w").close()
                h.proc.wait(timeout=30)
                return False  # nothing of it was alive to kill

            h.kill = dies_first
            LA.terminate(h, timeout=0.5)
        else:
            open(go, "w").close()
            assert h.proc.wait(timeout=30) == 3  # gone without a final status
            stale = LA.RunHandle(**detached.read_json(meta))
            assert LA.state(stale) == "failed"
            if case == "launched again since":
                detached.write_json(meta, {**stale.to_json(), "started": stale.started + 1})
            elif case == "trained from a shell":
                write_phase(h.run_dir, TRAINING)  # this test's own (live) PID
            elif case == "trained on another host":
                path = os.path.join(run_dir, PHASE_FILE)
                with open(path) as f:
                    facts = json.load(f)
                with open(path, "w") as f:
                    json.dump({**facts, "host": "elsewhere"}, f)
            LA.terminate(stale, timeout=0.5)
        with Store(store) as st:
            row = st.runs().iloc[-1]
            events = st.events("r")["kind"].tolist()
        if case in ("died alone", "died between the checks"):
            assert (row["status"], row["message"]) == (
                "failed", "its process ended without a final status"
            )  # fmt: skip
            assert events[-1] == "died"
        else:
            assert row["status"] == "running" and "died" not in events
    finally:
        _end(h, None)


@pytest.mark.parametrize("final", ["done", "stopped", None])
def test_terminate_keeps_the_final_status_of_a_run_killed_in_its_exit(tmp_path, final):
    """A run whose loop had written its final status ("done", or "stopped" for a served stop)
    and its exit phase, killed while its process was still shutting down, was marked "failed ·
    terminated by the launcher": a finished run listed as failed.  It keeps its status now; one
    killed while it trained (``None``: its row "running", its phase "training") is still marked
    failed.  The process is held in its exit (it waits for a word that never comes), so the
    kill always lands in that window."""
    from lab.store import Store
    from lab.training.phases import EXITING, TRAINING, read_phase

    store, runs = str(tmp_path / "s.db"), str(tmp_path / "runs")
    run_dir = os.path.join(runs, "r")
    os.makedirs(run_dir)
    never = str(tmp_path / "never")
    h = LA.RunHandle(
        name="r", runs_dir=runs, store=store, pid=0, preset="tiny", run_dir=run_dir, steps=10,
        command=[sys.executable, "-c", WRITES_PHASE_THEN_DIES, never, run_dir,
                 EXITING if final else TRAINING],
        tokens_per_step=1, learned=False, started=time.time(),
    )  # fmt: skip
    with Store(store) as st:  # what the run wrote: its start, then its final status
        st.start_run("r", {"steps": 10})
        if final:
            st.set_status("r", final)
    h_meta = os.path.join(run_dir, "launch.json")
    h.start(h_meta)
    try:
        deadline = time.monotonic() + 30
        while (read_phase(run_dir) or {}).get("pid") != h.pid:
            assert time.monotonic() < deadline, h.log_tail()
            time.sleep(0.02)
        assert h.is_alive()
        LA.terminate(h, timeout=0.5)
        assert not h.is_alive()
        with Store(store) as st:
            row = st.runs().iloc[-1]
            events = st.events("r")["kind"].tolist()
        if final:
            assert row["status"] == final and "terminated" not in events
        else:
            assert (row["status"], row["message"]) == ("failed", "terminated by the launcher")
            assert events[-1] == "terminated"
        # the launching kernel knows the exit code (SIGTERM's); it read "failed" regardless
        assert h.proc.returncode == -signal.SIGTERM
        assert LA.state(h) == (final or "failed")
        assert LA.state(LA.RunHandle(**detached.read_json(h_meta))) == (final or "failed")
    finally:
        _end(h, None)


def test_terminate_writes_the_end_a_ray_runs_journal_holds(tmp_path):
    """A `--ray` run whose task had returned (its journal says "done"; its exit phase written)
    while its driver had not yet copied the journal's last lines into the store: a terminate
    then marked the run failed over a clean finish.  It replays the journal first, as the
    driver would have (`lab.store.journal.replay`), and the run reads done.  Oracle: the store's
    row and events; the held process stands in for the driver."""
    from lab.store import Store
    from lab.store.journal import JOURNAL_NAME, StoreJournal
    from lab.training.phases import EXITING, read_phase

    store, runs = str(tmp_path / "s.db"), str(tmp_path / "runs")
    run_dir = os.path.join(runs, "r")
    os.makedirs(run_dir)
    h = LA.RunHandle(
        name="r", runs_dir=runs, store=store, pid=0, preset="tiny", run_dir=run_dir, steps=10,
        command=[sys.executable, "-c", WRITES_PHASE_THEN_DIES, str(tmp_path / "never"), run_dir,
                 EXITING],
        tokens_per_step=1, learned=False, started=time.time(), spec={"ray": "local"},
    )  # fmt: skip
    task = StoreJournal(os.path.join(run_dir, JOURNAL_NAME))  # what the task wrote
    task.start_run("r", {"steps": 10})
    task.log_metrics("r", 10, {"loss": 2.5})
    task.set_status("r", "done")
    with Store(store) as st:  # what the driver had copied: the start only
        st.start_run("r", {"steps": 10})
    h.start(os.path.join(run_dir, "launch.json"))
    try:
        deadline = time.monotonic() + 30
        while (read_phase(run_dir) or {}).get("pid") != h.pid:
            assert time.monotonic() < deadline, h.log_tail()
            time.sleep(0.02)
        LA.terminate(h, timeout=0.5)
        assert not h.is_alive()
        with Store(store) as st:
            row = st.runs().iloc[-1]
            events = st.events("r")["kind"].tolist()
            steps = st.metrics("r")["step"].tolist()
        assert row["status"] == "done" and "terminated" not in events and steps == [10]
        assert LA.state(h) == "done"
    finally:
        _end(h, None)


def _earlier(seconds: float) -> str:
    """An ISO time ``seconds`` ago: when an earlier attempt of the run wrote its rows."""
    from datetime import datetime, timedelta, timezone

    return (datetime.now(timezone.utc) - timedelta(seconds=seconds)).isoformat()


@pytest.mark.parametrize("final", ["done", "stopped"])
def test_a_resume_killed_between_its_final_status_and_its_exit_phase_keeps_its_end(tmp_path, final):
    """A resumed run killed after its loop wrote its final status, before its exit phase: the
    row's ``started_at`` is the first attempt's (a resume keeps it), so that end read as the
    earlier attempt's — `terminate` marked the finished resume "failed · terminated by the
    launcher".  The resume's own "resume" event dates this attempt now (`_store_row`'s
    ``began_at``).  The process is held with its phase "training", so the kill always lands in
    that window.  Oracle: the store's row and events, and `state` in both kernels."""
    from lab.store import Store
    from lab.training.phases import TRAINING, read_phase

    store, runs = str(tmp_path / "s.db"), str(tmp_path / "runs")
    run_dir = os.path.join(runs, "r")
    os.makedirs(run_dir)
    with Store(store) as st:  # the first attempt, ten minutes ago: started, stopped by request
        st.start_run("r", {"steps": 10}, at=_earlier(600))
        st.log_event("r", "start", "step 0", at=_earlier(600))
        st.set_status("r", "stopped", "stopped at step 4 by request", at=_earlier(590))
    h = LA.RunHandle(
        name="r", runs_dir=runs, store=store, pid=0, preset="tiny", run_dir=run_dir, steps=10,
        command=[sys.executable, "-c", WRITES_PHASE_THEN_DIES, str(tmp_path / "never"), run_dir,
                 TRAINING],
        tokens_per_step=1, learned=False, started=time.time(),
        events_before=LA._events_now(store),  # as `launch` notes it
    )  # fmt: skip
    meta = os.path.join(run_dir, "launch.json")
    h.start(meta)
    try:
        deadline = time.monotonic() + 30
        while (read_phase(run_dir) or {}).get("pid") != h.pid:
            assert time.monotonic() < deadline, h.log_tail()
            time.sleep(0.02)
        with Store(store) as st:  # what the resume wrote, up to its final status
            st.start_run("r", {"steps": 10}, resume=True)
            st.log_event("r", "resume", "step 4")
            st.set_status("r", final)
        # alive, its loop over: shutting down ("done" says so for a finished run)
        assert LA.state(h) == ("done" if final == "done" else "stopping")
        LA.terminate(h, timeout=0.5)
        assert not h.is_alive() and h.proc.returncode == -signal.SIGTERM
        with Store(store) as st:
            row = st.runs().iloc[-1]
            events = st.events("r")["kind"].tolist()
        assert row["status"] == final and "terminated" not in events
        assert LA.state(h) == final
        assert LA.state(LA.RunHandle(**detached.read_json(meta))) == final
    finally:
        _end(h, None)


def test_a_resumed_ray_run_reads_starting_until_its_task_begins(tmp_path):
    """A resumed `--ray` run's driver replays the task's journal from its first line, the
    earlier attempt's start and stop among them.  Stamped at the replay, they looked like this
    launch's: the row "started" and "stopped" as the resume began, and every view read
    "stopping" until the new task's first lines came.  The journal's times go with its lines
    now.  Oracle: `state` at each stage of what the driver has replayed (a held process
    stands in for the driver), and the row's ``started_at`` (the first attempt's)."""
    import pandas as pd

    from lab.store import Store
    from lab.store.journal import JOURNAL_NAME, StoreJournal, read_journal, replay

    store, runs = str(tmp_path / "s.db"), str(tmp_path / "runs")
    run_dir = os.path.join(runs, "r")
    os.makedirs(run_dir)
    path = os.path.join(run_dir, JOURNAL_NAME)
    task = StoreJournal(path)  # the first attempt's task
    task.start_run("r", {"steps": 10}, kind="lm", resume=False)
    task.log_event("r", "start", "step 0")
    task.log_metrics("r", 4, {"loss": 2.5})
    task.log_event("r", "stopped", "stopped at step 4 by request")
    task.set_status("r", "stopped", "stopped at step 4 by request")
    lines = read_journal(path)
    for e in lines:  # ... ten minutes ago
        e["t"] = _earlier(600)
    with open(path, "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in lines)
    with Store(store) as st:  # the first driver copied it all
        replay(read_journal(path), st)
        first = st.runs().iloc[-1]["started_at"]
    go = str(tmp_path / "go")
    h = LA.RunHandle(
        name="r", runs_dir=runs, store=store, pid=0, preset="tiny", run_dir=run_dir, steps=10,
        command=[sys.executable, "-c", WAITS_THEN_EXITS, go], tokens_per_step=1,
        learned=False, started=time.time(), spec={"ray": "local"},
        events_before=LA._events_now(store),
    )  # fmt: skip
    meta = os.path.join(run_dir, "launch.json")
    h.start(meta)
    try:

        def driver_polls() -> str:
            with Store(store) as st:
                replay(read_journal(path), st)
            return LA.state(h)

        assert driver_polls() == "starting"  # was "stopping": the old lines re-stamped
        with Store(store) as st:
            assert st.runs().iloc[-1]["started_at"] == first == pd.Timestamp(_at(lines[0]))
        task.start_run("r", {"steps": 10}, kind="lm", resume=True)  # the resumed task
        task.log_event("r", "resume", "step 4")
        assert driver_polls() == "running"
        task.set_status("r", "done")
        assert driver_polls() == "done"  # its loop over, the driver still shutting down
        with open(go, "w"):
            pass
        h.proc.wait(timeout=30)
        assert LA.state(h) == "done" and h.proc.returncode == 3  # the launching kernel
        assert LA.state(LA.RunHandle(**detached.read_json(meta))) == "done"
    finally:
        _end(h, None)


@pytest.mark.parametrize("case", ["a resume dead at once", "a Ray node an hour behind"])
def test_which_attempt_ended_is_told_by_the_stores_order_not_by_clocks(tmp_path, case):
    """Whether the row's end is this launch's was told by times within 5 s: a resume that
    died before reaching the store, seconds after the attempt before it began, read that
    attempt's "stopped"; and a Ray task on a node whose clock is an hour behind (its journal's
    times) read "failed" after a clean finish.  The handle notes the store's last event id as
    it launches; this attempt's start or resume event comes after it.  Oracle: `state` of an
    attached handle (no exit code) after the process has gone."""
    from lab.store import Store
    from lab.store.journal import JOURNAL_NAME, StoreJournal, read_journal, replay
    from lab.training.stop import mark_stopped

    store, runs = str(tmp_path / "s.db"), str(tmp_path / "runs")
    run_dir = os.path.join(runs, "r")
    os.makedirs(run_dir)
    with Store(store) as st:  # the attempt before: began two seconds ago, stopped by request
        st.start_run("r", {"steps": 10})
        st.log_event("r", "start", "step 0", at=_earlier(2))
        mark_stopped(st, "r", 4)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    h = LA.RunHandle(
        name="r", runs_dir=runs, store=store, pid=dead.pid, preset="tiny", run_dir=run_dir,
        steps=10, command=[], tokens_per_step=1, learned=False, started=time.time(),
        spec={"ray": "local"} if "Ray" in case else {}, events_before=LA._events_now(store),
    )  # fmt: skip
    if case == "a resume dead at once":
        assert LA.state(h) == "failed"
        return
    task = StoreJournal(os.path.join(run_dir, JOURNAL_NAME))
    task.start_run("r", {"steps": 10}, resume=True)
    task.log_event("r", "resume", "step 4")
    task.set_status("r", "done")
    lines = read_journal(task.path)
    for e in lines:
        e["t"] = _earlier(3600)
    with Store(store) as st:  # the driver copied it all, then exited
        replay(lines, st)
    assert LA.state(h) == "done"


@pytest.mark.parametrize("read", ["state", "snapshot"])
def test_a_stop_served_while_the_run_is_read_reads_stopping_never_running(
    tmp_path, monkeypatch, read
):
    """A run serves a stop request in this order: its final status, its exit phase, then the
    STOP file removed (`RunWatch.close`).  `state` looked for the file after reading the
    phase: a stop served between the two reads read "running" (the flake check on the AVX2
    EPYC, 1 in 5 repetitions, `test_run_finishes_and_a_stopped_run_resumes_exactly`).  Here the
    run serves it exactly there, in the reader's phase read; the process is this one (alive).
    Oracle: the run's own order — the file gone means its exit phase is on disk."""
    from lab.store import Store
    from lab.training import phases as RP
    from lab.training.stop import STOP_FILE, mark_stopped, request_stop

    store, runs = str(tmp_path / "s.db"), str(tmp_path / "runs")
    run_dir = os.path.join(runs, "r")
    os.makedirs(run_dir)
    h = LA.RunHandle(
        name="r", runs_dir=runs, store=store, pid=os.getpid(), preset="tiny", run_dir=run_dir,
        steps=80, command=[], tokens_per_step=1, learned=False, started=time.time(),
        events_before=LA._events_now(store),
    )  # fmt: skip
    with Store(store) as st:
        st.start_run("r", {"steps": 80})
        st.log_event("r", RP.START_EVENT, "step 0")
    RP.write_phase(run_dir, RP.TRAINING, step=2)
    monkeypatch.setattr(h, "is_alive", lambda: True)
    assert LA.state(h) == "running"
    request_stop(run_dir)
    real, served = LA.read_phase, []

    def read_phase_while_the_run_serves_the_stop(d):
        ph = real(d)  # the reader has the training phase; now the run ends its loop
        if not served:
            served.append(1)
            with Store(store) as st:
                mark_stopped(st, "r", 3)
            RP.write_phase(run_dir, RP.EXITING, status="stopped", step=3)
            os.remove(os.path.join(run_dir, STOP_FILE))
        return ph

    monkeypatch.setattr(LA, "read_phase", read_phase_while_the_run_serves_the_stop)
    got = LA.state(h) if read == "state" else LA.snapshot(h)["state"]
    assert served and got == "stopping"
    assert LA.state(h) == "stopping"  # read again: its loop is over, the process exiting
    monkeypatch.setattr(h, "is_alive", lambda: False)
    assert LA.state(h) == "stopped"


@pytest.mark.parametrize("case", ["trained again under its name", "its last driver copied nothing"])
def test_a_ray_runs_start_is_found_in_the_store_however_its_journal_was_copied(tmp_path, case):
    """Two ways a Ray run's start reached the store wrongly for its launcher's mark
    (`RunHandle.events_before`).  A run trained again under a finished one's name (its folder
    deleted, the store kept) logs the same words ("start", "step 0"); replay matched events by
    words only and never copied its start, so it read "failed" after a clean finish.  And a
    resume after a driver killed before it copied anything: the earlier attempt's start landed
    after the mark at the resume's first poll, and a resume that died at once read that
    attempt's "stopped".  Replay matches by time too now, and a Ray launch copies the journal
    in before it takes its mark.  Oracle: `state` of an attached handle after the process."""
    from lab.store import Store
    from lab.store.journal import JOURNAL_NAME, StoreJournal, read_journal, replay

    store, runs = str(tmp_path / "s.db"), str(tmp_path / "runs")
    run_dir = os.path.join(runs, "r")
    os.makedirs(run_dir)
    path = os.path.join(run_dir, JOURNAL_NAME)
    task = StoreJournal(path)
    task.start_run("r", {"steps": 10}, resume=False)
    task.log_event("r", "start", "step 0")
    task.set_status("r", "done" if case == "trained again under its name" else "stopped")
    with Store(store) as st:
        st.start_run("other", {})  # the store holds more than this run
        if case == "trained again under its name":  # the first training, copied; then its
            replay(read_journal(path), st)  # folder (journal and all) deleted
            os.remove(path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    h = LA.RunHandle(
        name="r", runs_dir=runs, store=store, pid=dead.pid, preset="tiny", run_dir=run_dir,
        steps=10, command=[], tokens_per_step=1, learned=False, started=time.time(),
        spec={"ray": "local"}, events_before=LA._events_now(store, run_dir),
    )  # fmt: skip
    if case == "trained again under its name":
        task.start_run("r", {"steps": 10}, resume=False)  # the new training, to its end
        task.log_event("r", "start", "step 0")
        task.set_status("r", "done")
    with Store(store) as st:  # the driver's polls
        replay(read_journal(path), st)
        replay(read_journal(path), st)
    assert LA.state(h) == ("done" if case == "trained again under its name" else "failed")


def _at(entry: dict):
    from datetime import datetime

    return datetime.fromisoformat(entry["t"])


@pytest.mark.parametrize("case", ["died alone", "left a stray", "launched again since"])
def test_a_search_stop_fails_the_trial_of_a_driver_that_died(tmp_path, case):
    """`fiblab.jobs.search_launch.request_stop` on a search whose driver had died answers False
    (it had ended), ends what it left (its pool's workers, a child here: the stop returned at
    once, leaving them writing the study) and tells FAIL to the trials it left running — also
    when nothing was left to kill (they stayed "running" until the next launch).  A trial with
    no driver recorded yet is failed only while the handle is the search's latest launch: a
    later launch's must be left alone."""
    import socket

    optuna = pytest.importorskip("optuna")
    from analysis.experiments.search.search import DRIVER_ATTR
    from fiblab.jobs import search_launch as SL
    from lab.machine.procs import process_id

    folder, go = str(tmp_path / "s"), str(tmp_path / "go")
    meta = os.path.join(folder, "search.json")
    code = CRASHING if case == "left a stray" else WAITS_THEN_EXITS
    h = SL.SearchHandle(
        name="s", runs_dir=str(tmp_path), store="", pid=0, folder=folder, space="coarse",
        objectives=["ppl"], trials=2, seed=0, storage="", command=[sys.executable, "-c", code, go],
        started=time.time() - 1,
    )  # fmt: skip
    h.start(meta)
    h.storage = "sqlite:///" + os.path.join(folder, SL.STUDY_DB)
    detached.write_json(meta, h.to_json())
    study = optuna.create_study(study_name="s", storage=h.storage)
    trial = study.ask()  # asked by the driver, which then dies mid-trial
    trial.set_user_attr(DRIVER_ATTR, f"{socket.gethostname()}:{process_id(h.pid)}")
    unmarked = study.ask()  # asked, its driver not yet recorded
    child = _child_of(h.log_path, h.proc) if case == "left a stray" else None
    try:
        open(go, "w").close()
        assert h.proc.wait(timeout=30) == 3
        stale = SL.SearchHandle(**detached.read_json(meta))
        if case == "launched again since":  # the unmarked trial may be the later launch's
            detached.write_json(meta, {**stale.to_json(), "started": stale.started + 1})
        assert SL.request_stop(stale, timeout=0.5) is False
        assert child is None or not detached.pid_alive(child)  # its pool's worker, ended
        trials = optuna.load_study(study_name="s", storage=h.storage).trials
        states = {t.number: t.state for t in trials}
        assert states[trial.number] == optuna.trial.TrialState.FAIL  # not "running" for ever
        later = case == "launched again since"
        want = optuna.trial.TrialState.RUNNING if later else optuna.trial.TrialState.FAIL
        assert states[unmarked.number] == want
    finally:
        _end(h, child)


@pytest.mark.parametrize("when", ["during its clean-up", "between its kill and its clean-up"])
def test_a_resume_launched_as_a_search_stops_keeps_its_trial(tmp_path, monkeypatch, when):
    """A search's stop kills its process, then fails the trials it left "running".  A resume
    from another kernel landing in that moment (its handle written, its first trial asked
    before its driver is recorded) had that trial failed too: the stop counted every trial
    asked since its own launch as its own.  The clean-up now holds the launch lock
    (`detached.launch_lock`: a resume waits for it), and a resume that came before it bounds
    the stopped launch's trials by its start.  Scripted: the other kernel acts inside the
    clean-up's study read (it had 3 s, enough for it unlocked) or right after the kill.
    Oracle: the study's trial states."""
    import socket
    import threading

    optuna = pytest.importorskip("optuna")
    from analysis.experiments.search.search import DRIVER_ATTR
    from fiblab.jobs import search_launch as SL
    from lab.machine.procs import process_id

    folder, go = str(tmp_path / "s"), str(tmp_path / "never")
    meta = os.path.join(folder, "search.json")
    h = SL.SearchHandle(
        name="s", runs_dir=str(tmp_path), store="", pid=0, folder=folder, space="coarse",
        objectives=["ppl"], trials=2, seed=0, storage="",
        command=[sys.executable, "-c", WAITS_THEN_EXITS, go], started=time.time() - 1,
    )  # fmt: skip
    h.start(meta)
    h.storage = "sqlite:///" + os.path.join(folder, SL.STUDY_DB)
    detached.write_json(meta, h.to_json())
    study = optuna.create_study(study_name="s", storage=h.storage)
    trial = study.ask()  # the stopped search's trial in flight, its driver recorded
    trial.set_user_attr(DRIVER_ATTR, f"{socket.gethostname()}:{process_id(h.pid)}")
    unmarked = study.ask()  # and one asked as the stop came, its driver not yet recorded
    time.sleep(0.01)  # the resume starts after it, as a launch after a dead process does
    later = []

    def second_kernel():  # a resume: its handle, then its process asks a trial
        with detached.claim(meta, "search 's'"):
            detached.write_json(meta, {**h.to_json(), "started": time.time()})
        later.append(optuna.load_study(study_name="s", storage=h.storage).ask().number)

    other = threading.Thread(target=second_kernel)
    real_load, real_kill = SL.load_study, type(h).kill

    def read_while_another_kernel_launches(hh, storage=None):
        if not other.ident:  # once
            other.start()
            other.join(3.0)  # the resume lands now, unless it must wait for the stop
        return real_load(hh, storage)

    def kill_then_another_kernel_launches(self, timeout=10.0):
        out = real_kill(self, timeout)
        second_kernel()
        return out

    if when == "during its clean-up":
        monkeypatch.setattr(SL, "load_study", read_while_another_kernel_launches)
    else:
        monkeypatch.setattr(type(h), "kill", kill_then_another_kernel_launches)
    try:
        assert SL.request_stop(h, timeout=5) is True and not h.is_alive()
        if other.ident:
            other.join(30)
        states = {t.number: t.state for t in real_load(h).trials}
        assert states[trial.number] == optuna.trial.TrialState.FAIL
        assert states[unmarked.number] == optuna.trial.TrialState.FAIL  # the stopped launch's
        assert states[later[0]] == optuna.trial.TrialState.RUNNING  # the resume's, left alone
    finally:
        _end(h, None)
