"""A process that outlives the notebook that started it: start it in its own session, record it
in a small JSON file beside its outputs, tell whether it still runs, read its log, stop it.

The three launchers use it: `fiblab.jobs.launch` (a training run, ``<runs>/<name>/launch.json``),
`fiblab.jobs.probe_launch` (a probe grid) and `fiblab.jobs.search_launch` (a search); their handles
extend `Handle`.  What each process *is* (its states, its stop request,
where its live values come from) is the launcher's; how a detached process is started, found
again after a kernel restart and killed is here, once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import secrets
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, fields
from typing import ClassVar

from lab.machine.procs import (
    carriers,
    carries,
    group_members,
    pid_alive,
    signal_carrier,
    start_ticks,
)
from lab.util import paths
from lab.util.files import atomic_write

__all__ = [
    "Handle",
    "LIVE",
    "TERMINAL",
    "pid_alive",
    "start",
    "write_json",
    "read_json",
    "claim",
    "launch_lock",
    "refuse_if_running",
    "strays",
    "job_group",
    "TOKEN_ENV",
    "log_tail",
    "kill_group",
    "wait_exit",
]

# the states of a detached run, as both launchers report them: alive, then how it ended
LIVE = ("starting", "running", "stopping")
TERMINAL = ("done", "stopped", "failed")

# set to the handle's ``token`` in a job's environment, so its children inherit it: what tells
# a job's strays once their leader is gone (`kill_group`)
TOKEN_ENV = "FIBLAB_JOB"


@dataclass(kw_only=True)
class Handle:
    """What a launcher keeps of one detached process: its name, where it writes, how it was
    started, and (in the launching process only) the `subprocess.Popen` that reaps it.

    Each launcher's handle adds what its process is (a run's preset and steps, a grid's cells, a
    search's space) and its folder (`out_dir`); its states, stop request and live values stay the
    launcher's.  Saved as JSON beside the outputs (`to_json`), so a new kernel can attach."""

    name: str
    runs_dir: str
    store: str  # '' when the process writes no store
    pid: int
    pid_start: int = 0  # the process's start time (`lab.machine.procs.start_ticks`); 0: unknown
    command: list[str]
    started: float = 0.0
    env: dict = field(default_factory=dict)  # extra environment the process was started with
    cwd: str | None = None
    token: str = ""  # TOKEN_ENV in the process's environment; '' in older handle files
    proc: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    KIND: ClassVar[str] = "process"  # how messages name it: "run", "probe grid", "search"
    LOG_NAME: ClassVar[str] = "process.log"

    @property
    def out_dir(self) -> str:
        """The folder the process writes in (its log, its handle file, its outputs)."""
        raise NotImplementedError

    @property
    def log_path(self) -> str:
        return os.path.join(self.out_dir, self.LOG_NAME)

    def to_json(self) -> dict:
        """Every field but the `Popen`, as JSON types."""
        return json.loads(
            json.dumps({f.name: getattr(self, f.name) for f in fields(self) if f.name != "proc"})
        )

    def bind(self, proc: subprocess.Popen) -> None:
        """Record the process just started for this handle: its PID and start time (which tell
        it from a later process given the same PID) and the `Popen` that reaps it."""
        self.pid, self.pid_start, self.proc = proc.pid, start_ticks(proc.pid), proc

    def start(self, meta_path: str) -> None:
        """Start ``command`` (`start`: its own session, its log at `log_path`, ``env``, in
        ``cwd`` or the project folder) and record this handle in ``meta_path``.  An interrupt
        between the two (a notebook's stop button) ends the new process: left running and
        unrecorded, no later launch would refuse a second one beside it."""
        cwd = self.cwd or str(paths.work_dir())
        self.token = secrets.token_hex(8)
        env = {**self.env, TOKEN_ENV: self.token}
        proc = start(self.command, self.log_path, env=env, cwd=cwd)
        try:
            self.bind(proc)
            write_json(meta_path, self.to_json())
        except BaseException:
            kill_group(proc.pid, lambda: proc.poll() is None, 5, self.token)
            raise

    def is_latest(self, meta_path: str) -> bool:
        """Whether ``meta_path`` still records this launch: a later launch under the name (a
        resume from another kernel) rewrites it, and what the job's files say is then its."""
        meta = read_json(meta_path) or {}
        return meta.get("pid") == self.pid and meta.get("started") == self.started

    def is_alive(self) -> bool:
        """Whether the process still runs: not exited, and not another program that got its
        PID (`lab.machine.procs.pid_alive`, the same answer the search's clean-up gets)."""
        if self.proc is not None:
            return self.proc.poll() is None
        return pid_alive(self.pid, self.pid_start)

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the process's log."""
        return log_tail(self.log_path, lines)

    def kill(self, timeout: float = 10.0) -> bool:
        """SIGTERM to the job (its process group and what carries its token outside it,
        `kill_group`), SIGKILL after ``timeout``; False if nothing of it was alive."""
        return kill_group(self.pid, self.is_alive, timeout, self.token)

    def wait_exit(self, timeout: float | None, poll: float = 0.5, on_poll=None) -> None:
        """Block while it runs (`wait_exit`); TimeoutError after ``timeout`` seconds."""
        wait_exit(self.is_alive, f"{self.KIND} {self.name!r}", self.pid, timeout, poll, on_poll)


