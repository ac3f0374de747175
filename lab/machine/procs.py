"""Whether a process is alive, and whether it is still the process we started: one definition
for the launchers (`fiblab.jobs.detached`), the CPU-share registry (`lab.machine.cpu_share`) and
the schedule search's clean-up of trials left by a killed driver
(`analysis.experiments.search.search`), which may not import the front ends.

A process is named by its PID *and* its start time (clock ticks since boot, field 22 of
``/proc/PID/stat``), fixed at fork: a reused PID has another start time.  The start time is
readable for the whole life of the process — while it execs (its command line still empty) and
while it exits (its memory, and so its command line, already gone) — so every caller answers
the same for an exiting process: alive until it is a zombie or gone.
"""

from __future__ import annotations

import os
import signal

__all__ = [
    "pid_alive",
    "start_ticks",
    "group_members",
    "carries",
    "carriers",
    "signal_carrier",
    "process_id",
    "parse_process_id",
]


def _fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the name (state, ppid, pgrp, …); None where it
    cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()  # the name may hold spaces and ')'
    except (OSError, IndexError):
        return None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start ticks) from ``/proc/PID/stat``; None where it cannot be read."""
    rest = _fields(pid)
    try:
        return (rest[0], int(rest[19])) if rest else None
    except (IndexError, ValueError):
        return None


def start_ticks(pid: int) -> int:
    """When process ``pid`` started (clock ticks since boot); 0 where it cannot be read (gone,
    or a platform without /proc)."""
    st = _stat(pid) if pid > 0 else None
    return st[1] if st else 0


def _exists(pid: int) -> bool:
    """``kill(pid, 0)``'s answer: a process (or a zombie) holds the PID."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        pass
    return True


def pid_alive(pid: int, started: int = 0) -> bool:
    """Whether process `pid` exists, is not a zombie (exited, not yet reaped: it has stopped
    working, whatever `kill(pid, 0)` says) and — when ``started`` (its `start_ticks` when it
    was launched) is given and readable — is still that process, not another one that got its
    PID."""
    if pid <= 0 or not _exists(pid):
        return False
    st = _stat(pid)
    if st is None:  # reaped since, or unreadable (no /proc, hidepid): ask again
        return _exists(pid)
    state, ticks = st
    if state in ("Z", "X"):
        return False
    return not (started and ticks != started)


def group_members(pgid: int) -> list[int]:
    """The PIDs of process group ``pgid`` that still run (zombies left out: they have exited,
    and only their parent's wait ends them).  A stop asks a whole job — its leader and every
    child it started in it (a data loader, a Ray worker) — and the leader may exit
    first.  While the group has a member, Linux gives its number to no new process, so the
    members found are the job's.  [] where there is no /proc."""
    out = []
    for name in os.listdir("/proc") if os.path.isdir("/proc/self") else []:
        if name.isdigit():
            rest = _fields(name)
            if rest and len(rest) > 2 and rest[2] == str(pgid) and rest[0] not in ("Z", "X"):
                out.append(int(name))
    return out


def carries(pid: int, name: str, value: str) -> bool:
    """Whether process ``pid`` was started with ``name=value`` in its environment (read from
    ``/proc/PID/environ``, set at exec; a child started with its parent's environment, as
    `subprocess` does by default, has it too).  A job's stray children are told by it once
    their leader is gone: the group's number alone may by then be another group's.  False
    where it cannot be read (gone, a zombie, another user's, no /proc), for the moment a
    process execs (the kernel shows no environment until the new program's is set up), and
    for a process that renamed itself over it (`setproctitle`, as a Ray worker does)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{name}={value}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def carriers(name: str, value: str) -> list[int]:
    """Every process (this one left out) that `carries` ``name=value``: a job's processes
    wherever they are, in its process group or in a session of their own (torchrun starts each
    rank in one).  [] where there is no /proc."""
    me = os.getpid()
    names = os.listdir("/proc") if os.path.isdir("/proc/self") else []
    return [int(n) for n in names if n.isdigit() and int(n) != me and carries(int(n), name, value)]


def signal_carrier(pid: int, name: str, value: str, sig: int) -> bool:
    """Send ``sig`` to process ``pid`` if it still `carries` ``name=value``; False otherwise.
    The signal goes through a pidfd opened before the check, so it reaches the very process
    checked or none: one that took the PID in between is never signalled (no pidfd, Linux
    before 5.3 or a filter that refuses it: `os.kill` right after the check)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):
        fd = None
    try:
        if not carries(pid, name, value):
            return False
        if fd is not None:
            try:
                signal.pidfd_send_signal(fd, sig)
                return True
            except ProcessLookupError:
                return False
            except OSError:
                pass
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


def process_id(pid: int | None = None) -> str:
    """``PID@TICKS`` of process `pid` (default: this one): what a record keeps to find that
    very process again (`parse_process_id`, `pid_alive`)."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}@{start_ticks(pid)}"


def parse_process_id(text: str) -> tuple[int, int] | None:
    """(pid, start ticks) of a `process_id` (``PID`` alone, as older records wrote it, reads
    with ticks 0: the PID only); None when it names no process."""
    pid, _, ticks = str(text).partition("@")
    if not pid.isdigit() or (ticks and not ticks.isdigit()):
        return None
    return int(pid), int(ticks or 0)
