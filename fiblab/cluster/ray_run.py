"""Probe grids and LM training runs as Ray tasks; the driver alone writes the store.

`run_probe_grid` runs the cells of a retrieval-probe grid (`probes.runner.run_cell`) as tasks
and, as each returns its record, appends it to the results JSONL and hands it to ``on_record``
(the CLI logs it into the store) — the semantics of `probes.grid.run_grid`: cells already in
the file are skipped, each record is written once, the result is in cell order.

`run_sweep` runs LM training runs (`lab.training.train.train`) as tasks.  Each task trains with exact
resume from the run's own checkpoints under ``cfg.run_dir`` (storage every node sees) and logs
into a `lab.store.journal.StoreJournal` in the run's folder instead of the store; the driver
follows the journals while the runs train (where it sees their folders) and replays what the
task returns at its end into the SQLite store.  A task whose node dies is retried
by Ray (``retries``) and resumes from the last checkpoint; a driver killed and started again
skips the runs that finished (done in the store, or a journal that ended done: then it is only
replayed) and resumes the others from their checkpoints.  Nothing is duplicated in the store:
metrics, evaluations and α are upserts, and a replay skips the events already there.

`train_on_ray` is ``fiblab train … --ray``: one run through the same path.  A sweep run done in
the store (or with a run folder) under its name but another configuration is refused before
anything runs (`check_same_configs`).  What the drivers print: `fiblab.cluster.ray_progress`.

The tasks are module-level functions, so Ray's workers import them from the installed lab.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fiblab.cluster.ray_cluster import TaskResources, connect, task_resources
from fiblab.cluster.ray_progress import TaskLines, report_start
from lab.store.evalkind import modern_text
from lab.store.journal import JOURNAL_NAME, StoreJournal, finished, read_journal, replay
from lab.util.checks import nonneg_int
from lab.util.progress import bar as progress_bar

DEFAULT_RETRIES = 3


def check_retries(retries) -> int:
    return nonneg_int(retries, "retries", "Ray task retries")


# --------------------------------------------------------------------------------------------
# the tasks (run on the workers)
# --------------------------------------------------------------------------------------------
def probe_cell_task(cell, settings, threads: int, log_to=None, live=None, started=None) -> dict:
    """One probe cell on a worker, on ``threads`` torch threads: its record and its node (with
    ``live`` / ``log_to``, the worker reports into the grid's live folder and the cell's log
    folder, which must be on storage the nodes share, and checks the stop request itself;
    ``started``: the driver's queue for the start line, `fiblab.cluster.ray_progress`)."""
    from lab.machine.cpu_share import pin
    from probes.runner import run_cell

    node = report_start(started, cell.key(settings))
    pin(threads)  # Ray reserved them: fixed, and counted by the node's other lab jobs
    rec = run_cell(cell, settings, progress=False, log_to=log_to, live=live)
    return {"record": rec, "node": node}


def journal_path(cfg) -> str:
    """Where run ``cfg``'s store journal lives: in its run folder."""
    return os.path.join(cfg.run_dir, cfg.name, JOURNAL_NAME)


def train_task(cfg, threads: int, started=None) -> dict:
    """One LM run on a worker: trained (or resumed from its checkpoints) with its store writes
    journaled in its run folder; returns the summary, its node and the whole journal (every
    attempt's).  It always resumes: a retried task continues its first attempt's checkpoints
    (a driver that must not resume a run refuses one with checkpoints before it starts)."""
    from lab.machine.cpu_share import pin
    from lab.training.train import train

    node = report_start(started, cfg.name)
    pin(threads)  # Ray reserved them: fixed, and counted by the node's other lab jobs
    t0 = time.perf_counter()
    path = journal_path(cfg)
    out = train(cfg, resume=True, quiet=True, store=StoreJournal(path))
    return {
        "node": node,
        "name": out["name"],
        "status": out["status"],
        "final_ppl": out["final_ppl"],
        "stopped_at": out.get("stopped_at"),
        "alphas": out["alphas"],
        "losses": out["losses"],
        "seconds": time.perf_counter() - t0,
        "journal": read_journal(path),
    }


# --------------------------------------------------------------------------------------------
# the drivers
# --------------------------------------------------------------------------------------------
def _drain(ray, pending: dict, on_done: Callable, on_idle: Callable | None = None) -> None:
    """Wait for every future of ``pending`` ({future: item}), calling ``on_done(item, result)``
    as each finishes (and ``on_idle(items still running)`` every 2 s without one).  A failing
    task: nothing more is waited for, the others are cancelled, and its error is raised."""
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=2.0 if on_idle else None)
        if not ready:
            on_idle(list(pending.values()))
            continue
        fut = ready[0]
        item = pending.pop(fut)
        try:
            result = ray.get(fut)
        except BaseException:
            for f in pending:
                ray.cancel(f)
            raise
        on_done(item, result)


