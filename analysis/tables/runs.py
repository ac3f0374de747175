"""The language-model runs of our store and their evaluations, as the tables read them.

LM runs are runs of kind ``lm`` whose config is a ``TrainConfig.to_dict()`` (``model.base``,
``model.schedule``, ``model.window``, ``model.seq_len`` = the training length, ``seed``); a flat
config with ``base``, ``schedule``, ``W`` / ``window``, ``seq_len``, ``seed`` is read too. Each run
carries its :class:`lab.store.variant.Variant` (runs with equal ids are comparable). Evaluation kinds:

``recompute``
    whole windows at ``context_len``, rung set recomputed for that length (the paper's policy);
``freeze``
    whole windows at ``context_len``, rung set frozen at the training length;
``recompute:block{j}`` / ``freeze:block{j}``
    positions [j·T, (j+1)·T) of windows of length ``context_len`` (T the training length);
``bin{b}``
    mean NLL in position bin b of windows at the training length;
``light``
    periodic cheap evaluations during training (never used by the tables).

Every table uses each run's *final* step (:func:`final_step_rows`); one the chosen runs cannot
fill raises :class:`analysis.tables.comparable.TableUnavailable` saying what to run (:func:`unavailable`,
:func:`pick_dataset`).
"""

from __future__ import annotations

import json

import pandas as pd

from analysis.tables.comparable import TableUnavailable
from analysis.tables.rows import config_label
from lab.store.evalkind import KIND_PATTERNS
from lab.store.variant import Variant, seed_of, variant_of

__all__ = [
    "EVAL_KINDS",
    "lm_runs",
    "lm_evals",
    "lm_evals_and_variants",
    "final_step_rows",
    "unavailable",
    "pick_dataset",
]


#: Evaluation kinds the tables read (``{j}`` / ``{b}`` stand for a block / bin number); the
#: store's text of a `lab.store.evalkind.EvalKind`, read back with `EvalKind.read`.
EVAL_KINDS = KIND_PATTERNS


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
            have = sorted(known)
            shown = ", ".join(have[:8]) + (", …" if len(have) > 8 else "")
            raise ValueError(
                f"no language-model runs named {unknown} in the store (it has {len(known)} LM "
                f"runs{': ' + shown if have else ''}): name runs it has, or none for all"
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
    :class:`lab.store.variant.Variant` id: equal ids, comparable runs) and ``finished_at``.
    ``status=None`` keeps every status; ``runs`` (a name or a list) keeps those runs (still
    filtered by ``status``); a name that is no LM run of the store raises ``ValueError``."""
    return _lm_runs(store, status, runs)[0]


def lm_evals_and_variants(store, status, runs) -> tuple[pd.DataFrame, dict[str, Variant]]:
    """:func:`lm_evals` and the runs' variants by id (what the tables' ``variant`` text needs)."""
    info, variants = _lm_runs(store, status, runs)
    ev = store.evals(list(info["run"])) if len(info) else store.evals([])
    ev = ev.drop(columns=[c for c in ("logged_at",) if c in ev.columns])
    return info.drop(columns="status").merge(ev, on="run", how="inner"), variants


def lm_evals(store, status: str | None = "done", runs=None) -> pd.DataFrame:
    """Every evaluation of the LM runs (all, or those named in ``runs``), with the run's variant:
    the columns of :func:`lm_runs` (less ``status``) then ``step``, ``dataset``,
    ``context_len``, ``kind``, ``loss``, ``perplexity``, ``tokens``."""
    return lm_evals_and_variants(store, status, runs)[0]


def final_step_rows(evals: pd.DataFrame, kinds) -> pd.DataFrame:
    """The rows of ``evals`` whose ``kind`` is one of ``kinds`` (a collection of names, or a
    predicate on the name), at each run's last step among those rows."""
    match = kinds if callable(kinds) else (lambda k, _s=frozenset(kinds): k in _s)
    df = evals[evals["kind"].map(match).astype(bool)]
    if df.empty:
        return df.copy()
    last = df.groupby("run")["step"].transform("max")
    return df[df["step"] == last].copy()


def same_tokens_basis(evals: pd.DataFrame) -> pd.DataFrame:
    """Length-extrapolation rows on one token basis: where a run's whole-window row at its
    training length (``recompute`` / ``freeze``) was scored on more tokens than its rows at longer
    lengths (training's final evaluation of the whole held-out stream, then ``fiblab eval
    --limit N`` or the study's limited evaluation beyond it), that row is replaced by the
    limited evaluation's one-block row at the training length (``…:block0``: the same windows,
    so the same tokens as the longer rows). Otherwise ppl(4T)/ppl(T) would compare different
    text. Rows already on one basis are returned unchanged."""
    if evals.empty or "tokens" not in evals:
        return evals
    out = evals.copy()
    keys = ["run", "dataset", "step"]
    for _, g in out.groupby(keys, sort=False):
        T = int(g["seq_len"].iloc[0])
        for kind in ("recompute", "freeze"):
            longer = g[(g["kind"] == kind) & (g["context_len"] > T)]
            base = g[(g["kind"] == kind) & (g["context_len"] == T)]
            block = g[(g["kind"] == f"{kind}:block0") & (g["context_len"] == T)]
            if longer.empty or base.empty or block.empty:
                continue
            n = int(longer["tokens"].min())
            if int(base["tokens"].iloc[0]) != n and int(block["tokens"].iloc[0]) == n:
                cols = ["loss", "perplexity", "tokens"]
                out.loc[base.index, cols] = block[cols].to_numpy()
    return out


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


def unavailable(table: str, more: str = "") -> TableUnavailable:
    """The error for ``table`` ("Table 1" … "Table 5") when none of the chosen runs has what it
    reads: what it needs and the command that produces it."""
    need, fix = _NEEDS[table]
    return TableUnavailable(f"{table} needs {need}, and none of the chosen runs has one{more}", fix)


def pick_dataset(df: pd.DataFrame, dataset: str | None, table: str) -> str:
    """The dataset ``table`` is built on: ``dataset`` if the rows have it, else the only one, else
    ``fineweb_edu``; :class:`TableUnavailable` (what to pass) otherwise."""
    have = sorted(df["dataset"].unique()) if len(df) else []
    if dataset is not None:
        if not have:  # nothing this table reads, on any dataset: say what produces it
            raise unavailable(table)
        if dataset not in have:
            raise TableUnavailable(
                f"{table} has no evaluations on dataset {dataset!r} in the store (it has "
                f"{have or 'none'} for this table)",
                "pick one of those (`fiblab report --dataset NAME`, or dataset=...)",
                choose="dataset",
            )
        return dataset
    if len(have) == 1:
        return have[0]
    if "fineweb_edu" in have:
        return "fineweb_edu"
    if not have:
        raise unavailable(table)
    raise TableUnavailable(
        f"{table}: the runs were evaluated on several datasets {have}",
        "choose one (`fiblab report --dataset NAME`, or dataset=...)",
        choose="dataset",
    )
