"""Grids of probe cells: build them, run them into a resumable JSONL file, and summarise them.

`run_grid` appends one JSON line per finished cell and skips cells already in the file, so an
interrupted grid resumes where it stopped; `table2` averages a mechanism's records over seeds.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time

import torch

from lab.machine import cpu_share
from lab.util import jsonio
from lab.util.checks import positive_int
from lab.util.jsonio import append_line
from lab.util.progress import bar as progress_bar
from probes.live import StopRequested
from probes.runner import run_cell
from probes.settings import LEARNED, Cell, ProbeSettings, mechanism


def load_records(path: str) -> list[dict]:
    """Records of a results file; a truncated last line (a killed run) is ignored."""
    return jsonio.read_rows(path)


def results_records(path: str) -> list[dict]:
    """`load_records` of a file that must be a probe results file (a grid continues in it, a
    report reads it): ValueError for lines that are no cell records — a config.json or a notes
    file given by mistake would be appended to, or read as no cells."""
    recs = load_records(path)
    ok = all(isinstance(r, dict) and "key" in r and "acc" in r for r in recs)
    if not ok or (not recs and os.path.isfile(path) and os.path.getsize(path) > 0):
        raise ValueError(f"{path!r} is not a probe results file (no cell records in it)")
    return recs


def append_record(path: str, rec: dict) -> None:
    """Append one JSON line durably; a torn last line left by a killed run is closed first
    (`lab.util.jsonio.append_line`)."""
    append_line(path, json.dumps(rec))


def _cell_worker(cell: Cell, settings: ProbeSettings, threads: int, log_to=None, live=None) -> dict:
    """One cell in a worker process of `run_grid(jobs > 1)`, on at most `threads` intra-op
    threads (its cap in `lab.machine.cpu_share`: fewer while other lab jobs need the cores; with
    ``log_to``, the worker opens its own sink for its cell's folder; with ``live``, it writes its
    cell's live file and checks the stop request itself)."""
    torch.set_num_threads(threads)
    return run_cell(cell, settings, progress=False, log_to=log_to, live=live)


def run_grid(
    cells: list[Cell],
    settings: ProbeSettings,
    out_path: str | None = None,
    progress: bool = True,
    on_record=None,
    on_step=None,
    jobs: int = 1,
    log_to=None,
    live=None,
) -> list[dict]:
    """Run every cell not already in `out_path` (appending one JSON line each).

    jobs > 1 runs that many cells at once in worker processes, each on cores // jobs threads
    (at least 1): on a small CPU the many small ops of a probe step use one thread better than
    two, so two 1-thread cells finish sooner than two 2-thread cells in turn.  Each worker
    registers its cell with the machine's lab jobs (`lab.machine.cpu_share`) with cores // jobs as its
    cap — alone, the grid runs as before; beside other jobs its workers take their share.
    Records are appended (and
    `on_record` called) as cells finish; `on_step` and the per-step progress bar need jobs = 1
    (with jobs > 1 a bar counts the finished cells, with a line for each).  The result is in
    `cells` order either way.  If a cell fails, no further cell starts, the cells already
    running are finished and recorded, and the first error is raised.  ``log_to`` (a
    `lab.training.sinks.LogSpec`) also logs each cell that runs live, into its own folder (skipped cells
    log nothing).
    ``live`` (a `probes.live.LiveSpec`): every running cell reports into its live file and
    checks the stop request between steps; a stop raises `probes.live.StopRequested` once the
    running cells are abandoned — the cells finished before it are in `out_path`, and running
    the grid again trains only the others.
    """
    positive_int(jobs, "jobs", "cells run at once")
    settings = settings.resolved()  # "auto" → the precision this CPU computes in (and keys by)
    done = {r["key"]: r for r in load_records(out_path)} if out_path else {}
    todo = [c for c in cells if c.key(settings) not in done]
    fresh: dict[str, dict] = {}

    def finish(rec: dict) -> None:
        if out_path:
            append_record(out_path, rec)
        fresh[rec["key"]] = rec
        if on_record:
            on_record(rec)
        if live is not None:  # the record is kept now: the cell is no longer "running"
            live.remove(rec["key"])

    if jobs == 1 or len(todo) <= 1:
        for cell in todo:
            finish(run_cell(cell, settings, progress, on_step, log_to, live))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        threads = max(1, cpu_share.cores() // jobs)  # the cores this process may use
        ctx = multiprocessing.get_context("spawn")
        t0 = time.perf_counter()
        errors: list[BaseException] = []
        cells_bar = progress_bar(progress, desc="probe cells", total=len(todo), unit="cell")
        with (
            cells_bar,
            ProcessPoolExecutor(
                max_workers=min(jobs, len(todo)),
                mp_context=ctx,
            ) as pool,
        ):
            futures = [pool.submit(_cell_worker, c, settings, threads, log_to, live) for c in todo]
            try:
                for fut in as_completed(futures):
                    if fut.cancelled():
                        continue
                    err = fut.exception()
                    if err is not None:  # a failing cell: queue nothing more, but
                        errors.append(err)  # keep the cells already running
                        for f in futures:
                            f.cancel()
                        continue
                    rec = fut.result()
                    finish(rec)
                    cells_bar.update(1)
                    if progress:
                        cells_bar.write(
                            f"[{len(fresh)}/{len(todo)}] {rec['key']}  "
                            f"{rec['seconds']:.0f}s  (grid "
                            f"{time.perf_counter() - t0:.0f}s)",
                            file=sys.stderr,
                        )
            except BaseException:  # e.g. Ctrl-C: start nothing new
                for f in futures:
                    f.cancel()
                raise
        if errors:  # a cell's own failure says more than the stop request beside it
            raise next((e for e in errors if not isinstance(e, StopRequested)), errors[0])
    return [done.get(c.key(settings)) or fresh[c.key(settings)] for c in cells]


def grid(mechanisms, depths, inits, seeds, task: str = "marked", distances=(None,)) -> list[Cell]:
    """The cells of a grid; mechanisms in any `lab.ladder.schemes` spelling become their canonical
    names (an unknown one is kept, for `build_probe_model` to refuse)."""

    def canonical(m):
        try:
            return mechanism(m).name
        except ValueError:
            return m

    cells = []
    for mech, depth, init, seed, dist in itertools.product(
        [canonical(m) for m in mechanisms], depths, inits, seeds, distances
    ):
        if mech not in LEARNED and init != inits[0]:
            continue  # init only matters for learned α
        cells.append(Cell(mech, depth, init if mech in LEARNED else "-", seed, task, dist))
    return cells


def table2(records: list[dict], mechanism: str = "blur") -> list[dict]:
    """Table-2-shaped rows (mean over seeds) of one mechanism's records: depth, init, seeds,
    alpha_min / alpha_max (final α over layers and seeds), acc {distance: mean}, seconds.
    (`analysis.tables.probe_table` puts the paper's values beside them and formats them.)"""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r["mechanism"] == mechanism:
            groups.setdefault((r["depth"], r["init"]), []).append(r)
    rows = []
    for (depth, init), rs in sorted(groups.items()):
        alphas = [a for r in rs for a in r["alphas"] if not math.isnan(a)]
        dists = list(rs[0]["acc"])
        rows.append(
            {
                "depth": depth,
                "init": init,
                "seeds": len(rs),
                "alpha_min": min(alphas, default=math.nan),
                "alpha_max": max(alphas, default=math.nan),
                "acc": {d: sum(r["acc"][d] for r in rs) / len(rs) for d in dists},
                "seconds": sum(r["seconds"] for r in rs) / len(rs),
            }
        )
    return rows