def run_probe_grid(
    cells: list,
    settings,
    out_path: str | None,
    address: str = "local",
    threads: int = 1,
    retries: int = DEFAULT_RETRIES,
    progress: bool = True,
    on_record: Callable[[dict], None] | None = None,
    gpus: bool | None = None,
    log_to=None,
    live=None,
) -> list[dict]:
    """Every cell of ``cells`` not already in ``out_path``, run as Ray tasks (see the module
    docstring); the records in ``cells`` order.  ``log_to`` / ``live`` as in
    `probes.grid.run_grid`: a stop request raises `probes.live.StopRequested` (Ray raises the
    task's own error class) once the running cells are abandoned."""
    from probes.grid import append_record, load_records

    check_retries(retries)
    settings = settings.resolved()  # as run_grid: "auto" → the precision this machine keys by
    done = {r["key"]: r for r in load_records(out_path)} if out_path else {}
    todo = [c for c in cells if c.key(settings) not in done]
    fresh: dict[str, dict] = {}
    if todo:
        with connect(address) as ray:
            res = task_resources(ray, threads, gpus)
            task = ray.remote(probe_cell_task).options(**res.options(retries))
            lanes = res.slots(ray.cluster_resources())
            if live is not None:  # the launcher's ETA shares the work out over these
                from probes.live import write_progress

                write_progress(live.folder, lanes=lanes)
            with progress_bar(progress, desc="probe cells", total=len(todo), unit="cell") as b:
                if progress:
                    b.write(
                        f"{len(todo)} cells on Ray: {res.describe()}, {lanes} at once",
                        file=sys.stderr,
                    )
                lines = TaskLines(ray, b, len(todo), progress, what="grid")

                def keep(cell, out: dict) -> None:
                    rec = out["record"]
                    if out_path:
                        append_record(out_path, rec)
                    fresh[rec["key"]] = rec
                    if on_record:
                        on_record(rec)
                    if live is not None:  # kept: the cell is no longer "running"
                        live.remove(rec["key"])
                    lines.finished(rec["key"], out["node"], rec["seconds"])

                pending = {
                    task.remote(c, settings, res.threads, log_to, live, lines.queue): c
                    for c in todo
                }
                _drain(ray, pending, keep, lines.poll if progress else None)
    return [done.get(c.key(settings)) or fresh[c.key(settings)] for c in cells]


@dataclass
class SweepResult:
    """One run of a sweep: how it ended here (``trained``; ``stopped``: by a stop request, its
    checkpoint kept, resumable; ``replayed``: finished before, its journal written into the
    store now; ``skipped``: already done in the store) and its final
    held-out perplexity per dataset."""

    name: str
    outcome: str
    final_ppl: dict = field(default_factory=dict)
    seconds: float = 0.0
    stopped_at: int | None = None  # the step a stopped run checkpointed


def journal_final_ppl(entries: list[dict]) -> dict:
    """The final (kind 'recompute') perplexity per dataset that a journal logged last."""
    import math

    out = {}
    for e in entries:
        if e["call"] == "log_eval":
            args = e["args"]
            kind = modern_text(e.get("kwargs", {}).get("kind", "recompute"))
            if kind == "recompute" and args[4] is not None:
                out[args[2]] = math.exp(args[4])
    return out


def _done_in_store(store_path: str | None) -> set[str]:
    if not store_path or not os.path.exists(store_path):
        return set()
    from lab.store import Store

    with Store(store_path) as st:
        return set(st.runs(kind="lm", status="done")["name"])


NOT_KNOWN_BEFORE = ("data_hash", "precision")  # what only training records (its provenance)


def config_clash(stored: dict, cfg) -> str | None:
    """How ``cfg`` differs from a run's ``stored`` config (the store's, or its folder's
    config.json): the `lab.store.variant` fields and the seed, less what only training records (the
    data's hash, the resolved precision); None when they are the same run."""
    from lab.store.variant import describe, differs, seed_of, variant_of

    a, b = variant_of(stored), variant_of(cfg.to_dict())
    names = [n for n in differs(a, b) if n not in NOT_KNOWN_BEFORE]
    parts = [f"{describe(a, names)} there, {describe(b, names)} now"] if names else []
    if seed_of(stored) != cfg.seed:
        parts.append(f"seed={seed_of(stored)} there, seed={cfg.seed} now")
    return "; ".join(parts) or None


def check_same_configs(configs: list, store_path: str | None, done: set[str]) -> None:
    """A ValueError naming the first run of ``configs`` whose name is taken by another
    configuration: done in the store (``done``), or with a run folder that holds one (its
    checkpoints would be resumed); the sweep then trains and writes nothing."""
    import json

    for cfg in configs:
        if cfg.name in done:
            from lab.store import Store

            with Store(store_path) as st:
                clash = config_clash(st.config(cfg.name), cfg)
            if clash:
                raise ValueError(
                    f"sweep run {cfg.name!r} is done in {store_path} with another configuration "
                    f"({clash}): give the run a new name (another preset or group in the spec), "
                    f"or sweep into another --store and --runs folder"
                )
            continue
        path = os.path.join(cfg.run_dir, cfg.name, "config.json")
        if os.path.exists(path):
            with open(path) as f:
                clash = config_clash(json.load(f), cfg)
            if clash:
                raise ValueError(
                    f"sweep run {cfg.name!r} has a run folder {os.path.dirname(path)} of another "
                    f"configuration ({clash}): give the run a new name, or use another --runs "
                    f"folder"
                )


