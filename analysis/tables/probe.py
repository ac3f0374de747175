"""Table 2: the marked two-distance retrieval probe, from probe cells — of our store, of probe
records (JSONL / :class:`probes.record.ProbeRecord`) or of the authors' ``retrieval_results``."""

from __future__ import annotations

import json
import math

import pandas as pd

from analysis.statistics.stats import as_sample
from analysis.tables.comparable import TableUnavailable
from analysis.tables.rows import rounded
from probes.record import ProbeRecord

__all__ = [
    "probe_cells_from_store",
    "probe_cells_from_records",
    "probe_cells_from_paperdb",
    "table2",
    "table2_from_store",
    "table2_from_paperdb",
]


_CELL_COLS = [
    "run",
    "task",
    "mechanism",
    "depth",
    "init",
    "seed",
    "steps",
    "distance",
    "accuracy",
    "alphas",
]


def _alpha_list(value) -> list[float]:
    if value is None:
        return []
    if isinstance(value, float) and math.isnan(value):
        return []
    return [float("nan") if a is None else float(a) for a in value]


def _cells(rows) -> pd.DataFrame:
    out = pd.DataFrame(rows, columns=_CELL_COLS)
    for c in ("depth", "seed", "distance"):
        out[c] = out[c].astype("int64")
    out["steps"] = out["steps"].astype("Int64")
    out["accuracy"] = out["accuracy"].astype(float)
    return out


def probe_cells_from_store(probes: pd.DataFrame) -> pd.DataFrame:
    """Probe cells from ``Store.probes()``: one row per cell and distance with columns ``run``,
    ``task``, ``mechanism``, ``depth``, ``init``, ``seed``, ``steps``, ``distance``,
    ``accuracy`` and ``alphas`` (the cell's final α per layer, from the record's ``alphas``
    kept in ``extra_json``; ``[]`` when it has none)."""
    rows = []
    for r in probes.itertuples(index=False):
        try:
            extra = json.loads(r.extra_json) if r.extra_json else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"probe run {r.run!r}: unreadable extra_json ({e})") from None
        rows.append(
            [
                r.run,
                r.task,
                r.mechanism,
                r.depth,
                r.init,
                r.seed,
                r.steps,
                r.distance,
                r.accuracy,
                _alpha_list(extra.get("alphas")),
            ]
        )
    return _cells(rows)


def probe_cells_from_records(records) -> pd.DataFrame:
    """Probe cells (the columns of :func:`probe_cells_from_store`) from the records that
    ``probes.runner.run_cell`` returns and the probe JSONL files hold (dicts or
    :class:`probes.record.ProbeRecord`)."""
    rows = []
    for i, rec in enumerate(records):
        if not isinstance(rec, ProbeRecord):
            missing = [k for k in ("mechanism", "depth", "init", "seed", "acc") if k not in rec]
            if missing:
                raise ValueError(f"probe record {i} lacks {missing} (has {sorted(rec)})")
            run = rec.get("key") or f"record{i}"
            rec = ProbeRecord.from_dict(rec)
        else:
            run = rec.key
        for d, acc in rec.acc.items():
            rows.append(
                [
                    run,
                    rec.task,
                    rec.mechanism,
                    rec.depth,
                    rec.init,
                    rec.seed,
                    rec.steps,
                    int(d),
                    acc,
                    _alpha_list(rec.alphas),
                ]
            )
    return _cells(rows)


def probe_cells_from_paperdb(retrieval: pd.DataFrame, source: str = "marked") -> pd.DataFrame:
    """Probe cells from the authors' ``retrieval_results`` (:func:`analysis.published.paperdb.load_retrieval`)
    of one ``source``. Their mechanism names lose the ``fib_`` prefix (``fib_blur`` → ``blur``,
    this project's name), ``staggered`` 1/0 becomes ``init`` ``staggered``/``uniform`` (``-``
    when not applicable); only the ``target`` / ``trained`` rows are kept; ``steps`` is unknown."""
    df = retrieval[(retrieval["source"] == source) & retrieval["kind"].isin(["target", "trained"])]
    rows = []
    for r in df.itertuples(index=False):
        mech = r.mech[4:] if r.mech.startswith("fib_") else r.mech
        init = {1: "staggered", 0: "uniform"}.get(int(r.staggered), "-")
        rows.append(
            [
                f"{source}/{r.mech}/d{r.depth}/{init}/s{r.seed}",
                source,
                mech,
                r.depth,
                init,
                r.seed,
                None,
                r.distance,
                r.acc,
                _alpha_list(r.alphas),
            ]
        )
    return _cells(rows)


