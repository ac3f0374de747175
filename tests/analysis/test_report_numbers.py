"""The numbers of `fiblab report` against the store's raw rows, and failures that stay failures.

The store is the synthetic fixture (`fixture_store.write_fixture`) plus a third fib/stagger seed
whose values are far from the other two (so a median, or a mean over two of the three seeds, is
visibly wrong) and whose step-20 rows must be ignored. The oracle reads the evaluations with plain
SQL and averages them with the `statistics` module: no table code is involved. A table builder
that raises anything but `TableUnavailable` must fail the report, never print "not available".
"""

import contextlib
import io
import json
import math
import sqlite3
import statistics

import pytest
from fixture_store import smoke_store

from analysis.reports.results import build_report
from analysis.tables import position as tables_position
from analysis.tables import ppl as tables_ppl
from analysis.tables import seeds as tables_seeds
from fiblab.cli import main
from lab.store import Store

T = 64  # the fixture's training length
STEP = 40  # its last step
LABEL = {"fixed": "fib/fixed", "stagger": "fib/stagger", "learned": "fib/learned", "dense": "dense"}

#: The third stagger seed, by hand: (context_len, kind) → mean NLL at the last step.
EXTRA = {
    (T, "recompute"): 3.60,
    (2 * T, "recompute"): 3.50,
    (4 * T, "recompute"): 3.45,
    (2 * T, "freeze"): 3.55,
    (4 * T, "freeze"): 3.52,
    **{(4 * T, f"recompute:block{j}"): 3.70 - 0.05 * j for j in range(4)},
    **{(T, f"bin{b}"): 4.10 - 0.07 * b for b in range(8)},
}


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = smoke_store(str(tmp_path_factory.mktemp("numbers") / "fx.db"))
    with Store(path) as s:
        cfg = s.config("smoke-stagger-s0")
        cfg = {**cfg, "seed": 2, "name": "smoke-stagger-s2"}
        s.start_run("smoke-stagger-s2", cfg, kind="lm", preset="tiny", seed=2, git_rev="fixture")
        s.log_eval("smoke-stagger-s2", STEP // 2, "bible", T, 9.0, 64 * T)  # not the last step
        for (ctx, kind), loss in EXTRA.items():
            s.log_eval("smoke-stagger-s2", STEP, "bible", ctx, loss, 64 * T, kind=kind)
        s.set_status("smoke-stagger-s2", "done")
    return path


@pytest.fixture(scope="module")
def raw(store_path):
    """{(run, step, context_len, kind): loss} of every evaluation, read with plain SQL."""
    with sqlite3.connect(store_path) as c:
        rows = c.execute(
            "SELECT r.name, e.step, e.context_len, e.kind, e.loss FROM evaluations e "
            "JOIN runs r ON r.id = e.run_id WHERE e.dataset = 'bible'"
        ).fetchall()
    c.close()
    return {(n, s, ctx, k): loss for n, s, ctx, k, loss in rows}


@pytest.fixture(scope="module")
def tables(store_path):
    """Every table of `fiblab report --json` on the store, by name."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", "--store", store_path, "--json"]) == 0
    return json.loads(out.getvalue())


def runs_of(raw, schedule: str) -> list[str]:
    return sorted({n for n, *_ in raw if n.startswith(f"smoke-{schedule}-s")})


def ppl(raw, run: str, ctx: int = T, kind: str = "recompute") -> float:
    return math.exp(raw[(run, STEP, ctx, kind)])


def close(printed, value: float, decimals: int) -> bool:
    """``printed`` is ``value`` rounded to ``decimals`` (half a unit of the last digit)."""
    return printed is not None and abs(printed - value) <= 0.5 * 10**-decimals + 1e-9


def row(table: list[dict], **where) -> dict:
    hits = [r for r in table if all(r.get(k) == v for k, v in where.items())]
    assert len(hits) == 1, (where, table)
    return hits[0]


def test_the_oracle_store_has_three_uneven_stagger_seeds(raw):
    per_seed = [ppl(raw, r) for r in runs_of(raw, "stagger")]
    assert len(per_seed) == 3
    assert abs(statistics.mean(per_seed) - statistics.median(per_seed)) > 1.0


def test_final_ppl_is_each_runs_last_full_evaluation_at_T(raw, tables):
    printed = {r["run"]: r for r in tables["final_ppl"]}
    names = sorted({n for n, *_ in raw})
    assert sorted(printed) == names
    for name in names:
        assert printed[name]["step"] == STEP
        assert close(printed[name]["perplexity"], ppl(raw, name), 2), name


def test_table1_is_the_mean_over_distinct_seeds(raw, tables):
    for schedule in ("fixed", "stagger", "learned"):
        seeds = [ppl(raw, r) for r in runs_of(raw, schedule)]
        r = row(tables["table1"], base="fib", schedule=schedule, W=8)
        assert r["seeds"] == len(seeds)
        assert close(r["bible"], statistics.mean(seeds), 2), schedule
    assert all(r["schedule"] != "dense" for r in tables["table1"])  # no window: left out


def test_table5_mean_and_both_stds(raw, tables):
    for schedule in ("fixed", "stagger"):
        seeds = [ppl(raw, r) for r in runs_of(raw, schedule)]
        r = row(tables["table5"], config=LABEL[schedule], W=8)
        assert r["n"] == len(seeds)
        for i, v in enumerate(seeds):
            assert close(r[f"seed{i}"], v, 3)
        assert close(r["mean"], statistics.mean(seeds), 3)
        assert close(r["std"], statistics.stdev(seeds), 3)
        assert close(r["std_pop"], statistics.pstdev(seeds), 3)


def test_table3_lengths_policies_blocks_and_change(raw, tables):
    for schedule in ("fixed", "stagger", "learned"):
        names = runs_of(raw, schedule)
        r = row(tables["table3"], model=LABEL[schedule], W=8)
        b = row(tables["table3_blocks"], model=LABEL[schedule], W=8)
        assert r["seeds"] == len(names)
        mean = {L: statistics.mean(ppl(raw, n, L) for n in names) for L in (T, 2 * T, 4 * T)}
        for L, v in mean.items():
            assert close(r[f"ppl_T{L}"], v, 2)
        for L in (2 * T, 4 * T):
            assert close(
                r[f"frozen_ppl_T{L}"], statistics.mean(ppl(raw, n, L, "freeze") for n in names), 2
            )
        assert close(r["change_at_4x_percent"], 100 * (mean[4 * T] / mean[T] - 1), 2)
        for j in range(4):
            v = statistics.mean(ppl(raw, n, 4 * T, f"recompute:block{j}") for n in names)
            assert close(b[f"ppl_T256_block{j}"], v, 2)


def test_table4_bins_are_mean_nll_and_the_gap_is_fixed_minus_stagger(raw, tables):
    means = {}
    for schedule in ("fixed", "stagger", "learned", "dense"):
        names = runs_of(raw, schedule)
        r = row(tables["table4"], schedule=LABEL[schedule])
        assert r["seeds"] == len(names)
        means[schedule] = [
            statistics.mean(raw[(n, STEP, T, f"bin{b}")] for n in names) for b in range(8)
        ]
        for b in range(8):
            assert close(r[f"b{b}"], means[schedule][b], 3), (schedule, b)
    gap = row(tables["table4"], schedule="fib/fixed - fib/stagger")
    for b in range(8):
        assert close(gap[f"b{b}"], means["fixed"][b] - means["stagger"][b], 3)


def test_table2_accuracy_and_alpha_range_from_the_probe_rows(store_path, tables):
    with sqlite3.connect(store_path) as c:
        acc = c.execute("SELECT init, distance, accuracy FROM probe_results").fetchall()
        alphas = c.execute(
            "SELECT p.init, a.step, a.alpha FROM alphas a "
            "JOIN (SELECT DISTINCT run_id, init FROM probe_results) p ON p.run_id = a.run_id"
        ).fetchall()
    c.close()
    assert len(acc) == 4
    for init, d, a in acc:
        assert close(row(tables["table2"], init=init)[f"acc_at_{d}"], a, 3)
    for init in ("uniform", "staggered"):
        last = max(s for i, s, _ in alphas if i == init)
        final = [a for i, s, a in alphas if i == init and s == last]
        assert len(final) == 2  # depth 2: one α per layer
        r = row(tables["table2"], init=init)
        assert close(r["learned_alpha_min"], min(final), 3)
        assert close(r["learned_alpha_max"], max(final), 3)


def test_a_complete_store_has_every_section(store_path):
    with Store(store_path) as s:
        md = build_report(s).markdown()
    assert "not available" not in md


def test_a_section_without_data_says_why(tmp_path):
    """Dense runs only: Table 1 (sparse runs) and Table 4's gap have nothing to show, and the
    report says why instead of failing."""
    path = smoke_store(str(tmp_path / "fx.db"))
    with Store(path) as s:
        md = build_report(s, runs=["smoke-dense-s0"]).markdown()
    assert "*Table 1 layout: not available — Table 1 needs" in md


@pytest.mark.parametrize(
    "module, builder, error",
    [
        (tables_ppl, "table1_from_store", KeyError("W")),
        (tables_position, "table4_from_store", ValueError("bins out of order")),
        (tables_seeds, "table5_from_store", ValueError("std of nothing")),
    ],
)
def test_a_builder_bug_fails_the_report(store_path, monkeypatch, module, builder, error):
    def broken(*a, **k):
        raise error

    monkeypatch.setattr(module, builder, broken)
    with Store(store_path) as s, pytest.raises(type(error)):
        build_report(s)


def test_report_refuses_a_dataset_and_probes_it_cannot_read(store_path, tmp_path, capsys):
    """`--dataset bogus` left Table 5 out of the JSON silently, `--probes notes.txt` the probe
    tables: each is one line naming the value, exit 2, no report folder."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    out = tmp_path / "rep"
    for extra, needle in [
        (
            ["--dataset", "bogus"],
            "dataset 'bogus' has no evaluation in the store: use one of bible",
        ),
        (["--probes", str(notes)], f"--probes {str(notes)!r} is not a probe results file"),
    ]:
        assert main(["report", "--store", store_path, "--out", str(out), *extra]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], lines
        assert not out.exists() and notes.read_text() == "mine\n"
