"""The machine's cores, shared by the lab's jobs instead of fought over (issue 30).

Torch gives every process as many spinning OpenMP threads as there are cores, so two lab jobs
side by side steal each other's cores (a training run 5.5× slower beside another).  Every
training run and probe cell registers in a machine-wide registry of live jobs and, at step
boundaries (`Share.step`), sets torch's threads to its share (`allot`): together the lab's jobs
run no more threads than cores.  `FIBLAB_THREADS` pins a job, `FIBLAB_CPU_SHARE=0` opts out,
a Ray task is pinned at its reserved CPUs.  The rules, the caps, the measurements and why
``OMP_WAIT_POLICY`` is left alone: docs/cpu_share.md.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass

from lab.machine.procs import pid_alive, start_ticks
from lab.util.files import atomic_write

ENV_DIR = "FIBLAB_JOBS_DIR"  # the registry folder (default: <tmp>/fiblab-jobs-<uid>)
ENV_THREADS = "FIBLAB_THREADS"  # pin this job to N torch threads
ENV_SHARE = "FIBLAB_CPU_SHARE"  # 0 / false / no / off: no sharing for this job
CHECK_EVERY = 1.0  # seconds between two looks at the registry from `Share.step`

_seq = itertools.count()
_pinned: int | None = None  # `pin`: this process's jobs' threads, fixed


def cores() -> int:
    """The CPUs this process may run on (its affinity): the one count the lab's machine record
    (`lab.machine.hardware`), the job share, ``--jobs`` grids, Ray's local instance and the probe
    form all use."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def sharing(environ=None) -> bool:
    """False when ``FIBLAB_CPU_SHARE`` switches sharing off."""
    env = os.environ if environ is None else environ
    return env.get(ENV_SHARE, "").strip().lower() not in ("0", "false", "no", "off")


def pin(threads: int | None) -> None:
    """Fix the jobs this process runs from now on at ``threads`` torch threads (None: back to
    ``FIBLAB_THREADS`` or the share) — a Ray task's, whose CPUs Ray reserved and whose numbers
    must not depend on what else runs on its node.  The other jobs count them as taken."""
    global _pinned
    _pinned = threads
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def pinned_threads(environ=None) -> int | None:
    """``FIBLAB_THREADS`` as a positive integer, None when unset; a ValueError when invalid."""
    text = (os.environ if environ is None else environ).get(ENV_THREADS, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{ENV_THREADS}={text!r} must be a whole number of threads >= 1")
    return int(text)


# --------------------------------------------------------------------------------------------
# the share: a pure function
# --------------------------------------------------------------------------------------------
def allot(n_cores: int, jobs: list[tuple[int, bool]]) -> list[int]:
    """Threads for each job of ``jobs`` — (cap, pinned) pairs, oldest first.

    A pinned job gets its cap.  The cores the pinned jobs leave are divided among the others,
    max-min fair: none above its cap, the rest in equal parts, the remainder one each to the
    oldest.  Every job gets at least one thread, so the sum exceeds ``n_cores`` only when the
    jobs outnumber the cores (or the pinned ones alone do)."""
    out = [cap if pinned else 0 for cap, pinned in jobs]
    budget = max(0, n_cores - sum(out))
    left = [i for i, (_, pinned) in enumerate(jobs) if not pinned]
    while left:
        share, extra = divmod(budget, len(left))
        capped = [i for i in left if jobs[i][0] <= share]
        if not capped:
            for k, i in enumerate(left):
                out[i] = share + (k < extra)
            break
        for i in capped:  # these want less than an equal part: theirs go to the others
            out[i] = jobs[i][0]
            budget -= jobs[i][0]
        left = [i for i in left if i not in capped]
    return [max(1, t) for t in out]


# --------------------------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """One live job's registry entry."""

    pid: int
    kind: str  # "train", "probe", …
    name: str
    threads: int  # torch intra-op threads it uses now
    cap: int  # the most it uses (docs/cpu_share.md: the cap)
    pinned: bool  # FIBLAB_THREADS or sharing off: never changes, counted as taken
    started: float  # time.time() at registration: the oldest gets the remainder
    pgid: int  # its process group: a launcher's job and its workers share one
    seq: int  # this process's registration number (one process, several jobs in turn)
    boot_ticks: int  # the process's start time (/proc/PID/stat): guards against PID reuse

    @property
    def key(self) -> str:
        return f"{self.pid}-{self.seq}"


def registry_dir(environ=None) -> str:
    """The registry folder: ``FIBLAB_JOBS_DIR``, else a per-user folder in the temp dir."""
    env = os.environ if environ is None else environ
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return env.get(ENV_DIR) or os.path.join(tempfile.gettempdir(), f"fiblab-jobs-{uid}")


def live_jobs(folder: str | None = None) -> list[Job]:
    """The live jobs of the registry, oldest first; entries of dead processes are removed."""
    folder = folder or registry_dir()
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".json")]
    except OSError:
        return []
    jobs = []
    for n in names:
        path = os.path.join(folder, n)
        try:
            with open(path) as f:
                job = Job(**json.load(f))
        except (OSError, ValueError, TypeError):
            continue  # vanished, being written, or another version's: not counted
        if pid_alive(job.pid, job.boot_ticks):
            jobs.append(job)
        else:
            with contextlib.suppress(OSError):
                os.remove(path)
    return sorted(jobs, key=lambda j: (j.started, j.pid, j.seq))


