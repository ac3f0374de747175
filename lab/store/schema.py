"""The store's schema: its tables, the migration scripts that build them, and `migrate`.

Tables (schema version in ``PRAGMA user_version``; ``SCHEMA_VERSION``):

``runs``
    one row per run, unique ``name``: ``kind`` ('lm', 'probe', …), ``status``
    ('pending' | 'running' | 'done' | 'failed' | 'stopped'), ``config_json`` (the full config dict the caller
    passed: base, schedule, W, K, seed, …), ``preset``, ``seed``, ``git_rev``, ``run_dir`` (the
    run's artefacts folder), ``message`` (e.g. the failure reason) and the ISO-8601 UTC times
    ``created_at``, ``started_at``, ``finished_at``.
``metrics``
    ``(run, step, name) -> value``; logging the same key again replaces the value.
``evaluations``
    ``(run, step, dataset, context_len, kind) -> loss, perplexity, tokens``: ``loss`` is the mean
    NLL per scored token (nats), ``perplexity = exp(loss)``, ``tokens`` the tokens actually
    scored, ``kind`` 'recompute' / 'freeze' (whole windows, rung set recomputed / frozen: the
    rung policy), 'recompute:block{j}' / 'freeze:block{j}' (position-matched), 'bin{b}', 'light'
    (`lab.store.evalkind`; stores before schema 4 said 'full' / 'frozen').
``alphas``
    ``(run, step, layer) -> alpha``, long format; a NaN α (dense layers) is stored as NULL.
``probe_results``
    one row per retrieval-probe cell and distance, unique on ``(run, distance) -> accuracy``;
    the run (kind 'probe') is named by the cell's key (task, mechanism, depth, init, seed,
    steps), which the row's columns repeat for queries; ``extra_json`` holds final α, seconds, the
    record's key and settings, ….  A probe's α trajectory goes to ``alphas`` and its loss curve to
    ``metrics`` (name 'loss'), both under the probe's run (kind 'probe', named by the record's
    key).
``battery_results``
    one row per RULER / LEGO battery result of a run (`probes.battery_run`):
    ``(run, task, n, seed) -> accuracy, correct, items`` with ``n`` the items per chain length,
    ``items`` all the task's items, ``step`` the checkpoint scored, ``chance`` the task's
    forced-choice rate, ``p_value`` the one-sided binomial test of accuracy > chance and
    ``at_chance`` (p ≥ the alpha in ``settings_json``), the battery's ``version`` and
    ``settings_json`` (chain lengths, distractors, vocabulary, …), and ``by_length_json``
    (accuracy per chain length).  Scoring the same (run, task, n, seed) again replaces the row.
``events``
    an append-only log: ``run`` (or NULL for store-wide events), ``time``, ``kind``, ``message``.

Rows of the other tables point at ``runs.id`` (foreign keys on); the API and the readers use run
names.  Readers return pandas DataFrames with the run's name in a ``run`` column.

``MIGRATIONS[i]`` takes a store from schema version i to i + 1; a schema change appends a
script, so a store file of any older version opens and is brought up to date by `migrate`.
"""

from __future__ import annotations

import sqlite3

TABLES = (
    "runs",
    "metrics",
    "evaluations",
    "alphas",
    "probe_results",
    "battery_results",
    "events",
)

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
    # 2 -> 3: the RULER / LEGO battery's results (`fiblab battery`, the demo's LM stage)
    """
    CREATE TABLE battery_results (
        run_id         INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        task           TEXT    NOT NULL,
        n              INTEGER NOT NULL CHECK (n > 0),
        seed           INTEGER NOT NULL CHECK (seed >= 0),
        step           INTEGER NOT NULL,
        items          INTEGER NOT NULL CHECK (items > 0),
        correct        INTEGER NOT NULL CHECK (correct >= 0 AND correct <= items),
        accuracy       REAL,
        chance         REAL    NOT NULL CHECK (chance > 0 AND chance < 1),
        p_value        REAL,
        at_chance      INTEGER NOT NULL CHECK (at_chance IN (0, 1)),
        version        INTEGER NOT NULL,
        settings_json  TEXT    NOT NULL DEFAULT '{}',
        by_length_json TEXT    NOT NULL DEFAULT '{}',
        logged_at      TEXT    NOT NULL,
        PRIMARY KEY (run_id, task, n, seed)
    ) WITHOUT ROWID;
    CREATE INDEX battery_results_task ON battery_results (task);
    """,
    # 3 -> 4: an evaluation kind says its rung policy as the CLI does (`lab.store.evalkind`):
    # 'full' -> 'recompute', 'frozen' -> 'freeze', alone or before ':block{j}'
    """
    CREATE TABLE evaluations_v4 (
        run_id      INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        step        INTEGER NOT NULL,
        dataset     TEXT    NOT NULL,
        context_len INTEGER NOT NULL CHECK (context_len > 0),
        kind        TEXT    NOT NULL DEFAULT 'recompute',
        loss        REAL,
        perplexity  REAL,
        tokens      INTEGER NOT NULL CHECK (tokens >= 0),
        logged_at   TEXT    NOT NULL,
        PRIMARY KEY (run_id, step, dataset, context_len, kind)
    ) WITHOUT ROWID;
    INSERT INTO evaluations_v4
        SELECT run_id, step, dataset, context_len,
               CASE WHEN kind = 'full' OR kind GLOB 'full:*' THEN 'recompute' || substr(kind, 5)
                    WHEN kind = 'frozen' OR kind GLOB 'frozen:*' THEN 'freeze' || substr(kind, 7)
                    ELSE kind END,
               loss, perplexity, tokens, logged_at
        FROM evaluations;
    DROP TABLE evaluations;
    ALTER TABLE evaluations_v4 RENAME TO evaluations;
    CREATE INDEX evaluations_dataset_ctx ON evaluations (dataset, context_len, kind);
    -- a process started before the upgrade keeps its open store and still writes the old words:
    -- its rows are rewritten as they land, so no reader misses them
    CREATE TRIGGER evaluations_kind_words AFTER INSERT ON evaluations
    WHEN NEW.kind = 'full' OR NEW.kind GLOB 'full:*' OR NEW.kind = 'frozen' OR NEW.kind GLOB 'frozen:*'
    BEGIN
        INSERT OR REPLACE INTO evaluations
            (run_id, step, dataset, context_len, kind, loss, perplexity, tokens, logged_at)
        VALUES (NEW.run_id, NEW.step, NEW.dataset, NEW.context_len,
                CASE WHEN NEW.kind GLOB 'full*' THEN 'recompute' || substr(NEW.kind, 5)
                     ELSE 'freeze' || substr(NEW.kind, 7) END,
                NEW.loss, NEW.perplexity, NEW.tokens, NEW.logged_at);
        DELETE FROM evaluations
        WHERE run_id = NEW.run_id AND step = NEW.step AND dataset = NEW.dataset
              AND context_len = NEW.context_len AND kind = NEW.kind;
    END;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the database on ``conn`` to SCHEMA_VERSION in one ``BEGIN IMMEDIATE`` transaction
    (run it with foreign keys off: see MIGRATIONS[1]); a dangling reference rolls it back."""
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
