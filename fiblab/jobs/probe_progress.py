"""How far a probe grid is, in words and seconds: pure functions of its state and live files
(`probes.live`), used by `fiblab.jobs.probe_launch.snapshot`."""

from __future__ import annotations

import math
import statistics

from lab.util.wording import plural

__all__ = ["eta_seconds", "cell_overhead", "activity"]


def eta_seconds(
    pending_depths: list[int],
    running: list[tuple[int, int, int, float | None]],
    steps: int,
    jobs: int,
    finished: list[tuple[int, float | None, float | None]] = (),
    overhead: float | None = None,
) -> float:
    """Seconds left, from measured step times scaled by depth (a step's cost grows with the
    layers).  ``running``: (depth, step, steps, seconds per step or None) of each cell training
    now; ``finished``: (depth, seconds per step, wall seconds from start to record) of the
    cells this launch finished.  Steps are timed after each cell's first step (which builds the
    kernel) and include the live accuracy evaluations.  The rate is the median seconds per
    layer-step of the running cells, else of the finished ones; each cell not started yet also
    costs ``overhead`` seconds (model build, first step, final evaluation: `cell_overhead`), by
    default the median of the finished ones (wall − steps × step time).  The work left is
    shared by ``jobs`` processes.  NaN before any step is measured: no guess from the first
    step alone."""
    rates = [s / d for d, _, _, s in running if s and d]
    if not rates:
        rates = [s / d for d, s, _ in finished if s and d]
    if not rates:
        return math.nan
    rate = statistics.median(rates)
    if overhead is None:
        over = [max(0.0, w - steps * s) for _, s, w in finished if s and w]
        overhead = statistics.median(over) if over else 0.0
    work = sum(max(n - k, 0) * d for d, k, n, _ in running) + steps * sum(pending_depths)
    lanes = max(1, min(jobs, len(running) + len(pending_depths)))
    return (work * rate + overhead * len(pending_depths)) / lanes


def cell_overhead(running: list[dict], trained: dict, steps: int) -> float:
    """Seconds a cell costs beyond its steps (model build, first step, final evaluation), from
    the cells of this launch that cannot have compiled the attention kernel: those started
    after some cell had taken its first step (the first step builds it, once per machine).  A
    first cell's ≈ 20–30 s compile counted for every cell left made the first launch's ETA
    jump when that cell finished (issue 42).  ``running``: the live files (``started``,
    ``first_step_at``); ``trained``: progress.json's finished cells (``step_s``, ``wall_s``,
    ``started``, ``first_step_at``).  The median of the finished such cells (wall − steps ×
    step time), else of the running ones' builds (first step − start, a lower bound), else 0."""
    firsts = [c["first_step_at"] for c in [*running, *trained.values()] if c.get("first_step_at")]
    if not firsts:
        return 0.0
    ready = min(firsts)  # the kernel is built from here on

    def fresh(c: dict) -> bool:
        return (c.get("started") or 0.0) >= ready

    done = [
        max(0.0, c["wall_s"] - steps * c["step_s"])
        for c in trained.values()
        if fresh(c) and c.get("wall_s") and c.get("step_s")
    ]
    if done:
        return statistics.median(done)
    builds = [
        c["first_step_at"] - c["started"] for c in running if fresh(c) and c.get("first_step_at")
    ]
    return statistics.median(builds) if builds else 0.0


def _kernel_built() -> bool:
    """Whether the CPU kernel is built already (then a first step takes seconds, not a build)."""
    from lab.kernels.cpu import is_cached

    try:
        return is_cached()
    except Exception:  # noqa: BLE001 - a progress line never fails over this
        return False


def _cell_name(r: dict) -> str:
    """The cell as the live line names it; a shift cell adds its trained distance, the only
    thing that tells two cells of the same mechanism, depth, init and seed apart."""
    name = f"{r['mechanism']} depth {r['depth']} {r['init']} seed {r['seed']}"
    if r.get("distance") is not None:
        name += f" distance {r['distance']}"
    return name


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
                f"{_cell_name(r)}: building the model and taking its first step"
                + ("" if _kernel_built() else " (compiling the attention kernel: ≈ 20–30 s, once)")
            )
        elif r.get("phase") == "evaluating":
            parts.append(f"{_cell_name(r)}: evaluating accuracy")
        else:
            parts.append(f"{_cell_name(r)}: step {r.get('step', 0)} / {r.get('steps', '?')}")
    return "; ".join(parts)


#: A grid of cells this long (steps) gets a time estimate before it starts (`start_estimate`).
LONG_STEPS = 1000


def start_estimate(cells, settings, scale: str, task: str, jobs: int = 1) -> str | None:
    """One line for a long grid before it trains: its cells and steps and the wall time they
    take on this machine, from one blur-cell step timed here per depth (`probes.runner.
    blur_step`, what `fiblab doctor` times), divided over ``jobs`` lanes. None for a short
    grid, a task other than ``marked`` or a scale without a step to time."""
    from lab.machine.measure import time_fn
    from lab.util.wording import duration, plural
    from probes.runner import blur_step
    from probes.settings import SCALES

    cells = list(cells)
    if not cells or task != "marked" or scale not in SCALES or settings.steps < LONG_STEPS:
        return None
    per_step = {
        d: time_fn(blur_step(scale, d, settings.precision), warmup=1, reps=2).min_s
        for d in sorted({c.depth for c in cells})
    }
    total = sum(per_step[c.depth] * settings.steps for c in cells) / max(1, jobs)
    return (
        f"{plural(len(cells), 'cell')} to train × {settings.steps:,} steps ({scale} scale): "
        f"≈ {duration(total)} on this machine (one step timed here: "
        + ", ".join(f"depth {d} {s:.2f} s" for d, s in per_step.items())
        + f"; jobs={jobs}); `--scale quick` is a 400-step look"
    )
