"""The experiment store: round trips for every table, upserts that replace, concurrent writers that
lose nothing, readers that only ever see whole transactions, and files it must refuse untouched."""

import json
import math
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from lab.store import Store
from lab.store.connection import UnknownRunError, git_revision
from lab.store.schema import SCHEMA_VERSION, TABLES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "deep" / "er" / "fiblab.db") as s:
        yield s


def count(store, table):
    with sqlite3.connect(store.path) as c:
        return c.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def probe_record(acc5=0.9, acc13=0.4, seconds=12.5):
    """A record shaped like probes.runner.run_cell's."""
    return {
        "key": "marked/learned/d2/staggered/s1/n30/b8/lr0.003/w2",
        "mechanism": "learned",
        "depth": 2,
        "init": "staggered",
        "seed": 1,
        "task": "marked",
        "steps": 30,
        "alphas": [0.61, 1.39],
        "acc": {"5": acc5, "13": acc13},
        "seconds": seconds,
        "trajectory": [
            {"step": 0, "alphas": [0.55, 1.45]},
            {"step": 10, "alphas": [0.58, 1.42]},
            {"step": 30, "alphas": [0.61, 1.39]},
        ],
        "loss": [{"step": 0, "loss": 3.4}, {"step": 10, "loss": 2.9}],
        "settings": {"lr": 0.003, "batch": 8, "window": 2},
    }


# -- opening -----------------------------------------------------------------------------------


def test_open_creates_dirs_wal_schema_version_and_pragmas(tmp_path):
    path = tmp_path / "a" / "b" / "fiblab.db"
    with Store(path) as s:
        assert s.path == str(path) and path.exists()
        conn = s._connection()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
        assert s.schema_version == SCHEMA_VERSION >= 1
        s.start_run("r", {"W": 8})
    with pytest.raises(RuntimeError, match="closed"):
        s.runs()
    with Store(path) as s2:  # reopening keeps the data and the version
        assert list(s2.runs()["name"]) == ["r"] and s2.schema_version == SCHEMA_VERSION
    with sqlite3.connect(path) as c:
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "metrics", "evaluations", "alphas", "probe_results", "events"} <= tables


def test_text_file_is_rejected_and_left_byte_identical(tmp_path):
    path = tmp_path / "fiblab.db"
    payload = b"step,loss\n1,4.2\n" * 100
    path.write_bytes(payload)
    with pytest.raises(ValueError) as e:
        Store(path)
    assert str(path) in str(e.value) and "not an SQLite database" in str(e.value)
    assert "move this file aside" in str(e.value)
    assert path.read_bytes() == payload
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fiblab.db"]  # no -wal / -shm


def test_foreign_sqlite_db_and_newer_schema_are_rejected_unchanged(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE users (id INTEGER)")
    c.close()
    before = other.read_bytes()
    with pytest.raises(ValueError, match="something else"):
        Store(other)
    assert other.read_bytes() == before

    newer = tmp_path / "newer.db"
    Store(newer).close()
    with sqlite3.connect(newer) as c:
        c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    c.close()
    with pytest.raises(ValueError, match="newer"):
        Store(newer)


def test_git_revision(tmp_path):
    """In this checkout: the commit git itself names; outside one, or without a working git:
    None, no error."""
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode != 0:
        pytest.skip(f"the tests do not run in a git checkout: {head.stderr.strip()}")
    rev = head.stdout.strip()
    assert len(rev) in (40, 64) and int(rev, 16) >= 0
    assert git_revision(ROOT) == rev
    assert git_revision(ROOT / "lab") == rev  # any folder of the checkout
    assert git_revision() == rev  # default: the package's own folder, in this checkout
    outside = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True)
    assert outside.returncode != 0  # the premise: the temporary folder is no checkout
    assert git_revision(tmp_path) is None
    assert git_revision(tmp_path / "missing") is None


def test_git_revision_is_none_without_a_working_git(monkeypatch):
    import lab.store.connection as sc

    def no_git(*a, **k):
        raise FileNotFoundError("git")

    monkeypatch.setattr(sc.subprocess, "run", no_git)
    assert git_revision(ROOT) is None

    def garbage(*a, **k):  # a git that answers, but not with a commit hash
        return subprocess.CompletedProcess(a[0], 0, stdout="not-a-hash\n", stderr="")

    monkeypatch.setattr(sc.subprocess, "run", garbage)
    assert git_revision(ROOT) is None


