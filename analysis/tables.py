"""The paper's tables 1–5 rebuilt from results, and side-by-side comparison with the published ones.

Sources: *our* experiment store (:class:`lab.store.Store`) and the paper's own frames (the authors'
``fib.db`` through :mod:`analysis.paperdb`, their ``lenextrap`` / ``posloss`` dumps through
:mod:`analysis.paper`). Each table has a pure builder from a long frame and thin readers:

======  =====================================  ================================================
table   from our store                          from the paper's frames
======  =====================================  ================================================
1       :func:`table1_from_store`              :func:`table1` (``load_final_ppl``)
2       :func:`table2_from_store`              :func:`table2_from_paperdb` (``load_retrieval``)
3       :func:`table3_from_store`              :func:`table3_from_lenextrap` (``paper.lenextrap``)
4       :func:`table4_from_store`              :func:`table4_from_posloss` (``paper.posloss``)
5       :func:`table5_from_store`              :func:`table5_from_final_ppl` (``load_final_ppl``)
======  =====================================  ================================================

:func:`with_paper` puts the published numbers beside ours; :func:`published` gives a published table
with its columns named as ours (Table 5's population std becomes ``std_pop``).

Store conventions read here (what training and the evaluation module log): LM runs are runs of
kind ``lm`` whose config is a ``TrainConfig.to_dict()`` (``model.base``, ``model.schedule``,
``model.window``, ``model.seq_len`` = the training length, ``seed``); a flat config with ``base``,
``schedule``, ``W`` / ``window``, ``seq_len``, ``seed`` is read too. Evaluation kinds:

``full``
    whole windows at ``context_len``, rung set recomputed for that length (the paper's policy);
``frozen``
    whole windows at ``context_len``, rung set frozen at the training length;
``full:block{j}`` / ``frozen:block{j}``
    positions [j·T, (j+1)·T) of windows of length ``context_len`` (T the training length);
``bin{b}``
    mean NLL in position bin b of windows at the training length;
``light``
    periodic cheap evaluations during training (never used here).

Every table uses each run's *final* step: the largest step at which the run has an evaluation of
the kinds that table reads. Only the seeds of one variant (:mod:`lab.variant`: everything but the
seed alike) are averaged (mean of perplexity, as the paper's Table 5 does), one run per seed, and
``seeds`` counts the distinct seeds; runs that differ in anything else are rows of their own whose
``variant`` column says what differs, and duplicates of one variant and seed are resolved and
noted in ``attrs["notes"]`` (see :mod:`analysis.comparable`). A table that cannot be built raises
:class:`TableUnavailable` (why, and what to run).

>>> from analysis.paperdb import load_final_ppl
>>> from analysis.paper import perplexity
>>> ours = table1(load_final_ppl("../shared/reference/fib.db"))      # doctest: +SKIP
>>> with_paper(ours.round(2), perplexity())                           # doctest: +SKIP
"""

from __future__ import annotations

import json
import math

import pandas as pd

from lab.evalkind import KIND_PATTERNS, EvalKind, Family
from lab.schemes import paper_label
from lab.variant import Variant, seed_of, variant_of
from probes.record import ProbeRecord

from . import paper as _paper
from .comparable import TableUnavailable, natural_key, one_run_per_seed, variant_labels
from .paperdb import BASES, DATASETS, DEFAULT_SEED, SCHEDULES
from .stats import as_sample

__all__ = [
    "TABLE1_KEYS",
    "TABLE1_COLUMNS",
    "EVAL_KINDS",
    "table1",
    "with_paper",
    "published",
    "TableUnavailable",
    "config_label",
    "lm_runs",
    "lm_evals",
    "final_step_rows",
    "table1_from_store",
    "probe_cells_from_store",
    "probe_cells_from_records",
    "probe_cells_from_paperdb",
    "table2",
    "table2_from_store",
    "table2_from_paperdb",
    "table3",
    "table3_from_store",
    "table3_from_lenextrap",
    "table4",
    "table4_from_store",
    "table4_from_posloss",
    "table5",
    "table5_from_store",
    "table5_from_final_ppl",
]

#: Row keys of Table 1.
TABLE1_KEYS = ["base", "schedule", "W"]
#: Value columns of Table 1, in the paper's order.
TABLE1_COLUMNS = list(DATASETS.values())


def _is_matrix_code(code) -> bool:
    """``f01`` … ``f99``: the main run matrix (``g``/``h`` are seed replicates)."""
    return isinstance(code, str) and len(code) >= 2 and code[0] == "f" and code[1:].isdigit()