def _write(folder: str, job: Job) -> None:
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, job.key + ".json")
    atomic_write(path, json.dumps(asdict(job)))  # readers list *.json only


def threads_for_new_job(jobs: list[Job], n_cores: int | None = None) -> int:
    """The threads a job started now (cap: all cores, not pinned) would get beside ``jobs``."""
    n = cores() if n_cores is None else n_cores
    return allot(n, [(j.cap, j.pinned) for j in jobs] + [(n, False)])[-1]


def describe(jobs: list[Job], n_cores: int, own_pgid: int | None = None) -> str:
    """One line for a launch panel: the other lab jobs on this machine and the threads a new
    job gets (``own_pgid`` None), or those of the panel's own job (the entries of its process
    group, e.g. a grid's workers)."""
    mine = [j for j in jobs if own_pgid is not None and j.pgid == own_pgid]
    others = [j for j in jobs if j not in mine]
    what = (
        "no other lab job"
        if not others
        else f"{len(others)} other lab job" + ("s" if len(others) > 1 else "")
    )
    if others:
        what += " (" + ", ".join(f"{j.kind} {j.name}: {j.threads}" for j in others[:3])
        what += ", …)" if len(others) > 3 else ")"
    if own_pgid is None:
        t = threads_for_new_job(others, n_cores)
        return f"{n_cores} cores, {what}: a new job gets {t} thread{'s' * (t != 1)}"
    if not mine:
        return f"{n_cores} cores, {what}"
    t = sum(j.threads for j in mine)
    return f"{n_cores} cores, {what}: this job uses {t} thread{'s' * (t != 1)}"


# --------------------------------------------------------------------------------------------
# a job's membership
# --------------------------------------------------------------------------------------------
class Share:
    """This process's membership of the budget while one job runs.

        with Share("train", cfg.name) as share:
            for step in ...:
                share.rebalance_if_due()   # at most once a CHECK_EVERY s: look and set the threads

    `register` writes the entry and sets the share at once; `unregister` (also on an exception) removes the
    entry and gives torch back the threads it had before.  ``log`` is called with a line when
    the threads change."""

    def __init__(self, kind: str, name: str, folder: str | None = None, log=None):
        self.kind, self.name, self.log = kind, name, log
        self.folder = folder or registry_dir()
        self.job: Job | None = None
        self._before: int | None = None
        self._checked = 0.0

    def register(self) -> Share:
        import torch

        self._before = torch.get_num_threads()
        pin = _pinned if _pinned is not None else pinned_threads()
        pinned = pin is not None or not sharing()
        cap = pin or self._before
        if pin is not None:
            torch.set_num_threads(pin)
        pid = os.getpid()
        self.job = Job(
            pid=pid,
            kind=self.kind,
            name=self.name,
            threads=torch.get_num_threads(),
            cap=cap,
            pinned=pinned,
            started=time.time(),
            pgid=os.getpgrp() if hasattr(os, "getpgrp") else pid,
            seq=next(_seq),
            boot_ticks=start_ticks(pid),
        )
        try:
            _write(self.folder, self.job)
        except OSError:  # no registry here: this job runs as before
            self.job = None
            return self
        self.rebalance()
        return self

    def rebalance_if_due(self) -> None:
        """At a step boundary: `rebalance` if `CHECK_EVERY` seconds have passed."""
        if self.job is not None and time.monotonic() - self._checked >= CHECK_EVERY:
            self.rebalance()

    def rebalance(self) -> int:
        """Set torch's threads to this job's share of the live jobs; returns them."""
        import torch

        self._checked = time.monotonic()
        job = self.job
        if job is None:
            return torch.get_num_threads()
        if job.pinned:
            return job.threads
        jobs = live_jobs(self.folder)
        keys = [j.key for j in jobs]
        if job.key not in keys:  # our entry vanished (a clean-up elsewhere): write it back
            with contextlib.suppress(OSError):
                _write(self.folder, job)
            jobs = live_jobs(self.folder)
            keys = [j.key for j in jobs]
        if job.key not in keys:
            return job.threads
        n = cores()
        want = allot(n, [(j.cap, j.pinned) for j in jobs])[keys.index(job.key)]
        if want != job.threads:
            torch.set_num_threads(want)
            self.job = job = Job(**{**asdict(job), "threads": torch.get_num_threads()})
            with contextlib.suppress(OSError):
                _write(self.folder, job)
            if self.log is not None:
                t, k = job.threads, len(jobs)
                self.log(
                    f"{self.kind} {self.name}: {t} thread{'s' * (t != 1)} of {n} cores "
                    f"({k} lab job{'s' * (k != 1)} on this machine)"
                )
        return job.threads

    def unregister(self) -> None:
        """Remove the entry and restore the threads torch had before `register`."""
        if self.job is not None:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.folder, self.job.key + ".json"))
            self.job = None
        if self._before is not None:
            import torch

            torch.set_num_threads(self._before)
            self._before = None

    def __enter__(self) -> Share:
        return self.register()

    def __exit__(self, *exc) -> None:
        self.unregister()