def start(cmd: list[str], log_path: str, *, env: dict | None = None, cwd: str | None = None):
    """Start `cmd` in a new session (a kernel interrupt or restart does not reach it), stdout and
    stderr appended to `log_path` after a dated header line; returns the `subprocess.Popen`."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"\n== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
        log.flush()
        return subprocess.Popen(
            cmd,
            cwd=cwd,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def write_json(path: str, data: dict) -> None:
    """Write `data` atomically (a reader never sees half a file)."""
    atomic_write(path, json.dumps(data, indent=1))


def read_json(path: str) -> dict | None:
    """The JSON object at `path`, or None when it is missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_handle(top: str, name: str, meta_name: str, cls, what: str):
    """The handle (``cls(**json)``) of the process ``name`` launched earlier under ``top``
    (e.g. before a kernel restart); a ValueError naming the folder when there is none."""
    meta = os.path.join(top, name, meta_name)
    d = read_json(meta)
    if d is None:
        raise ValueError(
            f"no {what} {name!r} under {top} (no {meta}): launch it, or pass the runs folder it "
            f"was launched with"
        )
    return cls(**d)


def list_handles(top: str, meta_name: str, cls) -> list:
    """Every handle launched under ``top`` (one folder each), the most recently started first;
    a file another version wrote (fields this ``cls`` does not take) is skipped."""
    out = []
    if os.path.isdir(top):
        for entry in os.scandir(top):
            d = read_json(os.path.join(entry.path, meta_name))
            if d is not None:
                try:
                    out.append(cls(**d))
                except TypeError:  # another version's file: not ours to show
                    continue
    return sorted(out, key=lambda h: h.started, reverse=True)


CLAIM_NAME = ".launching.lock"  # beside the jobs' folders
CLAIM_WAIT_S = 30.0  # how long a launch waits for another one of the same folder
# what ``flock`` answers on storage that cannot lock (NFS without lockd, Lustre mounted noflock)
NO_LOCKS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}


