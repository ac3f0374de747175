"""The experiment store: every number fiblab produces, in one SQLite file.

LM training runs, evaluations, learned-α trajectories and retrieval-probe results are written to
one SQLite database (default ``runs/fiblab.db``) that notebooks and ``analysis`` read while
training writes.  The file is in WAL journal mode, so readers never block the writer and the
writer never blocks readers; several processes may open it at once (writers wait on each other
for up to ``busy_timeout`` seconds).  Every write method is one short ``BEGIN IMMEDIATE`` …
``COMMIT`` transaction, and every reader runs in one read transaction, so it sees a consistent
snapshot (``Store.snapshot()`` extends one snapshot over several reader calls).  WAL needs a
local filesystem (not NFS/SMB).

Tables (schema version in ``PRAGMA user_version``; see ``SCHEMA_VERSION`` and ``MIGRATIONS``):

``runs``
    one row per run, unique ``name``: ``kind`` ('lm', 'probe', …), ``status``
    ('pending' | 'running' | 'done' | 'failed'), ``config_json`` (the full config dict the caller
    passed: base, schedule, W, K, seed, …), ``preset``, ``seed``, ``git_rev``, ``run_dir`` (the
    run's artefacts folder), ``message`` (e.g. the failure reason) and the ISO-8601 UTC times
    ``created_at``, ``started_at``, ``finished_at``.
``metrics``
    ``(run, step, name) -> value``; logging the same key again replaces the value.
``evaluations``
    ``(run, step, dataset, context_len, kind) -> loss, perplexity, tokens``: ``loss`` is the mean
    NLL per scored token (nats), ``perplexity = exp(loss)``, ``tokens`` the tokens actually
    scored, ``kind`` 'full' / 'frozen' (whole windows, rung set recomputed / frozen),
    'full:block{j}' / 'frozen:block{j}' (position-matched), 'bin{b}', 'light' (`lab.evalkind`).
``alphas``
    ``(run, step, layer) -> alpha``, long format; a NaN α (dense layers) is stored as NULL.
``probe_results``
    one row per retrieval-probe cell and distance: ``(task, mechanism, depth, init, seed, steps,
    distance) -> accuracy``, the probe's run and ``extra_json`` (final α, seconds, the record's
    key and settings, …).  A probe's α trajectory goes to ``alphas`` and its loss curve to
    ``metrics`` (name 'loss'), both under the probe's run (kind 'probe', named by the record's
    key).
``events``
    an append-only log: ``run`` (or NULL for store-wide events), ``time``, ``kind``, ``message``.

Rows of the other tables point at ``runs.id`` (foreign keys on); the API and the readers use run
names.  Readers return pandas DataFrames with the run's name in a ``run`` column.

    with Store("runs/fiblab.db") as s:
        s.start_run("fib-stagger-60m-s0", cfg, preset="60m", seed=0, run_dir="runs/fib-stagger")
        s.log_metrics("fib-stagger-60m-s0", 100, {"train/loss": 4.1, "lr": 3e-4})
        s.log_eval("fib-stagger-60m-s0", 100, "val", 1024, loss=3.9, tokens=262_144)
        s.set_status("fib-stagger-60m-s0", "done")
        df = s.metrics("fib-stagger-60m-s0", names="train/loss")
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported by the readers only, so a writer process starts faster
    import pandas as pd

__all__ = ["Store", "UnknownRunError", "git_revision", "STATUSES", "SCHEMA_VERSION", "DEFAULT_PATH"]

DEFAULT_PATH = "runs/fiblab.db"
STATUSES = ("pending", "running", "done", "failed", "stopped")
BUSY_TIMEOUT_S = 30.0
_SQLITE_HEADER = b"SQLite format 3\x00"
_TABLES = ("runs", "metrics", "evaluations", "alphas", "probe_results", "events")

# MIGRATIONS[i] takes a store from schema version i to i + 1; a later change appends a script.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE runs (
        id          INTEGER PRIMARY KEY,
        name        TEXT    NOT NULL UNIQUE CHECK (length(name) > 0),
        kind        TEXT    NOT NULL DEFAULT 'lm',
        status      TEXT    NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'running', 'done', 'failed')),
        config_json TEXT    NOT NULL DEFAULT '{}',
        preset      TEXT,
        seed        INTEGER,
        git_rev     TEXT,
        run_dir     TEXT,
        message     TEXT,
        created_at  TEXT    NOT NULL,
        started_at  TEXT,
        finished_at TEXT
    );
    CREATE INDEX runs_kind_status ON runs (kind, status);

    CREATE TABLE metrics (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        step   INTEGER NOT NULL,
        name   TEXT    NOT NULL,
        value  REAL,
        PRIMARY KEY (run_id, step, name)
    ) WITHOUT ROWID;
    CREATE INDEX metrics_run_name_step ON metrics (run_id, name, step);

    CREATE TABLE evaluations (
        run_id      INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        step        INTEGER NOT NULL,
        dataset     TEXT    NOT NULL,
        context_len INTEGER NOT NULL CHECK (context_len > 0),
        kind        TEXT    NOT NULL DEFAULT 'full',
        loss        REAL,
        perplexity  REAL,
        tokens      INTEGER NOT NULL CHECK (tokens >= 0),
        logged_at   TEXT    NOT NULL,
        PRIMARY KEY (run_id, step, dataset, context_len, kind)
    ) WITHOUT ROWID;
    CREATE INDEX evaluations_dataset_ctx ON evaluations (dataset, context_len, kind);

    CREATE TABLE alphas (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        step   INTEGER NOT NULL,
        layer  INTEGER NOT NULL CHECK (layer >= 0),
        alpha  REAL,
        PRIMARY KEY (run_id, step, layer)
    ) WITHOUT ROWID;

    CREATE TABLE probe_results (
        id         INTEGER PRIMARY KEY,
        run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        task       TEXT    NOT NULL,
        mechanism  TEXT    NOT NULL,
        depth      INTEGER NOT NULL,
        init       TEXT    NOT NULL,
        seed       INTEGER NOT NULL,
        steps      INTEGER NOT NULL,
        distance   INTEGER NOT NULL,
        accuracy   REAL,
        extra_json TEXT    NOT NULL DEFAULT '{}',
        logged_at  TEXT    NOT NULL,
        UNIQUE (run_id, distance)          -- the run name is the probe key (all settings)
    );
    CREATE INDEX probe_results_run ON probe_results (run_id);
    CREATE INDEX probe_results_mechanism ON probe_results (mechanism, depth);

    CREATE TABLE events (
        id      INTEGER PRIMARY KEY,
        run_id  INTEGER REFERENCES runs (id) ON DELETE CASCADE,
        time    TEXT    NOT NULL,
        kind    TEXT    NOT NULL,
        message TEXT
    );
    CREATE INDEX events_run ON events (run_id, id);
    CREATE TRIGGER events_append_only BEFORE UPDATE ON events
    BEGIN
        SELECT RAISE(ABORT, 'events is an append-only log');
    END;
    """,
    # 1 -> 2: status 'stopped' (a run stopped on request, resumable).  SQLite cannot alter a CHECK
    # constraint, so the runs table is rebuilt (SQLite's documented 12-step procedure; foreign
    # keys are off while migrations run, so dropping the old table cascades nothing and the
    # other tables' references resolve to the new one).
    """
    CREATE TABLE runs_v2 (
        id          INTEGER PRIMARY KEY,
        name        TEXT    NOT NULL UNIQUE CHECK (length(name) > 0),
        kind        TEXT    NOT NULL DEFAULT 'lm',
        status      TEXT    NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'running', 'done', 'failed', 'stopped')),
        config_json TEXT    NOT NULL DEFAULT '{}',
        preset      TEXT,
        seed        INTEGER,
        git_rev     TEXT,
        run_dir     TEXT,
        message     TEXT,
        created_at  TEXT    NOT NULL,
        started_at  TEXT,
        finished_at TEXT
    );
    INSERT INTO runs_v2 SELECT id, name, kind, status, config_json, preset, seed, git_rev, run_dir,
                               message, created_at, started_at, finished_at FROM runs;
    DROP TABLE runs;
    ALTER TABLE runs_v2 RENAME TO runs;
    CREATE INDEX runs_kind_status ON runs (kind, status);
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


class UnknownRunError(KeyError, ValueError):
    """A run name that the store does not hold (both a KeyError and a ValueError)."""

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return str(self.args[0]) if self.args else ""


def git_revision(path: str | os.PathLike | None = None) -> str | None:
    """The commit hash checked out at ``path`` (default: this package's folder), or None.

    None outside a git checkout, without a ``git`` executable, or when git fails for any reason.
    """
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "--verify", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    rev = out.stdout.strip()
    if (
        out.returncode != 0
        or len(rev) not in (40, 64)
        or any(c not in "0123456789abcdef" for c in rev)
    ):
        return None
    return rev


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _json_default(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    for attr in ("tolist", "item"):  # numpy arrays/scalars, torch tensors
        if hasattr(obj, attr):
            return getattr(obj, attr)()
    return str(obj)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=_json_default)


def _real(value: Any, what: str) -> float | None:
    """A float for a REAL column (NaN becomes NULL, which SQLite would store anyway)."""
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    return None if math.isnan(v) else v


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    try:
        i = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be an integer, got {value!r}") from None
    if i != value and not (hasattr(value, "item") and i == value.item()):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return i


def _names(x: str | Iterable[str] | None) -> list[str] | None:
    if x is None:
        return None
    return [x] if isinstance(x, str) else list(x)


def _in(column: str, values: list[Any]) -> str:
    return f"{column} IN ({', '.join('?' * len(values))})"


class Store:
    """The experiment store at ``path``: open it, log to it, read DataFrames from it.

    Safe to open from several processes (and to share between threads); a forked child opens
    its own connection on first use.  Use ``with Store(p) as s:`` or call ``close()``.
    """

    def __init__(
        self, path: str | os.PathLike = DEFAULT_PATH, *, timeout: float = BUSY_TIMEOUT_S
    ) -> None:
        self.path = os.fspath(path)
        self.timeout = float(timeout)
        self._lock = threading.RLock()
        self._snapshot_depth = 0
        self._git_rev: str | None | bool = False  # False: not looked up yet
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._memory = self.path == ":memory:"
        if not self._memory:
            self.path = os.path.abspath(os.path.expanduser(self.path))
            self._check_file()
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._conn = self._open()

    # -- opening -------------------------------------------------------------------------------

    def _reject(self, why: str) -> ValueError:
        return ValueError(
            f"{self.path} {why}; it was left untouched. Pass Store() the path of a "
            f"fiblab store or a new file, or move this file aside."
        )

    def _check_file(self) -> None:
        """Refuse an existing file that is not an SQLite database, before SQLite touches it."""
        if os.path.isdir(self.path):
            raise self._reject("is a directory, not an SQLite database")
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(_SQLITE_HEADER))
        except FileNotFoundError:
            return
        except OSError as e:
            raise ValueError(f"cannot read {self.path}: {e}") from e
        if head and head != _SQLITE_HEADER:
            raise self._reject(f"is not an SQLite database (it starts with {head[:8]!r})")

    def _set_wal(self, conn: sqlite3.Connection) -> str:
        """Switch to WAL.  The switch needs an exclusive lock and SQLite does not always run the
        busy handler for it (two processes opening a new file at once), so retry until timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            self._check_schema(conn)  # read-only checks, before anything is written
            if not self._memory:
                mode = self._set_wal(conn)
                if str(mode).lower() != "wal":
                    raise ValueError(
                        f"{self.path}: SQLite could not switch to WAL journal mode "
                        f"(got {mode!r}); put the store on a local filesystem"
                    )
                conn.execute("PRAGMA synchronous = NORMAL")  # WAL: durable against crashes
            self._migrate(conn)  # with foreign keys off: see MIGRATIONS[1]
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.OperationalError:  # locked, unreadable, …: not a verdict on the file
            conn.close()
            raise
        except sqlite3.DatabaseError as e:  # "file is not a database", malformed, …
            conn.close()
            raise self._reject(f"could not be opened as an SQLite database ({e})") from e
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        # one read transaction: another process may be creating the schema right now, and the
        # version and the table list must come from the same snapshot
        conn.execute("BEGIN")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%'"
                )
            ]
        finally:
            conn.execute("COMMIT")
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"{self.path} has store schema version {version}, newer than this "
                f"fiblab's {SCHEMA_VERSION}; update fiblab to read it"
            )
        if version == 0:
            if tables:
                raise self._reject(
                    f"is an SQLite database of something else (tables "
                    f"{sorted(tables)[:5]}, no fiblab schema version)"
                )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")  # another process may be creating the schema too
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            for i in range(version, SCHEMA_VERSION):
                for statement in split_sql(MIGRATIONS[i]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {i + 1}")
            bad = conn.execute("PRAGMA foreign_key_check").fetchall()
            if bad:
                raise sqlite3.DatabaseError(f"store migration left dangling references: {bad[:3]}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"Store({self.path!r}) is closed")
        if os.getpid() != self._pid:
            # A forked child must not use (or close) the parent's connection: open its own.
            self._pid = os.getpid()
            self._snapshot_depth = 0
            self._lock = threading.RLock()
            self._conn = self._open()
        return self._conn

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._conn is not None and os.getpid() == self._pid:
                self._conn.close()
            self._conn = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.path!r}{', closed' if self._conn is None else ''})"

    @property
    def schema_version(self) -> int:
        with self._lock:
            return self._connection().execute("PRAGMA user_version").fetchone()[0]

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            if self._snapshot_depth:
                raise RuntimeError("cannot write inside Store.snapshot(); write after it ends")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def snapshot(self) -> Iterator[Store]:
        """Hold one read transaction: every reader called inside sees the same snapshot.

        Keep it short: while it is open the WAL cannot be checkpointed past it.
        """
        with self._lock:
            conn = self._connection()
            outer = self._snapshot_depth == 0
            if outer:
                conn.execute("BEGIN")
                conn.execute("SELECT 1 FROM runs LIMIT 1").fetchall()  # start the snapshot now
            self._snapshot_depth += 1
            try:
                yield self
            finally:
                self._snapshot_depth -= 1
                if outer and conn.in_transaction:
                    conn.execute("COMMIT")

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self.snapshot():
            return self._connection().execute(sql, params).fetchall()

    def _run_id(self, conn: sqlite3.Connection, run: str) -> int:
        row = conn.execute("SELECT id FROM runs WHERE name = ?", (run,)).fetchone()
        if row is None:
            raise UnknownRunError(
                f"no run named {run!r} in {self.path}; start it with "
                f"Store.start_run({run!r}, config) first"
            )
        return row[0]

    def _default_git_rev(self) -> str | None:
        if self._git_rev is False:
            self._git_rev = git_revision()
        return self._git_rev  # type: ignore[return-value]

    # -- writers -------------------------------------------------------------------------------

    def start_run(
        self,
        name: str,
        config: Mapping[str, Any],
        kind: str = "lm",
        preset: str | None = None,
        seed: int | None = None,
        run_dir: str | os.PathLike | None = None,
        git_rev: str | None = None,
        resume: bool = False,
    ) -> int:
        """Create run ``name`` (or restart it: same row, new config) with status 'running'.

        ``resume=True`` continues the run from a checkpoint: its first ``started_at`` is kept
        (a restart from scratch stamps a new one).  ``git_rev`` defaults to this checkout's
        commit (None outside git).  Returns the run's id.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"run name must be a non-empty string, got {name!r}")
        if not isinstance(config, Mapping):
            raise ValueError(f"config must be a dict, got {type(config).__name__}")
        config_json = _dumps(dict(config))
        seed_ = None if seed is None else _int(seed, "seed")
        rev = git_rev if git_rev is not None else self._default_git_rev()
        rd = None if run_dir is None else os.fspath(run_dir)
        now = _now()
        with self._write() as conn:
            conn.execute(
                """INSERT INTO runs (name, kind, status, config_json, preset, seed, git_rev,
                                     run_dir, message, created_at, started_at, finished_at)
                   VALUES (?, ?, 'running', ?, ?, ?, ?, ?, NULL, ?, ?, NULL)
                   ON CONFLICT (name) DO UPDATE SET
                       kind = excluded.kind, status = 'running',
                       config_json = excluded.config_json, preset = excluded.preset,
                       seed = excluded.seed, git_rev = excluded.git_rev,
                       run_dir = excluded.run_dir, message = NULL,
                       started_at = CASE WHEN ? THEN COALESCE(runs.started_at, excluded.started_at)
                                    ELSE excluded.started_at END,
                       finished_at = NULL""",
                (name, kind, config_json, preset, seed_, rev, rd, now, now, bool(resume)),
            )
            return self._run_id(conn, name)

    def set_status(self, name: str, status: str, message: str | None = None) -> None:
        """Set a run's status; 'running' stamps started_at, 'done'/'failed' stamp finished_at.

        ``message`` (e.g. the failure reason) replaces the run's message when given.
        """
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        now = _now()
        started = "?" if status == "running" else "started_at"
        finished = (
            "?"
            if status in ("done", "failed")
            else "NULL"
            if status == "running"
            else "finished_at"
        )
        params: list[Any] = [status, message]
        params += [now] if status == "running" else []
        params += [now] if status in ("done", "failed") else []
        with self._write() as conn:
            cur = conn.execute(
                f"UPDATE runs SET status = ?, message = COALESCE(?, message), "
                f"started_at = {started}, finished_at = {finished} WHERE name = ?",
                (*params, name),
            )
            if cur.rowcount == 0:
                self._run_id(conn, name)  # raises UnknownRunError

    def log_metrics(self, run: str, step: int, values: Mapping[str, Any]) -> None:
        """Log ``{name: value}`` at ``step`` in one transaction; a logged key is replaced."""
        step_ = _int(step, "step")
        rows = [(str(k), _real(v, f"metric {k!r}")) for k, v in values.items()]
        with self._write() as conn:
            rid = self._run_id(conn, run)
            conn.executemany(
                """INSERT INTO metrics (run_id, step, name, value) VALUES (?, ?, ?, ?)
                   ON CONFLICT (run_id, step, name) DO UPDATE SET value = excluded.value""",
                [(rid, step_, k, v) for k, v in rows],
            )

    def log_eval(
        self,
        run: str,
        step: int,
        dataset: str,
        context_len: int,
        loss: float,
        tokens: int,
        kind: str = "full",
    ) -> float:
        """Log an evaluation: ``loss`` is the mean NLL (nats) per scored token, ``tokens`` the
        number scored.  Stores and returns ``perplexity = exp(loss)`` (inf on overflow)."""
        loss_ = _real(loss, "loss")
        if loss_ is None:
            ppl = math.nan
        else:
            try:
                ppl = math.exp(loss_)
            except OverflowError:
                ppl = math.inf
        tokens_ = _int(tokens, "tokens")
        ctx = _int(context_len, "context_len")
        if tokens_ < 0 or ctx <= 0:
            raise ValueError(f"need tokens >= 0 and context_len > 0, got {tokens_}, {ctx}")
        with self._write() as conn:
            rid = self._run_id(conn, run)
            conn.execute(
                """INSERT INTO evaluations (run_id, step, dataset, context_len, kind, loss,
                                            perplexity, tokens, logged_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (run_id, step, dataset, context_len, kind) DO UPDATE SET
                       loss = excluded.loss, perplexity = excluded.perplexity,
                       tokens = excluded.tokens, logged_at = excluded.logged_at""",
                (
                    rid,
                    _int(step, "step"),
                    dataset,
                    ctx,
                    kind,
                    loss_,
                    _real(ppl, "perplexity"),
                    tokens_,
                    _now(),
                ),
            )
        return ppl

    def log_alphas(self, run: str, step: int, alphas: Iterable[Any]) -> None:
        """Log one α per layer (layer = position in ``alphas``) at ``step``."""
        step_ = _int(step, "step")
        rows = [(layer, _real(a, f"alpha of layer {layer}")) for layer, a in enumerate(alphas)]
        with self._write() as conn:
            rid = self._run_id(conn, run)
            conn.executemany(
                """INSERT INTO alphas (run_id, step, layer, alpha) VALUES (?, ?, ?, ?)
                   ON CONFLICT (run_id, step, layer) DO UPDATE SET alpha = excluded.alpha""",
                [(rid, step_, layer, a) for layer, a in rows],
            )

    def log_probe(self, record: Mapping[str, Any]) -> str:
        """Store one retrieval-probe record (as ``probes.retrieval.run_cell`` returns it).

        Needs keys task, mechanism, depth, init, seed, steps and acc ({distance: accuracy});
        uses alphas, seconds, trajectory ([{step, alphas}]) and loss ([{step, loss}]) when
        present.  The record lands under a run of kind 'probe' named ``record['key']`` (or
        task/mechanism/d<depth>/<init>/s<seed>/n<steps>): one probe_results row per distance,
        the trajectory in alphas, the loss curve in metrics ('loss'), and everything else in
        extra_json.  Logging a record again replaces it.  Returns the run name.
        """
        need = ("task", "mechanism", "depth", "init", "seed", "steps", "acc")
        missing = [k for k in need if k not in record]
        if missing:
            raise ValueError(f"probe record lacks {missing} (has {sorted(record)})")
        task, mech, init = str(record["task"]), str(record["mechanism"]), str(record["init"])
        depth, seed = _int(record["depth"], "depth"), _int(record["seed"], "seed")
        steps = _int(record["steps"], "steps")
        name = str(record.get("key") or f"{task}/{mech}/d{depth}/{init}/s{seed}/n{steps}")
        acc = {
            _int(int(str(d)), "distance"): _real(a, f"accuracy at distance {d}")
            for d, a in dict(record["acc"]).items()
        }
        trajectory = list(record.get("trajectory") or [])
        if not trajectory and record.get("alphas") is not None:
            trajectory = [{"step": steps, "alphas": record["alphas"]}]
        alpha_rows = [
            (_int(t["step"], "trajectory step"), layer, _real(a, "alpha"))
            for t in trajectory
            for layer, a in enumerate(t["alphas"])
        ]
        loss_rows = [
            (_int(p["step"], "loss step"), _real(p["loss"], "loss"))
            for p in record.get("loss") or []
        ]
        columns = set(need) | {"trajectory", "loss"}
        extra = _dumps({k: v for k, v in record.items() if k not in columns})
        config = _dumps(
            {
                k: v
                for k, v in record.items()
                if k not in ("acc", "trajectory", "loss", "alphas", "seconds")
            }
        )
        now = _now()
        with self._write() as conn:
            row = conn.execute("SELECT kind FROM runs WHERE name = ?", (name,)).fetchone()
            if row is not None and row[0] != "probe":
                raise ValueError(f"run {name!r} already exists with kind {row[0]!r}, not 'probe'")
            conn.execute(
                """INSERT INTO runs (name, kind, status, config_json, seed, git_rev, created_at,
                                     started_at, finished_at)
                   VALUES (?, 'probe', 'done', ?, ?, ?, ?, NULL, ?)
                   ON CONFLICT (name) DO UPDATE SET
                       status = 'done', config_json = excluded.config_json,
                       seed = excluded.seed, git_rev = excluded.git_rev,
                       message = NULL, finished_at = excluded.finished_at""",
                (name, config, seed, record.get("git_rev") or self._default_git_rev(), now, now),
            )
            rid = self._run_id(conn, name)
            for table in ("probe_results", "alphas", "metrics"):  # the record replaces them
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (rid,))
            conn.executemany(
                """INSERT INTO probe_results (run_id, task, mechanism, depth, init, seed, steps,
                                              distance, accuracy, extra_json, logged_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (run_id, distance) DO UPDATE
                   SET run_id = excluded.run_id, accuracy = excluded.accuracy,
                       extra_json = excluded.extra_json, logged_at = excluded.logged_at""",
                [
                    (rid, task, mech, depth, init, seed, steps, d, a, extra, now)
                    for d, a in sorted(acc.items())
                ],
            )
            conn.executemany(
                """INSERT INTO alphas (run_id, step, layer, alpha) VALUES (?, ?, ?, ?)
                   ON CONFLICT (run_id, step, layer) DO UPDATE SET alpha = excluded.alpha""",
                [(rid, *r) for r in alpha_rows],
            )
            conn.executemany(
                """INSERT INTO metrics (run_id, step, name, value) VALUES (?, ?, 'loss', ?)
                   ON CONFLICT (run_id, step, name) DO UPDATE SET value = excluded.value""",
                [(rid, *r) for r in loss_rows],
            )
        return name

    def log_event(self, run: str | None, kind: str, message: str | None = None) -> int:
        """Append an event for ``run`` (None: a store-wide event); returns its id."""
        with self._write() as conn:
            rid = None if run is None else self._run_id(conn, run)
            cur = conn.execute(
                "INSERT INTO events (run_id, time, kind, message) VALUES (?, ?, ?, ?)",
                (rid, _now(), kind, message),
            )
            return int(cur.lastrowid)

    # -- readers -------------------------------------------------------------------------------

    def _frame(self, sql: str, params: Sequence[Any], dtypes: Mapping[str, str]) -> pd.DataFrame:
        import pandas as pd

        rows = self._read(sql, params)
        df = pd.DataFrame.from_records(rows, columns=list(dtypes))
        for col, dtype in dtypes.items():
            if dtype == "datetime":
                df[col] = pd.to_datetime(df[col], utc=True, format="ISO8601")
            elif dtype != "str":
                df[col] = df[col].astype(dtype)
        return df

    @staticmethod
    def _where(filters: list[tuple[str, list[Any] | None]]) -> tuple[str, list[Any]]:
        clauses, params = [], []
        for column, values in filters:
            if values is not None:
                clauses.append(_in(column, values))
                params += values
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params

    def runs(self, kind: str | None = None, status: str | None = None) -> pd.DataFrame:
        """All runs (optionally of one kind/status), oldest first; config_json as text."""
        where, params = self._where([("kind", _names(kind)), ("status", _names(status))])
        return self._frame(
            "SELECT id, name, kind, status, preset, seed, git_rev, run_dir, message, created_at,"
            " started_at, finished_at, config_json FROM runs" + where + " ORDER BY id",
            params,
            {
                "id": "int64",
                "name": "str",
                "kind": "str",
                "status": "str",
                "preset": "str",
                "seed": "Int64",
                "git_rev": "str",
                "run_dir": "str",
                "message": "str",
                "created_at": "datetime",
                "started_at": "datetime",
                "finished_at": "datetime",
                "config_json": "str",
            },
        )

    def config(self, run: str) -> dict:
        """The config dict that ``start_run`` stored for ``run``."""
        rows = self._read("SELECT config_json FROM runs WHERE name = ?", (run,))
        if not rows:
            raise UnknownRunError(f"no run named {run!r} in {self.path}")
        return json.loads(rows[0][0])

    def metrics(
        self, run: str | Iterable[str] | None = None, names: str | Iterable[str] | None = None
    ) -> pd.DataFrame:
        """Metrics in long format: run, step, name, value (NaN for a NaN/NULL value)."""
        where, params = self._where([("r.name", _names(run)), ("m.name", _names(names))])
        return self._frame(
            "SELECT r.name, m.step, m.name, m.value FROM metrics m JOIN runs r ON r.id = m.run_id"
            + where
            + " ORDER BY r.id, m.step, m.name",
            params,
            {"run": "str", "step": "int64", "name": "str", "value": "float64"},
        )

    def evals(self, run: str | Iterable[str] | None = None) -> pd.DataFrame:
        """Evaluations: run, step, dataset, context_len, kind, loss, perplexity, tokens, …"""
        where, params = self._where([("r.name", _names(run))])
        return self._frame(
            "SELECT r.name, e.step, e.dataset, e.context_len, e.kind, e.loss, e.perplexity,"
            " e.tokens, e.logged_at FROM evaluations e JOIN runs r ON r.id = e.run_id"
            + where
            + " ORDER BY r.id, e.step, e.dataset, e.context_len, e.kind",
            params,
            {
                "run": "str",
                "step": "int64",
                "dataset": "str",
                "context_len": "int64",
                "kind": "str",
                "loss": "float64",
                "perplexity": "float64",
                "tokens": "int64",
                "logged_at": "datetime",
            },
        )

    def alphas(self, run: str | Iterable[str] | None = None) -> pd.DataFrame:
        """α per layer in long format: run, step, layer, alpha."""
        where, params = self._where([("r.name", _names(run))])
        return self._frame(
            "SELECT r.name, a.step, a.layer, a.alpha FROM alphas a JOIN runs r ON r.id = a.run_id"
            + where
            + " ORDER BY r.id, a.step, a.layer",
            params,
            {"run": "str", "step": "int64", "layer": "int64", "alpha": "float64"},
        )

    def probes(self, task: str | Iterable[str] | None = None) -> pd.DataFrame:
        """Probe results, one row per cell and distance; extra_json as text."""
        where, params = self._where([("p.task", _names(task))])
        return self._frame(
            "SELECT r.name, p.task, p.mechanism, p.depth, p.init, p.seed, p.steps, p.distance,"
            " p.accuracy, p.extra_json, p.logged_at FROM probe_results p"
            " JOIN runs r ON r.id = p.run_id"
            + where
            + " ORDER BY p.task, p.mechanism, p.depth, p.init, p.seed, p.steps, p.distance",
            params,
            {
                "run": "str",
                "task": "str",
                "mechanism": "str",
                "depth": "int64",
                "init": "str",
                "seed": "int64",
                "steps": "int64",
                "distance": "int64",
                "accuracy": "float64",
                "extra_json": "str",
                "logged_at": "datetime",
            },
        )

    def events(self, run: str | Iterable[str] | None = None) -> pd.DataFrame:
        """The event log in order: id, run (None for store-wide events), time, kind, message."""
        where, params = self._where([("r.name", _names(run))])
        return self._frame(
            "SELECT e.id, r.name, e.time, e.kind, e.message FROM events e"
            " LEFT JOIN runs r ON r.id = e.run_id" + where + " ORDER BY e.id",
            params,
            {"id": "int64", "run": "str", "time": "datetime", "kind": "str", "message": "str"},
        )


def split_sql(script: str) -> list[str]:
    """Statements of a migration script (``executescript`` would commit our transaction)."""
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out
