"""lab.machine.procs.pid_alive: a running child is alive; one that exited is not, before it is reaped
(a zombie: `kill(pid, 0)` alone would call it alive) and after."""

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