# -- runs --------------------------------------------------------------------------------------


def test_runs_round_trip_rerun_upserts_and_status(store, tmp_path):
    cfg = {
        "base": "fibonacci",
        "schedule": "stagger",
        "W": 8,
        "K": 15,
        "seed": 0,
        "alphas": (0.5, 1.5),
        "run_dir": tmp_path,
    }
    rid = store.start_run(
        "fib-60m", cfg, preset="60m", seed=0, run_dir=tmp_path / "fib", git_rev="abc123"
    )
    r = store.runs().iloc[0]
    assert (
        r["id"],
        r["name"],
        r["kind"],
        r["status"],
        r["preset"],
        r["seed"],
        r["git_rev"],
        r["run_dir"],
    ) == (rid, "fib-60m", "lm", "running", "60m", 0, "abc123", str(tmp_path / "fib"))
    assert store.config("fib-60m") == {**cfg, "alphas": [0.5, 1.5], "run_dir": str(tmp_path)}
    assert json.loads(r["config_json"]) == store.config("fib-60m")
    assert r["started_at"] >= r["created_at"] and pd.isna(r["finished_at"])

    store.set_status("fib-60m", "failed", message="NaN loss at step 900")
    r = store.runs().iloc[0]
    assert (r["status"], r["message"]) == ("failed", "NaN loss at step 900")
    assert r["finished_at"] >= r["started_at"]

    # a re-run of the same name: same row, new config, running again, failure cleared
    assert store.start_run("fib-60m", {**cfg, "W": 16}, preset="60m", seed=0) == rid
    runs = store.runs()
    assert len(runs) == 1 and count(store, "runs") == 1
    r = runs.iloc[0]
    assert r["status"] == "running" and pd.isna(r["message"]) and pd.isna(r["finished_at"])
    assert store.config("fib-60m")["W"] == 16 and r["created_at"] < r["started_at"]

    store.set_status("fib-60m", "done")
    store.start_run("probe-x", {}, kind="probe")
    assert list(store.runs(status="done")["name"]) == ["fib-60m"]
    assert list(store.runs(kind="probe")["name"]) == ["probe-x"]


def test_a_replayed_write_keeps_the_time_it_was_made(store):
    """``at`` stamps a start, a status and an event with when they happened elsewhere (a Ray
    task's journal, `lab.store.journal.replay`), in UTC whatever zone it names; a resume keeps
    the first start.  A time without its zone, or not a time, is refused naming the value."""
    t0, t1 = "2026-01-02T03:04:05.000006+00:00", "2026-01-02T05:00:00+02:00"
    store.start_run("r", {}, at=t0)
    store.log_event("r", "start", "step 0", at=t0)
    store.set_status("r", "stopped", at=t1)
    store.start_run("r", {}, resume=True, at="2026-01-03T00:00:00+00:00")
    store.set_status("r", "done", at=t1)
    r, ev = store.runs().iloc[0], store.events("r")
    assert r["started_at"] == pd.Timestamp(t0) and r["finished_at"] == pd.Timestamp(t1)
    assert str(r["finished_at"]) == "2026-01-02 03:00:00+00:00"  # stored in UTC
    assert ev["time"].tolist() == [pd.Timestamp(t0)]
    for bad in ("2026-01-02T03:04:05", "yesterday"):
        with pytest.raises(
            ValueError, match=f"at must be an ISO-8601 time with its zone, got {bad!r}"
        ):
            store.set_status("r", "done", at=bad)
    assert store.runs().iloc[0]["finished_at"] == pd.Timestamp(t1)  # nothing written


