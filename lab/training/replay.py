"""Runs already in the store, replayed into a `lab.training.sinks` sink with live logging's tags.

`store_points` turns a run's stored rows into the points live logging would have sent: its
metrics (by name), evaluations (``ppl/…``, `lab.training.sinks.eval_tag`), α per layer and a probe's
accuracy per distance, at their original steps.  Wall times come from the store where it has
them (an evaluation's and a probe result's ``logged_at``); the other points carry the run's
start (or creation) time, the earliest the store knows.  `replay` writes each run into a fresh
sink (`LogSpec.open` with no resume step replaces the run's earlier event files), so exporting
a run twice gives one copy of its scalars, not two.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from lab.training.sinks import LogSpec, acc_scalars, alpha_scalars, eval_tag

__all__ = ["ScalarPoint", "replay", "store_points"]


@dataclass(frozen=True)
class ScalarPoint:
    """The scalars of one step of a run, and when they were logged (None: unknown)."""

    step: int
    values: dict[str, float] = field(default_factory=dict)
    walltime: float | None = None


def _seconds(ts) -> float | None:
    """A store timestamp (pandas, UTC) as seconds since the epoch; None for a missing one."""
    if ts is None or (isinstance(ts, float) and math.isnan(ts)) or str(ts) == "NaT":
        return None
    return float(ts.timestamp())


def _train_len(config_json: str) -> int | None:
    try:
        model = json.loads(config_json or "{}").get("model") or {}
    except (json.JSONDecodeError, AttributeError):
        return None
    n = model.get("seq_len") if isinstance(model, dict) else None
    return n if isinstance(n, int) else None


def store_points(store, runs: Iterable[str] | None = None) -> dict[str, list[ScalarPoint]]:
    """``{run: [ScalarPoint, …]}`` in step order (per step: metrics, evaluations, α, accuracy,
    grouped by wall time) for ``runs`` (default every run; an unknown name is a ValueError)."""
    with store.snapshot():
        table = store.runs()
        wanted = list(table["name"]) if runs is None else list(dict.fromkeys(runs))
        missing = [r for r in wanted if r not in set(table["name"])]
        if missing:
            raise ValueError(
                f"no run named {missing[0]!r} in {store.path}: list them with "
                f"`fiblab report --json`, or give no run names to export every run"
            )
        only = None if runs is None else wanted  # every run: no IN (…) of every name
        frames = (store.metrics(only), store.evals(only), store.alphas(only), store.probes())
    info = {r.name: r for r in table.itertuples(index=False) if r.name in set(wanted)}
    rows: dict[str, dict[tuple[int, float | None], dict[str, float]]] = {r: {} for r in wanted}

    def at(run, step, wall):
        return rows[run].setdefault((int(step), wall), {})

    start = {}
    for name, r in info.items():
        start[name] = _seconds(r.started_at)
        if start[name] is None:
            start[name] = _seconds(r.created_at)
    metrics, evals, alphas, probes = frames
    for m in metrics.itertuples(index=False):
        at(m.run, m.step, start[m.run])[m.name] = m.value
    lengths = {name: _train_len(r.config_json) for name, r in info.items()}
    for e in evals.itertuples(index=False):
        tag = eval_tag(e.dataset, e.kind, int(e.context_len), lengths[e.run])
        at(e.run, e.step, _seconds(e.logged_at))[tag] = e.perplexity
    for (run, step), group in alphas.groupby(["run", "step"], sort=False):
        values = [math.nan] * (int(group["layer"].max()) + 1)
        for layer, a in zip(group["layer"], group["alpha"]):
            values[int(layer)] = a
        at(run, step, start[run]).update(alpha_scalars(values))
    probes = probes[probes["run"].isin(wanted)]
    for p in probes.itertuples(index=False):
        at(p.run, p.steps, _seconds(p.logged_at)).update(acc_scalars({p.distance: p.accuracy}))
    return {
        run: [
            ScalarPoint(step, values, wall)
            for (step, wall), values in sorted(
                points.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0.0)
            )
        ]
        for run, points in rows.items()
    }


def replay(store, spec: LogSpec, runs: Iterable[str] | None = None) -> dict[str, int]:
    """Write ``runs`` (default every run) of ``store`` into fresh sinks of ``spec``; returns
    ``{run: scalars written}``."""
    written = {}
    for run, points in store_points(store, runs).items():
        sink = spec.open(run)
        try:
            for p in points:
                sink.scalars(p.step, p.values, walltime=p.walltime)
        finally:
            sink.close()
        written[run] = sum(len(p.values) for p in points)
    return written
