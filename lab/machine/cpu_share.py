"""The machine's cores, shared by the lab's jobs instead of fought over (issue 30).

Why.  Torch starts every process with as many intra-op threads as the machine has cores, and
its OpenMP threads *spin* while they wait for work.  Two lab jobs side by side therefore ask
for twice the cores, and each one's spinning threads steal the cores the other is computing
on.  Measured on a quiet 2-core machine: ``fiblab train --preset cpu-stagger --steps 24`` took
12.9 s alone, 71.1 s each with two at once (5.5×) and 214.5 s each with three (16.6×); the
probe step took 60 ms alone, 639–758 ms with two processes, 1.09–1.30 s with three.  With
``OMP_WAIT_POLICY=PASSIVE`` two processes ran at 108–111 ms a step each, and with one thread
each at 95–99 ms: side by side cost 3–7× the throughput of running one after the other.

What.

* a **CPU budget**.  Every training run (`lab.training.train.train`) and probe cell
  (`probes.runner.run_cell`) registers for its duration in a machine-wide registry — a folder of
  one JSON file per live job (pid, kind, name, threads, started, …) under the user's temp dir
  (``FIBLAB_JOBS_DIR`` moves it); entries of dead processes are ignored and removed.  At step
  boundaries (`Share.step`, at most once every `CHECK_EVERY` s) a job sets torch's intra-op
  threads to its share, `allot`: the cores (``os.sched_getaffinity``) divided among the live
  jobs, the remainder to the oldest, so together they use no more threads than cores (unless
  there are more jobs than cores: a job never gets fewer than one thread).  A job alone keeps
  all of them.
* **no spinning onto others' cores** follows from the share: the lab's jobs together run no more
  threads than cores, so an OpenMP thread that spins while it waits spins on a core no other
  lab job computes on.  ``OMP_WAIT_POLICY=PASSIVE`` (threads that sleep) is *not* set:
  measured on the 2-core Xeon (other load < 0.2 cores, 2 threads, 3 runs each) it made a job
  alone 1.6–1.7× slower — the probe step (demo scale, depth 2) 55–62 → 92–102 ms, a cpu-small
  LM step 146–188 → 232–242 ms — and libgomp reads it once, so a job started beside others
  would keep that cost after they end; with the share, two jobs at once ran at 0.69–0.89 of
  the time one after the other takes, three at 0.65–0.77 (benchmarks/concurrent_jobs.py).
  Beside programs that are not lab jobs, set ``OMP_WAIT_POLICY=PASSIVE`` yourself (measured
  beside one core of other load: a probe step 100–121 ms with it, 349–519 ms without).

How a job's own thread count meets the share:

* a job's **cap** is the threads it had when it joined: torch's default (all cores) for a run
  of the ``fiblab`` command, ``cores // N`` for a worker of a ``--jobs N`` grid, 1 under
  ``OMP_NUM_THREADS=1``.  The share never raises a job above its cap; it lowers it only while
  the machine's lab jobs want more than its cores.  Cores a capped job leaves are shared by the
  others (max-min fair).  A ``--jobs N`` grid alone thus runs exactly as before, and beside a
  training run its workers and the run share the cores.
* a **Ray task** is pinned at ``--ray-threads`` (`pin`): Ray reserved that many CPUs for it and
  promises the same numbers whatever the node (`fiblab.cluster.ray_cluster`); lab jobs outside Ray on
  that node take what the tasks leave.
* ``FIBLAB_THREADS=N`` **pins** this job to N threads whatever else runs; the others count its
  N as taken.  ``FIBLAB_CPU_SHARE=0`` switches sharing off for this job: it keeps torch's threads
  (counted as pinned by the others).
* torch's CPU reductions split work by thread, so a run's last bits depend on its thread count:
  a run whose numbers must not depend on what else runs (a bit-exact resume, a test against an
  oracle) pins its threads (``FIBLAB_THREADS``, or one thread: a cap of 1 is never lowered).

The registry is only advisory: a job that cannot write it (no temp dir) trains as before.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass

from lab.machine.procs import pid_alive
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
    cap: int  # the most it uses (see the module docstring)
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


def _boot_ticks(pid: int) -> int:
    """When process ``pid`` started (clock ticks since boot); 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def _alive(job: Job) -> bool:
    if not pid_alive(job.pid):
        return False
    now = _boot_ticks(job.pid)
    return not (job.boot_ticks and now and now != job.boot_ticks)  # the pid was reused


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
        if _alive(job):
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
                share.step()        # at most once a CHECK_EVERY s: look and set the threads

    `join` registers and sets the share at once; `leave` (also on an exception) removes the
    entry and gives torch back the threads it had before.  ``log`` is called with a line when
    the threads change."""

    def __init__(self, kind: str, name: str, folder: str | None = None, log=None):
        self.kind, self.name, self.log = kind, name, log
        self.folder = folder or registry_dir()
        self.job: Job | None = None
        self._before: int | None = None
        self._checked = 0.0

    def join(self) -> Share:
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
            boot_ticks=_boot_ticks(pid),
        )
        try:
            _write(self.folder, self.job)
        except OSError:  # no registry here: this job runs as before
            self.job = None
            return self
        self.rebalance()
        return self

    def step(self) -> None:
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

    def leave(self) -> None:
        """Remove the entry and restore the threads torch had before `join`."""
        if self.job is not None:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.folder, self.job.key + ".json"))
            self.job = None
        if self._before is not None:
            import torch

            torch.set_num_threads(self._before)
            self._before = None

    def __enter__(self) -> Share:
        return self.join()

    def __exit__(self, *exc) -> None:
        self.leave()
