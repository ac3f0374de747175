"""The importer for the authors' results database and Table 1 rebuilt from it.

Most tests run on a small fixture database built here with the authors' schema; the last class
rebuilds the paper's Table 1 from the real ``fib.db`` when ``../shared/reference`` is present.
"""

import hashlib
import re
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from paperdb_fixture import RUNS, STEPS, build_fixture, ppl_of

from analysis.published import paper
from analysis.published.paperdb import (
    DATASETS,
    load_final_ppl,
    load_retrieval,
    load_runs,
    parse_title,
)
from analysis.tables.beside import with_paper
from analysis.tables.ppl import TABLE1_COLUMNS, table1_from_final_ppl

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "reference"
REAL_DB = SHARED / "fib.db"


# The authors' tables as this code reads them (columns and types of db/fib.db).
@pytest.fixture
def db(tmp_path):
    return build_fixture(tmp_path / "fib.db")


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "title, expected",
    [
        ("f13__fib_stagger_w12", ("f13", "fib", "stagger", 12, 42)),
        ("f14__fib_hdc_w12", ("f14", "fib", "coprime", 12, 42)),
        ("f05__fib_fixed_w6", ("f05", "fib", "fixed", 6, 42)),
        ("f09__logsparse_w8", ("f09", "pow2", "fixed", 8, 42)),
        ("f18__logsparse_stagger_w6", ("f18", "pow2", "stagger", 6, 42)),
        ("g02__fib_learned_w12_s43", ("g02", "fib", "learned", 12, 43)),
        ("h03__fib_hdc_w12_s44", ("h03", "fib", "coprime", 12, 44)),
        ("g05__logsparse_stagger_w12_s43", ("g05", "pow2", "stagger", 12, 43)),
    ],
)
def test_parse_title_variants(title, expected):
    v = parse_title(title)
    assert (v["code"], v["base"], v["schedule"], v["W"], v["seed"]) == expected
    assert v["kind"] == "variant"


def test_parse_title_reference_and_garbage():
    v = parse_title("ref_e0000")
    assert v["kind"] == "reference" and v["code"] == "e0000"
    assert v["base"] is v["schedule"] is v["W"] is v["seed"] is None
    for bad in (
        "f13__fib_stagger",
        "f13__fib_zigzag_w12",
        "fib_stagger_w12",
        "",
        "f13__fib_stagger_w12_sx",
    ):
        with pytest.raises(ValueError, match="unrecognised run title"):
            parse_title(bad)


def test_load_runs(db):
    before = digest(db)
    runs = load_runs(db)
    assert list(runs["id"]) == list(range(1, len(RUNS) + 1))
    assert list(runs["title"]) == [r[0] for r in RUNS]
    assert {
        "id",
        "title",
        "status",
        "seed",
        "params_effective",
        "wall_seconds",
        "base",
        "schedule",
        "W",
    } <= set(runs.columns)
    row = runs.set_index("title").loc["h03__fib_hdc_w12_s44"]
    assert (row["code"], row["base"], row["schedule"], row["W"], row["seed"]) == (
        "h03",
        "fib",
        "coprime",
        12,
        44,
    )
    ref = runs[runs["title"] == "ref_e0000"].iloc[0]
    assert ref["kind"] == "reference" and pd.isna(ref["base"]) and pd.isna(ref["W"])
    assert ref["seed"] == 42  # from the runs table: the title has none
    failed = runs[runs["status"] == "failed"]
    assert list(failed["title"]) == ["f01__fib_learned_w6"] and pd.isna(
        failed["wall_seconds"].iloc[0]
    )
    assert digest(db) == before  # opened read-only


def test_final_ppl_excludes_failed_and_reference(db):
    final = load_final_ppl(db)
    done = [i + 1 for i, r in enumerate(RUNS) if r[2] == "done" and r[1] == "variant"]
    assert sorted(final["run_id"].unique()) == done
    assert 2 not in set(final["run_id"]) and 3 not in set(final["run_id"])
    assert len(final) == len(done) * 4
    assert set(final["dataset"]) == {"tinystories", "math", "fineweb_edu", "wikipedia"}
    with_failed = load_final_ppl(db, include_failed=True)
    assert 2 in set(with_failed["run_id"])
    # the reference row has no metrics, so including it adds nothing
    assert len(load_final_ppl(db, include_references=True)) == len(final)


def test_final_ppl_picks_the_step(db):
    for step in STEPS:
        final = load_final_ppl(db, step=step)
        assert set(final["step"]) == {step}
        for rid, ds, ppl, loss in final[["run_id", "dataset", "ppl", "loss"]].itertuples(
            index=False
        ):
            long_name = {v: k for k, v in DATASETS.items()}[ds]
            assert ppl == pytest.approx(ppl_of(rid, step, long_name))
            assert loss == pytest.approx(ppl / 100)
    assert load_final_ppl(db, step=12345).empty
    last = load_final_ppl(db, step=None)
    assert set(last["step"]) == {13000}


