"""lab.machine.procs.pid_alive: a running child is alive; one that exited is not, before it is reaped
(a zombie: `kill(pid, 0)` alone would call it alive) and after."""

import os
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
