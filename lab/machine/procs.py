"""Whether a process is alive: one definition for the launchers (`fiblab.jobs.detached`) and for the
schedule search's clean-up of trials left by a killed driver (`analysis.experiments.search.search`), which may not
import the front ends."""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (exited, not yet reaped): a zombie has
    stopped working, whatever `kill(pid, 0)` says."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
