"""The store under the worst moments: a writer SIGKILLed inside its transaction leaves the file
readable with none of that transaction in it, and two writers starting the same run name share
one row (an upsert: the later start's config wins) with nothing lost or duplicated."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lab.store import Store

ROOT = Path(__file__).resolve().parents[2]


def python(code, *args, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, env=env, **kw)


def probe(acc_scale, n=400, layers=8):
    """A probe record with n distances, a trajectory of 50 steps × `layers` α and 50 losses."""
    return {
        "key": "marked/blur/d8/staggered/s0",
        "task": "marked",
        "mechanism": "blur",
        "depth": 8,
        "init": "staggered",
        "seed": 0,
        "steps": 50,
        "acc": {str(d): acc_scale * d / n for d in range(1, n + 1)},
        "trajectory": [
            {"step": s, "alphas": [acc_scale + s + la / 10 for la in range(layers)]}
            for s in range(50)
        ],
        "loss": [{"step": s, "loss": acc_scale * 10 - s / 10} for s in range(50)],
    }


# The child: a Store whose connection SIGKILLs its own process when the statement `argv[3]`
# starts for the `argv[4]`-th time (sqlite3's public trace callback); a small page cache makes
# SQLite spill the uncommitted pages into the WAL file first, so half a transaction is on disk.
KILLED_WRITER = textwrap.dedent("""
    import json, os, signal, sys
    from lab.store import Store
    path, what, needle, nth = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    seen = [0]
    def hook(sql):
        if sql.lstrip().startswith(needle):
            seen[0] += 1
            if seen[0] == nth:
                os.kill(os.getpid(), signal.SIGKILL)
    class Killable(Store):
        def _open(self):
            conn = super()._open()
            conn.execute("PRAGMA cache_size = 2")
            conn.set_trace_callback(hook)
            return conn
    s = Killable(path)
    payload = json.loads(sys.stdin.read())
    if what == "probe":
        s.log_probe(payload)
    else:
        s.log_metrics("run", 1, payload)
    print("committed")                   # never reached when the hook fires
""")


def kill_inside(path, what, needle, nth, payload):
    import json

    proc = python(
        KILLED_WRITER, path, what, needle, nth, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    out, _ = proc.communicate(json.dumps(payload).encode(), timeout=120)
    return proc.returncode, out


def wal_size(path):
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def assert_whole_and_writable(path):
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with Store(path, timeout=2) as s:  # no lock left behind by the dead writer
        s.log_event(None, "after-crash", "a new write goes through")


@pytest.mark.parametrize("needle", ["INSERT INTO alphas", "INSERT INTO metrics"])
def test_probe_writer_killed_inside_its_transaction_leaves_the_old_record(tmp_path, needle):
    """log_probe replaces a record: DELETE the old rows, INSERT the new.  Killed after the
    deletes (and after the new accuracies are in): the old record, whole, is what remains."""
    path = tmp_path / "fiblab.db"
    old, new = probe(1.0), probe(2.0)
    with Store(path) as s:
        s.log_probe(old)
        before = (s.probes(), s.alphas(), s.metrics(), s.runs())
    wal0 = wal_size(path)
    rc, out = kill_inside(path, "probe", needle, 1, new)
    assert rc == -signal.SIGKILL and b"committed" not in out
    assert wal_size(path) > wal0  # the uncommitted half did reach the disk
    with Store(path) as s:
        after = (s.probes(), s.alphas(), s.metrics(), s.runs())
    for a, b in zip(before, after):
        assert a.equals(b)
    assert len(after[0]) == 400 and len(after[1]) == 50 * 8 and len(after[2]) == 50
    assert after[0]["accuracy"].tolist() == [d / 400 for d in range(1, 401)]  # old values
    assert_whole_and_writable(path)
    with Store(path) as s:  # the record can be logged again, and then it is the new one
        s.log_probe(new)
        assert s.probes()["accuracy"].tolist() == [2 * d / 400 for d in range(1, 401)]


def test_metrics_writer_killed_half_way_through_its_rows_leaves_none_of_them(tmp_path):
    path = tmp_path / "fiblab.db"
    with Store(path) as s:
        s.start_run("run", {})
        s.log_metrics("run", 0, {"loss": 3.0})
    rc, out = kill_inside(
        path, "metrics", "INSERT INTO metrics", 2500, {f"m{i}": float(i) for i in range(5000)}
    )
    assert rc == -signal.SIGKILL and b"committed" not in out
    with Store(path) as s:
        m = s.metrics()
        assert (m["step"].tolist(), m["name"].tolist(), m["value"].tolist()) == (
            [0],
            ["loss"],
            [3.0],
        )
    assert_whole_and_writable(path)


# Two processes start the SAME run name and log at once: both the shared metric `x` (the same
# keys: each (step, name) is one row, whoever wrote it last) and one metric of their own.
SAME_NAME_WRITER = textwrap.dedent("""
    import sqlite3, sys, time
    from lab.store import Store
    path, me, other, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    s = Store(path)
    s.start_run("shared", {"writer": me})
    s.log_event("shared", "start", me)
    peek = sqlite3.connect(path, timeout=30)
    deadline = time.time() + 30
    for i in range(n):
        if i == n // 2:                  # hold half-way until the other writer has started too
            while time.time() < deadline and not peek.execute(
                    "SELECT count(*) FROM metrics WHERE name = ?", (other,)).fetchone()[0]:
                time.sleep(0.002)
        s.log_metrics("shared", i, {"x": 1000.0 * int(me[1]) + i, me: float(i)})
    s.close()
""")


def test_two_writers_on_one_run_name_share_one_row_and_lose_nothing(tmp_path):
    path, n = tmp_path / "fiblab.db", 200
    procs = [
        python(SAME_NAME_WRITER, path, "w1", "w2", n),
        python(SAME_NAME_WRITER, path, "w2", "w1", n),
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with Store(path) as s:
        runs = s.runs()
        assert runs["name"].tolist() == ["shared"]  # one row: start_run is an upsert
        assert s.config("shared")["writer"] in ("w1", "w2")
        m = s.metrics("shared")
        assert len(m) == 3 * n and not m.duplicated(["step", "name"]).any()
        for me in ("w1", "w2"):  # each writer's own metric: every step, its values
            mine = m[m.name == me].sort_values("step")
            assert mine["step"].tolist() == list(range(n))
            assert mine["value"].tolist() == [float(i) for i in range(n)]
        x = m[m.name == "x"].sort_values("step")
        assert x["step"].tolist() == list(range(n))  # one value a step, from one of the two
        assert all(v - i in (1000.0, 2000.0) for i, v in zip(x["step"], x["value"]))
        ev = s.events("shared")
        assert sorted(ev[ev.kind == "start"]["message"]) == ["w1", "w2"]  # events append