def test_unknown_runs_and_bad_values_raise_clearly(store):
    for call in (
        lambda: store.set_status("nope", "done"),
        lambda: store.log_metrics("nope", 1, {"x": 1.0}),
        lambda: store.log_eval("nope", 1, "val", 1024, 3.0, 10),
        lambda: store.log_alphas("nope", 1, [1.0]),
        lambda: store.log_event("nope", "info", "x"),
        lambda: store.config("nope"),
    ):
        with pytest.raises(KeyError) as e:
            call()
        assert isinstance(e.value, ValueError) and isinstance(e.value, UnknownRunError)
        assert "'nope'" in str(e.value)
    store.start_run("r", {})
    with pytest.raises(ValueError, match="status must be one of"):
        store.set_status("r", "finished")
    with pytest.raises(ValueError, match="'x'"):
        store.log_metrics("r", 1, {"x": "four"})
    with pytest.raises(ValueError, match="step"):
        store.log_metrics("r", 1.5, {"x": 1.0})
    assert count(store, "metrics") == 0  # a failed write leaves nothing


# -- metrics, evaluations, alphas, events ------------------------------------------------------


def test_metrics_round_trip_filters_and_replace(store):
    store.start_run("a", {})
    store.start_run("b", {})
    store.log_metrics("a", 10, {"train/loss": 4.5, "lr": 3e-4, "grad_norm": float("nan")})
    store.log_metrics("a", 20, {"train/loss": 4.0, "lr": 2e-4})
    store.log_metrics("b", 10, {"train/loss": 5.0})
    df = store.metrics()
    assert list(df.columns) == ["run", "step", "name", "value"] and len(df) == 6
    a = store.metrics("a", names="train/loss")
    assert list(a["step"]) == [10, 20] and list(a["value"]) == [4.5, 4.0]
    assert math.isnan(store.metrics("a", names=["grad_norm"])["value"].iloc[0])
    assert set(store.metrics(names=["lr", "train/loss"])["run"]) == {"a", "b"}

    store.log_metrics("a", 10, {"train/loss": 4.25, "lr": 3e-4})  # re-run replaces
    assert count(store, "metrics") == 6
    assert store.metrics("a", "train/loss")["value"].tolist() == [4.25, 4.0]


def test_evals_perplexity_is_exp_loss_and_replace(store):
    store.start_run("a", {})
    ppl = store.log_eval("a", 100, "val", 1024, loss=3.2, tokens=261_120)
    assert ppl == pytest.approx(math.exp(3.2), rel=1e-15)
    store.log_eval("a", 100, "val", 4096, loss=3.5, tokens=1_044_480, kind="posmatched")
    store.log_eval("a", 100, "val", 1024, loss=3.25, tokens=261_120, kind="light")
    df = store.evals("a")
    assert len(df) == 3 and (df["perplexity"] == df["loss"].map(math.exp)).all()
    row = df[(df.context_len == 4096)].iloc[0]
    assert (row["dataset"], row["kind"], row["tokens"], row["loss"]) == (
        "val",
        "posmatched",
        1_044_480,
        3.5,
    )
    store.log_eval("a", 100, "val", 1024, loss=3.0, tokens=100)  # same key: replaced
    df = store.evals()
    assert len(df) == 3 and count(store, "evaluations") == 3
    full = df[(df.kind == "recompute")].iloc[0]
    assert (full["loss"], full["tokens"]) == (3.0, 100)
    assert full["perplexity"] == pytest.approx(math.exp(3.0), rel=1e-15)
    assert store.log_eval("a", 1, "val", 8, loss=1e4, tokens=1) == math.inf


def test_alphas_long_format_and_replace(store):
    store.start_run("learned", {"schedule": "learned"})
    store.log_alphas("learned", 0, [0.55, 1.0, 1.45])
    store.log_alphas("learned", 50, [0.6, 1.01, float("nan")])
    df = store.alphas("learned")
    assert list(df.columns) == ["run", "step", "layer", "alpha"]
    assert list(zip(df.step, df.layer)) == [(0, 0), (0, 1), (0, 2), (50, 0), (50, 1), (50, 2)]
    assert df.alpha.iloc[:5].tolist() == [0.55, 1.0, 1.45, 0.6, 1.01]
    assert math.isnan(df.alpha.iloc[5])
    store.log_alphas("learned", 50, [0.7, 1.02, 1.4])
    assert count(store, "alphas") == 6
    assert store.alphas()[lambda d: d.step == 50].alpha.tolist() == [0.7, 1.02, 1.4]