def _replay(store_path: str | None, entries: list[dict], start: int = 0) -> None:
    if not store_path or len(entries) <= start:
        return
    from lab.store import Store

    with Store(store_path) as st:
        replay(entries, st, start)


def run_sweep(
    configs: list,
    store_path: str | None,
    address: str = "local",
    threads: int = 1,
    retries: int = DEFAULT_RETRIES,
    progress: bool = True,
    gpus: bool | None = None,
    skip_done: bool = True,
) -> list[SweepResult]:
    """Train every run of ``configs`` (`lab.training.trainconfig.TrainConfig`s with distinct names) that
    is not finished, as Ray tasks; the results in ``configs`` order (see the module docstring).
    A run done in the store under the same name but another configuration is refused before
    anything runs (``skip_done=False``: a run done in the store is trained again, as `train`
    would: `train_on_ray`)."""
    check_retries(retries)
    names = [c.name for c in configs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"sweep runs {dup} appear more than once: give each run its own name")
    stored = _done_in_store(store_path) if skip_done else set()
    if skip_done:
        check_same_configs(configs, store_path, stored)
    results: dict[str, SweepResult] = {}
    todo = []
    for cfg in configs:
        entries = read_journal(journal_path(cfg))
        if cfg.name in stored or (not store_path and finished(entries)):
            results[cfg.name] = SweepResult(cfg.name, "skipped", journal_final_ppl(entries))
        elif finished(entries):  # trained, but the driver stopped before writing the store
            _replay(store_path, entries)
            results[cfg.name] = SweepResult(cfg.name, "replayed", journal_final_ppl(entries))
        else:
            todo.append(cfg)
    if todo:
        with connect(address) as ray:
            res: TaskResources = task_resources(ray, threads, gpus)
            task = ray.remote(train_task).options(**res.options(retries))
            with progress_bar(progress, desc="sweep runs", total=len(todo), unit="run") as b:
                if progress:
                    b.write(
                        f"{len(todo)} of {len(configs)} runs on Ray ({len(configs) - len(todo)} "
                        f"finished before): {res.describe()}, "
                        f"{res.slots(ray.cluster_resources())} at once",
                        file=sys.stderr,
                    )
                lines = TaskLines(ray, b, len(todo), progress)
                followed: dict[str, int] = {}  # journal lines already in the store, per run

                def idle(running: list) -> None:
                    """The start lines; and the running runs' new journal lines into the store
                    (where the driver sees the shared run folders), so the store shows them
                    as they train."""
                    lines.poll()
                    for cfg in running if store_path else ():
                        entries = read_journal(journal_path(cfg))
                        _replay(store_path, entries, followed.get(cfg.name, 0))
                        followed[cfg.name] = max(followed.get(cfg.name, 0), len(entries))

                def keep(cfg, out: dict) -> None:
                    _replay(store_path, out["journal"], followed.get(cfg.name, 0))
                    r = SweepResult(cfg.name, "trained", out["final_ppl"], out["seconds"])
                    if out["status"] == "stopped":
                        r.outcome, r.stopped_at = "stopped", out["stopped_at"]
                    results[cfg.name] = r
                    ppl = ", ".join(f"{k} {v:.3f}" for k, v in r.final_ppl.items())
                    lines.finished(
                        cfg.name, out["node"], r.seconds, f"{out['status']}  ppl {ppl or '-'}"
                    )

                pending = {task.remote(c, res.threads, lines.queue): c for c in todo}
                _drain(ray, pending, keep, idle if (store_path or progress) else None)
    return [results[n] for n in names]


def train_on_ray(cfg, store_path: str | None, resume: bool = False, **ray_options) -> SweepResult:
    """``fiblab train … --ray ADDRESS``: the one run ``cfg`` as a Ray task, through the sweep's
    path (journal in its run folder, the driver writing the store, exact resume; a stop
    request in the run folder reaches the task, which checkpoints and returns ``stopped``).
    Without ``resume`` a run folder with checkpoints is refused as `lab.training.train.train` refuses
    it, before anything starts; ``ray_options`` as `run_sweep`'s."""
    from lab.training.checkpoint import resume_point

    if not resume:
        resume_point(os.path.join(cfg.run_dir, cfg.name), cfg.name, resume=False)
        stale = journal_path(cfg)  # a fresh run: no earlier attempt's journal is its own
        if os.path.exists(stale):
            os.remove(stale)
    (result,) = run_sweep([cfg], store_path, skip_done=False, **ray_options)
    return result