def lock_path(meta_path: str, local: bool = False) -> str:
    """The lock file of launches into the folder that holds ``meta_path``'s job folder:
    `CLAIM_NAME` there (every kernel, whatever its temp folder, finds it), or with ``local``
    one in this user's temp folder keyed by that folder's real path — where the runs folder's
    storage cannot lock (`refuse_if_running` sees this host's processes only, so a lock of this
    host's launches is what it guards)."""
    parent = os.path.dirname(os.path.dirname(os.path.abspath(meta_path)))
    if not local:
        return os.path.join(parent, CLAIM_NAME)
    folder = os.path.join(tempfile.gettempdir(), f"fiblab-launch-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    if os.stat(folder).st_mode & 0o077:  # no other user may take (and keep) these locks
        os.chmod(folder, 0o700)
    key = hashlib.sha1(os.path.realpath(parent).encode()).hexdigest()[:16]
    return os.path.join(folder, key + ".lock")


@contextlib.contextmanager
def launch_lock(meta_path: str):
    """An exclusive lock on launching the job whose handle file is ``meta_path`` (``flock`` on
    `lock_path`); it goes with the file's close, or with a killed kernel.  `claim` holds it from
    the liveness check to the new handle file; a search's stop holds it to tell its launch's
    trials from a resume's.  A holder that never lets go (a kernel paused in a debugger, a
    process forked from one) fails the wait after `CLAIM_WAIT_S` with a line naming the file."""
    path = lock_path(meta_path)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lock = open(path, "a")
        _take(lock, path)
    except OSError as e:
        if e.errno not in NO_LOCKS | {errno.EACCES, errno.EPERM}:
            raise
        path = lock_path(meta_path, local=True)  # storage that cannot lock, or not ours
        lock = open(path, "a")
        _take(lock, path)
    try:
        yield
    finally:
        lock.close()


def _take(lock, path: str) -> None:
    """``flock`` ``lock`` exclusively, polling until `CLAIM_WAIT_S` has passed."""
    deadline = time.monotonic() + CLAIM_WAIT_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                lock.close()
                raise ValueError(
                    f"another launch or stop of a job beside this one has held {path} for "
                    f"{CLAIM_WAIT_S:.0f} s: let it finish, or end the process that holds it "
                    f"(fuser {path})"
                ) from None
            time.sleep(0.01)
        except OSError:
            lock.close()
            raise


@contextlib.contextmanager
def claim(meta_path: str, what: str):
    """Launch the job whose handle file is ``meta_path`` alone: `refuse_if_running`, then the
    caller's writes and `Handle.start`, under `launch_lock`.  Two kernels launching one name in
    the same milliseconds both passed the check before either wrote its handle, and two
    processes wrote one folder; now the second waits the first one's few milliseconds, then
    sees it running."""
    with launch_lock(meta_path):
        refuse_if_running(meta_path, what)
        yield


def refuse_if_running(meta_path: str, what: str) -> None:
    """ValueError if the process recorded in `meta_path` (its ``pid`` and ``pid_start``) still
    runs, or a child of it (`strays`) does: it may still write the job's files."""
    old = read_json(meta_path) or {}
    pid = int(old.get("pid", -1))
    if pid_alive(pid, int(old.get("pid_start", 0))):
        raise ValueError(
            f"{what} is already running (pid {pid}): stop it first, or launch under another name"
        )
    left = strays(pid, str(old.get("token", "")), int(old.get("pid_start", 0)))
    if left:
        raise ValueError(
            f"{what} has ended, but processes it started still run: end them first (kill -9 "
            f"{' '.join(map(str, left))}), or launch under another name"
        )


def strays(pid: int, token: str, started: int = 0) -> list[int]:
    """What is left of a job whose leader `pid` is gone: every process that carries its
    ``token`` (`TOKEN_ENV`) — a child in its group, a torchrun rank in a session of its own —
    and the rest of its group when one member carries it (`job_group`: a Ray worker renames
    itself over the environment the kernel shows).  [] without a token (an older handle file)
    or while the leader runs (``started``: its `start_ticks`, which tell it from a process that
    took its PID since)."""
    if not token or pid <= 0 or pid_alive(pid, started):
        return []
    return sorted(set(carriers(TOKEN_ENV, token)) | set(job_group(pid, token)))


def job_group(pid: int, token: str, led: bool = False) -> list[int]:
    """The live members of process group `pid` once its leader is gone, when the group is still
    the job's: it was followed from a live leader (``led``), or a member carries the job's
    ``token``.  While a group has a member Linux gives its number to no new process, and only
    a process of the job's own session may join it, so then every member is the job's; once it
    emptied, a later group may hold the number (a stale handle must not signal it).  []
    otherwise."""
    if pid <= 0:
        return []
    if pid_alive(pid):  # the leader lives (the caller asks its handle first), or the number
        return []  # names another process now
    members = group_members(pid)
    if led or (token and any(carries(m, TOKEN_ENV, token) for m in members)):
        return members
    return []


def log_tail(path: str, lines: int = 20) -> str:
    """The last `lines` lines of a log (carriage-return progress bars split into lines)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64_000))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.replace("\r", "\n").splitlines()[-lines:])


def kill_group(pid: int, alive, timeout: float = 10.0, token: str = "") -> bool:
    """SIGTERM to a job — the process group of its leader `pid`, and every process that
    carries its ``token`` outside it — then SIGKILL to what is left after `timeout` s;
    ``alive()`` tells whether the leader still runs.  Returns False when there was nothing to
    kill: the leader had exited and (given the token) left nothing running.

    The whole job counts, not the leader alone: a leader that exits on SIGTERM, or dies on its
    own, may leave a child that is slow to exit or never does (a data loader, a Ray worker
    with a handler of its own, in its group; a torchrun rank, in a session of its own) still
    writing the job's files beside a resume.  It returns when the group has no member left
    and each carrier seen outside it has exited (or ``timeout`` more seconds after the
    SIGKILL: one in uninterruptible sleep cannot be waited for).  The group is signalled only
    while it is the job's (`job_group`); a process outside it, only through `signal_carrier`.
    Not reached: a process outside the group that hides its environment (`carries`)."""
    # the group is followed from a live leader, or from a member with the token: it stays the
    # job's while it has a member, whatever those members carry by then
    led = alive() or bool(job_group(pid, token))  # alive first: it reaps a leader we started
    if not led and not (token and carriers(TOKEN_ENV, token)):
        return False
    outside: dict[int, int] = {}  # carriers seen outside the group: PID -> start ticks

    def state() -> tuple[bool, list[int]]:
        """(whether the job's group has a live member, the carriers outside it still running);
        one scan of each a poll.  A carrier is waited on by its PID and start time: an exiting
        process shows no environment while it still holds its files (and a GPU's memory)."""
        live = alive()
        group = set(group_members(pid) if live else job_group(pid, token, led))
        for p in carriers(TOKEN_ENV, token) if token else ():
            if p not in group:
                outside.setdefault(p, start_ticks(p))
        return live or bool(group), [p for p, t in outside.items() if pid_alive(p, t)]

    grp, rest = state()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if grp:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)
        for p in rest:
            signal_carrier(p, TOKEN_ENV, token, sig)
        deadline = time.monotonic() + timeout
        while True:
            time.sleep(0.05)
            grp, rest = state()
            if not (grp or rest):
                return True
            if time.monotonic() >= deadline:
                break
    return True


def wait_exit(alive, what: str, pid: int, timeout: float | None, poll: float, on_poll=None):
    """Block while ``alive()`` (calling ``on_poll()`` every ``poll`` seconds, and once more at the
    end).  TimeoutError naming `what` after ``timeout`` seconds, leaving the process alone."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while alive():
        if on_poll is not None:
            on_poll()
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(
                f"{what} still running after {timeout:.0f} s (pid {pid}); wait longer, or "
                f"request_stop() it"
            )
        time.sleep(poll)
    if on_poll is not None:
        on_poll()
