"""Launch a training run as a separate process, watch it through the store, stop it, resume it.

A notebook (or any Python session) builds the run's TrainConfig here (a preset and typed
overrides, `lab.lm.typedconfig`), writes it to ``<runs>/<name>/launch-config.json`` and starts
``python -m fiblab.cli train --config <that file>`` — or, when several GPUs are visible,
``python -m torch.distributed.run --standalone --nproc_per_node=N -m fiblab.cli train …`` — in a
new session (``start_new_session=True``), so neither a busy nor a restarted kernel stops it.  The
process trains exactly the config that was checked here (no values pass through strings).  Its
stdout and stderr go to ``<runs>/<name>/launch.log``; ``<runs>/<name>/launch.json`` records the
command and the PID, so a new kernel can `attach` to a run it did not start.

    h = launch("cpu-stagger", steps=300, store="runs/fiblab.db")
    snapshot(h)          # state, phase, step, loss, perplexity, tokens/s, ETA, curves, α per layer
    request_stop(h)      # the loop checkpoints after its current step and exits cleanly
    h = resume(h)        # continues from that checkpoint (same preset, name and overrides)
    wait(h)              # -> "done" | "stopped" | "failed"

States (`state`): ``starting`` (process alive, no step logged yet), ``running``, ``stopping``
(alive, a stop request pending, or its loop over and the process shutting down), and after exit
(or while a finished run's process shuts down) ``done``, ``stopped`` (by request; resumable) or
``failed`` (the store's message, or the log's last lines, says why).  Live values come from the
experiment store, so a run launched with ``store=''`` can only be told apart by its exit code.
What a live process is doing (``phase``: starting, preparing the data, the first step, training,
evaluating) comes from the file it writes beside its checkpoints (`lab.training.phases`), and its ETA
from its own measured step and evaluation times (`fiblab.jobs.train_eta`).  The command line itself
is built in `fiblab.jobs.train_process`.

One module (551 lines): launch, state, snapshot, stop, terminate and resume all read the same
three records (the handle file, the store's row, the phase file) under one rule of which is
newer; split, each part would import the others' private readers.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from fiblab.jobs import detached, train_eta
from fiblab.jobs.train_process import auto_nproc, gpu_count, train_command
from lab.lm.typedconfig import split_overrides, with_fields
from lab.machine.procs import parse_process_id
from lab.store import Store
from lab.store.connection import check_file
from lab.store.journal import JOURNAL_NAME, read_journal, replay
from lab.training.checkpoint import list_checkpoints
from lab.training.phases import (
    EXITING,
    RESUME_EVENT,
    START_EVENT,
    STARTING,
    TRAINING,
    clear_phase,
    read_phase,
)
from lab.training.stop import STOP_FILE
from lab.training.stop import request_stop as _touch_stop
from lab.training.trainconfig import make_config
from lab.util import paths
from lab.util.checks import positive_int
from lab.util.files import atomic_write

# where runs go by default, as the notebooks keep them (`lab.util.paths`: FIBLAB_STORE / FIBLAB_RUNS,
# else <checkout>/runs, or ./runs for an installed fiblab), resolved when this module is imported
ROOT: Path = paths.work_dir()
DEFAULT_STORE = paths.store_path(ROOT)
DEFAULT_RUNS = paths.runs_dir(ROOT)
LOG_NAME = "launch.log"
META_NAME = "launch.json"
CONFIG_NAME = "launch-config.json"  # the resolved TrainConfig the process is started with
TERMINAL = detached.TERMINAL

__all__ = [
    "RunHandle",
    "build_config",
    "launch",
    "attach",
    "list_runs",
    "resume",
    "request_stop",
    "terminate",
    "state",
    "snapshot",
    "wait",
    "TERMINAL",
]


@dataclass(kw_only=True)
class RunHandle(detached.Handle):
    """One launched training run (`detached.Handle`: name, pid, command, log, …)."""

    preset: str
    run_dir: str  # <runs>/<name>: checkpoints, config, launch.log
    steps: int
    tokens_per_step: int
    learned: bool
    spec: dict = field(default_factory=dict)  # launch() arguments but env and cwd, for resume()
    # the store's last event id as this launch began (`Store.last_event_id`): its loop's start or
    # resume event comes after it.  -1: not known (a launch.json written before)
    events_before: int = -1

    KIND = "run"
    LOG_NAME = LOG_NAME

    @property
    def out_dir(self) -> str:
        return self.run_dir

    def __repr__(self) -> str:  # what a notebook prints for a returned handle
        return f"<run {self.name!r}: preset {self.preset}, {self.steps:,} steps, pid {self.pid}>"


def build_config(preset: str, *, name=None, steps=None, data=None, overrides=None, runs_dir):
    """The TrainConfig `launch` would start (ValueError naming a bad preset or override)."""
    fields = {"steps": steps, "data": data, "name": name}
    over = split_overrides(overrides)
    if "run_dir" in over and os.path.abspath(str(over["run_dir"])) != os.path.abspath(runs_dir):
        raise ValueError(  # it was dropped unseen: the launch's runs folder won
            f"override run_dir={over['run_dir']} is the launch's runs_dir here: pass "
            f"runs_dir={over['run_dir']!r} instead"
        )
    cfg_over = {**with_fields(over, fields), "run_dir": runs_dir}
    return make_config(preset, cfg_over)


def launch(
    preset: str,
    *,
    name: str | None = None,
    steps: int | None = None,
    data: str | None = None,
    overrides=None,
    store: str | None = DEFAULT_STORE,
    runs_dir: str = DEFAULT_RUNS,
    resume: bool = False,
    nproc: int | None = None,
    env: dict | None = None,
    cwd: str | None = None,
    ray: str | None = None,
) -> RunHandle:
    """Start one training run in its own process session and return its handle.

    The configuration is built here first (`lab.training.trainconfig.make_config`), so a bad preset, override
    or GPU split fails at once with the reason; the process is handed that config as a file.  ``nproc=None`` uses torchrun over the visible
    GPUs when there are several (as many as divide the step's micro-batches), else one process.  ``env`` adds environment variables; the
    process runs in ``cwd`` (default: the project root, where relative data paths resolve;
    for an installed fiblab the working directory).  ``ray``: a Ray address (``local``,
    ``auto``, ``HOST:PORT``; `fiblab.cluster.ray_cluster`): the process runs the training as one Ray
    task there (``fiblab train --ray``; one GPU or ``--ray-threads`` CPUs of the cluster, the
    run folder on storage the nodes share); a stop request reaches the task through the run
    folder, as it reaches a local run.  None or '': here, as always.
    """
    store = store or ""
    if store:  # a file that is no store fails here, not in the process
        check_file(store)
    ray = (ray or "").strip() or None
    if ray:
        from fiblab.cluster.ray_cluster import check_reachable

        check_reachable(ray)
    over = split_overrides(overrides)
    cfg = build_config(preset, name=name, steps=steps, data=data, overrides=over, runs_dir=runs_dir)
    if nproc is None:
        nproc = 1 if ray else auto_nproc(cfg.accum, gpu_count())
    positive_int(nproc, "nproc", "processes, one per GPU, or None for one per visible GPU")
    if cfg.accum % nproc:
        raise ValueError(
            f"{cfg.accum} micro-batches per step do not split over {nproc} "
            f"processes: set nproc to a divisor of {cfg.accum} or change "
            f"micro_batch"
        )
    run_dir = os.path.join(runs_dir, cfg.name)
    meta = os.path.join(run_dir, META_NAME)
    with detached.claim(meta, f"run {cfg.name!r}"):  # alone from the check to the handle file
        if list_checkpoints(run_dir) and not resume:
            raise ValueError(_taken(cfg.name, run_dir, store))
        os.makedirs(run_dir, exist_ok=True)
        stale = os.path.join(run_dir, STOP_FILE)
        if os.path.exists(stale):  # an old request must not fire
            os.remove(stale)
        clear_phase(run_dir)  # nor an old process's phase be shown as this one's
        config = os.path.abspath(os.path.join(run_dir, CONFIG_NAME))  # the process reads it
        atomic_write(config, json.dumps(cfg.to_dict(), indent=1))
        cmd = train_command(
            config=config, store=store, runs_dir=None, resume=resume, nproc=nproc, ray=ray
        )
        spec = dict(
            preset=preset,
            name=cfg.name,
            steps=steps,
            data=data,
            overrides=over,
            store=store,
            runs_dir=runs_dir,
            nproc=nproc,
            **({"ray": ray} if ray else {}),  # a resume goes to the same cluster
        )
        h = RunHandle(
            name=cfg.name,
            preset=preset,
            run_dir=run_dir,
            runs_dir=runs_dir,
            store=store,
            pid=-1,
            command=cmd,
            steps=cfg.steps,
            tokens_per_step=cfg.tokens_per_step,
            learned=cfg.model.learned,
            spec=spec,
            started=time.time(),
            env=dict(env or {}),  # as the grid's and the search's handles record them
            cwd=cwd,
            events_before=_events_now(store, run_dir if ray else None),
        )
        h.start(meta)
    return h


def _taken(name: str, run_dir: str, store: str) -> str:
    """Why a new run may not take ``name``, and what works instead."""
    status = None
    if store and os.path.exists(store):
        with contextlib.suppress(Exception), Store(store) as st:
            row = st.runs().set_index("name")
            status = row.status.get(name)
    if status == "done":
        return (
            f"run {name!r} has finished already (its checkpoints are in {run_dir}): choose "
            f"another run name, or delete that folder to train it again from step 0"
        )
    return (
        f"run {name!r} already has checkpoints in {run_dir}: resume it (continue from its last "
        f"checkpoint), or choose another run name"
    )


def attach(name: str, runs_dir: str = DEFAULT_RUNS) -> RunHandle:
    """The handle of a run launched earlier (e.g. before a kernel restart), from launch.json."""
    meta = os.path.join(runs_dir, name, META_NAME)
    if not os.path.exists(meta):
        raise ValueError(
            f"no launched run {name!r} under {runs_dir} (no {meta}): launch it, or "
            f"pass the runs folder it was launched with"
        )
    with open(meta) as f:
        d = json.load(f)
    return RunHandle(**d)


def list_runs(runs_dir: str = DEFAULT_RUNS) -> list[RunHandle]:
    """Handles of every run launched under ``runs_dir`` (each ``<name>/launch.json``), the most
    recently started first: what a fresh kernel offers to attach, stop or resume."""
    out = []
    if os.path.isdir(runs_dir):
        for entry in os.scandir(runs_dir):
            d = detached.read_json(os.path.join(entry.path, META_NAME))
            if d is not None and {"name", "pid"} <= set(d):
                try:
                    out.append(RunHandle(**d))
                except TypeError:  # a launch.json of another version: not ours to show
                    continue
    return sorted(out, key=lambda h: h.started, reverse=True)


def resume(h: RunHandle, **changes) -> RunHandle:
    """Launch ``h`` again with resume=True (same preset, name, overrides; ``changes`` override
    launch() arguments, e.g. ``steps=``)."""
    if h.is_alive():
        raise ValueError(
            f"run {h.name!r} is still running (pid {h.pid}): stop it and wait for it "
            f"to exit before resuming"
        )
    # env and cwd live on the handle (as the grid's and the search's); a launch.json written
    # before they did carries them in its spec, which then still wins
    spec = {"env": h.env or None, "cwd": h.cwd, **h.spec, **changes}
    # a change of a field the first launch gave as an override replaces that override
    over = {k: v for k, v in split_overrides(spec.get("overrides")).items() if k not in changes}
    if "overrides" not in changes:  # an older launch kept a run_dir it then dropped: the
        over.pop("run_dir", None)  # run is where runs_dir put it
    spec["overrides"] = over
    preset = spec.pop("preset")
    return launch(preset, resume=True, **spec)


def request_stop(h: RunHandle) -> str:
    """Ask the run to stop after its current step (it writes a checkpoint first)."""
    return _touch_stop(h.run_dir)


def terminate(h: RunHandle, timeout: float = 10.0) -> None:
    """Hard stop: SIGTERM to the run's process group (SIGKILL after ``timeout``); the run is
    marked failed in the store.  Prefer `request_stop`, which keeps a checkpoint of the last
    step; this one loses the steps since the last periodic checkpoint.  A run that had ended
    keeps its state, also one killed in its exit after its final status (`_loop_ended`); only
    what it left running (`detached.strays`) is ended.  One whose process
    died without a final status (SIGKILL, out of memory) is marked failed: its row said
    "running" for ever."""
    ran = h.is_alive()  # before the row is read (`state`)
    killed = h.kill(timeout)
    if not h.store or not os.path.exists(h.store):
        return
    with contextlib.suppress(Exception), Store(h.store) as st:
        if h.spec.get("ray"):  # what its killed driver had not yet copied from the task
            _replay_journal(h.run_dir, st)
        row = _store_row(h, st)  # read after the kill: nothing of the run writes it any more
        # a process killed in its exit had written its final status ("done", a served stop):
        # it keeps it (marked failed before, for a stop that came as the run finished)
        final = (row or {}).get("status") in TERMINAL and _loop_ended(h, row)
        if ran and killed and not final:
            st.set_status(h.name, "failed", "terminated by the launcher")
            st.log_event(h.name, "terminated", "SIGTERM from fiblab.jobs.launch.terminate")
        elif _died_running(h, row):  # it had died, or died since `ran` was read
            st.set_status(h.name, "failed", "its process ended without a final status")
            st.log_event(h.name, "died", "no final status; found by fiblab.jobs.launch.terminate")


def _replay_journal(run_dir: str, st: Store) -> None:
    """A Ray run's journal (written by its task) into the store, as its driver would have: a
    driver killed after the task returned, before it copied the last lines, left "running"
    over a run that had ended (then marked failed).  Replaying is idempotent
    (`lab.store.journal.replay`); a missing or unreadable journal changes nothing."""
    with contextlib.suppress(Exception):
        replay(read_journal(os.path.join(run_dir, JOURNAL_NAME)), st)


def _died_running(h: RunHandle, row: dict | None) -> bool:
    """Whether the store's row says "running" for a run nothing trains any more: this handle's
    process has gone (killed or died; the caller's check), no later launch rewrote its handle
    file (a resume from another kernel, whose row it would be), and the process that last wrote
    its phase file (a torchrun rank, a `fiblab train` from a shell) is a process of this host
    that has gone too, without saying its loop was over (a Ray task's journal, not yet replayed
    into the store, says how it ended: a resume replays it)."""
    ph = read_phase(h.run_dir) or {}
    writer = parse_process_id(ph.get("process") or str(ph.get("pid") or ""))
    here = ph.get("host", socket.gethostname()) == socket.gethostname()
    return (
        (row or {}).get("status") == "running"
        and h.is_latest(os.path.join(h.run_dir, META_NAME))
        and here
        and ph.get("phase") != EXITING
        and not (writer is not None and detached.pid_alive(*writer))
    )


def _events_now(store: str, journal_of: str | None = None) -> int:
    """The store's last event id now (`RunHandle.events_before`); 0 for a store not yet made.
    ``journal_of``: a Ray run's folder, whose journal is copied in first — lines an earlier
    attempt's killed driver left uncopied would otherwise land after the mark and read as
    this attempt's start."""
    if not store or not os.path.exists(store):
        return 0
    with Store(store) as st:
        if journal_of:
            _replay_journal(journal_of, st)
        return st.last_event_id()


def _store_row(h: RunHandle, st: Store) -> dict | None:
    """The run's row, with ``last_event`` (its newest event's kind) and ``began_here``: whether
    this launch's loop has begun (its start or resume event came after the launch,
    `RunHandle.events_before`).  ``started_at`` cannot say
    it: a resume keeps the first one (a resumed run's final status read as an earlier
    attempt's), and a Ray task's clock is its node's.  A handle from before the mark goes by
    the time of the last such event (or ``started_at``), as it did."""
    runs = st.runs()
    row = runs[runs["name"] == h.name]
    if row.empty:
        return None
    out = row.iloc[-1].to_dict()
    ev = st.events(h.name)  # read once a poll: the last one's kind too
    out["last_event"] = None if ev.empty else str(ev["kind"].iloc[-1])
    began = ev[ev["kind"].isin((START_EVENT, RESUME_EVENT))]
    if h.events_before >= 0:
        out["began_here"] = bool((began["id"] > h.events_before).any())
    else:
        at = began["time"].iloc[-1] if len(began) else out.get("started_at")
        out["began_here"] = _seconds(at) >= h.started - 5
    return out


def _loop_ended(h: RunHandle, row: dict | None, ph: dict | None = None) -> bool:
    """Whether this launch's training loop is over: its exit phase (written after its last
    store write), or the store's row ended and begun by this launch (a Ray task's, replayed
    from its journal, writes no phase here).  ``ph``: the run's phase file, read if not given."""
    ph = (read_phase(h.run_dir) or {}) if ph is None else ph
    return _exit_phase_written(h, ph) or (
        (row or {}).get("status") in TERMINAL and bool((row or {}).get("began_here"))
    )


def _exit_phase_written(h: RunHandle, ph: dict) -> bool:
    """Whether this launch's loop wrote its exit phase, after its last store write (`launch`
    clears an older launch's phase file)."""
    return ph.get("phase") == EXITING and float(ph.get("since", 0)) >= h.started - 5


def _seconds(at) -> float:
    """A store time (a Timestamp) as epoch seconds; 0 for none."""
    try:
        return float(at.timestamp())
    except (AttributeError, TypeError, ValueError):  # None, NaT
        return 0.0


def state(
    h: RunHandle, _row: dict | None = None, _event: str | None = None, _alive: bool | None = None
) -> str:
    """starting | running | stopping | done | stopped | failed (see the module docstring).

    A caller passing the store's ``_row`` passes ``_alive`` from *before* it read the row: a
    process that writes its final status and exits between the two reads would otherwise be
    seen dead with a stale "running" row — "failed" for a run stopped by request.  The STOP
    file is looked for before the phase is read, the reverse of the run's order (its exit
    phase, then the file removed: `RunWatch.close`): read after, a stop served between the
    two reads read "running" (a race the flake check found; RESULTS, issue 38)."""
    alive = h.is_alive() if _alive is None else _alive
    stop_asked = os.path.exists(os.path.join(h.run_dir, STOP_FILE))
    if h.store and _row is None and os.path.exists(h.store):
        with Store(h.store) as st:
            _row = _store_row(h, st)
            _event = (_row or {}).get("last_event")
    status = (_row or {}).get("status")
    ph = read_phase(h.run_dir) or {}
    ended = _loop_ended(h, _row, ph)
    if alive:
        if stop_asked:
            return "stopping"
        if ended:
            return "done" if status == "done" else "stopping"  # its loop is over: shutting down
        return "running" if status == "running" else "starting"
    rc = h.proc.returncode if h.proc is not None else None
    # a non-zero exit fails the run (e.g. a resume that failed before it reached the store),
    # unless this launch's loop had written its final status (`_loop_ended`): killed in its
    # exit (`terminate`), or a crash in teardown after it, read "failed" in the launching
    # kernel and that status in every other
    if rc not in (None, 0) and not (ended and status in ("done", "stopped")):
        return "failed"
    if rc is None and not ended:  # attached, and this launch never ended its loop: the row is
        return "failed"  # a crash's, or an earlier launch's ("stopped" before a resume that died)
    if status == "done":
        return "done"
    if status == "stopped" or (_event == "stopped" and status == "pending"):
        return "stopped"
    if not h.store and ended and ph.get("status") in ("done", "stopped"):
        return ph["status"]  # no store: the loop's own word on how it ended
    if not h.store and rc == 0:
        return "done"
    return "failed"


def snapshot(h: RunHandle) -> dict:
    """Everything a live view shows, read from the store in one consistent snapshot.

    Keys: state, step, steps, loss, ppl (latest evaluation), tokens_per_s (median of the last
    10 logged steps), phase (what a live process is doing, in words: "starting the process",
    "preparing the data …", "training", "evaluating at step 200 …"; "" after it exited) and
    phase_since (when that began, epoch seconds),
    eta (a `fiblab.jobs.train_eta.Eta`: steps and evaluations left, from this process's own
    measurements), eta_s (its seconds; 0 for a finished run, NaN when not known or nothing
    runs: stopping, stopped, failed), message (the store's, for an exited run; the log tail
    when it failed), returncode, and the DataFrames ``loss_curve`` (step, value), ``evals``
    (step, dataset, kind, perplexity) and ``alphas`` (steps × layers, learned runs).
    """
    import pandas as pd

    row, event = None, None
    loss = pd.DataFrame(columns=["step", "value"])
    tok = pd.DataFrame(columns=["step", "value"])
    ev_s = pd.DataFrame(columns=["step", "value"])
    evals = pd.DataFrame(columns=["step", "dataset", "kind", "perplexity"])
    alphas = pd.DataFrame()
    alive = h.is_alive()  # before the store: a row read after it is never older (`state`)
    if h.store and os.path.exists(h.store):
        with Store(h.store) as st, st.snapshot():
            row = _store_row(h, st)
            event = (row or {}).get("last_event")
            if row is not None:
                m = st.metrics(h.name, names=["loss", "tokens_per_s", "eval_s"])
                loss, tok, ev_s = (
                    m[m["name"] == n][["step", "value"]].reset_index(drop=True)
                    for n in ("loss", "tokens_per_s", "eval_s")
                )
                evals = st.evals(h.name)[["step", "dataset", "kind", "perplexity"]]
                a = st.alphas(h.name)
                if not a.empty:
                    alphas = a.pivot(index="step", columns="layer", values="alpha")
    st_ = state(h, row, event, alive)
    rate = float(tok["value"].tail(10).median()) if len(tok) else math.nan
    live = st_ in ("starting", "running", "stopping")
    ph = read_phase(h.run_dir)
    if ph is not None and float(ph.get("since", 0)) < h.started - 5:
        ph = None  # an earlier process's (launch clears it; this guards a hand-made start)
    # the step: the process's own heartbeat (every few seconds, and its last step on exit),
    # else the store's last logged one (every log_every steps) — one number for every view
    logged = int(loss["step"].iloc[-1]) if len(loss) else 0
    step = max(logged, int(ph.get("step") or 0) if ph is not None else 0)
    if not live:
        ph = None
    eta = train_eta.UNKNOWN
    if st_ == "running" and ph is not None and "start_step" in ph:
        eta = train_eta.estimate(
            step,
            h.steps,
            int(ph["start_step"]),
            list(zip(tok["step"].tolist(), tok["value"].tolist())),
            list(zip(ev_s["step"].tolist(), ev_s["value"].tolist())),
            tokens_per_step=h.tokens_per_step,
            eval_every=int(ph.get("eval_every") or 0),
            light_tokens=ph.get("light_eval_tokens"),
            full_tokens=ph.get("full_eval_tokens"),
        )
    message = "" if live else (row or {}).get("message")  # a live run's is stale
    message = message if isinstance(message, str) else ""  # the store's NULL reads as NaN
    rc = h.proc.returncode if h.proc is not None else None
    if st_ == "failed" and (not message or rc not in (None, 0)):
        message = h.log_tail(8) or "the process exited without recording a result"
    return {
        "name": h.name,
        "state": st_,
        "step": step,
        "steps": h.steps,
        "loss": float(loss["value"].iloc[-1]) if len(loss) else math.nan,
        "ppl": float(evals["perplexity"].iloc[-1]) if len(evals) else math.nan,
        "tokens_per_s": rate,
        "phase": (ph["phase"] if ph is not None else STARTING) if live else "",
        # training: since the process first began training (phases keeps it across the
        # mid-run evaluations), so a view attached later does not count from the last one
        "phase_since": (
            float(ph.get("training_since", ph["since"]))
            if ph.get("phase") == TRAINING
            else float(ph["since"])
        )
        if ph is not None
        else h.started,  # fmt: skip
        "eta": eta,
        "eta_s": 0.0 if st_ == "done" else eta.seconds,
        "message": message,
        "returncode": rc,
        "loss_curve": loss,
        "evals": evals,
        "alphas": alphas,
    }


def wait(h: RunHandle, timeout: float | None = None, poll: float = 0.5, on_poll=None) -> str:
    """Block until the process exits (calling ``on_poll()`` every ``poll`` seconds); returns
    the final `state`.  Raises TimeoutError after ``timeout`` seconds, leaving the run alone."""
    h.wait_exit(timeout, poll, on_poll)
    return state(h)
