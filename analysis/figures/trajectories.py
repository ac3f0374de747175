"""Learned-α trajectories: how far each layer's spacing scalar moves from where it started.

Sources: our store (``Store.alphas()``: LM runs log every layer's α every ``alpha_every`` steps,
probe runs their per-step trajectory) and probe records (``trajectory: [{step, alphas}]``, as
``probes.runner.run_cell`` returns and the probe JSONL files hold). Both become one long frame
with columns ``run``, ``kind`` (``lm`` | ``probe``), ``step``, ``layer``, ``alpha``,
``alpha_init``. Layers without an α (NaN: dense layers) are dropped.

``alpha_init`` is the layer's α at step 0 when the trajectory has a step 0 (probes log one); for
an LM run, whose first logged step is 1 (after one optimizer step), it is the schedule's start
computed from the run's config (``lab.ladder.schedules.layer_alphas`` with the model's schedule,
``learned_init``, ``coprime_stride``, ``alpha_min``, ``alpha_span``); NaN when neither is known.

Summaries: :func:`final_range` (the α range at each run's last step), :func:`drift` (per run and
layer, the largest |α − α_init| over steps) and :func:`inert` (is every layer within a tolerance
of its start? the paper's "stays within 0.05 of α = 1"), both by the one definition in
:mod:`lab.ladder.drift`.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from lab.ladder.drift import INERT_TOL, alpha_drift, is_inert, layer_drifts
from lab.ladder.schedules import layer_alphas

__all__ = [
    "COLUMNS",
    "initial_alphas",
    "from_store",
    "from_records",
    "final_range",
    "run_points",
    "drift",
    "inert",
]

#: Columns of a trajectory frame.
COLUMNS = ["run", "kind", "step", "layer", "alpha", "alpha_init"]


def initial_alphas(config: dict, n_layers: int | None = None) -> list[float] | None:
    """The per-layer α a run starts from, from its config (a ``TrainConfig.to_dict()`` with the
    model under ``"model"``, or a flat model dict); ``None`` for a dense run or when the config
    does not say (no schedule, or no layer count and no ``n_layers``)."""
    model = config.get("model") if isinstance(config.get("model"), dict) else config
    if model.get("attention", "sparse") == "dense" or "schedule" not in model:
        return None
    layers = model.get("n_layers", n_layers)
    if layers is None:
        return None
    schedule = model["schedule"]
    init = model.get("learned_init", "fixed")
    kw = {k: model[k] for k in ("alpha_min", "alpha_span") if model.get(k) is not None}
    return layer_alphas(
        schedule if isinstance(schedule, str) else list(schedule),
        int(layers),
        stride=model.get("coprime_stride"),
        init=init if isinstance(init, str) else list(init),
        **kw,
    )


def _finish(df: pd.DataFrame, starts: dict) -> pd.DataFrame:
    """Drop NaN α, fill ``alpha_init`` (step-0 value, else ``starts[run]``), sort, type."""
    df = df[df["alpha"].notna()].copy()
    first = (
        df[df["step"] == 0].drop_duplicates(["run", "layer"]).set_index(["run", "layer"])["alpha"]
    )
    from_config = pd.Series(
        {
            (run, layer): float(a)
            for run, s in starts.items()
            if s is not None
            for layer, a in enumerate(s)
        },
        dtype=float,
    )
    known = pd.concat([first, from_config[~from_config.index.isin(first.index)]])
    keys = pd.MultiIndex.from_arrays([df["run"], df["layer"]])
    df["alpha_init"] = known.reindex(keys).to_numpy(dtype=float) if len(known) else math.nan
    df = df.sort_values(["run", "step", "layer"], kind="stable").reset_index(drop=True)
    df["step"] = df["step"].astype("int64")
    df["layer"] = df["layer"].astype("int64")
    df["alpha"] = df["alpha"].astype(float)
    return df[COLUMNS]


def from_store(store, runs=None, kinds=("lm", "probe")) -> pd.DataFrame:
    """Every α logged in a :class:`lab.store.Store` for runs of ``kinds`` (optionally only the
    names in ``runs``; named runs of other kinds are skipped, a name the store lacks raises
    ``ValueError``), as a trajectory frame (:data:`COLUMNS`)."""
    info = store.runs()
    if runs is not None:
        runs = [runs] if isinstance(runs, str) else list(runs)
        unknown = sorted(set(runs) - set(info["name"]))
        if unknown:
            raise ValueError(
                f"the store has no runs named {unknown} to read α trajectories of: name runs "
                f"it has (it has {len(info)})"
            )
        info = info[info["name"].isin(runs)]
    info = info[info["kind"].isin(list(kinds))]
    al = store.alphas(list(info["name"])) if len(info) else store.alphas([])
    kind = dict(zip(info["name"], info["kind"]))
    starts = {}
    for name, cfg in zip(info["name"], info["config_json"]):
        try:
            config = json.loads(cfg) if cfg else {}
            n = (
                int(al.loc[al["run"] == name, "layer"].max() + 1)
                if (al["run"] == name).any()
                else None
            )
            starts[name] = initial_alphas(config, n)
        except (ValueError, TypeError, json.JSONDecodeError):
            starts[name] = None  # an unusual config: only a step-0 value can serve
    df = al.assign(kind=al["run"].map(kind))
    return _finish(df, starts)


def from_records(records) -> pd.DataFrame:
    """Trajectory frame (:data:`COLUMNS`, kind ``probe``) of probe records. A record names its
    run by ``key`` (else ``record{i}``); without a ``trajectory`` its final ``alphas`` at
    ``steps`` is its only point."""
    rows = []
    for i, rec in enumerate(records):
        run = rec.get("key") or f"record{i}"
        traj = list(rec.get("trajectory") or [])
        if not traj and rec.get("alphas") is not None:
            traj = [{"step": rec.get("steps", 0), "alphas": rec["alphas"]}]
        for point in traj:
            for layer, a in enumerate(point["alphas"]):
                rows.append(
                    (run, "probe", int(point["step"]), layer, math.nan if a is None else float(a))
                )
    df = pd.DataFrame(rows, columns=["run", "kind", "step", "layer", "alpha"])
    return _finish(df, {})


def _check(traj: pd.DataFrame, who: str) -> None:
    missing = [c for c in COLUMNS if c not in traj.columns]
    if missing:
        raise ValueError(
            f"{who} needs an α trajectory frame; this is not a trajectory frame (it lacks "
            f"columns {missing}): build one with trajectories.from_store or from_records"
        )


def final_range(traj: pd.DataFrame) -> pd.DataFrame:
    """Per run, the α at its last logged step: ``run``, ``kind``, ``step``, ``layers``,
    ``alpha_min``, ``alpha_max``, ``init_min``, ``init_max`` (the starting range)."""
    _check(traj, "the final α range")
    last = traj[traj["step"] == traj.groupby("run")["step"].transform("max")]
    out = (
        last.groupby(["run", "kind"], sort=False)
        .agg(
            step=("step", "max"),
            layers=("layer", "nunique"),
            alpha_min=("alpha", "min"),
            alpha_max=("alpha", "max"),
            init_min=("alpha_init", "min"),
            init_max=("alpha_init", "max"),
        )
        .reset_index()
    )
    return out


def _points(g: pd.DataFrame) -> tuple[list[int], list[list[float]], list[float]]:
    """One run's frame as (layers, α per layer at each logged step, α_init per layer), the
    form `lab.ladder.drift` reads (layers indexed 0…max; NaN where a layer has no value)."""
    n = int(g["layer"].max()) + 1
    wide = g.pivot_table(index="step", columns="layer", values="alpha", aggfunc="first")
    wide = wide.sort_index().reindex(columns=range(n))
    init = g.groupby("layer")["alpha_init"].first().reindex(range(n))
    return sorted(g["layer"].unique()), wide.to_numpy().tolist(), init.to_numpy().tolist()


def run_points(traj: pd.DataFrame, run: str) -> dict:
    """One run of a trajectory frame in `lab.ladder.drift`'s form: ``{"points": α per layer at each
    logged step, "init": α per layer at the start}`` (NaN where unknown)."""
    _check(traj, "a run's α points")
    g = traj[traj["run"] == run]
    if g.empty:
        raise ValueError(
            f"the α trajectory frame has no run {run!r} (it has "
            f"{sorted(set(traj['run']))[:10]}): name one of those"
        )
    _, points, init = _points(g)
    return {"points": points, "init": init}


def drift(traj: pd.DataFrame) -> pd.DataFrame:
    """Per run and layer: ``alpha_init``, ``alpha_final`` (at the last logged step),
    ``max_drift`` = max over logged steps of |α − α_init| (`lab.ladder.drift.layer_drifts`) and
    ``final_drift`` = |α_final − α_init| (NaN where the start is unknown)."""
    _check(traj, "the α drift")
    rows = []
    for (run, kind), g in traj.groupby(["run", "kind"], sort=False):
        layers, points, init = _points(g)
        drifts = layer_drifts(points, init)
        last = g.sort_values("step", kind="stable").groupby("layer")["alpha"].last()
        for layer in layers:
            rows.append(
                {
                    "run": run,
                    "kind": kind,
                    "layer": layer,
                    "alpha_init": init[layer],
                    "alpha_final": float(last[layer]),
                    "max_drift": drifts[layer],
                }
            )
    out = pd.DataFrame(
        rows, columns=["run", "kind", "layer", "alpha_init", "alpha_final", "max_drift"]
    )
    out["layer"] = out["layer"].astype("int64")
    for c in ("alpha_init", "alpha_final", "max_drift"):
        out[c] = out[c].astype(float)
    out["final_drift"] = (out["alpha_final"] - out["alpha_init"]).abs()
    return out


def inert(traj: pd.DataFrame, tol: float = INERT_TOL) -> pd.DataFrame:
    """The inertness check per run: ``run``, ``kind``, ``layers``, ``max_drift`` (largest
    |α − α_init| over layers and steps: `lab.ladder.drift.alpha_drift`), ``worst_layer`` (where it
    happened) and ``inert`` (`lab.ladder.drift.is_inert`: every layer within ``tol`` of its start at
    every logged step; ``<NA>`` when a start is unknown)."""
    is_inert(0.0, tol)  # validates tol
    _check(traj, "the inertness check")
    rows = []
    for (run, kind), g in traj.groupby(["run", "kind"], sort=False):
        layers, points, init = _points(g)
        d = alpha_drift(points, init)
        verdict = is_inert(d, tol)
        drifts = layer_drifts(points, init)
        rows.append(
            {
                "run": run,
                "kind": kind,
                "layers": len(layers),
                "max_drift": d,
                "worst_layer": pd.NA if verdict is None else max(drifts, key=drifts.get),
                "inert": pd.NA if verdict is None else verdict,
            }
        )
    out = pd.DataFrame(rows, columns=["run", "kind", "layers", "max_drift", "worst_layer", "inert"])
    out["max_drift"] = out["max_drift"].astype(float)
    out["worst_layer"] = out["worst_layer"].astype("Int64")
    out["inert"] = out["inert"].astype("boolean")
    return out
