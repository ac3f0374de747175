"""Results that compare like with like: a run's variant (lab.store.variant), the tables that average only
over the seeds of one variant, duplicates reported and never averaged, the typed reason of a table
that cannot be built, `fiblab report --json`, strict JSON (lab.util.jsonio), the store's preset and a
resume that keeps started_at. Every expected row and mean below is counted by hand."""

import csv
import io
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.reports.results import build_report
from analysis.tables import position as tables_position
from analysis.tables.comparable import TableUnavailable, natural_key
from analysis.tables.length import table3_from_store
from analysis.tables.position import table4_from_store
from analysis.tables.ppl import table1_from_store
from analysis.tables.seeds import table5_from_store
from fiblab.cli import main as cli_main
from lab.lm.modelconfig import ModelConfig
from lab.lm.typedconfig import config_from_dict
from lab.machine.precision import default_precision
from lab.store import Store
from lab.store.variant import data_hash, describe, differs, provenance, seed_of, variant_of, varying
from lab.training.train import train
from lab.training.trainconfig import TrainConfig, make_config
from lab.util import jsonio

e = math.exp
T = 64


REFERENCE = Path(__file__).resolve().parents[2] / "analysis" / "reference"


def model(**over):
    base = dict(
        d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=64, seq_len=T, window=8, rungs=8
    )
    return ModelConfig(**{**base, **over})


def config(seed, steps=1500, data="bible", **over):
    return TrainConfig(model=model(**over), seed=seed, steps=steps, data=data).to_dict()


# -- lab.store.variant -------------------------------------------------------------------------------


def test_variant_names_what_differs_and_keeps_the_seed_apart():
    a, b = config(1), config(2)
    assert variant_of(a) == variant_of(b) and variant_of(a).id == variant_of(b).id
    assert (seed_of(a), seed_of(b)) == (1, 2)
    short = variant_of(config(1, steps=12))
    assert differs(variant_of(a), short) == ("steps",)
    assert describe(short, differs(variant_of(a), short)) == "steps=12"
    assert differs(variant_of(a), variant_of(config(1, data="x.txt"))) == ("data",)
    assert differs(variant_of(a), variant_of(config(1, seq_len=128))) == ("seq_len",)
    assert differs(variant_of(a), variant_of(config(1, schedule="stagger"))) == ("schedule",)
    w = variant_of(config(1, window=12))
    assert describe(w, differs(variant_of(a), w)) == "W=12"
    assert differs(variant_of(a), variant_of({**a, "lr": 1e-3})) == ("lr",)
    # the micro-batch split, the cadences and the name change no number: one variant
    same = {**a, "micro_batch": 2, "ckpt_every": 7, "log_every": 3, "name": "x", "preset": "p"}
    assert variant_of(same) == variant_of(a)
    # a model field without its own slot still counts
    assert differs(variant_of(a), variant_of(config(1, rope_theta=500.0))) == ("rope_theta",)
    # the id ignores key order and is the same in another process (a pure hash)
    assert variant_of(dict(reversed(list(a.items())))).id == variant_of(a).id
    assert len(variant_of(a).id) == 12 and variant_of(a).id != short.id


def test_fields_without_effect_and_missing_fields():
    # a dense model has no W, K or schedule: two dense runs that say different ones are alike
    d1 = variant_of(config(1, attention="dense", window=6))
    d2 = variant_of(config(2, attention="dense", window=12, schedule="stagger"))
    assert d1 == d2 and d1.window is None and d1.base is None
    # K is the Fibonacci base's only; a learned schedule's start counts only when learned
    assert variant_of(config(1, base="pow2", rungs=5)) == variant_of(config(1, base="pow2"))
    assert variant_of(config(1, learned_init="stagger")) == variant_of(config(1))
    la = variant_of(config(1, schedule="learned", learned_init="stagger"))
    lb = variant_of(config(1, schedule="learned", learned_init="fixed"))
    assert differs(la, lb) == ("learned_init",)
    # an old config without some fields: unknown (None), equal to another such config
    old = config(1)
    old["model"] = {k: v for k, v in old["model"].items() if k not in ("rounding", "path")}
    old = {k: v for k, v in old.items() if k != "warmup"}
    assert variant_of(old).rounding is None and variant_of(old).warmup is None
    assert variant_of(old) == variant_of(json.loads(json.dumps(old)))
    assert set(differs(variant_of(old), variant_of(config(1)))) == {
        "rounding",
        "path",
        "warmup",
    }
    assert describe(variant_of(old), ["rounding"]) == "rounding=?"
    # a flat config (short names too)
    flat = variant_of({"base": "fib", "schedule": "stagger", "W": 10, "K": 5, "seq_len": 32})
    assert (flat.window, flat.rungs, flat.seq_len, flat.steps) == (10, 5, 32, None)
    assert seed_of({"seed": None}, 4) == 4 and seed_of({}) is None
    with pytest.raises(ValueError, match="must be a dict"):
        variant_of(["fib"])