def test_events_append_only(store):
    store.start_run("a", {})
    i = store.log_event("a", "checkpoint", "saved step 1000")
    j = store.log_event(None, "note", "store-wide")
    k = store.log_event("a", "checkpoint", "saved step 1000")  # same content: appended again
    assert i < j < k
    ev = store.events()
    assert ev["id"].tolist() == [i, j, k] and ev["kind"].tolist() == [
        "checkpoint",
        "note",
        "checkpoint",
    ]
    assert store.events("a")["message"].tolist() == ["saved step 1000"] * 2
    assert ev["time"].is_monotonic_increasing and str(ev["time"].dt.tz) == "UTC"
    with (
        sqlite3.connect(store.path) as c,
        pytest.raises(sqlite3.IntegrityError, match="append-only"),
    ):
        c.execute("UPDATE events SET message = 'x'")


# -- probes ------------------------------------------------------------------------------------


def test_probe_record_round_trip_and_relog_replaces(store):
    rec = probe_record()
    name = store.log_probe(rec)
    assert name == rec["key"]
    df = store.probes()
    assert df["distance"].tolist() == [5, 13] and df["accuracy"].tolist() == [0.9, 0.4]
    row = df.iloc[0]
    assert (
        row["run"],
        row["task"],
        row["mechanism"],
        row["depth"],
        row["init"],
        row["seed"],
        row["steps"],
    ) == (name, "marked", "learned", 2, "staggered", 1, 30)
    extra = json.loads(row["extra_json"])
    assert extra["seconds"] == 12.5 and extra["alphas"] == [0.61, 1.39]
    assert extra["settings"]["lr"] == 0.003
    al = store.alphas(name)
    assert al["step"].tolist() == [0, 0, 10, 10, 30, 30] and al["layer"].tolist() == [0, 1] * 3
    assert al["alpha"].tolist() == [0.55, 1.45, 0.58, 1.42, 0.61, 1.39]
    assert store.metrics(name, "loss")["value"].tolist() == [3.4, 2.9]
    run = store.runs().iloc[0]
    assert (run["kind"], run["status"], run["seed"]) == ("probe", "done", 1)
    assert store.config(name)["mechanism"] == "learned"

    counts = {t: count(store, t) for t in ("runs", "probe_results", "alphas", "metrics")}
    store.log_probe(probe_record(acc5=1.0, acc13=0.25, seconds=9.0))
    assert {t: count(store, t) for t in counts} == counts
    df = store.probes("marked")
    assert df["accuracy"].tolist() == [1.0, 0.25]
    assert json.loads(df["extra_json"].iloc[0])["seconds"] == 9.0
    assert store.probes("kv").empty and list(store.probes("kv").columns) == list(df.columns)


def test_probe_without_key_gets_a_derived_run_name(store):
    rec = probe_record()
    del rec["key"], rec["trajectory"]
    rec["acc"] = {"200": 0.5}
    name = store.log_probe(rec)
    assert name == "marked/learned/d2/staggered/s1/n30"
    assert store.alphas(name)["alpha"].tolist() == [0.61, 1.39]  # final α at step = steps
    with pytest.raises(ValueError, match="acc"):
        store.log_probe({k: v for k, v in rec.items() if k != "acc"})


# -- concurrency -------------------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sqlite3, sys, time
    from lab.store import Store
    path, run, other, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    s = Store(path)                      # both writers may create the file at the same moment
    s.start_run(run, {"writer": run})
    peek = sqlite3.connect(path, timeout=30)
    deadline = time.time() + 30
    for i in range(n):
        if i == n // 2:                  # hold half-way until the other writer has started too
            while time.time() < deadline and not peek.execute(
                    "SELECT count(*) FROM metrics m JOIN runs r ON r.id = m.run_id "
                    "WHERE r.name = ?", (other,)).fetchone()[0]:
                time.sleep(0.002)
        s.log_metrics(run, i, {"x": float(i)})        # one transaction per row
    s.close()
