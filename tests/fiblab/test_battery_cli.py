"""`fiblab battery RUN …` on a real tiny trained run: the store gets one row per (run, task, n,
seed) whose counts match a recount of the model's forced choices by hand, scoring again replaces
rather than duplicates, the "at chance" label follows an exact binomial tail, an old store
migrates, ``--json`` is strict JSON, and bad input is one line (exit 2) with nothing written."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from fractions import Fraction
from math import comb

import pytest
import torch

from fiblab.cli import main
from lab.publish.export import run_model
from lab.store import Store
from lab.store.schema import MIGRATIONS, SCHEMA_VERSION, split_sql
from lab.training.train import train
from lab.training.trainconfig import make_config
from probes.battery import Alphabet, lego_batch, ruler_vt_batch
from probes.battery_run import ALPHA, chance_test, rows_of

WORDS = "in the beginning god created heaven and earth light darkness water day night".split()
RUN = "tiny-bat"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """runs/tiny-bat: the tiny preset (vocab 512, T=64) trained 2 steps, with its store."""
    runs = tmp_path_factory.mktemp("runs")
    rng = random.Random(0)
    text = runs / "text.txt"
    text.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(1500)))
    over = {"run_dir": str(runs), "data": str(text), "steps": 2, "ckpt_every": 2}
    cfg = make_config("tiny", {**over, "eval_every": 0, "name": RUN})
    train(cfg, store_path=str(runs / "fiblab.db"), quiet=True)
    return runs


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _rows(path) -> list[tuple]:
    """The battery table's rows straight from SQLite (not through the reader)."""
    with sqlite3.connect(path) as c:
        rows = c.execute(
            "SELECT r.name, b.task, b.n, b.seed, b.step, b.items, b.correct, b.accuracy, "
            "b.chance, b.p_value, b.at_chance, b.by_length_json, b.logged_at "
            "FROM battery_results b JOIN runs r ON r.id = b.run_id ORDER BY b.task, b.n, b.seed"
        ).fetchall()
    c.close()
    return rows


def _recount(run_dir, n: int, seed: int) -> dict:
    """{task: {size: correct}} by hand: the documented per-cell seeds, the model's last logits,
    and an item counted right when the answer's logit beats every other candidate's."""
    model = run_model(str(run_dir), "cpu", log=lambda *a: None).model
    a = Alphabet(model.cfg.vocab_size)
    out = {}
    tasks = (("ruler_vt", (2, 3, 4)), ("lego", (2, 3, 4)), ("assoc_recall", (12,)))
    for t, (task, sizes) in enumerate(tasks):
        out[task] = {}
        for size in sizes:
            g = torch.Generator().manual_seed(seed * 1000 + 100 * t + size)
            if t == 0:
                b = ruler_vt_batch(n, size, a, generator=g)
            elif t == 1:
                b = lego_batch(n, size, a, generator=g)
            else:  # recall: one hop of variable tracking, size − 1 distractor pairs
                b = ruler_vt_batch(n, 1, a, size - 1, generator=g)
            with torch.no_grad():
                logits = model(b.x)[0][:, -1].double().numpy()  # (n, V)
            right = 0
            for row, cands, ans in zip(logits, b.candidates.tolist(), b.answer.tolist()):
                others = [row[c] for c in cands if c != ans]
                right += all(row[ans] > o for o in others)
            out[task][size] = right
    return out


