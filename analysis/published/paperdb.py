"""Read the authors' results database (``db/fib.db``) into pandas DataFrames.

The database is the SQLite file the paper's training queue wrote: one ``runs`` row per training
attempt, held-out perplexity curves in ``metrics``, post-hoc evaluations in ``eval_results`` and
the synthetic probes in ``retrieval_results`` (see SPEC §7). Nothing here writes to it: every
connection is opened read-only (``mode=ro``).

Public functions
----------------
``parse_title(title)``
    The variant a run title encodes: code, base, schedule, W and seed.
``load_runs(path)``
    One row per run with its parsed variant.
``load_final_ppl(path, step=13000)``
    Held-out perplexity and loss per finished run and dataset at one step (long format).
``load_retrieval(path)``
    The ``retrieval_results`` table with the per-layer α parsed from JSON.

Any of the loaders raises ``ValueError`` naming the path when the file is missing, is not an
SQLite database, or lacks the tables and columns used here.
"""

from __future__ import annotations

import json
import re
import sqlite3
import warnings
from contextlib import closing
from pathlib import Path

import pandas as pd

from lab.ladder.schemes import SCHEMES

__all__ = [
    "BASES",
    "SCHEDULES",
    "DATASETS",
    "DEFAULT_SEED",
    "FINAL_STEP",
    "parse_title",
    "load_runs",
    "load_final_ppl",
    "load_retrieval",
]

#: The offset bases, in the paper's order ("logsparse" in a title is the power-of-2 base).
BASES = ("fib", "pow2")
#: The α schedules, in the paper's order ("hdc" in a title is the coprime stagger).
SCHEDULES = ("fixed", "learned", "stagger", "coprime")
#: Dataset names in the ``metrics`` table → the short names used in the paper's tables, in the
#: paper's column order.
DATASETS = {
    "tinystories_val": "tinystories",
    "math_val": "math",
    "fineweb_edu_val": "fineweb_edu",
    "wikipedia_val": "wikipedia",
}
#: The seed of a title without an ``_sNN`` suffix.
DEFAULT_SEED = 42
#: The last training step of every finished run (13,000 steps of 32,768 tokens).
FINAL_STEP = 13000

# Title body (between "f13__" and "_w12") → (base, schedule): the `lab.ladder.schemes` registry's
# run-title spelling of each scheme the authors ran.
_BODIES = {s.title: (s.base, s.schedule) for s in SCHEMES if s.title}
_VARIANT_RE = re.compile(
    r"^(?P<code>[a-z]\d+)__(?P<body>[a-z0-9_]+?)_w(?P<W>\d+)(?:_s(?P<seed>\d+))?$"
)
_REFERENCE_RE = re.compile(r"^ref_(?P<code>\w+)$")

# Columns each loader reads; a file lacking any of them is not the authors' database.
_REQUIRED = {
    "runs": (
        "id",
        "title",
        "variant_or_baseline",
        "seed",
        "params_effective",
        "tokens_trained",
        "status",
        "wall_seconds",
        "failure_reason",
    ),
    "metrics": ("run_id", "step", "dataset", "ppl", "loss", "eval_tokens"),
    "retrieval_results": (
        "source",
        "mech",
        "depth",
        "seed",
        "staggered",
        "train_d",
        "distance",
        "kind",
        "acc",
        "alphas",
        "peak_gb",
        "src_file",
        "extra",
    ),
}


def parse_title(title: str) -> dict:
    """The variant encoded in a run title.

    Returns a dict with keys ``code`` (``"f13"``, or ``"e0000"`` for a reference), ``kind``
    (``"variant"`` or ``"reference"``), ``base`` (``"fib"`` | ``"pow2"``), ``schedule``
    (``"fixed"`` | ``"learned"`` | ``"stagger"`` | ``"coprime"``), ``W`` (int) and ``seed``
    (int; 42 unless the title ends in ``_sNN``). For a reference title (``"ref_e0000"``) base,
    schedule, W and seed are ``None``: the title does not say.

    >>> parse_title("f18__logsparse_stagger_w6")["base"], parse_title("f14__fib_hdc_w12")["schedule"]
    ('pow2', 'coprime')

    Raises ``ValueError`` for any other form.
    """
    if not isinstance(title, str):
        raise ValueError(f"run title must be a string, got {title!r}")
    m = _REFERENCE_RE.match(title)
    if m:
        return {
            "code": m["code"],
            "kind": "reference",
            "base": None,
            "schedule": None,
            "W": None,
            "seed": None,
        }
    m = _VARIANT_RE.match(title)
    if not m or m["body"] not in _BODIES:
        raise ValueError(
            f"unrecognised run title {title!r}: expected e.g. 'f13__fib_stagger_w12', "
            f"'g02__fib_learned_w12_s43' or 'ref_e0000' (bodies: {sorted(_BODIES)})"
        )
    base, schedule = _BODIES[m["body"]]
    seed = int(m["seed"]) if m["seed"] is not None else DEFAULT_SEED
    return {
        "code": m["code"],
        "kind": "variant",
        "base": base,
        "schedule": schedule,
        "W": int(m["W"]),
        "seed": seed,
    }