_INITS = ("uniform", "staggered")


def table2(
    cells: pd.DataFrame,
    mechanism: str = "blur",
    task: str = "marked",
    steps: int | None = None,
    distances=None,
    decimals: int | None = None,
) -> pd.DataFrame:
    """Table 2 (the marked two-distance probe) from probe cells.

    ``cells`` as :func:`probe_cells_from_store` returns. Keeps one ``mechanism`` and ``task`` (and
    ``steps``: needed when cells of several training lengths are present). One row per
    (depth, init): ``learned_alpha_min`` / ``learned_alpha_max`` (the range of the final α over
    layers and seeds; NaN for a mechanism without α), ``acc_at_{d}`` for each evaluated distance
    (mean over seeds), ``seeds``. Depth ascending, uniform before staggered.

    Raises :class:`analysis.tables.comparable.TableUnavailable` when nothing matches, when several step
    counts are mixed, or when one seed of a cell appears twice (e.g. the same cell at two
    learning rates: filter ``cells``).
    """
    df = cells[(cells["mechanism"] == mechanism) & (cells["task"] == task)]
    if df.empty:
        have = sorted(set(zip(cells["task"], cells["mechanism"])))
        raise TableUnavailable(
            f"Table 2: no cells for task={task!r}, mechanism={mechanism!r} "
            f"((task, mechanism) present: {have or 'none'})",
            f"run the probe: `fiblab probe {task} --mechanisms {mechanism}`",
        )
    if steps is not None:
        df = df[df["steps"] == steps]
    else:
        have = sorted(int(s) for s in df["steps"].dropna().unique())
        if len(have) > 1:
            raise TableUnavailable(
                f"Table 2: cells of {mechanism!r} were trained for {have} steps",
                "pass steps=... to pick one, or report one probe grid "
                "(`fiblab report --probes FILE.jsonl`)",
            )
    if distances is not None:
        df = df[df["distance"].isin(list(distances))]
    dup = df.duplicated(["depth", "init", "seed", "distance"], keep=False)
    if dup.any():
        raise TableUnavailable(
            "Table 2 has more than one cell per (depth, init, seed, distance), from runs "
            f"{sorted(df.loc[dup, 'run'].unique())}",
            "report one probe grid (`fiblab report --probes FILE.jsonl`) or filter the cells",
        )
    dists = sorted(df["distance"].unique())
    rows = []
    for (depth, init), g in df.groupby(["depth", "init"], sort=False):
        per_seed = g.drop_duplicates("seed")
        alphas = as_sample([a for lst in per_seed["alphas"] for a in lst], "alphas")
        row = {
            "depth": int(depth),
            "init": init,
            "learned_alpha_min": float(alphas.min()) if len(alphas) else float("nan"),
            "learned_alpha_max": float(alphas.max()) if len(alphas) else float("nan"),
        }
        for d in dists:
            row[f"acc_at_{d}"] = float(g.loc[g["distance"] == d, "accuracy"].mean())
        row["seeds"] = int(g["seed"].nunique())
        rows.append(row)
    out = pd.DataFrame(rows)
    out["_i"] = out["init"].map(lambda i: _INITS.index(i) if i in _INITS else len(_INITS))
    out = out.sort_values(["depth", "_i", "init"]).drop(columns="_i").reset_index(drop=True)
    values = [c for c in out.columns if c.startswith(("learned_alpha", "acc_at_"))]
    return rounded(out, values, decimals)


def table2_from_store(store, mechanism: str = "blur", task: str = "marked", **kw) -> pd.DataFrame:
    """:func:`table2` of the probe results in our store."""
    return table2(probe_cells_from_store(store.probes()), mechanism, task, **kw)


def table2_from_paperdb(retrieval: pd.DataFrame, **kw) -> pd.DataFrame:
    """:func:`table2` of the authors' marked probe (``source = 'marked'``, mechanism blur)."""
    return table2(probe_cells_from_paperdb(retrieval, "marked"), "blur", "marked", **kw)
