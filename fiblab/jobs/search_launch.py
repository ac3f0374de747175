"""Launch a schedule search (`fiblab search …`) as a separate process, find it again, stop it.

The lifecycle is `fiblab.jobs.detached`'s, as for training runs and probe grids: the process starts
in its own session, so a busy or restarted kernel does not stop it.  Everything of a search
lives in ``<runs>/searches/<name>/``:

    search.json   the handle: name, command, pid, space, objectives, trials, storage
    search.log    the process's stdout and stderr (one line per trial)
    study.db      the Optuna study (``sqlite:///…``, study name = the search's name)
    STOP          written by `request_stop` before the process group is terminated

The study is the live state: `load_study` reads it (Optuna), `search_config` rebuilds the exact
`analysis.experiments.search.search.SearchConfig` the process runs from its recorded command (the CLI's own
parser and `fiblab.cli.search.build_config`), so nothing is derived twice.  Launching the same
name again (`resume`) continues the study until it has its trials; trials in flight when it was
stopped are lost (they stay *running* in the study and do not count).

States: ``starting`` (alive, no trial finished), ``running``, ``stopping`` (alive, stop
requested), then ``done`` (every trial finished), ``stopped`` (by request) or ``failed``.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from dataclasses import dataclass, field

from fiblab.jobs import detached
from lab.training.stop import STOP_FILE
from lab.training.stop import request_stop as write_stop
from lab.util import paths
from lab.util.checks import folder_name

SEARCHES_DIR = "searches"  # under the runs folder
META_NAME = "search.json"
LOG_NAME = "search.log"
STUDY_DB = "study.db"
LIVE = detached.LIVE
TERMINAL = detached.TERMINAL
DEFAULT_STORE = paths.store_path(paths.work_dir())
DEFAULT_RUNS = paths.runs_dir(paths.work_dir())

__all__ = [
    "SearchHandle",
    "SearchState",
    "searches_dir",
    "default_name",
    "search_command",
    "launch_search",
    "attach",
    "list_searches",
    "search_config",
    "load_study",
    "state",
    "request_stop",
    "resume",
    "wait",
]


def searches_dir(runs_dir: str = DEFAULT_RUNS) -> str:
    return os.path.join(runs_dir, SEARCHES_DIR)


@dataclass(kw_only=True)
class SearchHandle(detached.Handle):
    """One launched search (`detached.Handle`: name, pid, command, log, …)."""

    folder: str
    space: str
    objectives: list[str]
    trials: int
    seed: int
    storage: str
    extra: list[str] = field(default_factory=list)  # more `fiblab search` options

    KIND = "search"
    LOG_NAME = LOG_NAME

    @property
    def out_dir(self) -> str:
        return self.folder

    @property
    def stop_path(self) -> str:
        return os.path.join(self.folder, STOP_FILE)


@dataclass(frozen=True)
class SearchState:
    """What a search is doing at one moment: its state, trials finished / asked for, and how it
    ended (the log's last lines when it failed)."""

    name: str
    state: str
    done: int
    total: int
    message: str = ""


def default_name(space: str, objectives, seed: int) -> str:
    """``<space>-<objectives>-s<seed>`` as a folder name (``free+base`` → ``free_base``)."""
    return f"{space}-{'_'.join(objectives)}-s{seed}".replace("+", "_")


def search_command(
    space: str,
    objectives,
    trials: int,
    seed: int,
    name: str,
    storage: str,
    store: str,
    runs: str,
    extra=(),
) -> list[str]:
    """The `fiblab search` command line a search runs (also what `search_config` parses)."""
    return [
        sys.executable, "-m", "fiblab.cli", "search", space, "--objective", *objectives,
        "--trials", str(trials), "--seed", str(seed), "--study", name, "--storage", storage,
        "--store", store, "--runs", runs, *extra,
    ]  # fmt: skip


def _cli_args(h: SearchHandle):
    """The search's command, parsed by the CLI; the parser's one line as a ValueError (a
    notebook catching ValueError would miss argparse's SystemExit).  Each parser's ``error``
    raises instead of redirecting stderr, which is the whole process's: a panel's refresh
    thread would swallow, or keep, another thread's output."""
    from fiblab.cli.parser import build_parser, walk

    def refuse(message: str):
        raise ValueError(message)

    parser = build_parser()
    for _, sp in walk(parser):
        sp.error = refuse
    i = h.command.index("search")
    return parser.parse_args(h.command[i:])


def search_config(h: SearchHandle):
    """The `SearchConfig` the search's process runs (its command, parsed by the CLI)."""
    from fiblab.cli.search import build_config

    return build_config(_cli_args(h))


def continuing(
    space: str, objectives, seed: int, name: str | None, runs_dir: str, trials: int
) -> str | None:
    """What a launch under this name would continue, in words (None for a new search): an
    existing study keeps its trials and runs on to ``trials`` in all, which a user raising the
    trial count of a finished search should be told, not discover."""
    from analysis.experiments.search.search import finished_trials

    name = name or default_name(space, [str(o) for o in objectives], seed)
    folder = os.path.join(searches_dir(runs_dir), name)
    meta = detached.read_json(os.path.join(folder, META_NAME))
    if meta is None:
        return None
    h = attach(name, runs_dir)
    study = load_study(h)
    done = finished_trials(study) if study is not None else 0
    more = max(0, trials - done)
    return (
        f"search {name!r} exists with {done} finished trial{'' if done == 1 else 's'}: this "
        f"launch continues its study to {trials} in all ({more} more); another name starts a "
        f"fresh one"
    )


def launch_search(
    space: str,
    objectives=("distinct",),
    trials: int = 20,
    seed: int = 0,
    name: str | None = None,
    *,
    extra=(),
    store: str | None = DEFAULT_STORE,
    runs_dir: str = DEFAULT_RUNS,
    env: dict | None = None,
    cwd: str | None = None,
) -> SearchHandle:
    """Start ``fiblab search SPACE --objective … --trials N`` in its own session and return its
    handle.  Bad input fails here, before anything starts (the CLI's parser and `build_config`);
    a name that holds a search of another space or other objectives is refused."""
    objectives = [str(o) for o in objectives]
    name = folder_name(
        name or default_name(space, objectives, seed), "search", "linear-distinct-s0"
    )
    folder = os.path.join(searches_dir(runs_dir), name)
    meta = os.path.join(folder, META_NAME)
    storage = "sqlite:///" + os.path.abspath(os.path.join(folder, STUDY_DB))
    cmd = search_command(
        space, objectives, trials, seed, name, storage, store or "", runs_dir, list(extra)
    )
    h = SearchHandle(
        name=name, folder=folder, runs_dir=runs_dir, store=store or "", pid=-1, command=cmd,
        space=space, objectives=objectives, trials=trials, seed=seed, storage=storage,
        extra=list(extra), started=time.time(), env=dict(env or {}), cwd=cwd,
    )  # fmt: skip
    from fiblab.cli.search import build_config, check_ray_args

    args = _cli_args(h)  # argparse takes a prefix (--stud): compare what it parsed
    given = {"--study": args.study, "--storage": args.storage, "--store": args.store or "",
             "--runs": args.runs}  # fmt: skip
    owned = {"--study": name, "--storage": storage, "--store": store or "", "--runs": runs_dir}
    changed = sorted(k for k in owned if given[k] != owned[k])
    if changed:  # the handle reads and cleans the study and folders it names itself
        raise ValueError(
            f"extra {' '.join(changed)}: the launch sets it (name=, store=, runs_dir=); drop it "
            f"from extra"
        )
    check_ray_args(args)  # --ray reachable, --jobs/--ray-parallel that fit with it
    build_config(args)  # a ValueError (bad space, objective…) before starting
    with detached.claim(meta, f"search {name!r}"):  # alone from the check to the handle file
        old = detached.read_json(meta)
        if old is not None and (old.get("space"), old.get("objectives")) != (space, objectives):
            raise ValueError(
                f"search {name!r} already exists for {old.get('space')} / "
                f"{'+'.join(old.get('objectives') or [])}: choose another name, or attach it"
            )
        os.makedirs(folder, exist_ok=True)
        if os.path.exists(h.stop_path):
            os.remove(h.stop_path)  # an old stop request must not mark this launch stopped
        # after the check: a stop of the search before bounds its trials by this time
        h.started = time.time()
        h.start(meta)
    return h


def attach(name: str, runs_dir: str = DEFAULT_RUNS) -> SearchHandle:
    """The handle of a search launched earlier (e.g. before a kernel restart)."""
    return detached.read_handle(searches_dir(runs_dir), name, META_NAME, SearchHandle, "search")


def list_searches(runs_dir: str = DEFAULT_RUNS) -> list[SearchHandle]:
    """Every search launched under ``runs_dir``, the most recently started first."""
    return detached.list_handles(searches_dir(runs_dir), META_NAME, SearchHandle)


def _study_created(path: str, name: str) -> bool:
    """Whether the search process has created its study in ``path``, read without writing.

    Opening Optuna's storage creates its tables when they are absent, so a reader that opens it
    while the search process is still creating them races it ("table … already exists"). The
    study's row is written after the schema, so its presence, read-only, means both are there.

    A search killed mid-write leaves a hot journal, which a read-only connection may not roll
    back (SQLITE_READONLY_ROLLBACK: every stopped search's clean-up read "no study" one time in
    ten, leaving its last trial RUNNING).  A journal is hot only when no process holds the
    database, so no writer is racing: it is rolled back here, by a connection that reads only.
    """
    import sqlite3

    if not os.path.exists(path):
        return False
    for attempt in range(2):
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
            try:
                row = con.execute("SELECT 1 FROM studies WHERE study_name = ?", (name,)).fetchone()
            finally:
                con.close()
        except sqlite3.Error as e:  # no tables yet, locked mid-creation, or a hot journal
            if attempt or getattr(e, "sqlite_errorname", "") != "SQLITE_READONLY_ROLLBACK":
                return False
            _roll_back(path)
            continue
        return row is not None
    return False


def _roll_back(path: str) -> None:
    """Roll back the hot journal a killed writer left on the SQLite database ``path``: SQLite
    does so when a read-write connection first reads."""
    import sqlite3

    con = sqlite3.connect(path, timeout=5)
    try:
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    finally:
        con.close()


def load_study(h: SearchHandle, storage=None):
    """The search's Optuna study from its storage (``storage``: an Optuna storage object to
    reuse, e.g. a panel's, else the URL), or None before the process created it.  A caller
    holding a storage object has seen the study already (a panel opens one only then): the
    read-only check for its creation is skipped, since a database locked for a moment by the
    process writing its last trial as it stops would read as "not created" — a stopped
    search's panel then showed 0 trials done."""
    from analysis.experiments.search.search import require_optuna

    optuna = require_optuna()
    if storage is None and not _study_created(os.path.join(h.folder, STUDY_DB), h.name):
        return None
    try:
        return optuna.load_study(study_name=h.name, storage=storage or h.storage)
    except KeyError:  # the database exists, the study not yet
        return None


def state(h: SearchHandle, study=None) -> SearchState:
    """The search now (``study``: an already loaded study, else it is read)."""
    from analysis.experiments.search.search import finished_trials

    alive = h.is_alive()  # before the study: a search that ends between is read at its end
    study = load_study(h) if study is None else study
    done = 0 if study is None else finished_trials(study)
    stop = os.path.exists(h.stop_path)
    message = ""
    if alive:
        st = "stopping" if stop else "running" if done else "starting"
    else:
        rc = h.proc.returncode if h.proc is not None else None
        # a clean exit, or (attached: no return code) every trial in, is done before a stop
        # asked as it finished; a stop in its rerun of the best trials (rc from the SIGTERM)
        # stays stopped
        if rc == 0 or (rc is None and done >= h.trials):
            st = "done"
        elif stop:
            st = "stopped"
        else:
            st = "failed"
            message = h.log_tail(8) or "the process exited without a word"
    return SearchState(h.name, st, done, h.trials, message)


def request_stop(h: SearchHandle, timeout: float = 10.0) -> bool:
    """Stop the search now: STOP is written, then the job terminated (`Handle.kill`: the trials in
    flight are lost; finished ones stay in the study and the store).  False if it had ended;
    what a crashed driver left in its group (its pool's workers, `detached.strays`) is ended
    all the same, and the trials it left running are told FAIL."""
    ran = h.is_alive()
    if ran:
        write_stop(h.folder)
    h.kill(timeout)
    meta = os.path.join(h.folder, META_NAME)
    # no launch during the clean-up: a resume from another kernel in that moment asked a
    # trial this stop then failed (it waits on the lock for these milliseconds); one that came
    # before it bounds which unmarked trials were this launch's
    with detached.launch_lock(meta):
        later = detached.read_json(meta) or {}
        until = math.inf if h.is_latest(meta) else float(later.get("started") or 0.0)
        _fail_abandoned(h, until)
    return ran


def _fail_abandoned(h: SearchHandle, until: float) -> list[int]:
    """The trials the stopped process left running, told FAIL now (in the study and the
    store), so the panel never shows a stopped search with a trial "running": those whose
    recorded driver has gone, and those asked by this launch but left before their driver was
    recorded — begun after it started and before ``until`` (the next launch's start, when one
    has rewritten the handle file; its trials must be left alone)."""
    from analysis.experiments.search.search import (
        DRIVER_ATTR,
        fail_abandoned,
        mark_failed,
        require_optuna,
        trial_run_name,
    )

    study = load_study(h)
    if study is None:
        return []
    from lab.store import Store

    optuna = require_optuna()
    with Store(h.store) if h.store else contextlib.nullcontext() as st:
        out = fail_abandoned(study, h.name, st)
        # a trial asked but killed before its driver was recorded: started by this launch
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            begun = t.datetime_start.timestamp() if t.datetime_start else 0.0
            if not t.user_attrs.get(DRIVER_ATTR) and h.started - 1 <= begun < until:
                study.tell(t.number, state=optuna.trial.TrialState.FAIL)
                mark_failed(st, trial_run_name(h.name, t.number), "its search stopped")
                out.append(t.number)
    return out


def resume(h: SearchHandle) -> SearchHandle:
    """Launch a stopped (or failed) search again: the study continues to its trials."""
    if h.is_alive():
        raise ValueError(f"search {h.name!r} is still running (pid {h.pid}): stop it first")
    return launch_search(
        h.space, h.objectives, h.trials, h.seed, h.name, extra=h.extra, store=h.store,
        runs_dir=h.runs_dir, env=h.env or None, cwd=h.cwd,
    )  # fmt: skip


def wait(h: SearchHandle, timeout: float | None = None, poll: float = 0.5, on_poll=None) -> str:
    """Block until the process exits; returns the final state's word."""
    h.wait_exit(timeout, poll, on_poll)
    return state(h).state