def test_table1_layout_on_fixture(db):
    final = load_final_ppl(db)
    t = table1_from_final_ppl(final)
    assert list(t.columns) == ["base", "schedule", "W"] + TABLE1_COLUMNS
    # f-runs with seed 42 only, in the paper's order; g02/h03 (seeds 43, 44) are left out
    assert [tuple(r) for r in t[["base", "schedule", "W"]].itertuples(index=False)] == [
        ("fib", "learned", 6),
        ("fib", "stagger", 12),
        ("fib", "coprime", 12),
        ("pow2", "fixed", 8),
        ("pow2", "stagger", 6),
    ]
    assert t["W"].dtype == "int64" and list(t.index) == list(range(5))
    f13 = t[(t["schedule"] == "stagger") & (t["base"] == "fib")].iloc[0]
    assert f13["fineweb_edu"] == pytest.approx(ppl_of(1, 13000, "fineweb_edu_val"))
    # the failed f01 attempt must not reach the table: its value would clash with the done one
    with pytest.raises(ValueError, match="more than one value"):
        table1_from_final_ppl(load_final_ppl(db, include_failed=True))


def test_with_paper_columns(db):
    ours = table1_from_final_ppl(load_final_ppl(db), decimals=2)
    published = paper.perplexity()
    both = with_paper(ours, published)
    expected = ["base", "schedule", "W"]
    for c in TABLE1_COLUMNS:
        expected += [c, c + "_paper", c + "_diff"]
    assert list(both.columns) == expected
    assert len(both) == len(ours)
    row = both[(both["base"] == "pow2") & (both["schedule"] == "fixed")].iloc[0]
    assert row["fineweb_edu_paper"] == 44.78
    assert row["fineweb_edu_diff"] == pytest.approx(row["fineweb_edu"] - 44.78)
    assert len(with_paper(ours, published, how="outer")) == len(published)


def test_load_retrieval(db):
    r = load_retrieval(db)
    assert len(r) == 3
    assert list(r.columns[:10]) == [
        "source",
        "mech",
        "depth",
        "seed",
        "staggered",
        "train_d",
        "distance",
        "kind",
        "acc",
        "alphas",
    ]
    alphas = dict(zip(r["mech"], r["alphas"]))
    assert alphas == {"fib_blur": [0.56, 1.39], "gumbel_fib": [0.9841, 1.0714], "dense": []}
    assert load_retrieval(db, extra=True)["extra"].iloc[0] == {"peakGB": 3.1}


def test_missing_and_corrupt_files_name_the_path(tmp_path):
    missing = tmp_path / "nowhere.db"
    for load in (load_runs, load_final_ppl, load_retrieval):
        with pytest.raises(ValueError, match="nowhere.db"):
            load(missing)
    assert not missing.exists()
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not an SQLite file\n" * 200)
    with pytest.raises(ValueError, match="corrupt.db"):
        load_runs(corrupt)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE runs (id INTEGER, title TEXT)")
    con.close()
    with pytest.raises(ValueError, match="other.db.*lacks columns"):
        load_runs(other)
    with pytest.raises(ValueError, match="other.db.*no 'retrieval_results' table"):
        load_retrieval(other)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path} is not a file")):
        load_runs(tmp_path)  # a directory


def test_paper_tables_load():
    shapes = {1: (21, 7), 2: (6, 6), 3: (7, 6), 4: (2, 10), 5: (5, 6)}
    for n, shape in shapes.items():
        assert paper.paper_table(n).shape == shape
    assert paper.perplexity()["W"].dtype == "int64"
    assert pd.isna(paper.length_extrapolation()["W"].iloc[0])  # dense has no window
    with pytest.raises(ValueError):
        paper.paper_table(6)
    le = paper.lenextrap()
    f13 = le[(le["run"] == "f13__fib_stagger_w12") & (le["dataset"] == "fineweb_edu")]
    assert dict(zip(f13["length"], f13["ppl"].round(2))) == {1024: 42.02, 2048: 41.65, 4096: 41.45}


@pytest.mark.skipif(not REAL_DB.is_file(), reason=f"{REAL_DB} not present")
class TestRealDatabase:
    def test_table1_rebuilt_equals_paper(self):
        before = REAL_DB.stat().st_mtime_ns
        ours = table1_from_final_ppl(load_final_ppl(REAL_DB), decimals=2)
        published = pd.read_csv(ROOT / "analysis" / "reference" / "table1_perplexity.csv")
        assert ours.shape == (21, 7)
        pd.testing.assert_frame_equal(ours, published, check_dtype=False)
        both = with_paper(ours, published)
        assert (both[[c + "_diff" for c in TABLE1_COLUMNS]].abs() < 1e-9).all().all()
        assert REAL_DB.stat().st_mtime_ns == before

    def test_reference_copies_match_shared(self):
        for name in list(paper.TABLE_FILES.values()) + ["lenextrap.json", "posloss.json"]:
            assert digest(paper.REFERENCE_DIR / name) == digest(SHARED / name), name
