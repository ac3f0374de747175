"""Tables 1–5 and the α trajectories from a hand-made experiment store whose numbers are worked out
here by hand, from the authors' frames (the fixture fib.db of test_paperdb.py, and the length and
position dumps inside analysis/reference), and — when ../shared/reference/fib.db is present — the
paper's Tables 2 and 5 rebuilt from the real database."""

import math
from pathlib import Path

import pandas as pd
import pytest
from paperdb_fixture import build_fixture, ppl_of

from analysis.figures import trajectories as tj
from analysis.published import paper
from analysis.published.paperdb import load_final_ppl, load_retrieval
from analysis.tables.beside import published, with_paper
from analysis.tables.length import table3, table3_from_lenextrap, table3_from_store
from analysis.tables.position import table4_from_posloss, table4_from_store
from analysis.tables.ppl import table1_from_store
from analysis.tables.probe import (
    probe_cells_from_paperdb,
    probe_cells_from_records,
    probe_cells_from_store,
    table2,
    table2_from_paperdb,
    table2_from_store,
)
from analysis.tables.rows import config_label
from analysis.tables.runs import lm_evals, lm_runs
from analysis.tables.seeds import table5, table5_from_final_ppl, table5_from_store
from lab.lm.modelconfig import ModelConfig
from lab.store import Store
from lab.store.variant import seed_of, variant_of
from lab.training.trainconfig import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
REAL_DB = ROOT.parent / "shared" / "reference" / "fib.db"
T = 64  # the fixture runs' training length
e = math.exp

# run: (model overrides, seed, status)
RUNS = {
    "fixed-s1": (dict(schedule="fixed"), 1, "done"),
    "fixed-s2": (dict(schedule="fixed"), 2, "done"),
    "stag-s1": (dict(schedule="stagger"), 1, "done"),
    "stag-s2": (dict(schedule="stagger"), 2, "done"),
    "learn-s1": (dict(schedule="learned", learned_init="stagger"), 1, "done"),
    "pow2-s1": (dict(base="pow2", schedule="stagger", window=12), 1, "done"),
    "dense-s1": (dict(attention="dense"), 1, "done"),
    "fixed-s3": (dict(schedule="fixed"), 3, "failed"),
}
# final FineWeb loss at the training length (step 100); Bible is 0.5 higher
LOSS = {
    "fixed-s1": 3.0,
    "fixed-s2": 3.2,
    "stag-s1": 2.8,
    "stag-s2": 2.9,
    "learn-s1": 2.95,
    "pow2-s1": 3.1,
    "dense-s1": 2.5,
    "fixed-s3": 9.0,
}
# length extrapolation (fineweb_edu, step 100): run -> {(kind, context_len): loss}
EXTRAP = {
    "fixed-s1": {
        ("recompute", 128): 2.98,
        ("recompute", 256): 2.97,
        ("freeze", 128): 2.99,
        ("freeze", 256): 2.985,
    },
    "stag-s1": {
        ("recompute", 128): 2.79,
        ("recompute", 256): 2.77,
        ("freeze", 128): 2.795,
        ("freeze", 256): 2.79,
        **{(f"recompute:block{j}", 256): 2.9 - 0.05 * j for j in range(4)},
        **{(f"freeze:block{j}", 256): 2.91 - 0.05 * j for j in range(4)},
    },
    "dense-s1": {("recompute", 128): 3.3, ("recompute", 256): 4.4},
}
BIN_BASE = {"fixed-s1": 4.0, "fixed-s2": 4.2, "stag-s1": 3.9, "stag-s2": 3.95}


def model_config(**over):
    return ModelConfig(
        **{
            **dict(
                d_model=32,
                n_layers=2,
                n_heads=4,
                n_kv_heads=2,
                vocab_size=64,
                seq_len=T,
                window=8,
                rungs=8,
            ),
            **over,
        }
    )


def probe(mech, depth, init, seed, acc, alphas, steps=100, trajectory=None):
    rec = {
        "key": f"marked/{mech}/d{depth}/{init}/s{seed}/n{steps}",
        "mechanism": mech,
        "depth": depth,
        "init": init,
        "seed": seed,
        "task": "marked",
        "steps": steps,
        "alphas": alphas,
        "acc": {str(d): a for d, a in acc.items()},
        "seconds": 1.0,
    }
    if trajectory is not None:
        rec["trajectory"] = trajectory
    return rec


