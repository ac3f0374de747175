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

__all__ = ["pid_alive", "start_ticks", "process_id", "parse_process_id"]


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start ticks) from ``/proc/PID/stat``; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces and ')'
        return rest[0], int(rest[19])
    except (OSError, IndexError, ValueError):
        return None


def start_ticks(pid: int) -> int:
    """When process ``pid`` started (clock ticks since boot); 0 where it cannot be read (gone,
    or a platform without /proc)."""
    st = _stat(pid) if pid > 0 else None
    return st[1] if st else 0


def pid_alive(pid: int, started: int = 0) -> bool:
    """Whether process `pid` exists, is not a zombie (exited, not yet reaped: it has stopped
    working, whatever `kill(pid, 0)` says) and — when ``started`` (its `start_ticks` when it
    was launched) is given and readable — is still that process, not another one that got its
    PID."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    st = _stat(pid)
    if st is None:  # no /proc here: kill(pid, 0) is all we can tell
        return True
    state, ticks = st
    if state in ("Z", "X"):
        return False
    return not (started and ticks != started)


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
