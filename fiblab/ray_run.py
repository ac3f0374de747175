"""Probe grids and LM training runs as Ray tasks; the driver alone writes the store.

`run_probe_grid` runs the cells of a retrieval-probe grid (`probes.runner.run_cell`) as tasks
and, as each returns its record, appends it to the results JSONL and hands it to ``on_record``
(the CLI logs it into the store) — the semantics of `probes.grid.run_grid`: cells already in
the file are skipped, each record is written once, the result is in cell order.

`run_sweep` runs LM training runs (`lab.train.train`) as tasks.  Each task trains with exact
resume from the run's own checkpoints under ``cfg.run_dir`` (storage every node sees) and logs
into a `lab.store_journal.StoreJournal` in the run's folder instead of the store; the driver
follows the journals while the runs train (where it sees their folders) and replays what the
task returns at its end into the SQLite store.  A task whose node dies is retried
by Ray (``retries``) and resumes from the last checkpoint; a driver killed and started again
skips the runs that finished (done in the store, or a journal that ended done: then it is only
replayed) and resumes the others from their checkpoints.  Nothing is duplicated in the store:
metrics, evaluations and α are upserts, and a replay skips the events already there.

The tasks are module-level functions, so Ray's workers import them from the installed lab.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fiblab.ray_cluster import TaskResources, connect, task_resources
from lab.progress import bar as progress_bar
from lab.store_journal import JOURNAL_NAME, StoreJournal, finished, read_journal, replay

DEFAULT_RETRIES = 3


def check_retries(retries) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries {retries!r} must be an integer >= 0 (Ray task retries)")
    return retries


# --------------------------------------------------------------------------------------------
# the tasks (run on the workers)
# --------------------------------------------------------------------------------------------
def probe_cell_task(cell, settings, threads: int, log_to=None, live=None) -> dict:
    """One probe cell on a worker, on ``threads`` torch threads: its record (with ``live`` /
    ``log_to``, the worker reports into the grid's live folder and the cell's log folder,
    which must be on storage the nodes share, and checks the stop request itself)."""
    import torch

    from probes.runner import run_cell

    torch.set_num_threads(threads)
    return run_cell(cell, settings, progress=False, log_to=log_to, live=live)


def journal_path(cfg) -> str:
    """Where run ``cfg``'s store journal lives: in its run folder."""
    return os.path.join(cfg.run_dir, cfg.name, JOURNAL_NAME)


def train_task(cfg, threads: int) -> dict:
    """One LM run on a worker: trained (or resumed from its checkpoints) with its store writes
    journaled in its run folder; returns the summary and the whole journal (every attempt's)."""
    import torch

    from lab.train import train

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    path = journal_path(cfg)
    out = train(cfg, resume=True, quiet=True, store=StoreJournal(path))
    return {
        "name": out["name"],
        "status": out["status"],
        "final_ppl": out["final_ppl"],
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
            t0 = time.perf_counter()
            with progress_bar(progress, desc="probe cells", total=len(todo), unit="cell") as b:
                if progress:
                    b.write(f"{len(todo)} cells on Ray: {res.describe()}", file=sys.stderr)

                def keep(cell, rec: dict) -> None:
                    if out_path:
                        append_record(out_path, rec)
                    fresh[rec["key"]] = rec
                    if on_record:
                        on_record(rec)
                    if live is not None:  # kept: the cell is no longer "running"
                        live.remove(rec["key"])
                    b.update(1)
                    if progress:
                        b.write(
                            f"[{len(fresh)}/{len(todo)}] {rec['key']}  {rec['seconds']:.0f}s  "
                            f"(grid {time.perf_counter() - t0:.0f}s)",
                            file=sys.stderr,
                        )

                pending = {task.remote(c, settings, res.threads, log_to, live): c for c in todo}
                _drain(ray, pending, keep)
    return [done.get(c.key(settings)) or fresh[c.key(settings)] for c in cells]


@dataclass
class SweepResult:
    """One run of a sweep: how it ended here (``trained``; ``replayed``: finished before, its
    journal written into the store now; ``skipped``: already done in the store) and its final
    held-out perplexity per dataset."""

    name: str
    outcome: str
    final_ppl: dict = field(default_factory=dict)
    seconds: float = 0.0


def _final_ppl(entries: list[dict]) -> dict:
    """The final (kind 'full') perplexity per dataset that a journal logged last."""
    import math

    out = {}
    for e in entries:
        if e["call"] == "log_eval":
            args = e["args"]
            if e.get("kwargs", {}).get("kind", "full") == "full" and args[4] is not None:
                out[args[2]] = math.exp(args[4])
    return out


def _done_in_store(store_path: str | None) -> set[str]:
    if not store_path or not os.path.exists(store_path):
        return set()
    from lab.store import Store

    with Store(store_path) as st:
        return set(st.runs(kind="lm", status="done")["name"])


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
) -> list[SweepResult]:
    """Train every run of ``configs`` (`lab.trainconfig.TrainConfig`s with distinct names) that
    is not finished, as Ray tasks; the results in ``configs`` order (see the module docstring)."""
    check_retries(retries)
    names = [c.name for c in configs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"sweep runs {dup} appear more than once: give each run its own name")
    stored = _done_in_store(store_path)
    results: dict[str, SweepResult] = {}
    todo = []
    for cfg in configs:
        entries = read_journal(journal_path(cfg))
        if cfg.name in stored or (not store_path and finished(entries)):
            results[cfg.name] = SweepResult(cfg.name, "skipped", _final_ppl(entries))
        elif finished(entries):  # trained, but the driver stopped before writing the store
            _replay(store_path, entries)
            results[cfg.name] = SweepResult(cfg.name, "replayed", _final_ppl(entries))
        else:
            todo.append(cfg)
    if todo:
        with connect(address) as ray:
            res: TaskResources = task_resources(ray, threads, gpus)
            task = ray.remote(train_task).options(**res.options(retries))
            t0 = time.perf_counter()
            with progress_bar(progress, desc="sweep runs", total=len(todo), unit="run") as b:
                if progress:
                    b.write(
                        f"{len(todo)} of {len(configs)} runs on Ray ({len(configs) - len(todo)} "
                        f"finished before): {res.describe()}",
                        file=sys.stderr,
                    )

                followed: dict[str, int] = {}  # journal lines already in the store, per run

                def follow(running: list) -> None:
                    """The running runs' new journal lines into the store (where the driver
                    sees the shared run folders), so the store shows them as they train."""
                    for cfg in running:
                        entries = read_journal(journal_path(cfg))
                        _replay(store_path, entries, followed.get(cfg.name, 0))
                        followed[cfg.name] = max(followed.get(cfg.name, 0), len(entries))

                def keep(cfg, out: dict) -> None:
                    _replay(store_path, out["journal"], followed.get(cfg.name, 0))
                    r = SweepResult(cfg.name, "trained", out["final_ppl"], out["seconds"])
                    results[cfg.name] = r
                    b.update(1)
                    if progress:
                        ppl = ", ".join(f"{k} {v:.3f}" for k, v in r.final_ppl.items())
                        b.write(
                            f"[{b.n}/{len(todo)}] {cfg.name}  {out['status']}  ppl {ppl}  "
                            f"{r.seconds:.0f}s  (sweep {time.perf_counter() - t0:.0f}s)",
                            file=sys.stderr,
                        )

                pending = {task.remote(c, res.threads): c for c in todo}
                _drain(ray, pending, keep, follow if store_path else None)
    return [results[n] for n in names]