PROBES = [
    probe(
        "blur",
        2,
        "uniform",
        0,
        {200: 0.5, 350: 0.2},
        [0.98, 1.03],
        trajectory=[
            {"step": 0, "alphas": [1.0, 1.0]},
            {"step": 50, "alphas": [1.01, 0.97]},
            {"step": 100, "alphas": [0.98, 1.03]},
        ],
    ),
    probe("blur", 2, "uniform", 1, {200: 0.3, 350: 0.1}, [0.93, 1.01]),
    probe("blur", 2, "staggered", 0, {200: 1.0, 350: 0.0}, [0.56, 1.40]),
    probe("blur", 2, "staggered", 1, {200: 0.9, 350: 0.02}, [0.58, 1.38]),
    probe("learned", 2, "uniform", 0, {200: 0.0, 350: 0.0}, [0.99, 1.0]),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("tables") / "fiblab.db"
    with Store(path) as s:
        for name, (over, seed, status) in RUNS.items():
            cfg = TrainConfig(model=model_config(**over), seed=seed).to_dict()
            s.start_run(name, cfg, kind="lm", seed=seed, git_rev="test")
            for ds, extra in (("fineweb_edu", 0.0), ("bible", 0.5)):
                s.log_eval(name, 100, ds, T, LOSS[name] + extra, 1000, kind="recompute")
                s.log_eval(name, 50, ds, T, 7.0, 1000, kind="recompute")  # not the last step
                s.log_eval(name, 100, ds, T, 8.0, 100, kind="light")  # never read
            for (kind, L), loss in EXTRAP.get(name, {}).items():
                s.log_eval(name, 100, "fineweb_edu", L, loss, 1000, kind=kind)
            if name in BIN_BASE:
                for b in range(8):
                    s.log_eval(
                        name, 100, "fineweb_edu", T, BIN_BASE[name] - 0.1 * b, 100, kind=f"bin{b}"
                    )
                    s.log_eval(name, 100, "bible", T, 5.0, 100, kind=f"bin{b}")
            s.set_status(name, status)
        for step, alphas in ((1, [0.56, 1.44]), (50, [0.60, 1.43]), (100, [0.62, 1.41])):
            s.log_alphas("learn-s1", step, alphas)
        for rec in PROBES:
            s.log_probe({**rec, "git_rev": "test"})
        yield s


# -- which run is which ------------------------------------------------------------------------


def test_variant_of_nested_and_flat_configs():
    cfg = TrainConfig(
        model=model_config(base="pow2", schedule="stagger", window=12), seed=7
    ).to_dict()
    v = variant_of(cfg)
    assert (config_label(v.base, v.schedule), v.window, seed_of(cfg), v.seq_len) == (
        "pow2/stagger",
        12,
        7,
        T,
    )
    d = variant_of(TrainConfig(model=model_config(attention="dense")).to_dict())
    assert config_label(d.base, d.schedule, d.attention) == "dense"
    assert d.window is None and d.base is None
    flat = {"base": "fib", "schedule": [0.6, 1.4], "W": 10, "seq_len": 128}
    fv = variant_of(flat)
    assert (config_label(fv.base, fv.schedule), fv.window, seed_of(flat, 3)) == (
        "fib/custom",
        10,
        3,
    )
    with pytest.raises(ValueError, match="must be a dict"):
        variant_of("fib/stagger")


def test_lm_runs_keeps_done_lm_runs_only(store):
    runs = lm_runs(store)
    assert list(runs["run"]) == [n for n, r in RUNS.items() if r[2] == "done"]  # no probes
    assert "fixed-s3" in set(lm_runs(store, status=None)["run"])
    row = runs.set_index("run").loc["pow2-s1"]
    assert (row["config"], row["W"], row["seed"], row["seq_len"]) == ("pow2/stagger", 12, 1, T)
    assert set(lm_evals(store)["run"]) == set(runs["run"])
    assert list(lm_runs(store, runs=["stag-s2", "fixed-s1", "fixed-s3"])["run"]) == [
        "fixed-s1",
        "stag-s2",
    ]  # failed s3 still filtered
    with pytest.raises(ValueError, match=r"no language-model runs named \['nope'\]"):
        lm_runs(store, runs=["nope", "fixed-s1"])


# -- Table 1 -----------------------------------------------------------------------------------


def test_table1_from_store_by_hand(store):
    t = table1_from_store(store)
    assert list(t.columns) == ["base", "schedule", "W", "fineweb_edu", "bible", "seeds"]
    assert [tuple(r) for r in t[["base", "schedule", "W"]].itertuples(index=False)] == [
        ("fib", "fixed", 8),
        ("fib", "learned", 8),
        ("fib", "stagger", 8),
        ("pow2", "stagger", 12),
    ]
    fixed = t.iloc[0]
    assert fixed["fineweb_edu"] == pytest.approx((e(3.0) + e(3.2)) / 2)  # failed s3 left out
    assert fixed["bible"] == pytest.approx((e(3.5) + e(3.7)) / 2)
    assert fixed["seeds"] == 2
    assert t.iloc[3]["fineweb_edu"] == pytest.approx(e(3.1))
    just = table1_from_store(store, runs=["fixed-s2", "stag-s1"])
    assert list(just["schedule"]) == ["fixed", "stagger"] and list(just["seeds"]) == [1, 1]
    assert just.iloc[0]["fineweb_edu"] == pytest.approx(e(3.2))
    one = table1_from_store(store, seed=2, decimals=2)
    assert list(one["schedule"]) == ["fixed", "stagger"]
    assert one.iloc[0]["fineweb_edu"] == round(e(3.2), 2) and one.iloc[0]["seeds"] == 1
    both = with_paper(t, paper.perplexity())
    assert both.iloc[0]["fineweb_edu_paper"] == 44.08  # the paper's fib fixed W=8


# -- Table 2 -----------------------------------------------------------------------------------


def test_table2_from_store_by_hand(store):
    t = table2_from_store(store)
    assert list(t.columns) == [
        "depth",
        "init",
        "learned_alpha_min",
        "learned_alpha_max",
        "acc_at_200",
        "acc_at_350",
        "seeds",
    ]
    assert list(t["init"]) == ["uniform", "staggered"]
    u, s = t.iloc[0], t.iloc[1]
    assert (u["learned_alpha_min"], u["learned_alpha_max"]) == (0.93, 1.03)
    assert (u["acc_at_200"], u["acc_at_350"]) == pytest.approx((0.4, 0.15))
    assert (s["learned_alpha_min"], s["learned_alpha_max"]) == (0.56, 1.40)
    assert (s["acc_at_200"], s["acc_at_350"]) == pytest.approx((0.95, 0.01))
    assert list(t["seeds"]) == [2, 2]
    learned = table2_from_store(store, mechanism="learned")
    assert len(learned) == 1 and learned.iloc[0]["seeds"] == 1
    both = with_paper(t, published(2))
    assert both.iloc[0]["acc_at_200_paper"] == 0.38  # paper: depth 2, uniform
    with pytest.raises(ValueError, match="no cells for task='marked', mechanism='dense'"):
        table2_from_store(store, mechanism="dense")


def test_table2_records_equal_store_and_guard_mixed_cells(store):
    from_records = table2(probe_cells_from_records(PROBES))
    pd.testing.assert_frame_equal(from_records, table2_from_store(store))
    cells = probe_cells_from_store(store.probes())
    assert set(cells.columns) >= {"alphas", "accuracy", "distance"}
    longer = PROBES + [probe("blur", 2, "uniform", 0, {200: 1.0, 350: 1.0}, [1.0, 1.0], steps=9)]
    with pytest.raises(ValueError, match=r"trained for \[9, 100\] steps; pass steps="):
        table2(probe_cells_from_records(longer))
    assert table2(probe_cells_from_records(longer), steps=9)["acc_at_200"].tolist() == [1.0]
    twice = PROBES + [dict(PROBES[0], key="other-lr")]
    with pytest.raises(ValueError, match="more than one cell"):
        table2(probe_cells_from_records(twice))


def test_table2_from_paper_fixture_db(tmp_path):
    db = build_fixture(tmp_path / "fib.db")
    cells = probe_cells_from_paperdb(load_retrieval(db))
    assert list(cells["mechanism"]) == ["blur"] and list(cells["init"]) == ["staggered"]
    t = table2_from_paperdb(load_retrieval(db))
    assert t.to_dict("records") == [
        {
            "depth": 2,
            "init": "staggered",
            "learned_alpha_min": 0.56,
            "learned_alpha_max": 1.39,
            "acc_at_200": 0.99,
            "seeds": 1,
        }
    ]


# -- Table 3 -----------------------------------------------------------------------------------


def test_table3_from_store_by_hand(store):
    t = table3_from_store(store)
    blocks = [f"ppl_T256_block{j}" for j in range(4)]
    assert list(t.columns) == (
        [
            "model",
            "W",
            "ppl_T64",
            "ppl_T128",
            "ppl_T256",
            "change_at_4x_percent",
            "frozen_ppl_T128",
            "frozen_ppl_T256",
            "frozen_change_at_4x_percent",
        ]
        + blocks
        + ["frozen_" + b for b in blocks]
        + ["seeds"]
    )
    # only runs evaluated beyond their training length; dense first
    assert list(t["model"]) == ["dense", "fib/fixed", "fib/stagger"]
    assert pd.isna(t.iloc[0]["W"]) and list(t["W"][1:]) == [8, 8]
    dense, fixed, stag = (t.iloc[i] for i in range(3))
    assert dense["ppl_T256"] == pytest.approx(e(4.4))
    assert dense["change_at_4x_percent"] == pytest.approx(100 * (e(4.4) / e(2.5) - 1))
    assert math.isnan(dense["frozen_ppl_T256"])
    assert fixed["ppl_T64"] == pytest.approx(e(3.0))  # seed 1 only: s2 was not extrapolated
    assert fixed["frozen_change_at_4x_percent"] == pytest.approx(100 * (e(2.985) / e(3.0) - 1))
    assert stag["ppl_T128"] == pytest.approx(e(2.79))
    assert [stag[b] for b in blocks] == pytest.approx([e(2.9 - 0.05 * j) for j in range(4)])
    assert stag["frozen_ppl_T256_block3"] == pytest.approx(e(2.76))
    assert math.isnan(fixed["ppl_T256_block0"])
    assert list(t["seeds"]) == [1, 1, 1]
    assert list(table3_from_store(store, runs="stag-s1")["model"]) == ["fib/stagger"]
    slim = table3_from_store(store, blocks=False, decimals=1)
    assert "ppl_T256_block0" not in slim.columns and slim.iloc[0]["ppl_T256"] == round(e(4.4), 1)


def test_table3_long_frame_rules():
    long = pd.DataFrame(
        {
            "model": "fib/stagger",
            "W": 8,
            "run": ["a", "a", "b", "b"],
            "train_len": [100, 100, 100, 200],
            "context_len": [100, 200, 100, 200],
            "policy": "recompute",
            "block": pd.array([pd.NA] * 4, dtype="Int64"),
            "ppl": [10.0, 11.0, 12.0, 13.0],
        }
    )
    with pytest.raises(ValueError, match="different lengths"):
        table3(long)
    two = long.iloc[:3].assign(run=["a", "a", "b"])
    t = table3(two)
    assert t.iloc[0]["ppl_T100"] == 11.0 and t.iloc[0]["seeds"] == 2  # mean of a and b
    assert t.iloc[0]["change_at_2x_percent"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="missing"):
        table3(long.drop(columns="policy"))


def test_table3_from_the_authors_dump_matches_the_paper():
    ours = table3_from_lenextrap(paper.lenextrap())
    assert len(ours) == 22 and ours.iloc[0]["model"] == "dense"
    both = with_paper(ours, published(3)).dropna(subset=["ppl_T1024_paper"])
    assert len(both) == 7
    for c in ("ppl_T1024", "ppl_T2048", "ppl_T4096"):
        assert (both[c + "_diff"].abs() <= 0.005 + 1e-9).all(), c  # printed to 2 decimals
    change = both.set_index("model")["change_at_4x_percent_diff"]
    assert abs(change["dense"]) <= 0.5  # printed as an integer
    assert (change.drop("dense").abs() <= 0.05 + 1e-9).all()


# -- Table 4 -----------------------------------------------------------------------------------


def test_table4_from_store_by_hand(store):
    t = table4_from_store(store)  # two datasets: fineweb_edu is the default
    bins = [f"b{b}" for b in range(8)]
    assert list(t.columns) == ["schedule", "W"] + bins + ["seeds"]
    assert list(t["schedule"]) == ["fib/fixed", "fib/stagger", "fib/fixed - fib/stagger"]
    assert t.iloc[0][bins].tolist() == pytest.approx([4.1 - 0.1 * b for b in range(8)])
    assert t.iloc[1][bins].tolist() == pytest.approx([3.925 - 0.1 * b for b in range(8)])
    assert t.iloc[2][bins].tolist() == pytest.approx([0.175] * 8)
    assert t.iloc[0]["seeds"] == 2 and pd.isna(t.iloc[2]["seeds"])
    assert list(table4_from_store(store, runs=["stag-s1"])["schedule"]) == ["fib/stagger"]
    bible = table4_from_store(store, dataset="bible", gap=None)
    assert len(bible) == 2 and (bible[bins] == 5.0).all().all()
    with pytest.raises(ValueError, match="no evaluations on dataset 'wikipedia'"):
        table4_from_store(store, dataset="wikipedia")


def test_table4_from_the_authors_dump_matches_the_paper():
    ours = table4_from_posloss(paper.posloss(), W=8, decimals=3)
    both = with_paper(ours, published(4)).dropna(subset=["b0_paper"])
    assert list(both["schedule"]) == ["fib/fixed", "fib/stagger"]
    assert (both.filter(like="_diff").abs() < 1e-9).all().all()
    gap = ours[ours["schedule"] == "fib/fixed - fib/stagger"].iloc[0]
    # SPEC §7.4: f06 minus f11 = .023 .039 .033 .040 .033 .044 .037 .037
    assert [gap[f"b{b}"] for b in range(8)] == pytest.approx(
        [0.023, 0.039, 0.033, 0.040, 0.033, 0.044, 0.037, 0.037], abs=1e-9
    )


# -- Table 5 -----------------------------------------------------------------------------------


def test_table5_from_store_by_hand(store):
    t = table5_from_store(store, W=8)
    assert list(t.columns) == ["config", "W", "seed1", "seed2", "n", "mean", "std", "std_pop"]
    # ordered by mean: stagger (e^2.8, e^2.9), learned (e^2.95), fixed (e^3.0, e^3.2)
    assert list(t["config"]) == ["fib/stagger", "fib/learned", "fib/fixed"]
    fixed = t.iloc[2]
    a, b = e(3.0), e(3.2)
    assert (fixed["seed1"], fixed["seed2"]) == pytest.approx((a, b))
    assert fixed["mean"] == pytest.approx((a + b) / 2) and fixed["n"] == 2
    assert fixed["std"] == pytest.approx(abs(a - b) / math.sqrt(2))
    assert fixed["std_pop"] == pytest.approx(abs(a - b) / 2)
    learned = t.iloc[1]
    assert math.isnan(learned["seed2"]) and math.isnan(learned["std"]) and learned["n"] == 1
    assert list(table5_from_store(store, runs=["fixed-s1", "fixed-s2"])["n"]) == [2]
    everything = table5_from_store(store)
    assert {"dense", "pow2/stagger"} <= set(everything["config"])
    assert pd.isna(everything.iloc[0]["W"])  # dense has no window, comes first


def test_table5_long_frame_guards():
    long = pd.DataFrame({"config": ["x", "x"], "W": [8, 8], "seed": [1, 1], "ppl": [1.0, 2.0]})
    with pytest.raises(ValueError, match="more than one value per"):
        table5(long)


def test_table5_from_paper_fixture_db(tmp_path):
    db = build_fixture(tmp_path / "fib.db")
    t = table5_from_final_ppl(load_final_ppl(db))
    # W = 12 in the fixture: f13 stagger (id 1, s42), f14 hdc (id 5, s42), g02 learned (id 8,
    # s43), h03 hdc (id 9, s44); FineWeb ppl = 10·id + 0.5
    assert list(t["config"]) == ["fib/stagger", "fib/coprime", "fib/learned"]
    assert list(t.columns[2:5]) == ["seed42", "seed43", "seed44"]
    cop = t.iloc[1]
    assert (cop["seed42"], cop["seed44"]) == (
        ppl_of(5, 13000, "fineweb_edu_val"),
        ppl_of(9, 13000, "fineweb_edu_val"),
    )
    assert cop["mean"] == 70.5 and cop["std_pop"] == 20.0
    assert cop["std"] == pytest.approx(40 / math.sqrt(2))
    both = with_paper(t, published(5))
    assert both.iloc[0]["std_pop_paper"] == 0.13  # the paper's population std


# -- trajectories ------------------------------------------------------------------------------


def test_trajectories_from_store(store):
    traj = tj.from_store(store)
    assert list(traj.columns) == tj.COLUMNS
    lm = traj[traj["run"] == "learn-s1"]
    assert set(lm["kind"]) == {"lm"} and sorted(lm["step"].unique()) == [1, 50, 100]
    # LM start from the config: the stagger clamped to [0.55, 1.45]
    assert lm.groupby("layer")["alpha_init"].first().tolist() == pytest.approx([0.55, 1.45])
    d = tj.drift(traj).set_index(["run", "layer"])
    assert d.loc[("learn-s1", 0), "max_drift"] == pytest.approx(0.07)
    assert d.loc[("learn-s1", 1), "max_drift"] == pytest.approx(0.04)
    assert d.loc[("learn-s1", 1), "alpha_final"] == pytest.approx(1.41)
    key = PROBES[0]["key"]
    assert d.loc[(key, 0), "max_drift"] == pytest.approx(0.02)  # |0.98 − 1|
    assert d.loc[(key, 1), "max_drift"] == pytest.approx(0.03)  # |0.97 − 1| and |1.03 − 1|
    fr = tj.final_range(traj).set_index("run")
    assert (fr.loc["learn-s1", "alpha_min"], fr.loc["learn-s1", "alpha_max"]) == (0.62, 1.41)
    assert fr.loc["learn-s1", "step"] == 100
    ok = tj.inert(traj, tol=0.05).set_index("run")
    assert not ok.loc["learn-s1", "inert"] and ok.loc["learn-s1", "worst_layer"] == 0
    assert ok.loc[key, "inert"]
    assert tj.inert(traj, tol=0.1).set_index("run").loc["learn-s1", "inert"]
    only = tj.from_store(store, runs="learn-s1")
    assert set(only["run"]) == {"learn-s1"}
    with pytest.raises(ValueError, match="no runs named"):
        tj.from_store(store, runs="nope")
    assert tj.from_store(store, runs=["learn-s1", PROBES[0]["key"]], kinds=("lm",))[
        "run"
    ].unique().tolist() == ["learn-s1"]


def test_trajectories_from_records_match_the_store(store):
    recs = tj.from_records(PROBES)
    stored = tj.from_store(store, kinds=("probe",))
    cols = ["run", "step", "layer", "alpha", "alpha_init"]
    key = PROBES[0]["key"]
    pd.testing.assert_frame_equal(
        recs[recs["run"] == key][cols].reset_index(drop=True),
        stored[stored["run"] == key][cols].reset_index(drop=True),
    )
    # a record without trajectory has only its final point and no known start
    lone = recs[recs["run"] == PROBES[1]["key"]]
    assert lone["step"].tolist() == [100, 100] and lone["alpha_init"].isna().all()
    assert pd.isna(tj.inert(recs).set_index("run").loc[PROBES[1]["key"], "inert"])
    nan_layers = tj.from_records(
        [probe("dense", 2, "-", 0, {200: 1.0}, [float("nan"), float("nan")])]
    )
    assert nan_layers.empty
    with pytest.raises(ValueError, match="not a trajectory frame"):
        tj.drift(pd.DataFrame({"run": []}))


def test_initial_alphas():
    cfg = TrainConfig(model=model_config(schedule="stagger", n_layers=3)).to_dict()
    assert tj.initial_alphas(cfg) == pytest.approx([0.5, 1.0, 1.5])
    assert tj.initial_alphas(TrainConfig(model=model_config(attention="dense")).to_dict()) is None
    assert tj.initial_alphas({"schedule": "fixed"}, n_layers=2) == [1.0, 1.0]
    assert tj.initial_alphas({"schedule": "fixed"}) is None


# -- the real database ---------------------------------------------------------------------------


@pytest.mark.skipif(not REAL_DB.is_file(), reason=f"{REAL_DB} not present")
class TestRealDatabase:
    def test_table5_rebuilt(self):
        final = load_final_ppl(REAL_DB)
        ours = table5_from_final_ppl(final)
        published5 = published(5)
        assert list(ours["config"]) == list(published5["config"])
        both = with_paper(ours.round(2), published5)
        for c in ("seed42", "seed43", "seed44", "mean"):
            same = (both[c + "_diff"].abs() < 1e-9) | (both[c].isna() & both[c + "_paper"].isna())
            assert same.all(), c
        # the paper took the std of the seed values as printed (2 decimals); so do we here
        rounded = final.assign(ppl=final["ppl"].round(2))
        again = table5_from_final_ppl(rounded, decimals=2)
        pd.testing.assert_series_equal(again["std_pop"], published5["std_pop"], check_names=False)

    def test_table2_rebuilt(self):
        ours = table2_from_paperdb(load_retrieval(REAL_DB), decimals=2)
        both = with_paper(ours, published(2))
        assert len(both) == 6 and (both.filter(like="_diff").abs() < 1e-9).all().all()


def test_table2_agrees_with_the_probe_runner_on_measured_cells():
    """The probe runner's own summary (probes.grid.table2) of the measured grid is a second,
    independent computation of the same table."""
    from probes.grid import load_records
    from probes.grid import table2 as runner_table2

    path = ROOT / "benchmarks" / "results" / "probe-marked-paper.jsonl"
    records = load_records(str(path))
    ours = table2(probe_cells_from_records(records)).set_index(["depth", "init"])
    theirs = runner_table2(records)
    assert len(ours) == len(theirs) > 0
    for row in theirs:
        mine = ours.loc[(row["depth"], row["init"])]
        assert mine["seeds"] == row["seeds"]
        assert (mine["learned_alpha_min"], mine["learned_alpha_max"]) == pytest.approx(
            (row["alpha_min"], row["alpha_max"])
        )
        assert (mine["acc_at_200"], mine["acc_at_350"]) == pytest.approx(
            (row["acc"]["200"], row["acc"]["350"])
        )


def test_extrapolation_rows_on_one_token_basis_by_hand():
    """Training's final evaluation scores the whole held-out stream at T (more tokens); a limited
    evaluation beyond T scores fewer: ppl(4T)/ppl(T) must use the limited run's one-block row at
    T, the same text as the longer rows. A run already on one basis is left alone."""
    import math

    import pandas as pd

    from analysis.tables.runs import same_tokens_basis

    def row(run, kind, ctx, loss, tokens):
        return {
            "run": run,
            "dataset": "d",
            "step": 500,
            "seq_len": 128,
            "kind": kind,
            "context_len": ctx,
            "loss": loss,
            "perplexity": math.exp(loss),
            "tokens": tokens,
        }

    ev = pd.DataFrame(
        [
            row("a", "recompute", 128, 3.70, 49920),  # the whole stream (training's evaluation)
            row("a", "recompute:block0", 128, 3.58, 25600),  # the limited evaluation at T
            row("a", "recompute", 512, 3.60, 25600),
            row("b", "recompute", 128, 3.50, 25600),  # one basis already
            row("b", "recompute:block0", 128, 3.50, 25600),
            row("b", "recompute", 512, 3.55, 25600),
        ]
    )
    got = same_tokens_basis(ev)
    a = got[(got["run"] == "a") & (got["kind"] == "recompute") & (got["context_len"] == 128)].iloc[
        0
    ]
    assert a["loss"] == 3.58 and a["tokens"] == 25600
    assert a["perplexity"] == pytest.approx(math.exp(3.58))
    pd.testing.assert_frame_equal(got[got["run"] == "b"], ev[ev["run"] == "b"])
    assert len(got) == len(ev) and (got["kind"] == ev["kind"]).all()