def _short_dataset(name: str) -> str:
    """``fineweb_edu_val`` → ``fineweb_edu``; an unknown name loses only a ``_val`` suffix."""
    if name in DATASETS:
        return DATASETS[name]
    return name[:-4] if name.endswith("_val") else name


def _connect(path, tables) -> sqlite3.Connection:
    """A read-only connection to ``path`` after checking that it holds ``tables`` with the
    columns in ``_REQUIRED``; ``ValueError`` naming the path otherwise."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"results database {p} does not exist")
    if not p.is_file():
        raise ValueError(f"results database {p} is not a file")
    uri = p.resolve().as_uri() + "?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as e:
        raise ValueError(f"cannot open results database {p}: {e}") from e
    try:
        have = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for table in tables:
            if table not in have:
                raise ValueError(
                    f"{p} is not the authors' results database: it has no "
                    f"{table!r} table (tables: {sorted(have) or 'none'})"
                )
            cols = {row[1] for row in con.execute(f'PRAGMA table_info("{table}")')}
            missing = [c for c in _REQUIRED[table] if c not in cols]
            if missing:
                raise ValueError(
                    f"{p} is not the authors' results database: table {table!r} "
                    f"lacks columns {missing}"
                )
    except sqlite3.DatabaseError as e:  # "file is not a database", malformed image, …
        con.close()
        raise ValueError(f"{p} is not a readable SQLite database: {e}") from e
    except ValueError:
        con.close()
        raise
    return con


def _query(path, tables, sql, params=()) -> pd.DataFrame:
    with closing(_connect(path, tables)) as con:
        try:
            return pd.read_sql_query(sql, con, params=params)
        except (sqlite3.DatabaseError, pd.errors.DatabaseError) as e:
            raise ValueError(f"cannot read {Path(path)}: {e}") from e


_RUN_COLUMNS = [
    "id",
    "title",
    "code",
    "kind",
    "status",
    "base",
    "schedule",
    "W",
    "seed",
    "params_effective",
    "tokens_trained",
    "wall_seconds",
    "failure_reason",
]


def load_runs(path) -> pd.DataFrame:
    """One row per ``runs`` row, ordered by id.

    Columns:

    ``id``
        the runs table's id (``metrics.run_id`` refers to it)
    ``title``
        the run title, e.g. ``"f13__fib_stagger_w12"``
    ``code``
        the title's prefix: ``f01``–``f21`` the main matrix, ``g``/``h`` seed replicates,
        ``e0000`` … for the reference rows
    ``kind``
        ``"variant"`` or ``"reference"`` (``variant_or_baseline``)
    ``status``
        ``"done"``, ``"failed"`` or ``"pending"``
    ``base``, ``schedule``, ``W``
        parsed from the title (see :func:`parse_title`); missing (``None``/``<NA>``) for
        references and for titles of no known form
    ``seed``
        the title's seed (42 unless ``_sNN``); the runs table's seed where the title has none
        (references). A warning is issued if the two disagree.
    ``params_effective``, ``tokens_trained``, ``wall_seconds``, ``failure_reason``
        as stored (``wall_seconds`` is missing for failed and reference rows)
    """
    raw = _query(
        path,
        ["runs"],
        "SELECT id, title, variant_or_baseline AS kind, status, seed AS db_seed, "
        "params_effective, tokens_trained, wall_seconds, failure_reason FROM runs ORDER BY id",
    )
    parsed = []
    for title, db_seed, kind in zip(raw["title"], raw["db_seed"], raw["kind"]):
        try:
            v = parse_title(title)
        except ValueError:
            v = {
                "code": None,
                "kind": kind,
                "base": None,
                "schedule": None,
                "W": None,
                "seed": None,
            }
        if v["seed"] is None:
            v["seed"] = None if pd.isna(db_seed) else int(db_seed)
        elif not pd.isna(db_seed) and int(db_seed) != v["seed"]:
            warnings.warn(
                f"run {title!r}: the title says seed {v['seed']}, the runs table says "
                f"{int(db_seed)}; using the title's",
                stacklevel=2,
            )
        parsed.append(v)
    p = pd.DataFrame(parsed, index=raw.index, columns=["code", "base", "schedule", "W", "seed"])
    out = raw.drop(columns=["db_seed"]).join(p)
    out["W"] = out["W"].astype("Int64")
    out["seed"] = out["seed"].astype("Int64")
    for col in ("params_effective", "tokens_trained"):
        out[col] = out[col].astype("Int64")
    out["wall_seconds"] = out["wall_seconds"].astype(float)
    return out[_RUN_COLUMNS].reset_index(drop=True)


def load_final_ppl(
    path,
    step: int | None = FINAL_STEP,
    *,
    include_failed: bool = False,
    include_references: bool = False,
) -> pd.DataFrame:
    """Held-out perplexity and loss at ``step``, one row per run and dataset (long format).

    By default only finished variant runs count: status ``"done"`` and kind ``"variant"``, so the
    two KeyboardInterrupt attempts and the reference rows are left out (``include_failed`` /
    ``include_references`` keep them). ``step=None`` takes each run's last recorded step instead
    of a fixed one. A run with no metrics at ``step`` has no rows.

    Columns: ``run_id``, ``title``, ``code``, ``base``, ``schedule``, ``W``, ``seed``, ``status``,
    ``dataset`` (short name: ``tinystories``, ``math``, ``fineweb_edu``, ``wikipedia``; the DB
    stores ``tinystories_val`` …), ``step``, ``ppl``, ``loss`` (nats per token), ``eval_tokens``.
    Ordered by run id, then the datasets in the paper's column order.
    """
    runs = load_runs(path)
    keep = pd.Series(True, index=runs.index)
    if not include_failed:
        keep &= runs["status"].eq("done")
    if not include_references:
        keep &= runs["kind"].ne("reference")
    runs = runs[keep]
    if step is None:
        sql = (
            "SELECT m.run_id, m.step, m.dataset, m.ppl, m.loss, m.eval_tokens FROM metrics m "
            "JOIN (SELECT run_id, MAX(step) AS step FROM metrics GROUP BY run_id) last "
            "ON m.run_id = last.run_id AND m.step = last.step"
        )
        params = ()
    else:
        sql = "SELECT run_id, step, dataset, ppl, loss, eval_tokens FROM metrics WHERE step = ?"
        params = (int(step),)
    m = _query(path, ["runs", "metrics"], sql, params)
    m["dataset"] = m["dataset"].map(_short_dataset)
    out = runs.rename(columns={"id": "run_id"})[
        ["run_id", "title", "code", "base", "schedule", "W", "seed", "status"]
    ].merge(m, on="run_id", how="inner")
    order = {name: i for i, name in enumerate(DATASETS.values())}
    out["_d"] = out["dataset"].map(lambda d: order.get(d, len(order)))
    out = out.sort_values(["run_id", "_d", "dataset"]).drop(columns="_d")
    out["step"] = out["step"].astype(int)
    out["ppl"] = out["ppl"].astype(float)
    out["loss"] = out["loss"].astype(float)
    out["eval_tokens"] = out["eval_tokens"].astype("Int64")
    return out.reset_index(drop=True)


def _alphas(text):
    """The ``alphas`` JSON as a list of floats: probes store either ``[0.97, 0.92]`` or
    ``[{"alpha": 0.97}, …]`` (one entry per layer); ``[]`` for mechanisms with no α."""
    if text is None or (isinstance(text, float) and pd.isna(text)):
        return []
    value = json.loads(text)
    if not isinstance(value, list):
        raise ValueError(f"alphas is not a JSON list: {text!r}")
    return [float(v["alpha"]) if isinstance(v, dict) else float(v) for v in value]


def load_retrieval(path, *, extra: bool = False) -> pd.DataFrame:
    """The synthetic-probe results (``retrieval_results``), one row per stored cell.

    Columns: ``source`` (``sweep`` | ``multitarget`` | ``marked``; ``marked`` is the paper's probe
    table), ``mech`` (mechanism), ``depth``, ``seed``, ``staggered`` (1 staggered init, 0 uniform,
    -1 not applicable: sweep), ``train_d`` (the trained distance; -1 when trained on a set),
    ``distance`` (the evaluated offset), ``kind`` (``trained`` | ``control`` | ``target``),
    ``acc``, ``alphas`` (list of per-layer final α as floats, ``[]`` for mechanisms without α),
    ``peak_gb``, ``src_file``; with ``extra=True`` also ``extra``, the original record parsed
    from JSON (a dict).
    """
    cols = [
        "source",
        "mech",
        "depth",
        "seed",
        "staggered",
        "train_d",
        "distance",
        "kind",
        "acc",
        "alphas",
        "peak_gb",
        "src_file",
    ] + (["extra"] if extra else [])
    df = _query(
        path,
        ["retrieval_results"],
        f"SELECT {', '.join(cols)} FROM retrieval_results "
        "ORDER BY source, mech, depth, seed, staggered, train_d, distance, kind",
    )
    try:
        df["alphas"] = df["alphas"].map(_alphas)
        if extra:
            df["extra"] = df["extra"].map(lambda t: None if t is None else json.loads(t))
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{Path(path)}: unreadable JSON in retrieval_results: {e}") from e
    for col in ("depth", "seed", "staggered", "train_d", "distance"):
        df[col] = df[col].astype(int)
    df["acc"] = df["acc"].astype(float)
    df["peak_gb"] = df["peak_gb"].astype(float)
    return df