#: TrainConfig fields that change no number of a run (so runs that differ in them are seeds of
#: one variant); every other field of TrainConfig and ModelConfig must split runs
NO_EFFECT = {
    "seed", "micro_batch", "eval_every", "eval_light_tokens", "eval_batch", "alpha_every",
    "ckpt_every", "keep_ckpts", "log_every", "run_dir", "name", "preset",
    "precision",  # the requested one; the precision it ran in is provenance's (below)
    "tokenizer",  # its file; the tokenised data's hash is provenance's (below)
}  # fmt: skip


def _changed(value):
    """A different value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value * 2 + 1
    if isinstance(value, tuple):
        return tuple(v * 0.5 for v in value)
    if value is None:
        return 3
    return {"fib": "pow2", "fixed": "stagger", "round": "floor"}.get(value, value + "-x")


def test_every_field_that_changes_a_number_splits_the_variant():
    """Each field of TrainConfig and of ModelConfig (read from the dataclasses, so a field added
    later is covered), changed alone, gives another variant — unless it is listed as changing
    no number; each provenance field too. A learned schedule starting at the coprime one, so
    every sparse-only field has an effect."""
    import dataclasses

    base = {
        **config(1, schedule="learned", learned_init="coprime", coprime_stride=3),
        "vocab_size": 64,
        "val_tokens": 4096,
        "provenance": {"data_hash": "abc", "precision": "fp32"},
    }
    v0 = variant_of(base)
    missing = []
    for f in dataclasses.fields(ModelConfig):
        cfg = {**base, "model": {**base["model"], f.name: _changed(base["model"][f.name])}}
        if variant_of(cfg) == v0 or variant_of(cfg).id == v0.id:
            missing.append(f"model.{f.name}")
    for f in dataclasses.fields(TrainConfig):
        if f.name == "model":
            continue
        cfg = {**base, f.name: _changed(base[f.name])}
        split = variant_of(cfg) != v0 and variant_of(cfg).id != v0.id
        if split == (f.name in NO_EFFECT):
            missing.append(f"{f.name} ({'splits' if split else 'merges'})")
    for k in ("data_hash", "precision"):
        cfg = {**base, "provenance": {**base["provenance"], k: "other"}}
        if variant_of(cfg) == v0:
            missing.append(f"provenance.{k}")
    assert not missing, f"fields that do not behave: {missing}"


def test_provenance_data_hash_and_precision(cpu_profile):
    class Prepared:
        def __init__(self, key):
            self.meta = {"key": key}

    class Mix:
        def __init__(self, domains, weights):
            self.domains, self.weights = domains, weights

    assert data_hash(Prepared("abc")) == "abc" and data_hash(object()) is None
    m1 = Mix({"a": Prepared("k1"), "b": Prepared("k2")}, {"a": 1.0, "b": 1.0})
    m2 = Mix({"a": Prepared("k1"), "b": Prepared("k2")}, {"a": 1.0, "b": 2.0})
    assert data_hash(m1) != data_hash(m2) and len(data_hash(m1)) == 64
    assert default_precision("cpu") == "fp32" and default_precision("cuda:0") == "bf16"
    cfg = {**config(1), "provenance": provenance(Prepared("abc"), "fp32")}
    v = variant_of(cfg)
    assert (v.data_hash, v.precision) == ("abc", "fp32")
    other = variant_of({**config(1), "provenance": {"data_hash": "def", "precision": "fp32"}})
    assert differs(v, other) == ("data_hash",)
    assert differs(v, variant_of(config(1))) == ("data_hash", "precision")  # recorded vs unknown


def test_varying_and_natural_order():
    vs = [variant_of(config(1, steps=s)) for s in (12, 300, 1500)]
    assert varying(vs) == ("steps",) and varying(vs[:1]) == ()
    assert sorted(["steps=1500", "steps=12", "steps=300"], key=natural_key) == [
        "steps=12",
        "steps=300",
        "steps=1500",
    ]


# -- the like-with-like store --------------------------------------------------------------------

# run: (config, final fineweb loss at its training length)
RUNS = {
    "fixed-s1": (config(1, schedule="fixed"), 3.0),
    "fixed-s2": (config(2, schedule="fixed"), 3.2),
    "stag-s1": (config(1, schedule="stagger"), 2.8),
    "stag-s2": (config(2, schedule="stagger"), 2.9),
    "short-s1": (config(1, schedule="stagger", steps=12), 6.0),  # only steps differ
    "data-s1": (config(1, schedule="stagger", data="other.txt"), 2.5),  # only data
    "long-s1": (config(1, schedule="stagger", seq_len=128), 2.7),  # only seq_len
}
# length extrapolation at twice the training length (full policy)
EXTRAP = {"fixed-s1": 3.1, "stag-s1": 2.85, "stag-s2": 2.95, "short-s1": 6.5, "long-s1": 2.75}
# position bins: bin b has NLL base - 0.1 b
BINS = {"fixed-s1": 4.0, "fixed-s2": 4.2, "stag-s1": 3.9, "stag-s2": 3.95, "short-s1": 7.0}


def write_store(path, runs=RUNS):
    with Store(path) as s:
        for name, (cfg, loss) in runs.items():
            t = cfg["model"]["seq_len"]
            s.start_run(name, cfg, kind="lm", seed=cfg["seed"], git_rev="test")
            s.log_eval(name, 100, "fineweb_edu", t, loss, 1000, kind="recompute")
            s.log_eval(name, 50, "fineweb_edu", t, 9.0, 1000, kind="recompute")  # not the last step
            if name in EXTRAP:
                s.log_eval(name, 100, "fineweb_edu", 2 * t, EXTRAP[name], 1000, kind="recompute")
            for b in range(8):
                if name in BINS:
                    s.log_eval(
                        name, 100, "fineweb_edu", t, BINS[name] - 0.1 * b, 100, kind=f"bin{b}"
                    )
            s.set_status(name, "done")
    return str(path)


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    return write_store(tmp_path_factory.mktemp("variants") / "fiblab.db")


@pytest.fixture(scope="module")
def store(store_path):
    with Store(store_path) as s:
        yield s


def rows(df, cols):
    return [tuple(r) for r in df[cols].itertuples(index=False)]


# fields that differ anywhere among the Table 1 / Table 5 runs: seq_len, data, steps
BASE = "seq_len=64, data=bible, steps=1500"
SHORT = "seq_len=64, data=bible, steps=12"
DATA = "seq_len=64, data=other.txt, steps=1500"
LONG = "seq_len=128, data=bible, steps=1500"


def test_table1_averages_only_seeds_of_one_variant(store):
    t = table1_from_store(store)
    assert list(t.columns) == ["base", "schedule", "W", "variant", "fineweb_edu", "seeds"]
    # fixed: one variant, two seeds; stagger: two seeds of the base variant, then one row for
    # each run that differs in steps, data or seq_len (numbers by value: 64 < 128, 12 < 1500)
    assert rows(t, ["schedule", "variant", "seeds"]) == [
        ("fixed", BASE, 2),
        ("stagger", SHORT, 1),
        ("stagger", BASE, 2),
        ("stagger", DATA, 1),
        ("stagger", LONG, 1),
    ]
    assert t["fineweb_edu"].tolist() == pytest.approx(
        [(e(3.0) + e(3.2)) / 2, e(6.0), (e(2.8) + e(2.9)) / 2, e(2.5), e(2.7)]
    )
    assert t.attrs["notes"] == []
    # one variant per config: the layout of before (no variant column)
    one = table1_from_store(store, runs=["fixed-s1", "fixed-s2", "stag-s1", "stag-s2"])
    assert list(one.columns) == ["base", "schedule", "W", "fineweb_edu", "seeds"]
    assert one["seeds"].tolist() == [2, 2]


def test_table3_rows_per_variant(store):
    t = table3_from_store(store)
    # only runs evaluated beyond their training length; among them steps and seq_len differ
    base, short, long = "seq_len=64, steps=1500", "seq_len=64, steps=12", "seq_len=128, steps=1500"
    assert rows(t, ["model", "variant", "seeds"]) == [
        ("fib/fixed", base, 1),
        ("fib/stagger", short, 1),
        ("fib/stagger", base, 2),
        ("fib/stagger", long, 1),
    ]
    assert t["ppl_T64"].tolist()[:3] == pytest.approx([e(3.0), e(6.0), (e(2.8) + e(2.9)) / 2])
    assert t["ppl_T128"].tolist() == pytest.approx(
        [e(3.1), e(6.5), (e(2.85) + e(2.95)) / 2, e(2.7)]
    )
    assert math.isnan(t["ppl_T64"].iloc[3]) and t["ppl_T256"].iloc[3] == pytest.approx(e(2.75))
    assert t["ppl_T256"].iloc[:3].isna().all()
    assert t["change_at_2x_percent"].tolist() == pytest.approx(
        [
            100 * (e(3.1) / e(3.0) - 1),
            100 * (e(6.5) / e(6.0) - 1),
            100 * (((e(2.85) + e(2.95)) / 2) / ((e(2.8) + e(2.9)) / 2) - 1),
            100 * (e(2.75) / e(2.7) - 1),
        ]
    )


def test_table4_rows_and_gap_per_variant(store):
    t = table4_from_store(store)
    bins = [f"b{b}" for b in range(8)]
    assert rows(t, ["schedule", "variant"]) == [
        ("fib/fixed", "steps=1500"),
        ("fib/stagger", "steps=12"),
        ("fib/stagger", "steps=1500"),
        ("fib/fixed - fib/stagger", "steps=1500"),  # only rows of one variant are paired
    ]
    assert t.iloc[0][bins].tolist() == pytest.approx([4.1 - 0.1 * b for b in range(8)])
    assert t.iloc[1][bins].tolist() == pytest.approx([7.0 - 0.1 * b for b in range(8)])
    assert t.iloc[2][bins].tolist() == pytest.approx([3.925 - 0.1 * b for b in range(8)])
    assert t.iloc[3][bins].tolist() == pytest.approx([0.175] * 8)
    assert t["seeds"].tolist()[:3] == [2, 1, 2] and pd.isna(t["seeds"].iloc[3])


def test_table5_rows_per_variant(store):
    t = table5_from_store(store)
    assert list(t.columns) == [
        "config",
        "W",
        "variant",
        "seed1",
        "seed2",
        "n",
        "mean",
        "std",
        "std_pop",
    ]
    # by W (all 8), then mean ascending
    assert rows(t, ["config", "variant", "n"]) == [
        ("fib/stagger", DATA, 1),
        ("fib/stagger", LONG, 1),
        ("fib/stagger", BASE, 2),
        ("fib/fixed", BASE, 2),
        ("fib/stagger", SHORT, 1),
    ]
    stag = t.iloc[2]
    assert (stag["seed1"], stag["seed2"]) == pytest.approx((e(2.8), e(2.9)))
    assert stag["mean"] == pytest.approx((e(2.8) + e(2.9)) / 2)
    assert stag["std_pop"] == pytest.approx(abs(e(2.8) - e(2.9)) / 2)
    assert math.isnan(t.iloc[4]["seed2"]) and t.iloc[4]["seed1"] == pytest.approx(e(6.0))


# -- duplicates of one variant and seed ----------------------------------------------------------


@pytest.fixture
def dup_store(tmp_path):
    path = tmp_path / "dup.db"
    with Store(path) as s:
        # 'later' is created first but finishes last: it is the newest finished run
        for name, loss in (("later", 3.0), ("earlier", 4.0), ("other-seed", 5.0)):
            seed = 2 if name == "other-seed" else 1
            s.start_run(name, config(seed, schedule="stagger"), kind="lm", seed=seed)
            s.log_eval(name, 100, "fineweb_edu", T, loss, 1000, kind="recompute")
        for name in ("earlier", "other-seed", "later"):
            time.sleep(0.002)
            s.set_status(name, "done")
    with Store(path) as s:
        yield s


def test_duplicates_are_reported_not_averaged(dup_store):
    t = table1_from_store(dup_store)
    assert len(t) == 1 and t.iloc[0]["seeds"] == 2  # seeds 1 and 2, not three runs
    assert t.iloc[0]["fineweb_edu"] == pytest.approx((e(3.0) + e(5.0)) / 2)  # 'later' for seed 1
    (note,) = t.attrs["notes"]
    assert "'earlier'" in note and "'later'" in note and "newest finished, 'later'" in note
    for build in (table3_from_store, table4_from_store):
        with pytest.raises(TableUnavailable):  # no such evaluations: not a duplicate question
            build(dup_store)
    t5 = table5_from_store(dup_store)
    assert t5.iloc[0]["seed1"] == pytest.approx(e(3.0)) and len(t5.attrs["notes"]) == 1
    with pytest.raises(TableUnavailable, match=r"'earlier' and 'later' are the same variant") as ex:
        table1_from_store(dup_store, duplicates="error")
    assert "runs=[...]" in str(ex.value) and "fiblab report RUN" in str(ex.value)
    picked = table1_from_store(dup_store, runs=["earlier", "other-seed"])
    assert picked.iloc[0]["fineweb_edu"] == pytest.approx((e(4.0) + e(5.0)) / 2)
    assert picked.attrs["notes"] == []
    with pytest.raises(ValueError, match="duplicates='both'"):
        table1_from_store(dup_store, duplicates="both")


def test_report_names_duplicates_and_says_why_a_table_is_missing(dup_store):
    md = build_report(dup_store).markdown()
    assert "Note: runs 'earlier' and 'later' are the same variant and seed" in md
    missing = [line for line in md.splitlines() if "not available" in line]
    assert len(missing) == 2  # Table 3 and Table 4: no such evaluations
    for line in missing:
        assert "`fiblab eval runs/NAME`" in line, line
        assert "_from_store" not in line and "Traceback" not in line, line
    assert "Table 3 needs evaluations beyond the training length" in md


def test_a_genuine_bug_is_not_shown_as_not_available(store, monkeypatch):
    def broken(*a, **k):
        raise KeyError("a bug")

    monkeypatch.setattr(tables_position, "table4_from_store", broken)
    with pytest.raises(KeyError, match="a bug"):
        build_report(store)


# -- fiblab report --json ------------------------------------------------------------------------


def _strict(text):
    def no_constants(name):
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=no_constants)


def test_report_json_has_every_table_with_the_markdown_numbers(store, store_path, capsys, tmp_path):
    path = store_path
    assert cli_main(["report", "--store", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    obj = _strict(out)
    assert "NaN" not in out and "Infinity" not in out
    for name in ("final_ppl", "table1", "table3", "table4", "table5"):
        assert name in obj, sorted(obj)
    # the paper's numbers sit in columns beside ours, not in a table of their own
    assert not [n for n in obj if n.startswith("paper_table")], sorted(obj)
    # the paper's Table 3 beside each row of ours with the same model and W, its change at 2×
    # computed by hand from the published CSV; none where the paper has no such row
    with open(REFERENCE / "table3_length_extrapolation.csv", newline="") as f:
        by_hand = {
            (row["model"], int(row["W"]) if row["W"] else None): (
                float(row["ppl_T2048"]) / float(row["ppl_T1024"]) - 1
            )
            * 100
            for row in csv.DictReader(f)
        }
    assert {k for k in by_hand if k[0] == "fib/fixed"} == {("fib/fixed", 8)}
    for r in obj["table3"]:
        want = by_hand.get((r["model"], r["W"]))
        got = r["change_at_2x_percent_paper"]
        assert (got is None) if want is None else got == pytest.approx(want, abs=0.01), r
    for name, frame, d in (
        ("table1", table1_from_store(store), 2),
        ("table3", table3_from_store(store, blocks=False), 2),
        ("table4", table4_from_store(store), 3),
        ("table5", table5_from_store(store), 3),
    ):
        got = obj[name]
        ours = [c for c in got[0] if not c.endswith("_paper")]
        assert len(got) == len(frame) and ours == list(frame.columns), name
        for rec, row in zip(got, frame.to_dict("records")):
            for col, want in row.items():
                if isinstance(want, float) and math.isnan(want) or want is pd.NA:
                    assert rec[col] is None, (name, col)
                elif isinstance(want, float):
                    assert rec[col] == float(f"{want:.{d}f}"), (name, col)
                else:
                    assert rec[col] == want, (name, col)
    assert any(r["ppl_T256"] is None for r in obj["table3"])  # NaN cells became null
    # with --out the files are written too and stdout stays pure JSON
    assert cli_main(["report", "--store", str(path), "--json", "--out", str(tmp_path / "r")]) == 0
    both = capsys.readouterr()
    assert _strict(both.out) == obj and "report:" in both.err
    assert (tmp_path / "r" / "report.md").is_file()
    assert cli_main(["report", "--store", str(path)]) == 2  # neither --out nor --json


# -- lab.util.jsonio ----------------------------------------------------------------------------------


def test_jsonio_writes_strict_json():
    obj = {
        "nan": float("nan"),
        "inf": [float("inf"), -float("inf")],
        "np": np.float64("nan"),
        "i": np.int64(3),
        "f": np.float32(0.5),
        "arr": np.array([1.0, np.nan]),
        "na": pd.NA,
        "nat": pd.NaT,
        "t": (1, 2),
        "nested": {"x": [{"y": float("nan")}]},
        1: "key",
    }
    text = jsonio.dumps(obj)
    assert _strict(text) == {
        "nan": None,
        "inf": [None, None],
        "np": None,
        "i": 3,
        "f": 0.5,
        "arr": [1.0, None],
        "na": None,
        "nat": None,
        "t": [1, 2],
        "nested": {"x": [{"y": None}]},
        "1": "key",
    }
    assert jsonio.dumps({"p": Path("a/b")}, default=str) == '{"p": "a/b"}'
    with pytest.raises(TypeError):
        jsonio.dumps({"p": object()})
    buf = io.StringIO()
    jsonio.dump([float("nan")], buf)
    assert buf.getvalue() == "[null]"


def test_cli_json_outputs_are_strict(capsys):
    assert cli_main(["coverage", "--layers", "4", "--seq-len", "128", "--json"]) == 0
    _strict(capsys.readouterr().out)
    assert cli_main(["efficiency", "--preset", "tiny", "--json"]) == 0
    _strict(capsys.readouterr().out)


# -- the store's preset column and a resume that keeps started_at --------------------------------


def test_store_resume_keeps_started_at(tmp_path):
    with Store(tmp_path / "s.db") as s:
        s.start_run("r", {"a": 1}, preset="tiny")
        first = s.runs().iloc[0]["started_at"]
        s.set_status("r", "stopped")
        time.sleep(0.002)
        s.start_run("r", {"a": 1}, preset="tiny", resume=True)
        assert s.runs().iloc[0]["started_at"] == first
        time.sleep(0.002)
        s.start_run("r", {"a": 1}, preset="tiny")  # a restart from scratch
        assert s.runs().iloc[0]["started_at"] > first


def test_training_fills_preset_and_provenance_and_resume_keeps_started_at(tmp_path, cpu_profile):
    """A run records its preset, seed and provenance — precision fp32 on either CPU (`auto`)."""
    words = [f"w{i % 97} v{(i * 7) % 31}" for i in range(6000)]
    text = tmp_path / "corpus.txt"
    text.write_text(" ".join(words) + "\n")
    store = str(tmp_path / "s.db")
    over = {
        "steps": 2,
        "eval_every": 0,
        "ckpt_every": 1,
        "data": str(text),
        "run_dir": str(tmp_path / "runs"),
        "name": "pre",
        "val_tokens": 512,
        "model.attention": "dense",  # no sparse kernel to build: this test is about the store
    }
    cfg = make_config("tiny-s5", over)
    assert cfg.preset == "tiny" and cfg.seed == 5
    train(cfg, store_path=store, quiet=True)
    with Store(store) as s:
        row = s.runs().set_index("name").loc["pre"]
        first = row["started_at"]
        stored = s.config("pre")
    assert row["preset"] == "tiny" and row["status"] == "done"
    (entry,) = [p for p in (tmp_path / "runs" / "data").iterdir() if p.is_dir()]
    key = json.loads((entry / "meta.json").read_text())["key"]
    assert stored["provenance"] == {"data_hash": key, "precision": "fp32"}
    assert variant_of(stored).data_hash == key and seed_of(stored) == 5
    on_disk = json.loads((tmp_path / "runs" / "pre" / "config.json").read_text())
    assert "provenance" not in on_disk and on_disk["preset"] == "tiny"
    assert config_from_dict(stored, TrainConfig) == cfg  # the store's copy restores config.json
    time.sleep(0.01)
    train(cfg, resume=True, store_path=store, quiet=True)  # from the last checkpoint
    with Store(store) as s:
        again = s.runs().set_index("name").loc["pre"]
    assert again["started_at"] == first and again["finished_at"] > row["finished_at"]
