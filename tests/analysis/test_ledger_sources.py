"""Where the claims ledger's evidence comes from, each path worked out by hand: a store's LM runs
on two token bases and several datasets, its battery rows, its probe cells beside record files
and grid files, stored attention timings, the main job's numbers merged into a store's runs, and
how runs are ranked into scales (`analysis.ledger.evidence`)."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.experiments.demo import evidence as de
from analysis.ledger import evidence as le
from lab.store import Store

sys.path.insert(0, str(Path(__file__).parents[1]))
from fixture_store import write_fixture  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
T = 64


def _config(name, schedule="fixed", n_layers=4, attention="sparse", steps=40, **model):
    return {
        "name": name,
        "steps": steps,
        "data": "fineweb_edu",
        "model": {
            "d_model": 32,
            "n_layers": n_layers,
            "n_heads": 4,
            "n_kv_heads": 2,
            "vocab_size": 512,
            "seq_len": T,
            "attention": attention,
            "base": "fib",
            "rungs": 8,
            "window": 8,
            "schedule": schedule,
            **model,
        },
    }


def _battery_row(task="ruler-vt", correct=30, items=100, at_chance=False):
    return {
        "task": task, "n": 1, "seed": 0, "step": 40, "items": items, "correct": correct,
        "chance": 0.25, "p_value": 0.5, "at_chance": at_chance, "version": 1,
        "settings": {}, "by_length": {},
    }  # fmt: skip


def _write_store(path: str) -> None:
    """Three runs, inserted in a non-alphabetical order:

    * ``zeta-fixed``: evaluated on 'bible' and 'fineweb_edu' (the ledger reads fineweb_edu);
      its whole-stream row at T scored 1000 tokens, its rows at 2T 200 tokens with a one-block
      row at T on those same 200 tokens (the same-token basis); 11 position bins logged in
      reverse order; α logged though its schedule is fixed (no drift); a battery row.
    * ``alpha-coprime``: coprime at 4 layers (the stagger's α: no claim compares it) on 'wiki'.
    * ``mid-one-row``: one evaluation only, at 2T, no seed, no window (dense).
    """
    with Store(path) as s:
        s.start_run("zeta-fixed", _config("zeta-fixed"), seed=3, git_rev="t")
        for ds, shift in (("bible", 2.0), ("fineweb_edu", 0.0)):
            s.log_eval("zeta-fixed", 40, ds, T, 3.0 + shift, 1000)
            s.log_eval("zeta-fixed", 40, ds, T, 3.1 + shift, 200, kind="recompute:block0")
            s.log_eval("zeta-fixed", 40, ds, 2 * T, 3.2 + shift, 200)
            s.log_eval("zeta-fixed", 40, ds, T, 3.05 + shift, 1000, kind="freeze")
            s.log_eval("zeta-fixed", 40, ds, T, 3.15 + shift, 200, kind="freeze:block0")
            s.log_eval("zeta-fixed", 40, ds, 2 * T, 3.25 + shift, 200, kind="freeze")
            s.log_eval("zeta-fixed", 40, ds, 3 * T // 2, 9.0, 200)  # not a multiple of T
        for b in reversed(range(11)):
            s.log_eval("zeta-fixed", 40, "fineweb_edu", T, 4.0 - 0.1 * b, 64, kind=f"bin{b}")
        s.log_alphas("zeta-fixed", 10, [1.0, 1.0, 1.0, 1.0])
        s.log_alphas("zeta-fixed", 40, [1.3, 1.0, 1.0, 1.0])
        s.log_battery("zeta-fixed", _battery_row())
        s.set_status("zeta-fixed", "done")
        s.start_run("alpha-coprime", _config("alpha-coprime", "coprime"), seed=0, git_rev="t")
        s.log_eval("alpha-coprime", 40, "wiki", T, 2.5, 1000)
        s.log_eval("alpha-coprime", 40, "bible", T, 2.6, 1000)
        s.set_status("alpha-coprime", "done")
        s.start_run("mid-one-row", _config("mid-one-row", attention="dense"), git_rev="t")
        s.log_eval("mid-one-row", 40, "wiki", 2 * T, 2.0, 1000)
        s.set_status("mid-one-row", "done")


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("sources") / "s.db")
    _write_store(path)
    return path


def test_store_runs_read_their_dataset_their_token_basis_and_their_bins(store_path):
    with Store(store_path) as st:
        (tier,) = le.from_store(st).of("lm")
    assert [r.name for r in tier.lms] == ["zeta-fixed", "alpha-coprime", "mid-one-row"]
    z, c, m = tier.lms
    assert (z.label, z.W, z.seed) == ("fib/fixed", 8, 3)
    # fineweb_edu, not 'bible' (first in sorted order): the whole stream's ppl at T …
    assert z.ppl == pytest.approx(math.exp(3.0))
    # … but ppl(2T)/ppl(T) on the same 200 tokens: the one-block row stands in at T
    assert z.ext == pytest.approx({1: math.exp(3.1), 2: math.exp(3.2)})
    assert z.frozen == pytest.approx({1: math.exp(3.15), 2: math.exp(3.25)})
    assert z.bins == pytest.approx(tuple(4.0 - 0.1 * b for b in range(11)))  # bin0 … bin10
    assert z.drift is None  # α logged, but a fixed schedule has no drift to report
    assert z.battery == {"ruler-vt": {"acc": 0.3, "chance": 0.25, "n": 100, "at_chance": False}}
    # 'bible' before 'wiki' when neither is fineweb_edu; four coprime layers are the stagger
    assert (c.label, c.ppl) == ("fib/coprime=stagger", pytest.approx(math.exp(2.6)))
    assert (m.label, m.W, m.seed, m.bins, m.battery) == ("dense", None, None, None, None)
    assert math.isnan(m.ppl) and m.ext == pytest.approx({2: math.exp(2.0)})


def test_a_coprime_run_is_the_stagger_only_at_a_depth_where_its_alphas_are(store_path):
    four = {"n_layers": 4, "schedule": "coprime"}
    assert le.run_label("fib/coprime", four) == "fib/coprime=stagger"
    assert le.run_label("fib/coprime", {"n_layers": 8, "schedule": "coprime"}) == "fib/coprime"
    assert le.run_label("fib/coprime", {"n_layers": 0, "schedule": "coprime"}) == "fib/coprime"
    assert le.run_label("fib/coprime", {"n_layers": 1, "schedule": "coprime"}) == (
        "fib/coprime=stagger"  # one layer: α = 1 under both
    )
    assert le.run_label("fib/coprime", {"schedule": "coprime"}) == "fib/coprime"  # depth unknown
    assert le.run_label("fib/stagger", four) == "fib/stagger"  # only a coprime label changes


def test_scales_rank_by_name_config_and_size():
    assert le.lm_scale("x", {"scale": "study-smoke"}) == "smoke"
    assert le.lm_scale("study-smoke-fixed", {}) == "smoke"
    assert le.lm_scale("x", {"scale": "study"}) == "study"
    assert le.lm_scale("study-fixed-s1", {}) == "study"
    big = {"steps": 13000, "model": {"d_model": 512}}
    assert le.lm_scale("x", big) == "paper"
    assert le.lm_scale("x", {"steps": 13000, "model": {"d_model": 256}}) == "other"
    assert le.lm_scale("x", {"steps": 12999, "model": {"d_model": 512}}) == "other"
    assert le.lm_scale("x", {"scale": "demo"}) == "demo"
    assert le.lm_scale("demo-cpu-fixed", {}) == "demo"
    assert le.lm_scale("x", {}) == "other"
    run = le.LMRun("r", "fib/fixed")
    (no_steps,) = le.group_lms([(run, "other", {"steps": None, "seq_len": 64})])
    (no_len,) = le.group_lms([(run, "other", {"steps": 40})])
    assert no_steps.rank == no_len.rank == (le.LM_RANK["other"], 0)
    (smoke,) = le.group_lms([(run, "smoke", {"steps": 40, "seq_len": 64})])
    assert (smoke.decides, smoke.rank) == (False, (le.LM_RANK["smoke"], 40 * 64))


def _probe(seed, steps=40, **over):
    return {"task": "marked", "mechanism": "blur", "depth": 2, "init": "uniform", "seed": seed,
            "steps": steps, "acc": {"125": 0.5}, **over}  # fmt: skip


def test_probe_cells_pool_the_store_record_files_and_every_grid(tmp_path, store_path):
    grids = []
    for i in (1, 2):
        path = tmp_path / f"probe-{i}.jsonl"
        path.write_text(json.dumps(_probe(10 + i)) + "\n\n")  # a blank line is no record
        grids.append(str(path))
    untasked = {k: v for k, v in _probe(20).items() if k != "task"}  # no task: the marked one
    with Store(store_path) as st:
        ev = le.from_store(st, probe_records=[untasked], grids=grids)
    assert ev.sources == [f"store {store_path}", *grids]  # outside the checkout: as given
    (tier,) = ev.of("probe")
    assert sorted(r["seed"] for r in tier.records) == [11, 12, 20]
    assert tier.setup == f"3 marked-probe cells, distances [125], 40 steps ({', '.join(grids)})"
    fix = tmp_path / "fix.db"
    write_fixture(str(fix))
    quick = tmp_path / "probe-quick.jsonl"  # the paper's distances, few steps: the fixture's scale
    quick.write_text(json.dumps(_probe(7, acc={"200": 0.5, "350": 0.1})) + "\n")
    with Store(str(fix)) as st:
        (tier,) = le.from_store(st, grids=[str(quick)]).of("probe")
    assert tier.setup.endswith(f"(the store, {quick})") and len(tier.records) == 3
    (alone,) = le.group_probes([_probe(1, steps=None, key="k")], "here")
    assert alone.setup.endswith("0 steps (here)") and alone.rank == (le.PROBE_RANK["reduced"], 0)
    (given,) = de.from_demo(None, [_probe(1)], []).of("probe")
    assert given.setup.endswith("40 steps (given records)")


def test_stored_grids_and_timings_are_read_from_the_root_given(tmp_path):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    for name in ("probe-b.jsonl", "probe-a.jsonl", "other.jsonl"):
        (tmp_path / "benchmarks" / "results" / name).write_text("")
    (tmp_path / "benchmarks" / "attention-x.json").write_text("[]")
    res = tmp_path / "benchmarks" / "results"
    assert le.stored_grids(str(tmp_path)) == [
        str(res / "probe-a.jsonl"),
        str(res / "probe-b.jsonl"),
    ]
    assert le.stored_timings(str(tmp_path)) == [str(tmp_path / "benchmarks" / "attention-x.json")]
    assert le.stored_grids(str(tmp_path / "empty")) == []


def test_a_timing_file_is_one_efficiency_tier_named_where_a_reader_finds_it(tmp_path):
    rows = [{"T": 1024, "row": "mask", "fwd_ms": 2.0}, {"T": 1024, "row": "torch interp"}]
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"rows": rows, "cpu": "x"}))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(rows[:1]))
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"cpu": "x"}))
    a, b, c = le.timing_tiers([str(wrapped), str(bare), str(empty)])
    assert (a.kind, a.scale, a.rank) == ("efficiency", "benchmark", (1, 2))
    assert a.setup == f"attention timings, {wrapped}"
    assert a.timings == tuple({**r, "source": str(wrapped)} for r in rows)
    assert (b.rank, len(b.timings)) == ((1, 1), 1) and (c.rank, c.timings) == ((1, 0), ())
    inside = ROOT / "benchmarks" / "x.json"
    assert le._shown_path(str(inside)) == os.path.join("benchmarks", "x.json")
    assert le._shown_path(str(tmp_path / "y.json")) == str(tmp_path / "y.json")
    ev = de.from_demo(None, [], [], timings=[str(empty), str(bare)])
    assert ev.sources == ["this job", f"attention timings, {empty}", str(bare)]


class _Rows:
    """A store whose battery reader returns these rows (the reader's column names vary)."""

    path = "fake"

    def __init__(self, rows):
        self.rows = rows

    def battery(self):
        return pd.DataFrame(self.rows)


def test_battery_rows_by_either_column_name_the_last_kept_and_chance_test_only_when_known():
    old = [
        {"run": "a", "task": "t", "acc": 0.1, "n": 10, "chance": 0.2, "at_chance": None},
        {"run": "a", "task": "t", "acc": 0.4, "n": 50, "chance": 0.2, "at_chance": True},
    ]
    assert le.store_battery(_Rows(old)) == {
        "a": {"t": {"acc": 0.4, "chance": 0.2, "n": 50, "at_chance": True}}
    }
    new = [
        {"run": "b", "task": "u", "accuracy": 0.9, "items": 7, "chance": 0.5, "at_chance": 1.0},
        {"run": "b", "task": "v", "accuracy": 0.3, "items": 9, "chance": 0.5},
    ]
    assert le.store_battery(_Rows(new)) == {  # a float chance test (NaN in a frame): unknown
        "b": {"u": {"acc": 0.9, "chance": 0.5, "n": 7}, "v": {"acc": 0.3, "chance": 0.5, "n": 9}}
    }
    assert le.store_battery(object()) == {}  # a store of an older version has no reader


def test_the_main_jobs_numbers_join_its_runs_in_a_store(tmp_path):
    """With a store, the job's own runs are read back from it, and what only the job measured
    (same-token extrapolation, a battery the store lacks) is added to the run of that name."""
    from test_ledger_evidence import demo_lm

    path = str(tmp_path / "s.db")
    write_fixture(path)
    grid = tmp_path / "probe-g.jsonl"
    grid.write_text(json.dumps(_probe(9)) + "\n")
    timing = tmp_path / "t.json"
    timing.write_text("[]")
    with Store(path) as st:
        st.log_battery("smoke-stagger-s0", _battery_row(task="mine", correct=50))
        ev = de.from_demo(
            {"union": 1},
            [],
            [demo_lm(name="smoke-stagger-s1"), demo_lm(name="smoke-stagger-s0")],
            store=st,
            grids=[str(grid)],
            timings=[str(timing)],
        )
    assert ev.coverage == {"union": 1}
    assert ev.sources == [f"store {path}", str(grid), f"attention timings, {timing}"]
    (tier,) = ev.of("lm")
    runs = {r.name: r for r in tier.lms}
    assert len(runs) == 6 and runs["smoke-stagger-s1"].ppl == pytest.approx(math.exp(2.93))
    assert runs["smoke-stagger-s1"].same_tokens == pytest.approx(20.0)  # the job's number
    assert runs["smoke-stagger-s1"].battery == demo_lm()["battery"]  # the store has none
    kept = runs["smoke-stagger-s0"].battery  # the store's own battery wins
    assert kept == {"mine": {"acc": 0.5, "chance": 0.25, "n": 100, "at_chance": False}}
    assert runs["smoke-fixed-s0"].same_tokens is None  # not a run of this job
    assert [t.scale for t in ev.of("probe")] == ["quick", "reduced"]  # the store's, the grid's
    assert len(ev.of("efficiency")) == 1