def table1(final_ppl: pd.DataFrame, decimals: int | None = None) -> pd.DataFrame:
    """Table 1 in the paper's layout from a long final-perplexity frame.

    ``final_ppl`` is what :func:`analysis.paperdb.load_final_ppl` returns (columns ``code``,
    ``base``, ``schedule``, ``W``, ``seed``, ``dataset``, ``ppl``; others are ignored). Only the
    main matrix is used: codes ``f01``–``f21`` with seed 42.

    Returns one row per (base, schedule, W) present, in the paper's order (fib before pow2;
    fixed, learned, stagger, coprime; W ascending), with columns ``base``, ``schedule``, ``W``
    (int), ``tinystories``, ``math``, ``fineweb_edu``, ``wikipedia`` (perplexity; ``NaN`` where
    a dataset is missing), index 0…n−1 — the layout of :func:`analysis.paper.perplexity`.
    ``decimals`` rounds the values (the paper prints 2).

    Raises ``ValueError`` if required columns are missing or a (base, schedule, W, dataset) cell
    has more than one value (e.g. a failed attempt that was not filtered out).
    """
    need = {"code", "base", "schedule", "W", "seed", "dataset", "ppl"}
    missing = sorted(need - set(final_ppl.columns))
    if missing:
        raise ValueError(f"table1 needs columns {sorted(need)}; missing {missing}")
    df = final_ppl[
        final_ppl["code"].map(_is_matrix_code)
        & final_ppl["seed"].eq(DEFAULT_SEED).fillna(False).astype(bool)
        & final_ppl["base"].notna()
    ]
    keys = TABLE1_KEYS + ["dataset"]
    dup = df.duplicated(keys, keep=False)
    if dup.any():
        cells = df.loc[dup, keys + (["title"] if "title" in df.columns else [])]
        raise ValueError("more than one value per Table 1 cell:\n" + cells.to_string(index=False))
    wide = df.pivot(index=TABLE1_KEYS, columns="dataset", values="ppl").reset_index()
    wide.columns.name = None
    extra = [c for c in wide.columns if c not in TABLE1_KEYS and c not in TABLE1_COLUMNS]
    for col in TABLE1_COLUMNS:
        if col not in wide.columns:
            wide[col] = float("nan")
    wide = wide[TABLE1_KEYS + TABLE1_COLUMNS + sorted(extra)]
    base_rank = {b: i for i, b in enumerate(BASES)}
    sched_rank = {s: i for i, s in enumerate(SCHEDULES)}
    wide["W"] = wide["W"].astype("int64")
    wide = wide.assign(
        _b=wide["base"].map(lambda b: base_rank.get(b, len(base_rank))),
        _s=wide["schedule"].map(lambda s: sched_rank.get(s, len(sched_rank))),
    )
    wide = (
        wide.sort_values(["_b", "base", "_s", "schedule", "W"])
        .drop(columns=["_b", "_s"])
        .reset_index(drop=True)
    )
    values = [c for c in wide.columns if c not in TABLE1_KEYS]
    wide[values] = wide[values].astype(float)
    if decimals is not None:
        wide[values] = wide[values].round(decimals)
    return wide


def with_paper(
    ours: pd.DataFrame,
    paper: pd.DataFrame,
    on: list[str] | None = None,
    *,
    how: str = "left",
    suffix: str = "_paper",
    diff_suffix: str = "_diff",
) -> pd.DataFrame:
    """``ours`` with the published value next to each of its numbers.

    Rows are matched on the key columns ``on``; by default the columns both frames share that are
    not floating point (for Table 1: ``base``, ``schedule``, ``W``). Every other shared column
    ``c`` becomes three adjacent columns: ``c`` (ours), ``c_paper`` (published) and ``c_diff``
    (ours − published). Columns only in ``ours`` are kept after them; columns only in ``paper``
    are dropped. ``how`` is the merge: ``"left"`` keeps exactly ``ours``' rows (a value the paper
    lacks is ``NaN``), ``"outer"`` adds the paper's rows we lack.

    >>> t = with_paper(table1(df).round(2), analysis.paper.perplexity())   # doctest: +SKIP
    >>> list(t.columns[3:6])                                               # doctest: +SKIP
    ['tinystories', 'tinystories_paper', 'tinystories_diff']
    """
    shared = [c for c in ours.columns if c in paper.columns]
    if on is None:
        on = [
            c
            for c in shared
            if not (pd.api.types.is_float_dtype(ours[c]) or pd.api.types.is_float_dtype(paper[c]))
        ]
    if not on:
        raise ValueError("with_paper: no key columns to match rows on; pass on=[...]")
    for c in on:
        if c not in ours.columns or c not in paper.columns:
            raise ValueError(f"with_paper: key column {c!r} is not in both frames")
    values = [c for c in shared if c not in on]
    if not values:
        raise ValueError("with_paper: the frames share no value columns")
    left, right = ours.copy(), paper[on + values].copy()
    for c in on:  # e.g. W as int64 on one side and Int64 on the other
        if left[c].dtype != right[c].dtype:
            try:
                right[c] = right[c].astype(left[c].dtype)
            except (TypeError, ValueError):
                left[c], right[c] = left[c].astype(str), right[c].astype(str)
    if right.duplicated(on).any():
        raise ValueError(f"with_paper: the published table has repeated keys {on}")
    right = right.rename(columns={c: c + suffix for c in values})
    merged = left.merge(right, on=on, how=how, sort=False)
    cols = list(on)
    for c in values:
        merged[c + diff_suffix] = merged[c] - merged[c + suffix]
        cols += [c, c + suffix, c + diff_suffix]
    cols += [c for c in ours.columns if c not in cols]
    return merged[cols]


def published(n: int) -> pd.DataFrame:
    """The paper's Table ``n`` with its columns named as the tables built here name them, ready
    for :func:`with_paper`: Table 5's ``std`` (the population std, ddof 0) becomes ``std_pop``,
    so that it lines up with our ``std_pop`` and not with our sample ``std``."""
    t = _paper.paper_table(n)
    if n == 5:
        t = t.rename(columns={"std": "std_pop"})
    return t


# ------------------------------------------------------------------------------------------------
# our store: which run is which, and its evaluations
# ------------------------------------------------------------------------------------------------

#: Evaluation kinds the tables read (``{j}`` / ``{b}`` stand for a block / bin number); the
#: store's text of a `lab.evalkind.EvalKind`, read back with `EvalKind.read`.
EVAL_KINDS = KIND_PATTERNS