def _tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), in exact fractions."""
    q = Fraction(p)
    return float(sum(comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k, n + 1)))


def test_battery_writes_the_store_with_counts_a_recount_gives(trained, capsys):
    runs = trained
    store = runs / "fiblab.db"
    rc, out, err = run(
        capsys, "battery", RUN, "--runs", runs, "--store", store, "--n", 6, "--seed", 3
    )
    assert rc == 0, err
    assert "ruler_vt" in out and "lego" in out and "assoc_recall" in out and "stored in" in out
    rows = [r for r in _rows(store) if r[3] == 3]
    assert [r[1] for r in rows] == ["assoc_recall", "lego", "ruler_vt"]
    by_hand = _recount(runs / RUN, 6, 3)
    step = run_model(str(runs / RUN), "cpu", log=lambda *a: None).step
    for name, task, n, seed, st, items, correct, acc, chance, *_rest in rows:
        k = 6 if task == "assoc_recall" else 18  # one size of recall, three chain lengths
        assert (name, n, seed, st, items) == (RUN, 6, 3, step, k)
        assert correct == sum(by_hand[task].values())
        assert acc == correct / k
        assert chance == {"ruler_vt": 1 / 9, "lego": 0.5, "assoc_recall": 1 / 12}[task]
        tag = {"ruler_vt": "h", "lego": "L", "assoc_recall": "p"}[task]
        per = json.loads(_rest[2])
        assert per == {f"{tag}{s}": c / 6 for s, c in by_hand[task].items()}
    with Store(store) as st:  # the reader the claims ledger uses: the same numbers
        df = st.battery(RUN)
    df = df[df["seed"] == 3].sort_values("task")
    assert df["correct"].tolist() == [r[6] for r in rows]
    assert df["at_chance"].tolist() == [bool(r[10]) for r in rows]
    assert str(df.dtypes["at_chance"]) == "bool"


def test_a_rerun_replaces_and_another_seed_adds(trained, capsys, tmp_path):
    runs = trained
    store = tmp_path / "s.db"
    argv = ["battery", runs / RUN, "--store", store, "--n", 4, "--seed", 1]
    assert run(capsys, *argv)[0] == 0
    first = _rows(store)
    assert len(first) == 3
    assert run(capsys, *argv)[0] == 0
    second = _rows(store)
    assert len(second) == 3
    assert [r[:-1] for r in second] == [r[:-1] for r in first]  # same numbers, one row each
    assert all(b[-1] > a[-1] for a, b in zip(first, second))  # rewritten, not kept
    assert run(capsys, "battery", runs / RUN, "--store", store, "--n", 4, "--seed", 2)[0] == 0
    assert len(_rows(store)) == 6
    with Store(store) as st:  # a run folder the store did not hold is registered first
        r = st.runs()
    assert r["name"].tolist() == [RUN] and r["status"].tolist() == ["done"]


def test_the_chance_label_is_the_exact_binomial_tail(trained, capsys, tmp_path):
    store = tmp_path / "s.db"
    assert run(capsys, "battery", trained / RUN, "--store", store, "--n", 10)[0] == 0
    for *_h, items, correct, _acc, chance, p, at, _per, _t in _rows(store):
        assert p == pytest.approx(_tail(correct, items, chance), rel=1e-9, abs=1e-12)
        assert bool(at) == (_tail(correct, items, chance) >= ALPHA)
    # where the label flips, by hand: 100 fair coins, 58 heads p = 0.0666, 59 heads p = 0.0443
    assert _tail(58, 100, 0.5) > ALPHA > _tail(59, 100, 0.5)
    for k in (58, 59):
        p, at = chance_test(k, 100, 0.5)
        assert p == pytest.approx(_tail(k, 100, 0.5), rel=1e-9) and at == (k == 58)
    # RULER's 1/9: 30 right of 150 is above chance (tail ≈ 4e-4), 20 right is not
    assert chance_test(30, 150, 1 / 9)[1] is False and chance_test(20, 150, 1 / 9)[1] is True


def test_rows_of_counts_a_hand_built_report():
    report = {
        "ruler_vt": {
            "acc": 0.5,
            "acc_h2": 1.0,
            "acc_h3": 0.5,
            "acc_h4": 0.0,
            "chance": 1 / 9,
            "n": 12,
        },
        "lego": {"acc": 0.25, "acc_L2": 0.25, "acc_L3": 0.5, "acc_L4": 0.0, "chance": 0.5, "n": 12},
    }
    rv, lego = rows_of(report, 4, 0, 7, {"version": 1})
    assert (rv.correct, rv.items, rv.accuracy, rv.step) == (6, 12, 0.5, 7)
    assert (lego.correct, lego.accuracy) == (3, 0.25)
    assert lego.at_chance and not rv.at_chance  # 6 of 12 at 1/9: tail ≈ 0.0004
    assert rows_of({"skipped": "too short"}, 4, 0, 7, {}) == []
    with pytest.raises(ValueError, match="n=5"):
        rows_of(report, 5, 0, 7, {})


@pytest.mark.parametrize("version", [1, 2])
def test_an_old_store_migrates_and_takes_battery_rows(trained, capsys, tmp_path, version):
    path = tmp_path / f"v{version}.db"
    con = sqlite3.connect(path, isolation_level=None)
    for i in range(version):
        for stmt in split_sql(MIGRATIONS[i]):
            con.execute(stmt)
    con.execute(f"PRAGMA user_version = {version}")
    con.execute(
        "INSERT INTO runs (name, kind, status, created_at) "
        "VALUES ('old', 'lm', 'done', '2026-11-30T00:00:00Z')"
    )
    con.execute("INSERT INTO metrics (run_id, step, name, value) VALUES (1, 5, 'loss', 2.5)")
    con.close()
    with Store(path) as st:
        assert st.schema_version == SCHEMA_VERSION >= 3
        assert st.battery().empty and st.metrics("old")["value"].tolist() == [2.5]
    assert run(capsys, "battery", trained / RUN, "--store", path, "--n", 2)[0] == 0
    with Store(path) as st:
        assert sorted(st.battery()["task"]) == ["assoc_recall", "lego", "ruler_vt"]
        assert st.runs()["name"].tolist() == ["old", RUN]
    con = sqlite3.connect(path)
    con.execute("PRAGMA foreign_keys = ON")
    con.execute(f"DELETE FROM runs WHERE name = '{RUN}'")  # its battery rows follow the run
    assert con.execute("SELECT count(*) FROM battery_results").fetchone()[0] == 0
    con.close()


def test_json_is_strict_and_matches_the_store(trained, capsys, tmp_path):
    store = tmp_path / "s.db"
    rc, out, err = run(
        capsys, "battery", RUN, "--runs", trained, "--store", store, "--n", 3, "--json"
    )
    assert rc == 0, err

    def refuse(name):
        raise ValueError(f"non-JSON constant {name}")

    doc = json.loads(out, parse_constant=refuse)
    assert [d["run"] for d in doc] == [RUN]
    got = {(r["task"], r["correct"], r["items"], r["at_chance"]) for r in doc[0]["rows"]}
    want = {(r[1], r[6], r[5], bool(r[10])) for r in _rows(store)}
    assert got == want and len(got) == 3
    assert all(r["version"] == 1 and r["settings"]["hops"] == [2, 3, 4] for r in doc[0]["rows"])


def _one_error_line(rc, err, needle):
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("fiblab: error: "), err
    assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["{run}", "nope"], "'nope' is neither a folder nor a run"),
        (["{empty}"], "no checkpoint (ckpt_<step>.pt)"),
        (["{tmp}"], "is not a training run folder"),
        (["{run}", "--n", "0"], "--n 0 must be >= 1"),
        (["{run}", "--seed", "-1"], "--seed -1 must be >= 0"),
    ],
)
def test_bad_input_is_exit_2_with_one_line_and_nothing_written(
    trained, tmp_path, capsys, argv, needle
):
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(trained / RUN / "config.json", empty / "config.json")
    sub = {"{run}": str(trained / RUN), "{empty}": str(empty), "{tmp}": str(tmp_path)}
    argv = [sub.get(a, a) for a in argv]
    store = tmp_path / "s.db"
    rc, _, err = run(capsys, "battery", *argv, "--store", store, "--runs", trained)
    _one_error_line(rc, err, needle)
    assert not store.exists()  # nothing written, not even an empty store
