"""lab.machine.procs.pid_alive: a running child is alive; one that exited is not, before it is reaped
(a zombie: `kill(pid, 0)` alone would call it alive) and after."""

import os
import secrets
import subprocess
import sys
import time

from lab.machine.procs import pid_alive


def test_running_zombie_and_reaped_children():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert pid_alive(p.pid)
    finally:
        p.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # killed, not waited on: a zombie until reaped
        with open(f"/proc/{p.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.02)
    assert not pid_alive(p.pid)
    p.wait()
    assert not pid_alive(p.pid)
    assert not pid_alive(0) and not pid_alive(-5)


def test_a_process_reaped_between_the_two_reads_is_gone(monkeypatch):
    """`kill(pid, 0)` may find a process that its parent reaps before ``/proc/PID/stat`` is read:
    it is gone, not alive (a search's clean-up then left its trial RUNNING).  Scripted: the
    process is reaped after the kill succeeded and before its stat file is read.  (A stat file
    that cannot be read while the process lives, /proc mounted hidepid, still reads alive.)"""
    from lab.machine import procs

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])

    def reaped_in_between(pid):
        p.kill()
        p.wait()
        return None  # its stat file: gone

    assert procs.pid_alive(p.pid)
    monkeypatch.setattr(procs, "_fields", reaped_in_between)
    assert not procs.pid_alive(p.pid)


def test_group_members_are_the_groups_live_processes_only():
    """The members a stop waits for, against the kernel's own answer (os.getpgid): a session's
    leader and its child, not this process; none once they exited (a zombie left out)."""
    from lab.machine.procs import group_members

    code = "import subprocess, time; subprocess.Popen(['sleep', '30']); time.sleep(30)"
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(group_members(p.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        members = group_members(p.pid)
        assert p.pid in members and len(members) == 2
        assert all(os.getpgid(m) == p.pid for m in members) and os.getpid() not in members
    finally:
        os.killpg(p.pid, 9)
    deadline = time.monotonic() + 10
    while group_members(p.pid) and time.monotonic() < deadline:  # p: a zombie until reaped
        time.sleep(0.02)
    assert group_members(p.pid) == [] and p.poll() is not None


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_carries_reads_the_environment_the_process_was_started_with():
    """What tells a job's strays (`fiblab.jobs.detached.strays`): the variable its launcher set,
    inherited by a child; not another value, not a name's prefix, not a process that is gone."""
    from lab.machine.procs import carries

    env = {**os.environ, "FIBLAB_TEST_TOKEN": "abc"}
    code = (
        "import subprocess, time; c = subprocess.Popen(['sleep', '30']); print(c.pid, flush=True)"
    )
    p = subprocess.Popen([sys.executable, "-c", code + "; time.sleep(30)"], env=env,
                         stdout=subprocess.PIPE, text=True)  # fmt: skip
    child = None
    try:
        child = int(p.stdout.readline())
        deadline = time.monotonic() + 10  # its exec done: the kernel shows no environment while
        while _cmdline(child) != b"sleep\x0030\x00" and time.monotonic() < deadline:  # it execs
            time.sleep(0.01)  # (seen once under load: the child read with none)
        for pid in (p.pid, child):
            assert carries(pid, "FIBLAB_TEST_TOKEN", "abc")
            assert not carries(pid, "FIBLAB_TEST_TOKEN", "ab")
            assert not carries(pid, "FIBLAB_TEST", "TOKEN=abc")  # its own entry, whole
        assert not carries(os.getpid(), "FIBLAB_TEST_TOKEN", "abc")
    finally:
        if child is not None:
            os.kill(child, 9)
        p.kill()
        p.wait()
    assert not carries(p.pid, "FIBLAB_TEST_TOKEN", "abc")


def test_carriers_and_signal_carrier_reach_the_carriers_only():
    """A job's processes outside its group (a torchrun rank, in a session of its own) are found
    by the token alone and signalled only while they still carry it: against the kernel's
    answer (the exit signal each process died of)."""
    from lab.machine.procs import carriers, signal_carrier

    t1 = secrets.token_hex(8)  # its own: another run of the suite beside this one has others
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    ours = subprocess.Popen(sleep, env={**os.environ, "FIBLAB_TEST_TOKEN": t1},
                            start_new_session=True)  # fmt: skip
    other = subprocess.Popen(sleep, env={**os.environ, "FIBLAB_TEST_TOKEN": t1 + "x"})
    try:
        deadline = time.monotonic() + 10  # both exec'd (none shows an environment meanwhile)
        while carriers("FIBLAB_TEST_TOKEN", t1) != [ours.pid] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert carriers("FIBLAB_TEST_TOKEN", t1) == [ours.pid]
        assert not signal_carrier(other.pid, "FIBLAB_TEST_TOKEN", t1, 15)
        assert signal_carrier(ours.pid, "FIBLAB_TEST_TOKEN", t1, 15)
        assert ours.wait(timeout=10) == -15 and other.poll() is None
        assert not signal_carrier(ours.pid, "FIBLAB_TEST_TOKEN", t1, 15)  # reaped: gone
        assert carriers("FIBLAB_TEST_TOKEN", t1) == []
    finally:
        for q in (ours, other):
            q.kill()
            q.wait()