def _policy_kind(text: str) -> EvalKind | None:
    """The kind if it is whole windows or a block under a rung policy (full / frozen)."""
    k = EvalKind.read(text)
    return k if k is not None and k.policy is not None else None


def _bin_kind(text: str) -> EvalKind | None:
    k = EvalKind.read(text)
    return k if k is not None and k.family is Family.BIN else None


def config_label(base, schedule, attention: str = "sparse") -> str:
    """The paper's name of a configuration (`lab.schemes.paper_label`): ``"dense"``, or
    ``"base/schedule"`` such as ``"fib/stagger"``; a custom base or schedule (a list) is
    called ``custom``."""
    return paper_label(base, schedule, attention)


def _run_row(v: Variant) -> dict:
    """The columns :func:`lm_runs` shows of a variant (a config without base / schedule /
    attention is read as the defaults, fib / fixed / sparse, as before variants existed)."""
    attention = v.attention or "sparse"
    dense = attention == "dense"
    base = None if dense else (v.base if v.base is not None else "fib")
    schedule = None if dense else (v.schedule if v.schedule is not None else "fixed")
    return {
        "config": config_label(base, schedule, attention),
        "attention": attention,
        "base": None if dense else (base if isinstance(base, str) else "custom"),
        "schedule": None if dense else (schedule if isinstance(schedule, str) else "custom"),
        "W": None if dense else v.window,
        "seq_len": v.seq_len,
    }


_RUN_COLS = [
    "run",
    "status",
    "config",
    "attention",
    "base",
    "schedule",
    "W",
    "seed",
    "seq_len",
    "variant_id",
    "finished_at",
]


def _named(runs) -> list[str] | None:
    if runs is None:
        return None
    return [runs] if isinstance(runs, str) else list(runs)


def _lm_runs(store, status, runs) -> tuple[pd.DataFrame, dict[str, Variant]]:
    names = _named(runs)
    if names is not None:
        known = set(store.runs(kind="lm")["name"])
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(
                f"no language-model runs named {unknown} in the store (it has {len(known)} LM runs)"
            )
    info = store.runs(kind="lm", status=status)
    if names is not None:
        info = info[info["name"].isin(names)]
    rows, variants = [], {}
    for r in info.itertuples(index=False):
        try:
            config = json.loads(r.config_json) if r.config_json else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"run {r.name!r}: unreadable config_json ({e})") from None
        v = variant_of(config)
        variants[v.id] = v
        seed = seed_of(config, None if pd.isna(r.seed) else int(r.seed))
        rows.append(
            {
                "run": r.name,
                "status": r.status,
                **_run_row(v),
                "seed": seed,
                "variant_id": v.id,
                "finished_at": r.finished_at,
            }
        )
    out = pd.DataFrame(rows, columns=_RUN_COLS)
    for c in ("W", "seed", "seq_len"):
        out[c] = out[c].astype("Int64")
    return out, variants


def lm_runs(store, status: str | None = "done", runs=None) -> pd.DataFrame:
    """The language-model runs (kind ``lm``) of a :class:`lab.store.Store`, one row each, oldest
    first: ``run``, ``status``, what their config says (``config`` — the paper's label —,
    ``attention``, ``base``, ``schedule``, ``W``, ``seed``, ``seq_len``), ``variant_id`` (the
    :class:`lab.variant.Variant` id: equal ids, comparable runs) and ``finished_at``.
    ``status=None`` keeps every status; ``runs`` (a name or a list) keeps those runs (still
    filtered by ``status``); a name that is no LM run of the store raises ``ValueError``."""
    return _lm_runs(store, status, runs)[0]


def _lm_evals(store, status, runs) -> tuple[pd.DataFrame, dict[str, Variant]]:
    info, variants = _lm_runs(store, status, runs)
    ev = store.evals(list(info["run"])) if len(info) else store.evals([])
    ev = ev.drop(columns=[c for c in ("logged_at",) if c in ev.columns])
    return info.drop(columns="status").merge(ev, on="run", how="inner"), variants


def lm_evals(store, status: str | None = "done", runs=None) -> pd.DataFrame:
    """Every evaluation of the LM runs (all, or those named in ``runs``), with the run's variant:
    the columns of :func:`lm_runs` (less ``status``) then ``step``, ``dataset``,
    ``context_len``, ``kind``, ``loss``, ``perplexity``, ``tokens``."""
    return _lm_evals(store, status, runs)[0]


def final_step_rows(evals: pd.DataFrame, kinds) -> pd.DataFrame:
    """The rows of ``evals`` whose ``kind`` is one of ``kinds`` (a collection of names, or a
    predicate on the name), at each run's last step among those rows."""
    match = kinds if callable(kinds) else (lambda k, _s=frozenset(kinds): k in _s)
    df = evals[evals["kind"].map(match).astype(bool)]
    if df.empty:
        return df.copy()
    last = df.groupby("run")["step"].transform("max")
    return df[df["step"] == last].copy()


# what each table of our store needs, and the command that produces it
_TRAIN = "train a run to the end (`fiblab train --preset cpu-stagger`): it ends with one"
_EVAL = (
    "evaluate a trained run with `fiblab eval runs/NAME` (it logs the longer lengths "
    "and the position bins)"
)
_NEEDS = {
    "Table 1": ("a sparse run's final evaluation at its training length", _TRAIN),
    "Table 3": ("evaluations beyond the training length", _EVAL),
    "Table 4": ("position-bin evaluations (bin0 … bin7)", _EVAL),
    "Table 5": ("a run's final evaluation at its training length", _TRAIN),
}


