"""How far a probe grid is, in words and seconds: pure functions of its state and live files
(`probes.live`), used by `fiblab.probe_launch.snapshot`."""

from __future__ import annotations

import math
import statistics

from lab.wording import plural

__all__ = ["eta_seconds", "activity"]


def eta_seconds(
    pending_depths: list[int],
    running: list[tuple[int, int, int, float | None]],
    steps: int,
    jobs: int,
    finished: list[tuple[int, float | None, float | None]] = (),
) -> float:
    """Seconds left, from measured step times scaled by depth (a step's cost grows with the
    layers).  ``running``: (depth, step, steps, seconds per step or None) of each cell training
    now; ``finished``: (depth, seconds per step, wall seconds from start to record) of the
    cells this launch finished.  Steps are timed after each cell's first step (which builds the
    kernel) and include the live accuracy evaluations.  The rate is the median seconds per
    layer-step of the running cells, else of the finished ones; each cell not started yet also
    costs the median overhead of the finished ones (model build, first step, final evaluation:
    wall − steps × step time).  The work left is shared by ``jobs`` processes.  NaN before any
    step is measured: no guess from the first step alone."""
    rates = [s / d for d, _, _, s in running if s and d]
    if not rates:
        rates = [s / d for d, s, _ in finished if s and d]
    if not rates:
        return math.nan
    rate = statistics.median(rates)
    over = [max(0.0, w - steps * s) for _, s, w in finished if s and w]
    overhead = statistics.median(over) if over else 0.0
    work = sum(max(n - k, 0) * d for d, k, n, _ in running) + steps * sum(pending_depths)
    lanes = max(1, min(jobs, len(running) + len(pending_depths)))
    return (work * rate + overhead * len(pending_depths)) / lanes


def _cell_name(r: dict) -> str:
    return f"{r['mechanism']} depth {r['depth']} {r['init']} seed {r['seed']}"


def activity(st: str, total: int, running: list[dict], done: int) -> str:
    """What a grid in state ``st`` with ``total`` cells, ``done`` finished and ``running`` (live
    files) is doing now, in words — the start-up phases included."""
    if st == "starting":
        return "starting the process (loading Python and torch; a few seconds)"
    if st == "stopping":
        return "stopping: abandoning the running cell" + ("s" if len(running) > 1 else "")
    if st != "running":
        return ""
    if not running:
        if done == total:
            return f"all {plural(total, 'cell')} trained; the process is finishing"
        return "starting the next cell (a worker process loads torch first)"
    parts = []
    for r in running:
        if r.get("phase") == "building":
            parts.append(
                f"{_cell_name(r)}: building the model and taking its first step (the "
                f"attention kernel is compiled on first use, ≈ 20–30 s once)"
            )
        elif r.get("phase") == "evaluating":
            parts.append(f"{_cell_name(r)}: evaluating accuracy")
        else:
            parts.append(f"{_cell_name(r)}: step {r.get('step', 0)} / {r.get('steps', '?')}")
    return "; ".join(parts)
