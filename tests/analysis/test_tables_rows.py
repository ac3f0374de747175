"""What every table's rows share (`analysis.tables.rows`): the paper's row order, the
``variant`` column only where it says something, the notes, rounding — against hand-written
expected tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.tables.comparable import TableUnavailable, comparable_rows
from analysis.tables.rows import config_label, finish_table, paper_order, rounded
from lab.store.variant import variant_of

# -- the paper's order -----------------------------------------------------------------------

#: By hand: dense first; then base fib, pow2, anything else; within a base the schedules fixed,
#: learned, stagger, coprime, anything else; labels alike in both by their text. The first "/"
#: splits base from schedule, so a user's "fib/stagger/v2" is a fib row of an unknown schedule.
PAPER_ORDER = [
    "dense",
    "fib/fixed",
    "fib/learned",
    "fib/stagger",
    "fib/coprime",
    "fib/blur",
    "fib/custom",
    "fib/stagger/v2",
    "pow2/fixed",
    "pow2/stagger",
    "custom/fixed",
    "custom/custom",
]
SHUFFLED = [
    "custom/custom",
    "fib/custom",
    "pow2/stagger",
    "fib/blur",
    "fib/coprime",
    "dense",
    "fib/stagger/v2",
    "custom/fixed",
    "fib/stagger",
    "pow2/fixed",
    "fib/learned",
    "fib/fixed",
]


def test_paper_order_of_config_labels():
    assert sorted(SHUFFLED) == sorted(PAPER_ORDER)
    df = pd.DataFrame({"model": SHUFFLED, "ppl": np.arange(len(SHUFFLED), dtype=float)})
    out = paper_order(df, "model")  # no W and no variant column: the label alone
    assert list(out["model"]) == PAPER_ORDER
    assert list(out.columns) == ["model", "ppl"]
    assert list(out.index) == list(range(len(PAPER_ORDER)))
    assert list(out["ppl"]) == [float(SHUFFLED.index(m)) for m in PAPER_ORDER]  # rows move whole


@pytest.mark.parametrize(
    "column",
    [
        pd.Series([64, np.nan, 0, 32, np.nan, 8], dtype="float64"),
        pd.Series([64, pd.NA, 0, 32, pd.NA, 8], dtype="Int64"),
        pd.Series([64, None, 0, 32, None, 8], dtype=object),
        pd.Series([64, pd.NA, 0, 32, pd.NA, 8], dtype=object),
    ],
    ids=["float-nan", "Int64-na", "object-None", "object-NA"],
)
def test_paper_order_by_w_missing_first_in_any_dtype(column):
    df = pd.DataFrame(
        {
            "config": [
                "fib/stagger",
                "fib/stagger",
                "fib/stagger",
                "fib/stagger",
                "dense",
                "fib/fixed",
            ],
            "W": column,
            "run": ["w64", "w?", "w0", "w32", "dense", "fixed8"],
        }
    )
    out = paper_order(df, "config")
    assert list(out["run"]) == ["dense", "fixed8", "w?", "w0", "w32", "w64"]
    assert list(out.columns) == ["config", "W", "run"]


def test_paper_order_by_variant_text_then_as_given():
    df = pd.DataFrame(
        {
            "config": ["fib/stagger"] * 5 + ["fib/fixed"],
            "W": [32, 32, 32, 32, 32, 64],
            "variant": ["steps=1500", "steps=300", "steps=12", "", "steps=300", "steps=9999"],
            "run": ["a", "b", "c", "d", "e", "f"],
        }
    )
    out = paper_order(df, "config")
    # config before W before the variant text (numbers by value); equal rows as given
    assert list(out["run"]) == ["f", "d", "c", "b", "e", "a"]


# -- the paper's name ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, label",
    [
        (("fib", "stagger"), "fib/stagger"),
        (("pow2", "fixed"), "pow2/fixed"),
        (("fib", "coprime", "sparse"), "fib/coprime"),
        (("fib", "stagger", "dense"), "dense"),
        (([1, 2, 5], "fixed"), "custom/fixed"),
        (("fib", [0.5, 1.0]), "fib/custom"),
    ],
)
def test_config_label(args, label):
    assert config_label(*args) == label


# -- rows of one variant, and the table's finish ---------------------------------------------


def _evals():
    a, b = (
        variant_of(
            {"attention": "sparse", "base": "fib", "schedule": "stagger", "W": 32, "steps": s}
        )
        for s in (12, 1500)
    )
    ev = pd.DataFrame(
        {
            "run": ["a0", "b0", "a0-again"],
            "variant_id": [a.id, b.id, a.id],
            "seed": pd.array([0, 0, 0], dtype="Int64"),
            "finished_at": ["2024-05-01T10:00:00+00:00", "2024-05-01T11:00:00+00:00", None],
            "config": "fib/stagger",
            "W": pd.array([32, 32, 32], dtype="Int64"),
            "perplexity": [10.0, 11.0, 12.0],
        }
    )
    return ev, {a.id: a, b.id: b}


def test_comparable_rows_keep_one_run_per_seed_and_say_which_variant():
    ev, variants = _evals()
    rows, notes = comparable_rows(ev, variants, "Table 4", "newest")
    assert list(rows["run"]) == ["a0", "b0"]  # 'a0-again' never finished
    assert list(rows["variant"]) == ["steps=12", "steps=1500"]
    assert len(notes) == 1 and notes[0].startswith("runs 'a0-again' and 'a0' are the same")
    with pytest.raises(TableUnavailable) as ex:
        comparable_rows(ev, variants, "Table 4", "error")
    assert ex.value.reason.startswith("Table 4: runs 'a0-again' and 'a0' are the same variant")


@pytest.mark.parametrize(
    "variant, kept",
    [
        (["", ""], False),
        ([None, None], False),
        ([np.nan, np.nan], False),
        ([None, ""], False),
        (["", "steps=12"], True),
        ([None, "steps=12"], True),
    ],
)
def test_finish_table_keeps_the_variant_column_only_where_it_says_something(variant, kept):
    out = pd.DataFrame({"config": ["fib/fixed", "fib/stagger"], "variant": variant, "x": [1, 2]})
    notes = ["runs 'a' and 'b' are the same variant and seed"]
    done = finish_table(out, notes)
    assert list(done.columns) == (["config", "variant", "x"] if kept else ["config", "x"])
    assert done.attrs["notes"] == notes
    notes.append("later")  # the table keeps its own copy
    assert done.attrs["notes"] == ["runs 'a' and 'b' are the same variant and seed"]


def test_finish_table_without_variant_column():
    done = finish_table(pd.DataFrame({"config": ["dense"], "x": [1.0]}), [])
    assert list(done.columns) == ["config", "x"] and done.attrs["notes"] == []


def test_rounded():
    def frame():
        return pd.DataFrame(
            {
                "name": ["a", "b"],
                "ppl": [12.3456, 7.0049],
                "n": pd.array([3, None], dtype="Int64"),
                "gap": pd.Series([1.005, "2.5"], dtype=object),
            }
        )

    df = frame()
    out = rounded(df, ["ppl", "n", "gap"], 2)
    assert out is df  # in place
    assert out["ppl"].tolist() == [12.35, 7.0]
    assert out["n"].tolist()[0] == 3.0 and np.isnan(out["n"].tolist()[1])
    assert out["gap"].tolist() == [round(1.005, 2), 2.5]
    assert all(out[c].dtype == np.float64 for c in ("ppl", "n", "gap"))
    assert out["name"].tolist() == ["a", "b"]
    pd.testing.assert_frame_equal(rounded(frame(), ["ppl"], None), frame())
    pd.testing.assert_frame_equal(rounded(frame(), [], 2), frame())