def _nothing(table: str, more: str = "") -> TableUnavailable:
    need, fix = _NEEDS[table]
    return TableUnavailable(f"{table} needs {need}, and none of the chosen runs has one{more}", fix)


def _pick_dataset(df: pd.DataFrame, dataset: str | None, table: str) -> str:
    have = sorted(df["dataset"].unique()) if len(df) else []
    if dataset is not None:
        if dataset not in have:
            raise TableUnavailable(
                f"{table} has no evaluations on dataset {dataset!r} in the store (it has "
                f"{have or 'none'} for this table)",
                "pick one of those (`fiblab report --dataset NAME`, or dataset=...)",
            )
        return dataset
    if len(have) == 1:
        return have[0]
    if "fineweb_edu" in have:
        return "fineweb_edu"
    if not have:
        raise _nothing(table)
    raise TableUnavailable(
        f"{table}: the runs were evaluated on several datasets {have}",
        "choose one (`fiblab report --dataset NAME`, or dataset=...)",
    )


def _rank(label: str) -> tuple:
    """Sort key of a config label: dense first, then the paper's base and schedule order."""
    if label == "dense":
        return (-1, -1, "")
    base, _, sched = str(label).partition("/")
    b = BASES.index(base) if base in BASES else len(BASES)
    s = SCHEDULES.index(sched) if sched in SCHEDULES else len(SCHEDULES)
    return (b, s, str(label))


def _order(df: pd.DataFrame, label: str) -> pd.DataFrame:
    """Rows in the paper's order: by config (:func:`_rank`), then W (missing first), then the
    variant text (numbers by value)."""
    keys = df[label].map(_rank)
    w = df["W"].astype("Float64").fillna(-1.0) if "W" in df.columns else 0
    v = df["variant"].map(natural_key) if "variant" in df.columns else 0
    out = df.assign(_k=keys, _w=w, _v=v).sort_values(["_k", "_w", "_v"], kind="stable")
    return out.drop(columns=["_k", "_w", "_v"]).reset_index(drop=True)


def _comparable(ev: pd.DataFrame, variants: dict, table: str, duplicates: str):
    """One run per (variant, seed) (:func:`analysis.comparable.one_run_per_seed`) and each row's
    ``variant`` text (:func:`analysis.comparable.variant_labels`); returns (rows, notes)."""
    ev, notes = one_run_per_seed(ev, table, duplicates)
    ev = ev.assign(variant=variant_labels(ev, variants, ["config", "W"]))
    return ev, notes


