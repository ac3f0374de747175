"""A small fake of the authors' results database (``db/fib.db``): its schema, a few runs and
their perplexities, written by `build_fixture`; `ppl_of` is each number, by hand.  Shared by the
paperdb, tables, report, demo and notebook-panel tests."""

from __future__ import annotations

import json
import sqlite3

from analysis.published.paperdb import DATASETS

SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, run_dir TEXT NOT NULL,
    candidate_id TEXT, variant_or_baseline TEXT NOT NULL, phase INTEGER NOT NULL,
    config_json TEXT NOT NULL, seed INTEGER NOT NULL, d_model INTEGER NOT NULL,
    n_layers INTEGER NOT NULL, params_effective INTEGER, tokens_trained INTEGER,
    status TEXT NOT NULL DEFAULT 'pending', started_at TEXT, ended_at TEXT, wall_seconds REAL,
    failure_reason TEXT, created_at TEXT NOT NULL);
CREATE TABLE metrics (
    run_id INTEGER NOT NULL, step INTEGER NOT NULL, dataset TEXT NOT NULL, ppl REAL, loss REAL,
    eval_tokens INTEGER, recorded_at TEXT NOT NULL, PRIMARY KEY (run_id, step, dataset));
CREATE TABLE eval_results (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id INTEGER, step INTEGER NOT NULL,
    model_size INTEGER NOT NULL, eval_name TEXT NOT NULL, metric TEXT NOT NULL,
    value REAL NOT NULL, recorded_at TEXT NOT NULL);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ts TEXT NOT NULL, kind TEXT NOT NULL,
    message TEXT NOT NULL, payload_json TEXT);
CREATE TABLE retrieval_results (
    source TEXT NOT NULL, mech TEXT NOT NULL, depth INTEGER NOT NULL, seed INTEGER NOT NULL,
    staggered INTEGER NOT NULL, train_d INTEGER NOT NULL, distance INTEGER NOT NULL,
    kind TEXT NOT NULL, acc REAL NOT NULL, alphas TEXT, peak_gb REAL, src_file TEXT, extra TEXT,
    PRIMARY KEY (source, mech, depth, seed, staggered, train_d, distance, kind));
"""

# (title, kind, status, seed, wall_seconds, failure_reason)
RUNS = [
    ("f13__fib_stagger_w12", "variant", "done", 42, 9013.6, None),
    ("f01__fib_learned_w6", "variant", "failed", 42, None, "KeyboardInterrupt()"),
    ("ref_e0000", "reference", "pending", 42, None, None),
    ("f01__fib_learned_w6", "variant", "done", 42, 38307.1, None),
    ("f14__fib_hdc_w12", "variant", "done", 42, 9018.2, None),
    ("f09__logsparse_w8", "variant", "done", 42, 8998.8, None),
    ("f18__logsparse_stagger_w6", "variant", "done", 42, 9010.3, None),
    ("g02__fib_learned_w12_s43", "variant", "done", 43, 39604.6, None),
    ("h03__fib_hdc_w12_s44", "variant", "done", 44, 9036.6, None),
]
STEPS = (1000, 13000)


def ppl_of(run_id, step, dataset):
    """A distinct, recognisable perplexity per (run, step, dataset)."""
    return 10.0 * run_id + (0.0 if step == 13000 else 500.0) + list(DATASETS).index(dataset) / 4


def build_fixture(path):
    """A small database with the authors' schema: the runs above, metrics at 1000 and 13000 for
    every variant (the failed attempt too, so that only its status can exclude it), none for the
    reference, and three retrieval rows with both α encodings."""
    con = sqlite3.connect(path)
    con.executescript(SCHEMA)
    for title, kind, status, seed, wall, why in RUNS:
        con.execute(
            "INSERT INTO runs (title, run_dir, variant_or_baseline, phase, config_json, seed, "
            "d_model, n_layers, params_effective, tokens_trained, status, wall_seconds, "
            "failure_reason, created_at) VALUES (?, ?, ?, 2, '{}', ?, 512, 16, ?, ?, ?, ?, ?, "
            "'2026-06-08T00:00:00+00:00')",
            (
                title,
                f"C:\\exp\\{title}",
                kind,
                seed,
                0 if kind == "reference" else 60850688,
                425984000 if status == "done" else None,
                status,
                wall,
                why,
            ),
        )
    run_ids = [r[0] for r in con.execute("SELECT id FROM runs WHERE variant_or_baseline='variant'")]
    for rid in run_ids:
        for step in STEPS:
            for ds in DATASETS:
                p = ppl_of(rid, step, ds)
                con.execute(
                    "INSERT INTO metrics VALUES (?, ?, ?, ?, ?, 1048576, 'now')",
                    (rid, step, ds, p, p / 100),
                )
    retrieval = [
        ("marked", "fib_blur", 2, 0, 1, -1, 200, "target", 0.99, json.dumps([0.56, 1.39])),
        (
            "sweep",
            "gumbel_fib",
            2,
            0,
            -1,
            55,
            55,
            "trained",
            1.0,
            json.dumps([{"alpha": 0.9841}, {"alpha": 1.0714}]),
        ),
        ("sweep", "dense", 2, 0, -1, 55, 128, "control", 0.0056, "[]"),
    ]
    for row in retrieval:
        con.execute(
            "INSERT INTO retrieval_results VALUES (?,?,?,?,?,?,?,?,?,?, 3.1, 'x.json', "
            "'{\"peakGB\": 3.1}')",
            row,
        )
    con.commit()
    con.close()
    return path