""")


def python(code, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, env=env)


def test_two_processes_writing_at_once_lose_no_rows(tmp_path):
    path, n = tmp_path / "fiblab.db", 300
    procs = [python(WRITER, path, "w1", "w2", n), python(WRITER, path, "w2", "w1", n)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    with Store(path) as s:
        df = s.metrics()
        assert len(df) == 2 * n
        for run in ("w1", "w2"):
            mine = df[df.run == run]
            assert mine["step"].tolist() == list(range(n)) and mine["value"].tolist() == list(
                map(float, range(n))
            )
        assert len(s.runs()) == 2


PAIR_WRITER = textwrap.dedent("""
    import sqlite3, sys, time
    from lab.store import Store
    path, n = sys.argv[1], int(sys.argv[2])
    s = Store(path)
    peek = sqlite3.connect(path, timeout=30)
    deadline = time.time() + 30
    for i in range(n):
        if i == n // 2:                  # go on once the reader has seen a half-written run
            while time.time() < deadline and not peek.execute(
                    "SELECT count(*) FROM events WHERE kind = 'reader-saw'").fetchone()[0]:
                time.sleep(0.002)
        s.log_metrics("pairs", i, {"a": float(i), "b": -float(i)})   # two rows, one transaction
    s.close()
""")


def test_reader_sees_only_whole_transactions_while_another_process_writes(tmp_path):
    path, n = tmp_path / "fiblab.db", 300
    with Store(path) as s:
        s.start_run("pairs", {})
        proc = python(PAIR_WRITER, path, n)
        seen, reads, signalled = set(), 0, False
        try:
            while True:
                done = proc.poll() is not None
                df = s.metrics("pairs")
                reads += 1
                assert len(df) % 2 == 0, f"reader saw half a transaction: {len(df)} rows"
                steps = df.groupby("step")["name"].apply(tuple)
                assert (steps == ("a", "b")).all()
                assert (
                    df[df.name == "a"]["value"].to_numpy()
                    == -df[df.name == "b"]["value"].to_numpy()
                ).all()
                seen.add(len(df))
                if 0 < len(df) < 2 * n and not signalled:
                    s.log_event("pairs", "reader-saw", f"{len(df)} rows")
                    signalled = True
                if done:
                    break
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.wait(timeout=60) == 0
        assert signalled and max(seen) == 2 * n and reads >= 2


def test_snapshot_holds_one_view_across_reader_calls(tmp_path):
    path = tmp_path / "fiblab.db"
    with Store(path) as reader, Store(path) as writer:
        writer.start_run("a", {})
        writer.log_metrics("a", 0, {"x": 1.0})
        with reader.snapshot():
            before = len(reader.metrics())
            writer.log_metrics("a", 1, {"x": 2.0})  # commits while the snapshot is open
            writer.log_alphas("a", 1, [1.0])
            assert len(reader.metrics()) == before == 1 and reader.alphas().empty
            with pytest.raises(RuntimeError, match="snapshot"):
                reader.log_event("a", "x", "y")
        assert len(reader.metrics()) == 2 and len(reader.alphas()) == 1


def test_version_1_store_migrates_keeping_rows_and_learns_stopped(tmp_path):
    """A store written by schema version 1 (no 'stopped' status) is rebuilt in place: every row
    survives, references still cascade, and 'stopped' becomes a valid status."""
    from lab.store.schema import MIGRATIONS, split_sql

    path = tmp_path / "v1.db"
    con = sqlite3.connect(path, isolation_level=None)
    for stmt in split_sql(MIGRATIONS[0]):
        con.execute(stmt)
    con.execute("PRAGMA user_version = 1")
    con.execute(
        "INSERT INTO runs (name, kind, status, created_at) "
        "VALUES ('a', 'lm', 'done', '2026-11-30T00:00:00Z')"
    )
    con.execute("INSERT INTO metrics (run_id, step, name, value) VALUES (1, 5, 'loss', 2.5)")
    con.execute("INSERT INTO alphas (run_id, step, layer, alpha) VALUES (1, 5, 0, 0.9)")
    with pytest.raises(sqlite3.IntegrityError):  # version 1 refuses the new status
        con.execute("UPDATE runs SET status = 'stopped'")
    con.close()
    with Store(path) as st:
        assert st.schema_version == SCHEMA_VERSION >= 2
        assert list(st.runs()["name"]) == ["a"]
        assert st.metrics("a")["value"].tolist() == [2.5]
        assert st.alphas("a")["alpha"].tolist() == [0.9]
        st.set_status("a", "stopped", "stopped by request at step 5")
        assert st.runs()["status"].tolist() == ["stopped"]
    con = sqlite3.connect(path)
    con.execute("PRAGMA foreign_keys = ON")
    con.execute("DELETE FROM runs WHERE name = 'a'")  # the children still follow their run
    assert con.execute("SELECT count(*) FROM metrics").fetchone()[0] == 0
    con.close()


def test_version_3_store_names_its_evaluation_kinds_as_the_cli_does(tmp_path):
    """A store of schema 3 said 'full' / 'frozen' for the rung policies; opening it rewrites
    every such kind (alone and before ':block{j}') to 'recompute' / 'freeze', leaves every other
    kind and value as it was, and the rows parse as the kinds the tables read."""
    from lab.store.evalkind import EvalKind, Family
    from lab.store.schema import MIGRATIONS, split_sql

    path = tmp_path / "v3.db"
    con = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:3]:
        for stmt in split_sql(script):
            con.execute(stmt)
    con.execute("PRAGMA user_version = 3")
    con.execute(
        "INSERT INTO runs (name, kind, status, created_at) "
        "VALUES ('a', 'lm', 'done', '2026-11-30T00:00:00Z')"
    )
    old = ["full", "frozen", "full:block0", "frozen:block12", "bin3", "light", "fullish"]
    for i, kind in enumerate(old):
        con.execute(
            "INSERT INTO evaluations (run_id, step, dataset, context_len, kind, loss, perplexity,"
            " tokens, logged_at) VALUES (1, 5, 'd', 64, ?, ?, ?, 100, '2026-11-30T00:00:00Z')",
            (kind, 0.1 * i, math.exp(0.1 * i)),
        )
    con.close()
    with Store(path) as st:
        assert st.schema_version == SCHEMA_VERSION >= 4
        ev = st.evals("a").sort_values("loss")
        want = ["recompute", "freeze", "recompute:block0", "freeze:block12", "bin3", "light"]
        assert ev["kind"].tolist() == want + ["fullish"]  # an unknown text is left alone
        assert ev["loss"].tolist() == pytest.approx([0.1 * i for i in range(len(old))])
        assert EvalKind.parse(ev["kind"].iloc[3]) == EvalKind(Family.FREEZE, 12)
        st.log_eval("a", 6, "d", 64, 0.5, 10)  # the default kind is the paper's policy
        assert st.evals("a").query("step == 6")["kind"].tolist() == ["recompute"]
    # a process started before the upgrade still writes the old words into its open store
    con = sqlite3.connect(path, isolation_level=None)
    old_writer = (
        "INSERT INTO evaluations (run_id, step, dataset, context_len, kind, loss, perplexity,"
        " tokens, logged_at) VALUES (1, 7, 'd', 64, ?, ?, 1.0, 100, '2026-12-05T00:00:00Z')"
        " ON CONFLICT (run_id, step, dataset, context_len, kind) DO UPDATE SET loss = excluded.loss"
    )
    for kind, loss in (("full:block2", 0.7), ("frozen", 0.8), ("full:block2", 0.9)):
        con.execute(old_writer, (kind, loss))
    con.close()
    with Store(path) as st:
        got = st.evals("a").query("step == 7").sort_values("kind")
        assert got["kind"].tolist() == ["freeze", "recompute:block2"]
        assert got["loss"].tolist() == pytest.approx([0.8, 0.9])  # written again: replaced


def test_the_schema_builds_exactly_its_tables(tmp_path):
    """A new store holds the tables `TABLES` names (no more, no fewer)."""
    with Store(tmp_path / "t.db") as st:
        path = st.path
    with sqlite3.connect(path) as c:
        names = [
            r[0]
            for r in c.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
    assert (
        sorted(names)
        == sorted(TABLES)
        == sorted(
            [
                "runs",
                "metrics",
                "evaluations",
                "alphas",
                "probe_results",
                "battery_results",
                "events",
            ]
        )
    )
