"""Ray for the lab's sweeps: import it, connect to a cluster, and size each task.

Ray (an optional extra, ``pip install 'fiblab[ray]'``) is imported inside these functions only,
so the rest of the lab never needs it.  ``ADDRESS`` is

- ``local``: start a Ray instance on this machine for this command (stopped when it ends);
- ``auto``: join the cluster this machine belongs to (`ray start --head` / `ray start
  --address …` ran on it; Slurm and Kubernetes set one up the same way);
- ``HOST:PORT`` (the head's GCS address) or ``ray://HOST:PORT`` (Ray Client).

Resources per task: one GPU when the cluster has GPUs (a probe cell or an LM run then uses
that GPU), else ``threads`` CPUs, and the task sets torch's intra-op threads to the same
number.  One thread per task is the default: on small CPUs the many small ops of a probe step
use one thread better than two (as `probes.grid.run_grid`'s ``jobs`` found), so a 16-core node
runs 16 cells at once; give LM runs more threads (``--ray-threads 4``) when cores are many.
The same seeds give the same numbers whatever the number of nodes (each task is a pure
function of its cell or config; torch's CPU kernels give the same result for the same number
of threads, which is why the threads are fixed per task, not per node).  A task registers
with its node's lab jobs pinned at its threads (`lab.machine.cpu_share.pin`): lab jobs outside Ray on
that node share what the tasks leave.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lab.machine.cpu_share import cores
from lab.util.checks import positive_int

RAY_MISSING = "Ray is not installed: pip install 'fiblab[ray]' (or pip install ray)"
ADDRESS_HELP = (
    "run the tasks on Ray: local (a cluster for this command on this machine), auto (the "
    "cluster this machine joined with `ray start`), or HOST:PORT / ray://HOST:PORT of a "
    "running cluster (default: no Ray)"
)
_HOST_PORT = re.compile(r"^(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")


def import_ray():
    """The ``ray`` module, or a ValueError that says how to install it."""
    try:
        import ray
    except ImportError:
        raise ValueError(RAY_MISSING) from None
    return ray


def check_address(address: str) -> str:
    """``address`` if it is ``local``, ``auto`` or ``[ray://]HOST:PORT``, else a ValueError."""
    if address in ("local", "auto") or _HOST_PORT.match(address or ""):
        return address
    raise ValueError(
        f"--ray {address!r} is not a Ray address: use local, auto, or HOST:PORT "
        f"(e.g. 10.0.0.5:6379, or ray://10.0.0.5:10001 for Ray Client)"
    )


def check_reachable(address: str, timeout: float = 3.0) -> str:
    """``address`` (`check_address`) when something accepts a connection at its HOST:PORT
    (``local`` and ``auto`` need none), else a ValueError.  Ray retries an address nobody serves
    for a minute or more, deaf to SIGTERM; this answers within ``timeout`` seconds."""
    check_address(address)
    if address in ("local", "auto"):
        return address
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as e:
        why = e.strerror or str(e) or type(e).__name__
        raise ValueError(
            f"--ray {address!r}: nothing answers at {host}:{port} ({why}): start the cluster "
            f"there (ray start --head), or use --ray local"
        ) from None
    return address


def check_threads(threads) -> int:
    """A positive integer thread count, else a ValueError naming it."""
    return positive_int(threads, "threads", "per Ray task")


def _code_root() -> str:
    """The folder holding the lab's packages (`fiblab`, `lab`, …): the workers of a local
    cluster import them from there, as this process does."""
    return str(Path(__file__).resolve().parents[2])


@contextmanager
def connect(address: str, num_cpus: int | None = None) -> Iterator[object]:
    """Ray connected to ``address`` for the ``with`` block (yields the ``ray`` module).

    An already connected Ray (a test's cluster, a notebook's session) is used as it is and left
    connected.  ``local`` starts an instance of ``num_cpus`` CPUs (default: this process's
    cores) without the dashboard, whose workers import the lab from this checkout."""
    check_reachable(address)
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    own = signal.getsignal(signal.SIGTERM)  # before `ray.init` puts its own in
    if address == "local":
        path = os.pathsep.join(p for p in (_code_root(), os.environ.get("PYTHONPATH")) if p)
        ray.init(
            address="local",  # a new instance, even where another cluster runs on this machine
            num_cpus=num_cpus or cores(),
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": path}},
        )
    else:
        ray.init(address=address, log_to_driver=False)
    if callable(own) and threading.current_thread() is threading.main_thread():
        # a handler the caller put in stays (a probe grid's writes how it ended; Ray's exits
        # at once, and a grid terminated in its Ray work or its stop read "failed" with no end)
        signal.signal(signal.SIGTERM, own)
    try:
        yield ray
    finally:
        ray.shutdown()


@dataclass(frozen=True)
class TaskResources:
    """What one task asks Ray for, and the torch threads it then uses."""

    num_cpus: float
    num_gpus: float
    threads: int

    def options(self, retries: int) -> dict:
        """Ray's ``.options(...)`` for a task: these resources and ``max_retries`` (a task whose
        worker or node dies is run again, up to ``retries`` times)."""
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "max_retries": retries}

    def slots(self, cluster: dict) -> int:
        """How many of these tasks the cluster of resources ``cluster`` (Ray's
        ``cluster_resources()``) runs at once (at least 1: Ray queues the rest)."""
        n = [cluster.get("CPU", 0) // self.num_cpus] if self.num_cpus else []
        n += [cluster.get("GPU", 0) // self.num_gpus] if self.num_gpus else []
        return max(1, int(min(n))) if n else 1

    def describe(self) -> str:
        if self.num_gpus:
            return f"1 GPU and {self.threads} CPU thread(s) per task"
        return f"{self.threads} CPU thread(s) per task"


def task_resources(ray, threads: int = 1, gpus: bool | None = None) -> TaskResources:
    """One GPU per task when the cluster has GPUs (``gpus=None`` asks the cluster; True / False
    decide), else ``threads`` CPUs per task."""
    check_threads(threads)
    if gpus is None:
        gpus = ray.cluster_resources().get("GPU", 0) > 0
    if gpus:
        return TaskResources(num_cpus=1, num_gpus=1, threads=threads)
    return TaskResources(num_cpus=threads, num_gpus=0, threads=threads)