def _finish(out: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """The ``variant`` column only where some row needs it; the notes in ``attrs``."""
    if "variant" in out.columns and not out["variant"].fillna("").astype(str).str.len().any():
        out = out.drop(columns="variant")
    out.attrs["notes"] = list(notes)
    return out


def _round(df: pd.DataFrame, cols, decimals: int | None) -> pd.DataFrame:
    if decimals is not None and len(cols):
        df[list(cols)] = df[list(cols)].astype(float).round(decimals)
    return df


def _dataset_order(names) -> list[str]:
    paper = [d for d in TABLE1_COLUMNS if d in set(names)]
    return paper + sorted(set(names) - set(paper))


# ------------------------------------------------------------------------------------------------
# Table 1 from our store
# ------------------------------------------------------------------------------------------------


def table1_from_store(
    store,
    *,
    seed: int | None = None,
    status: str | None = "done",
    runs=None,
    duplicates: str = "newest",
    decimals: int | None = None,
) -> pd.DataFrame:
    """Table 1 (final held-out perplexity, base × schedule × W by dataset) from our store.

    Reads each sparse LM run's ``full`` evaluations at its training length at its last such step.
    ``seed`` keeps one seed; otherwise the seeds of one variant are averaged (one run per seed:
    see :mod:`analysis.comparable`; ``duplicates`` says what to do with two runs of one variant
    and seed). Returns ``base``, ``schedule``, ``W``, ``variant`` (only when runs of one label
    differ in more than the seed: what tells the rows apart, e.g. ``steps=12``), one perplexity
    column per dataset present (the paper's four first, in its order, then others
    alphabetically), and ``seeds`` (distinct seeds averaged); rows in the paper's order;
    ``attrs["notes"]`` lists the duplicates resolved. Dense runs have no window and are left out
    (see :func:`table3_from_store`). ``runs`` restricts the table to those run names (see
    :func:`lm_runs`). :class:`TableUnavailable` when no run has such an evaluation.
    """
    ev, variants = _lm_evals(store, status, runs)
    ev = ev[(ev["attention"] != "dense") & (ev["context_len"] == ev["seq_len"])]
    if seed is not None:
        ev = ev[ev["seed"] == seed]
    ev = final_step_rows(ev, {"full"})
    if ev.empty:
        raise _nothing("Table 1", "" if seed is None else f" with seed {seed}")
    ev, notes = _comparable(ev, variants, "Table 1", duplicates)
    cols = _dataset_order(ev["dataset"].unique())
    keys = TABLE1_KEYS + ["variant"]
    wide = ev.pivot_table(index=keys, columns="dataset", values="perplexity", aggfunc="mean")
    wide = wide.reset_index()
    wide.columns.name = None
    seeds = ev.groupby(keys)["seed"].nunique(dropna=False).rename("seeds").reset_index()
    wide = wide.merge(seeds, on=keys)[keys + cols + ["seeds"]]
    wide["W"] = wide["W"].astype("int64")
    wide["seeds"] = wide["seeds"].astype("int64")
    wide = _order(
        wide.assign(_l=[config_label(b, s) for b, s in zip(wide["base"], wide["schedule"])]), "_l"
    )
    return _finish(_round(wide.drop(columns="_l"), cols, decimals), notes)


# ------------------------------------------------------------------------------------------------
# Table 2: the retrieval probe
# ------------------------------------------------------------------------------------------------

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
    ``probes.retrieval.run_cell`` returns and the probe JSONL files hold (dicts or
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
    """Probe cells from the authors' ``retrieval_results`` (:func:`analysis.paperdb.load_retrieval`)
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

    Raises :class:`TableUnavailable` when nothing matches, when several step counts are mixed,
    or when one seed of a cell appears twice (e.g. the same cell at two learning rates: filter
    ``cells``).
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
    return _round(out, values, decimals)


def table2_from_store(store, mechanism: str = "blur", task: str = "marked", **kw) -> pd.DataFrame:
    """:func:`table2` of the probe results in our store."""
    return table2(probe_cells_from_store(store.probes()), mechanism, task, **kw)


def table2_from_paperdb(retrieval: pd.DataFrame, **kw) -> pd.DataFrame:
    """:func:`table2` of the authors' marked probe (``source = 'marked'``, mechanism blur)."""
    return table2(probe_cells_from_paperdb(retrieval, "marked"), "blur", "marked", **kw)


# ------------------------------------------------------------------------------------------------
# Table 3: length extrapolation
# ------------------------------------------------------------------------------------------------


def _fmt_factor(k: float) -> str:
    return f"{k:g}"


def table3(long: pd.DataFrame, blocks: bool = True, decimals: int | None = None) -> pd.DataFrame:
    """Table 3 (perplexity against evaluation length) from a long frame.

    ``long`` has one row per run and measurement: ``model`` (config label), ``W`` (missing for
    dense), ``run``, ``train_len`` (the training length T), ``context_len``, ``policy``
    (``full``: rungs recomputed for the length, the paper's; ``frozen``: rungs of length T),
    ``block`` (missing: whole windows; j: positions [j·T, (j+1)·T) of each window) and ``ppl``.

    An optional ``variant`` column (text) splits a (model, W) into rows of different variants
    (:mod:`analysis.comparable`), and an optional ``seed`` column makes ``seeds`` count distinct
    seeds rather than runs.

    Returns one row per (model, W[, variant]), seeds averaged, with columns ``model``, ``W``,
    [``variant``,] then

    - ``ppl_T{L}`` for every length L (whole windows, recomputed rungs),
    - ``change_at_{k}x_percent`` = 100·(ppl at k·T / ppl at T − 1), k the largest factor L/T in
      the table (NaN for a row not evaluated at k·T),
    - ``frozen_ppl_T{L}`` for L > T and ``frozen_change_at_{k}x_percent`` (same baseline: at L = T
      both policies attend the same distances; the frozen value at T is used only when the
      recomputed one is missing),
    - with ``blocks``: ``ppl_T{L}_block{j}`` and ``frozen_ppl_T{L}_block{j}``,
    - ``seeds`` (runs averaged).

    Rows: dense first, then the paper's base and schedule order, W ascending.
    """
    need = ["model", "W", "run", "train_len", "context_len", "policy", "block", "ppl"]
    missing = [c for c in need if c not in long.columns]
    if missing:
        raise ValueError(f"table3 needs columns {need}; missing {missing}")
    df = long.copy()
    df["W"] = df["W"].astype("Int64")
    df["block"] = df["block"].astype("Int64")
    keys = ["model", "W"] + (["variant"] if "variant" in df.columns else [])
    mixed = df.groupby(keys, dropna=False)["train_len"].nunique()
    if (mixed > 1).any():
        raise ValueError(
            f"table3: runs of one configuration were trained at different lengths: "
            f"{list(mixed[mixed > 1].index)}; build the table per training length"
        )
    groups = list(df.groupby(keys, dropna=False, sort=False))
    factors = df["context_len"] / df["train_len"]
    k = float(factors.max()) if len(df) else 1.0
    rows, order = [], {}
    for key, g in groups:
        T = int(g["train_len"].iloc[0])
        row = dict(zip(keys, key))

        def mean(policy, L, block=None, _g=g):
            sel = _g[(_g["policy"] == policy) & (_g["context_len"] == L)]
            sel = sel[sel["block"].isna()] if block is None else sel[sel["block"] == block]
            return float(sel["ppl"].mean()) if len(sel) else float("nan")

        whole = g[g["block"].isna()]
        for L in sorted(whole.loc[whole["policy"] == "full", "context_len"].unique()):
            row[f"ppl_T{L}"] = mean("full", L)
            order[f"ppl_T{L}"] = (0, L, 0)
        base = mean("full", T)
        if math.isnan(base):
            base = mean("frozen", T)
            if not math.isnan(base):
                row[f"ppl_T{T}"] = base
                order[f"ppl_T{T}"] = (0, T, 0)
        kname = _fmt_factor(k)
        top = int(round(k * T)) if (k * T).is_integer() else None
        row[f"change_at_{kname}x_percent"] = (
            100.0 * (mean("full", top) / base - 1.0) if top else float("nan")
        )
        order[f"change_at_{kname}x_percent"] = (1, 0, 0)
        frozen_ls = sorted(
            L for L in whole.loc[whole["policy"] == "frozen", "context_len"].unique() if L != T
        )
        for L in frozen_ls:
            row[f"frozen_ppl_T{L}"] = mean("frozen", L)
            order[f"frozen_ppl_T{L}"] = (2, L, 0)
        if frozen_ls:
            row[f"frozen_change_at_{kname}x_percent"] = (
                100.0 * (mean("frozen", top) / base - 1.0) if top else float("nan")
            )
            order[f"frozen_change_at_{kname}x_percent"] = (3, 0, 0)
        if blocks:
            blk = g[g["block"].notna()]
            for (policy, L, j), _ in blk.groupby(["policy", "context_len", "block"]):
                prefix = "" if policy == "full" else "frozen_"
                name = f"{prefix}ppl_T{L}_block{j}"
                row[name] = mean(policy, L, j)
                order[name] = (4 if policy == "full" else 5, L, j)
        row["seeds"] = int(g["seed" if "seed" in g.columns else "run"].nunique(dropna=False))
        rows.append(row)
    cols = keys + sorted(order, key=order.get) + ["seeds"]
    out = pd.DataFrame(rows, columns=cols)
    if out.empty:
        return out
    out["W"] = out["W"].astype("Int64")
    out["seeds"] = out["seeds"].astype("int64")
    out = _order(out, "model")
    values = [c for c in out.columns if c not in ("model", "W", "variant", "seeds")]
    out[values] = out[values].astype(float)
    return _round(out, values, decimals)


def table3_from_store(
    store,
    dataset: str | None = None,
    *,
    status: str | None = "done",
    runs=None,
    blocks: bool = True,
    duplicates: str = "newest",
    decimals: int | None = None,
) -> pd.DataFrame:
    """:func:`table3` from our store: the ``full``, ``frozen`` and ``…:block{j}`` evaluations of
    every LM run (dense included) at its last step with such evaluations, on ``dataset`` (default:
    the only one, else ``fineweb_edu``). Only runs evaluated beyond their training length count,
    so that every column of a row averages the same seeds; the seeds of one variant are averaged,
    other variants are rows of their own (see :func:`table1_from_store` for ``variant``,
    ``duplicates`` and ``attrs["notes"]``). ``runs`` restricts it to those names."""
    ev, variants = _lm_evals(store, status, runs)
    ev = final_step_rows(ev, lambda k: _policy_kind(k) is not None)
    ds = _pick_dataset(ev, dataset, "Table 3")
    ev = ev[ev["dataset"] == ds]
    longer = set(ev.loc[ev["context_len"] > ev["seq_len"], "run"])
    ev = ev[ev["run"].isin(longer)]
    if ev.empty:
        raise _nothing("Table 3", f" on {ds!r}")
    ev, notes = _comparable(ev, variants, "Table 3", duplicates)
    parsed = [_policy_kind(k) for k in ev["kind"]]
    long = pd.DataFrame(
        {
            "model": ev["config"].to_numpy(),
            "W": ev["W"].to_numpy(),
            "variant": ev["variant"].to_numpy(),
            "run": ev["run"].to_numpy(),
            "seed": ev["seed"].to_numpy(),
            "train_len": ev["seq_len"].to_numpy(),
            "context_len": ev["context_len"].to_numpy(),
            "policy": [p.policy for p in parsed],
            "block": pd.array([p.block for p in parsed], dtype="Int64"),
            "ppl": ev["perplexity"].to_numpy(),
        }
    )
    return _finish(table3(long, blocks=blocks, decimals=decimals), notes)


def table3_from_lenextrap(
    lenextrap: pd.DataFrame,
    dataset: str = "fineweb_edu",
    train_len: int = 1024,
    runs=None,
    decimals: int | None = None,
) -> pd.DataFrame:
    """:func:`table3` from the authors' length dump (:func:`analysis.paper.lenextrap`): every run
    (or those named in ``runs``) on ``dataset``, trained at ``train_len``; recomputed rungs only
    (their policy). The paper's Table 3 is 7 of these rows."""
    df = lenextrap[lenextrap["dataset"] == dataset]
    if runs is not None:
        df = df[df["run"].isin(list(runs))]
    if df.empty:
        raise ValueError(
            f"table3_from_lenextrap: no rows for dataset={dataset!r}"
            + ("" if runs is None else f" and runs={list(runs)}")
        )
    model = [
        config_label(b, s, "dense" if pd.isna(b) else "sparse")
        for b, s in zip(df["base"], df["schedule"])
    ]
    long = pd.DataFrame(
        {
            "model": model,
            "W": df["W"].to_numpy(),
            "run": df["run"].to_numpy(),
            "train_len": train_len,
            "context_len": df["length"].to_numpy(),
            "policy": "full",
            "block": pd.array([pd.NA] * len(df), dtype="Int64"),
            "ppl": df["ppl"].to_numpy(),
        }
    )
    return table3(long, blocks=False, decimals=decimals)


# ------------------------------------------------------------------------------------------------
# Table 4: loss by position bin
# ------------------------------------------------------------------------------------------------


def table4(
    long: pd.DataFrame, gap=("fib/fixed", "fib/stagger"), decimals: int | None = None
) -> pd.DataFrame:
    """Table 4 (mean NLL per position bin) from a long frame.

    ``long`` has columns ``schedule`` (config label), ``W``, ``run``, ``bin`` (0 = earliest
    positions) and ``nll``; an optional ``variant`` (text) splits a (schedule, W) into rows of
    different variants, an optional ``seed`` makes ``seeds`` count distinct seeds rather than
    runs. Returns one row per (schedule, W[, variant]), seeds averaged: ``schedule``, ``W``,
    [``variant``,] ``b0`` … ``b{n−1}``, ``seeds``; in the paper's order. ``gap=(a, b)`` appends,
    for each W (and variant) where both are present, a row ``schedule = "a - b"`` holding a − b
    per bin (positive: b has the lower loss; the paper's fixed − stagger ≈ +0.035 nats);
    ``None`` adds none.
    """
    need = ["schedule", "W", "run", "bin", "nll"]
    missing = [c for c in need if c not in long.columns]
    if missing:
        raise ValueError(f"table4 needs columns {need}; missing {missing}")
    df = long.copy()
    df["W"] = df["W"].astype("Int64")
    keys = ["schedule", "W"] + (["variant"] if "variant" in df.columns else [])
    bins = sorted(int(b) for b in df["bin"].unique())
    cols = [f"b{b}" for b in bins]
    if df.empty:
        return pd.DataFrame(columns=keys + cols + ["seeds"])
    wide = df.pivot_table(index=keys, columns="bin", values="nll", aggfunc="mean", dropna=False)
    wide.columns = [f"b{int(b)}" for b in wide.columns]
    wide = wide.reset_index()
    who = "seed" if "seed" in df.columns else "run"
    seeds = df.groupby(keys, dropna=False)[who].nunique(dropna=False).rename("seeds")
    wide = wide.merge(seeds.reset_index(), on=keys)
    wide = wide.dropna(subset=cols, how="all")
    wide = _order(wide[keys + cols + ["seeds"]], "schedule")
    wide["seeds"] = wide["seeds"].astype("Int64")
    if gap is not None:
        a, b = gap
        extra = []
        rest = keys[2:]  # the variant, when there is one: a gap pairs rows of one variant text
        for _, row in wide[wide["schedule"] == a].iterrows():
            w = row["W"]
            same = (wide["W"].isna() if pd.isna(w) else wide["W"] == w) & (wide["schedule"] == b)
            for k in rest:
                same &= wide[k] == row[k]
            rb = wide[same]
            if len(rb):
                diff = row[cols].to_numpy(dtype=float) - rb[cols].to_numpy(dtype=float)[0]
                extra.append(
                    {
                        "schedule": f"{a} - {b}",
                        "W": w,
                        **{k: row[k] for k in rest},
                        **dict(zip(cols, diff)),
                        "seeds": pd.NA,
                    }
                )
        if extra:
            gaps = pd.DataFrame(extra, columns=wide.columns)
            gaps["W"] = gaps["W"].astype("Int64")
            gaps["seeds"] = gaps["seeds"].astype("Int64")
            wide = pd.concat([wide, gaps], ignore_index=True)
    wide[cols] = wide[cols].astype(float)
    return _round(wide, cols, decimals)


def table4_from_store(
    store,
    dataset: str | None = None,
    *,
    gap=("fib/fixed", "fib/stagger"),
    status: str | None = "done",
    runs=None,
    duplicates: str = "newest",
    decimals: int | None = None,
) -> pd.DataFrame:
    """:func:`table4` from our store: each LM run's ``bin{b}`` evaluations at its training length
    and its last step with such evaluations, on ``dataset`` (default: the only one, else
    ``fineweb_edu``); the loss column is the bin's mean NLL. The seeds of one variant are
    averaged, other variants are rows of their own, and a gap row pairs only rows of one variant
    text (see :func:`table1_from_store` for ``variant``, ``duplicates`` and ``attrs["notes"]``).
    ``runs`` restricts it to those names."""
    ev, variants = _lm_evals(store, status, runs)
    ev = ev[ev["context_len"] == ev["seq_len"]]
    ev = final_step_rows(ev, lambda k: _bin_kind(k) is not None)
    ds = _pick_dataset(ev, dataset, "Table 4")
    ev = ev[ev["dataset"] == ds]
    ev, notes = _comparable(ev, variants, "Table 4", duplicates)
    long = pd.DataFrame(
        {
            "schedule": ev["config"].to_numpy(),
            "W": ev["W"].to_numpy(),
            "variant": ev["variant"].to_numpy(),
            "run": ev["run"].to_numpy(),
            "seed": ev["seed"].to_numpy(),
            "bin": [_bin_kind(k).bin for k in ev["kind"]],
            "nll": ev["loss"].to_numpy(),
        }
    )
    return _finish(table4(long, gap=gap, decimals=decimals), notes)


def table4_from_posloss(
    posloss: pd.DataFrame,
    dataset: str = "fineweb_edu",
    W: int | None = 8,
    gap=("fib/fixed", "fib/stagger"),
    decimals: int | None = None,
) -> pd.DataFrame:
    """:func:`table4` from the authors' binned position dump (:func:`analysis.paper.posloss`) on
    ``dataset``; ``W`` keeps one window (the paper's Table 4 is W = 8, fixed and stagger)."""
    df = posloss[posloss["dataset"] == dataset]
    if W is not None:
        df = df[df["W"] == W]
    if df.empty:
        raise ValueError(f"table4_from_posloss: no rows for dataset={dataset!r}, W={W!r}")
    long = pd.DataFrame(
        {
            "schedule": [config_label(b, s) for b, s in zip(df["base"], df["schedule"])],
            "W": df["W"].to_numpy(),
            "run": df["run"].to_numpy(),
            "bin": df["bin"].to_numpy(),
            "nll": df["nll"].to_numpy(),
        }
    )
    return table4(long, gap=gap, decimals=decimals)


# ------------------------------------------------------------------------------------------------
# Table 5: seed replication
# ------------------------------------------------------------------------------------------------


def table5(long: pd.DataFrame, decimals: int | None = None) -> pd.DataFrame:
    """Table 5 (one configuration over seeds) from a long frame with columns ``config``, ``W``,
    ``seed`` and ``ppl``.

    One row per (config, W): ``config``, ``W``, ``seed{s}`` for every seed in the table (NaN
    where a config lacks it), ``n``, ``mean``, ``std`` (sample, ddof 1; NaN for one seed),
    ``std_pop`` (population, ddof 0: the paper's). An optional ``variant`` column (text) splits a
    (config, W) into rows of different variants, shown after ``W``. Rows by W, then mean
    ascending (the paper's order). ``ValueError`` when a (config, W[, variant], seed) has two
    values.
    """
    need = ["config", "W", "seed", "ppl"]
    missing = [c for c in need if c not in long.columns]
    if missing:
        raise ValueError(f"table5 needs columns {need}; missing {missing}")
    df = long.copy()
    df["W"] = df["W"].astype("Int64")
    keys = ["config", "W"] + (["variant"] if "variant" in df.columns else [])
    dup = df.duplicated(keys + ["seed"], keep=False)
    if dup.any():
        raise ValueError(
            f"table5: more than one value per ({', '.join(keys)}, seed):\n"
            + df.loc[dup].to_string(index=False)
        )
    seeds = sorted(int(s) for s in df["seed"].dropna().unique())
    rows = []
    for key, g in df.groupby(keys, dropna=False, sort=False):
        config = key[0]
        x = as_sample(g["ppl"].to_numpy(), f"ppl of {config}")
        row = dict(zip(keys, key))
        for s in seeds:
            v = g.loc[g["seed"] == s, "ppl"]
            row[f"seed{s}"] = float(v.iloc[0]) if len(v) else float("nan")
        row.update(
            {
                "n": len(x),
                "mean": float(x.mean()) if len(x) else float("nan"),
                "std": float(x.std(ddof=1)) if len(x) >= 2 else float("nan"),
                "std_pop": float(x.std(ddof=0)) if len(x) else float("nan"),
            }
        )
        rows.append(row)
    cols = keys + [f"seed{s}" for s in seeds] + ["n", "mean", "std", "std_pop"]
    out = pd.DataFrame(rows, columns=cols)
    out["W"] = out["W"].astype("Int64")
    out["n"] = out["n"].astype("int64")
    out = (
        out.assign(_w=out["W"].astype("Float64").fillna(-1.0))
        .sort_values(["_w", "mean"], kind="stable")
        .drop(columns="_w")
        .reset_index(drop=True)
    )
    values = [c for c in cols if c not in ("config", "W", "variant", "n")]
    out[values] = out[values].astype(float)
    return _round(out, values, decimals)


def table5_from_store(
    store,
    dataset: str | None = None,
    W: int | None = None,
    *,
    status: str | None = "done",
    runs=None,
    duplicates: str = "newest",
    decimals: int | None = None,
) -> pd.DataFrame:
    """:func:`table5` from our store: each LM run's ``full`` evaluation at its training length and
    last step on ``dataset`` (default: the only one, else ``fineweb_edu``); ``W`` keeps one
    window (dense runs, which have none, are kept only when ``W`` is None). The seeds of one
    variant are a row; other variants are rows of their own (see :func:`table1_from_store` for
    ``variant``, ``duplicates`` and ``attrs["notes"]``). ``runs`` restricts it to those names."""
    ev, variants = _lm_evals(store, status, runs)
    ev = final_step_rows(ev[ev["context_len"] == ev["seq_len"]], {"full"})
    ds = _pick_dataset(ev, dataset, "Table 5")
    ev = ev[ev["dataset"] == ds]
    if W is not None:
        ev = ev[ev["W"] == W]
        if ev.empty:
            raise _nothing("Table 5", f" with W={W} on {ds!r}")
    if ev["seed"].isna().any():
        raise TableUnavailable(
            "Table 5 lists runs by seed, and the configs of runs "
            f"{sorted(ev.loc[ev['seed'].isna(), 'run'].unique())} record none",
            "leave them out by naming the runs to use (`fiblab report RUN …`, or runs=[...])",
        )
    ev, notes = _comparable(ev, variants, "Table 5", duplicates)
    long = pd.DataFrame(
        {
            "config": ev["config"].to_numpy(),
            "W": ev["W"].to_numpy(),
            "variant": ev["variant"].to_numpy(),
            "seed": ev["seed"].to_numpy(),
            "ppl": ev["perplexity"].to_numpy(),
        }
    )
    return _finish(table5(long, decimals=decimals), notes)


def table5_from_final_ppl(
    final_ppl: pd.DataFrame,
    dataset: str = "fineweb_edu",
    W: int | None = 12,
    decimals: int | None = None,
) -> pd.DataFrame:
    """:func:`table5` from the authors' final perplexities (:func:`analysis.paperdb.load_final_ppl`:
    main matrix and seed replicates alike) on ``dataset``; ``W`` keeps one window (the paper's
    Table 5 is W = 12)."""
    need = {"base", "schedule", "W", "seed", "dataset", "ppl"}
    missing = sorted(need - set(final_ppl.columns))
    if missing:
        raise ValueError(f"table5_from_final_ppl needs columns {sorted(need)}; missing {missing}")
    df = final_ppl[(final_ppl["dataset"] == dataset) & final_ppl["base"].notna()]
    if W is not None:
        df = df[df["W"] == W]
    long = pd.DataFrame(
        {
            "config": [config_label(b, s) for b, s in zip(df["base"], df["schedule"])],
            "W": df["W"].to_numpy(),
            "seed": df["seed"].to_numpy(),
            "ppl": df["ppl"].to_numpy(),
        }
    )
    return table5(long, decimals=decimals)
