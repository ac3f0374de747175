"""Launch a probe grid as a separate process, watch it through its live files, stop it, resume it.

The way `fiblab.jobs.launch` runs training: a `probes.gridspec.GridSpec` is checked here (its cells
and settings are built first, so bad input fails at once), then ``python -m fiblab.cli probe …
--live <grid folder>`` starts in a new session (`fiblab.jobs.detached`), so neither a busy nor a
restarted kernel stops it.  Everything of a grid lives in ``<runs>/probe-grids/<name>/``:

    grid.json      the handle: name, spec, command, pid (what `attach` and `list_grids` read)
    grid.log       the process's stdout and stderr
    results.jsonl  one record per finished cell (`probes.grid.run_grid`: resumable)
    progress.json, live/*.json, STOP    the live state and the stop request (`probes.live`)

The grid process is the experiment store's one writer: it logs each record as its cell
finishes; a notebook only reads.

    h = launch_grid(GridSpec(scale="tiny", depths=(2,), seeds=(0, 1)), name="try")
    snapshot(h)       # state, cells done / total, the running cells' step, loss, α, accuracy, ETA
    request_stop(h)   # the running cells are abandoned between two steps; finished ones kept
    h = resume(h)     # the same command again: only the cells not in results.jsonl train
    wait(h)           # -> "done" | "stopped" | "failed"

States: ``starting`` (the process is alive and has not reached its cells: Python and torch
load), ``running``, ``stopping`` (alive, a stop requested), and after it exits ``done``,
``stopped`` (by request; resumable) or ``failed`` (the log's last lines say why).
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field, replace

from fiblab.jobs import detached
from fiblab.jobs.probe_progress import activity, cell_overhead, eta_seconds
from lab.training.stop import request_stop as _write_stop
from lab.training.stop import stop_requested
from lab.util import paths
from lab.util.checks import folder_name
from probes import live as LV
from probes.grid import append_record, load_records
from probes.gridspec import GridSpec

GRIDS_DIR = "probe-grids"  # under the runs folder
META_NAME = "grid.json"
LOG_NAME = "grid.log"
RESULTS_NAME = "results.jsonl"
TERMINAL = detached.TERMINAL
LIVE = detached.LIVE
DEFAULT_STORE = paths.store_path(paths.work_dir())
DEFAULT_RUNS = paths.runs_dir(paths.work_dir())

__all__ = [
    "GridHandle",
    "GridSnapshot",
    "grids_dir",
    "grid_command",
    "legacy_results",
    "adopt_records",
    "default_name",
    "same_grid",
    "launch_grid",
    "attach",
    "list_grids",
    "state",
    "snapshot",
    "eta_seconds",
    "grid_lanes",
    "request_stop",
    "resume",
    "terminate",
    "wait",
    "TERMINAL",
]


def grids_dir(runs_dir: str = DEFAULT_RUNS) -> str:
    return os.path.join(runs_dir, GRIDS_DIR)


@dataclass(kw_only=True)
class GridHandle(detached.Handle):
    """One launched probe grid (`detached.Handle`: name, pid, command, log, …)."""

    grid_dir: str
    spec: dict  # GridSpec.to_dict()
    keys: list[str]  # the cells' record names, in training order
    depths: list[int]  # each cell's depth (the ETA scales step times by it)
    steps: int  # steps per cell

    KIND = "probe grid"
    LOG_NAME = LOG_NAME

    @property
    def out_dir(self) -> str:
        return self.grid_dir

    @property
    def results_path(self) -> str:
        return os.path.join(self.grid_dir, RESULTS_NAME)

    def grid_spec(self) -> GridSpec:
        return GridSpec.from_dict(self.spec)


@dataclass(frozen=True)
class GridSnapshot:
    """What a live view shows of a grid, read at one moment.

    ``records``: the finished cells (results.jsonl, grid order); ``running``: the live files of
    the cells training now (partial records: step, phase, loss_now, alphas, acc, trajectory…);
    ``activity``: what is happening, in words; ``eta_s``: seconds left, NaN when unknown (no
    step measured yet) or when the grid is not running; ``message``: how it ended (the log's
    last lines when it failed)."""

    name: str
    state: str
    total: int
    done: int
    steps: int
    records: list = field(default_factory=list)
    running: list = field(default_factory=list)
    activity: str = ""
    eta_s: float = math.nan
    message: str = ""
    returncode: int | None = None
    trained_now: int = 0  # cells this launch trained (the others were in the results file)

    @property
    def steps_done(self) -> int:
        """Optimizer steps of this grid done so far (finished cells count whole)."""
        return self.done * self.steps + sum(int(r.get("step", 0)) for r in self.running)

    @property
    def steps_total(self) -> int:
        return self.total * self.steps


def same_grid(meta: dict | None, spec: GridSpec) -> bool:
    """Whether a grid.json describes ``spec``'s grid (every setting but ``jobs`` and ``ray``,
    which change no result; record names alone do not tell, e.g. marker distances are not in
    them)."""
    if meta is None:
        return False
    old = {k: v for k, v in (meta.get("spec") or {}).items() if k not in ("jobs", "ray")}
    try:
        return GridSpec.from_dict(old) == replace(spec, jobs=GridSpec.jobs, ray=GridSpec.ray)
    except (TypeError, ValueError):
        return False


def default_name(spec: GridSpec, runs_dir: str = DEFAULT_RUNS) -> str:
    """``<task>-<scale>``, or ``-2``, ``-3``… when that name holds another grid; the same grid
    keeps its name (launching it again continues it)."""
    base = f"{spec.task}-{spec.scale}"
    for i in range(1, 1000):
        name = base if i == 1 else f"{base}-{i}"
        old = detached.read_json(os.path.join(grids_dir(runs_dir), name, META_NAME))
        if old is None or same_grid(old, spec):
            return name
    raise ValueError(f"no free grid name {base}-N under {grids_dir(runs_dir)}: give one")


def legacy_results(spec: GridSpec, runs_dir: str = DEFAULT_RUNS) -> str:
    """The results file notebook 02 and ``fiblab probe`` used before grids had folders (and the
    CLI's default ``--out``): ``<runs>/probes/<task>-<scale>.jsonl``."""
    return os.path.join(runs_dir, "probes", f"{spec.task}-{spec.scale}.jsonl")


def adopt_records(results_path: str, spec: GridSpec, runs_dir: str = DEFAULT_RUNS) -> int:
    """Start a new grid's results file with the cells `legacy_results` already holds (so a grid
    trained in the kernel before is not trained again); returns how many.  Only for a grid
    without a results file, and only at the scale's marker distances (that file did not tell
    other distances apart)."""
    old = legacy_results(spec, runs_dir)
    if os.path.exists(results_path) or not os.path.exists(old):
        return 0
    settings = spec.settings()
    if spec.task == "marked" and spec.distances:
        from probes.settings import TASK_SCALES

        if tuple(spec.distances) != tuple(TASK_SCALES["marked"][spec.scale].task.distances):
            return 0
    keys = [c.key(settings) for c in spec.cells()]
    found = {r.get("key"): r for r in load_records(old)}
    kept = [found[k] for k in keys if k in found]
    for rec in kept:
        append_record(results_path, rec)
    return len(kept)


def grid_command(
    spec: GridSpec, out: str, live_dir: str, store: str = "", python: str | None = None
) -> list[str]:
    """The argv that trains ``spec``'s cells into ``out`` and reports into ``live_dir`` (every
    setting the spec changes is passed explicitly). Pure: starts nothing."""
    settings = spec.settings()
    cmd = [python or sys.executable, "-m", "fiblab.cli", "probe", spec.task]
    cmd += ["--scale", spec.scale, "--mechanisms", *spec.mechanisms]
    cmd += ["--depths", *map(str, spec.depths), "--init", *(spec.inits or ("uniform",))]
    cmd += ["--seeds", *map(str, spec.seeds)]
    if spec.task == "shift":
        cmd += ["--distances", *map(str, spec.distances)]
    elif spec.task == "marked" and spec.distances:
        cmd += ["--marker-distances", *map(str, spec.distances)]
    if spec.steps:
        cmd += ["--steps", str(settings.steps), "--log-every", str(settings.log_every)]
    cmd += ["--precision", spec.precision]
    cmd += ["--ray", spec.ray] if spec.ray else ["--jobs", str(spec.jobs)]
    return cmd + ["--out", out, "--store", store or "", "--live", live_dir]


def launch_grid(
    spec: GridSpec,
    name: str | None = None,
    *,
    store: str | None = DEFAULT_STORE,
    runs_dir: str = DEFAULT_RUNS,
    env: dict | None = None,
    cwd: str | None = None,
) -> GridHandle:
    """Start ``spec``'s grid in its own process session and return its handle.

    A grid folder that already holds this name with the same settings is continued (its
    finished cells are skipped: that is `resume`, which may change ``jobs``); with other
    settings it is refused.  A new grid starts with the cells the older shared results file
    holds (`adopt_records`)."""
    cells = spec.cells()  # validates before any work
    settings = spec.settings()
    if store:  # a file that is no store fails here, not in the process
        from lab.store.connection import check_file

        check_file(store)
    if spec.ray:
        from fiblab.cluster.ray_cluster import check_reachable

        check_reachable(spec.ray)
    keys = [c.key(settings) for c in cells]
    name = folder_name(name or default_name(spec, runs_dir), "grid", "marked-quick")
    folder = os.path.join(grids_dir(runs_dir), name)
    meta = os.path.join(folder, META_NAME)
    with detached.claim(meta, f"probe grid {name!r}"):  # alone from the check to the handle file
        old = detached.read_json(meta)
        if old is not None and not same_grid(old, spec):
            raise ValueError(
                f"probe grid {name!r} already exists with other settings "
                f"({GridSpec.from_dict(old.get('spec', {})).describe()}): choose another name, "
                f"or attach it to see it"
            )
        os.makedirs(folder, exist_ok=True)
        LV.clear(folder)  # an old stop request must not fire, old live files must not show
        adopt_records(os.path.join(folder, RESULTS_NAME), spec, runs_dir)
        cmd = grid_command(spec, os.path.join(folder, RESULTS_NAME), folder, store or "")
        h = GridHandle(
            name=name,
            grid_dir=folder,
            runs_dir=runs_dir,
            store=store or "",
            pid=-1,
            command=cmd,
            spec=spec.to_dict(),
            keys=keys,
            depths=[c.depth for c in cells],
            steps=settings.steps,
            started=time.time(),
            env=dict(env or {}),
            cwd=cwd,
        )
        h.start(meta)
    return h


def attach(name: str, runs_dir: str = DEFAULT_RUNS) -> GridHandle:
    """The handle of a grid launched earlier (e.g. before a kernel restart), from grid.json."""
    return detached.read_handle(grids_dir(runs_dir), name, META_NAME, GridHandle, "probe grid")


def list_grids(runs_dir: str = DEFAULT_RUNS) -> list[GridHandle]:
    """Every grid launched under ``runs_dir``, the most recently started first."""
    return detached.list_handles(grids_dir(runs_dir), META_NAME, GridHandle)


def _progress(h: GridHandle) -> dict | None:
    """progress.json when the process of this handle wrote it (not an earlier launch's)."""
    p = LV.read_progress(h.grid_dir)
    return p if p is not None and p.get("pid") == h.pid else None


def state(h: GridHandle) -> str:
    """starting | running | stopping | done | stopped | failed (see the module docstring).
    Liveness first, then progress.json: a grid that writes its end and exits between the two
    reads is then read with its end, never as dead without one ("failed")."""
    alive = h.is_alive()
    prog = _progress(h)
    if alive:
        if stop_requested(h.grid_dir):
            return "stopping"
        return "running" if prog is not None else "starting"
    # its own word on how it ended counts, whatever the exit code: a grid killed in its exit
    # after writing it (`terminate`) read "failed" in the launching kernel, its end elsewhere
    end = (prog or {}).get("exit")
    return end if end in ("done", "stopped") else "failed"


def grid_lanes(spec: dict, prog: dict) -> int | None:
    """Cells the grid trains at once: its jobs here; on Ray, what the grid process found the
    cluster holds (progress.json's ``lanes``), None until it says (no ETA rather than one for
    a cell at a time)."""
    if spec.get("ray"):
        lanes = prog.get("lanes")
        return int(lanes) if lanes else None
    return int(spec.get("jobs", 1))


def snapshot(h: GridHandle) -> GridSnapshot:
    """The grid now: state, finished records, running cells, activity, ETA, message."""
    st = state(h)
    prog = _progress(h) or {}
    found = {r["key"]: r for r in load_records(h.results_path)}
    records = [found[k] for k in h.keys if k in found]
    running = [r for r in LV.read_live(h.grid_dir) if r["key"] in h.keys and r["key"] not in found]
    if st not in LIVE:
        running = []  # a dead process's files are stale
    depth_of = dict(zip(h.keys, h.depths))
    pending = [
        depth_of[k] for k in h.keys if k not in found and k not in {r["key"] for r in running}
    ]
    eta = math.nan
    lanes = grid_lanes(h.spec, prog)
    if st == "running" and lanes is not None:
        trained = prog.get("trained") or {}  # cells this launch finished: their step times
        eta = eta_seconds(
            pending,
            [(r["depth"], r.get("step", 0), r["steps"], r.get("step_s")) for r in running],
            h.steps,
            lanes,
            [
                (depth_of[k], v.get("step_s"), v.get("wall_s"))
                for k, v in trained.items()
                if k in depth_of
            ],
            cell_overhead(running, trained, h.steps),
        )
    message = str(prog.get("message") or "")
    rc = h.proc.returncode if h.proc is not None else None
    if st == "failed":
        tail = h.log_tail(8)
        message = (message + "\n" if message else "") + (
            tail or "the process exited without recording a result"
        )
    return GridSnapshot(
        name=h.name,
        state=st,
        total=len(h.keys),
        done=len(records),
        steps=h.steps,
        records=records,
        running=running,
        activity=activity(st, len(h.keys), running, len(records)),
        eta_s=eta,
        message=message,
        returncode=rc,
        trained_now=len(prog.get("trained") or {}),
    )


def request_stop(h: GridHandle) -> str:
    """Ask the grid to stop: its running cells are abandoned between two steps (seconds)."""
    return _write_stop(h.grid_dir)


def resume(h: GridHandle, **changes) -> GridHandle:
    """Launch the stopped (or failed) grid again: the same command, so only the cells not in
    its results file train.  ``changes`` may alter how it runs — ``jobs``, ``ray`` (which change
    no result) and the launch's ``store``, ``env``, ``cwd`` — and nothing else: another setting
    makes other cells (launch a grid of its own), and a misspelt one was dropped unseen."""
    if h.is_alive():
        raise ValueError(
            f"probe grid {h.name!r} is still running (pid {h.pid}): stop it and wait for it "
            f"to exit before resuming"
        )
    launch_args = {"store": h.store, "env": h.env or None, "cwd": h.cwd}
    wrong = sorted(set(changes) - {"jobs", "ray", *launch_args})
    if wrong:
        raise ValueError(
            f"resume of probe grid {h.name!r} cannot change {', '.join(wrong)}: it may change "
            f"jobs, ray, store, env and cwd; for other settings launch a grid under a new name"
        )
    launch_args |= {k: v for k, v in changes.items() if k in launch_args}
    spec = GridSpec.from_dict(
        {**h.spec, **{k: changes[k] for k in ("jobs", "ray") if k in changes}}
    )
    return launch_grid(spec, h.name, runs_dir=h.runs_dir, **launch_args)


def terminate(h: GridHandle, timeout: float = 10.0) -> None:
    """Hard stop: SIGTERM to the grid's process group (SIGKILL after ``timeout``); the grid
    reads "failed" (one writing its end, a stop served, ends after it and reads that end).
    Prefer `request_stop`: both keep the finished cells."""
    h.kill(timeout)


def wait(h: GridHandle, timeout: float | None = None, poll: float = 0.5, on_poll=None) -> str:
    """Block until the process exits (calling ``on_poll()`` every ``poll`` seconds); returns
    the final `state`.  TimeoutError after ``timeout`` seconds, leaving the grid alone."""
    h.wait_exit(timeout, poll, on_poll)
    return state(h)
