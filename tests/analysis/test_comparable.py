"""Which runs a table averages (`analysis.tables.comparable`), checked on hand-built evaluation frames.

Every expected run list, note and message below is written out by hand from the rules in the
module docstring: one run per (variant, seed), the newest finished one; a run that has not
finished (or whose finish time is not a date) is older than any finished one; a tie goes to the
later run; duplicates are named in notes (oldest first) or, with ``duplicates="error"``, refuse.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.tables.comparable import (
    TableUnavailable,
    natural_key,
    one_run_per_seed,
    variant_labels,
)
from lab.store.variant import variant_of

FIX = "name the runs to use (`fiblab report RUN …`, or runs=[...])"


def evals(runs, datasets=("fineweb_edu", "wikitext")) -> pd.DataFrame:
    """An evaluation frame as `analysis.tables.runs.lm_evals` gives it (oldest run first, one row per
    dataset): ``runs`` are (run, variant_id, seed, finished_at, config, W) tuples."""
    rows = [
        {
            "run": run,
            "variant_id": vid,
            "seed": seed,
            "finished_at": done,
            "config": config,
            "W": w,
            "dataset": d,
            "perplexity": 10.0 + i + j / 10,
        }
        for i, (run, vid, seed, done, config, w) in enumerate(runs)
        for j, d in enumerate(datasets)
    ]
    cols = ["run", "variant_id", "seed", "finished_at", "config", "W", "dataset", "perplexity"]
    df = pd.DataFrame(rows, columns=cols)
    df["seed"] = df["seed"].astype("Int64")
    df["W"] = df["W"].astype("Int64")
    return df


def kept(ev: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(ev["run"]))


def note(others: str, newest: str, where: str) -> str:
    return (
        f"runs {others} and '{newest}' are the same variant and seed ({where}): the newest "
        f"finished, '{newest}', is used; {FIX} to choose another"
    )


# -- TableUnavailable ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, text, fix",
    [
        (("no runs evaluated at T=1024",), "no runs evaluated at T=1024", ""),
        (("no runs", "run `fiblab train`"), "no runs; run `fiblab train`", "run `fiblab train`"),
    ],
)
def test_table_unavailable_says_why_and_what_to_run(args, text, fix):
    e = TableUnavailable(*args)
    assert str(e) == text and e.reason == args[0] and e.fix == fix
    assert isinstance(e, ValueError)  # the CLI's exit code 2, not a traceback


# -- one run per (variant, seed) -------------------------------------------------------------

T0 = "2024-05-01T10:00:00+00:00"
T1 = "2024-05-01T11:00:00+00:00"
T2 = "2024-05-01T12:00:00+00:00"


@pytest.mark.parametrize(
    "runs, expect_kept, expect_notes",
    [
        # one run of each (variant, seed): all kept, nothing to say
        (
            [("a", "v1", 0, T0, "fib/stagger", 32), ("b", "v1", 1, T1, "fib/stagger", 32)],
            ["a", "b"],
            [],
        ),
        # the first run finished last: it is the newest
        (
            [("late", "v1", 0, T2, "fib/stagger", 32), ("early", "v1", 0, T1, "fib/stagger", 32)],
            ["late"],
            [note("'early'", "late", "fib/stagger W=32, seed 0")],
        ),
        # a run that has not finished (or whose time is no date) is older than a finished one
        (
            [
                ("done", "v1", 3, T0, "fib/stagger", 32),
                ("running", "v1", 3, None, "fib/stagger", 32),
                ("garbled", "v1", 3, "not a date", "fib/stagger", 32),
            ],
            ["done"],
            [note("'running', 'garbled'", "done", "fib/stagger W=32, seed 3")],
        ),
        # equal finish times (and two unfinished runs): the later run wins
        (
            [
                ("x1", "v1", 0, T1, "pow2/fixed", 0),
                ("x2", "v1", 0, T1, "pow2/fixed", 0),
                ("u1", "v2", 0, None, "dense", None),
                ("u2", "v2", 0, None, "dense", None),
            ],
            ["x2", "u2"],
            [
                note("'x1'", "x2", "pow2/fixed W=0, seed 0"),
                note("'u1'", "u2", "dense, seed 0"),
            ],
        ),
        # three runs of one variant and seed: both older ones named, oldest first
        (
            [
                ("r1", "v1", 5, T0, "fib/fixed", 64),
                ("r2", "v1", 5, T1, "fib/fixed", 64),
                ("r3", "v1", 5, T2, "fib/fixed", 64),
            ],
            ["r3"],
            [note("'r1', 'r2'", "r3", "fib/fixed W=64, seed 5")],
        ),
        # a run of unknown seed is kept, and two such runs of one variant are duplicates
        (
            [
                ("s0", "v1", 0, T0, "fib/stagger", 32),
                ("n1", "v1", None, T0, "fib/stagger", 32),
                ("n2", "v1", None, T1, "fib/stagger", 32),
            ],
            ["s0", "n2"],
            [note("'n1'", "n2", "fib/stagger W=32, seed unknown")],
        ),
        # notes in the order of the runs, not of the variant ids
        (
            [
                ("z1", "vz", 1, T0, "fib/coprime", 16),
                ("a1", "va", 0, T0, "fib/learned", 8),
                ("z2", "vz", 1, T1, "fib/coprime", 16),
                ("a2", "va", 0, T1, "fib/learned", 8),
            ],
            ["z2", "a2"],
            [
                note("'z1'", "z2", "fib/coprime W=16, seed 1"),
                note("'a1'", "a2", "fib/learned W=8, seed 0"),
            ],
        ),
    ],
)
def test_one_run_per_seed_keeps_the_newest_finished(runs, expect_kept, expect_notes):
    ev = evals(runs)
    out, notes = one_run_per_seed(ev, "Table 1")  # duplicates="newest" by default
    assert kept(out) == expect_kept
    assert notes == expect_notes
    # every evaluation of a kept run, unchanged and in the input's order
    pd.testing.assert_frame_equal(out, ev[ev["run"].isin(expect_kept)])


def test_finish_times_in_other_time_zones_compare_as_instants():
    # 'paris' reads 12:00 but finished at 10:00 UTC, an hour before 'london'
    ev = evals(
        [
            ("london", "v1", 0, "2024-05-01T11:00:00+00:00", "fib/stagger", 32),
            ("paris", "v1", 0, "2024-05-01T12:00:00+02:00", "fib/stagger", 32),
        ]
    )
    out, notes = one_run_per_seed(ev, "Table 1", "newest")
    assert kept(out) == ["london"]
    assert notes == [note("'paris'", "london", "fib/stagger W=32, seed 0")]


def test_duplicates_error_names_the_runs_and_how_to_choose():
    ev = evals(
        [
            ("ok", "v0", 0, T0, "dense", None),
            ("first", "v1", 7, T0, "dense", None),
            ("again", "v1", 7, T1, "dense", None),
        ]
    )
    with pytest.raises(TableUnavailable) as ex:
        one_run_per_seed(ev, "Table 5", duplicates="error")
    reason = (
        "Table 5: runs 'first' and 'again' are the same variant and seed (dense, seed 7), so "
        "averaging them would count one seed twice"
    )
    assert ex.value.reason == reason and ex.value.fix == FIX
    assert str(ex.value) == f"{reason}; {FIX}"
    out, notes = one_run_per_seed(ev[ev["run"] != "again"], "Table 5", duplicates="error")
    assert kept(out) == ["ok", "first"] and notes == []


def test_one_run_per_seed_edges():
    empty = evals([])
    out, notes = one_run_per_seed(empty, "Table 1")
    assert out.empty and notes == []
    with pytest.raises(ValueError, match=r"duplicates='both' must be one of \('newest', 'error'\)"):
        one_run_per_seed(empty, "Table 1", duplicates="both")


# -- the variant text ------------------------------------------------------------------------


def _variant(**kw):
    return variant_of({"attention": "sparse", "base": "fib", "schedule": "stagger", **kw})


def test_variant_labels_are_per_row_of_the_frame_and_keep_its_index():
    short, long_ = _variant(W=32, steps=12), _variant(W=32, steps=1500)
    variants = {short.id: short, long_.id: long_}
    ev = pd.DataFrame(
        {"variant_id": [short.id, long_.id, short.id], "config": ["fib/stagger"] * 3, "W": 32},
        index=pd.Index(["r1", "r2", "r3"], name="run"),
    )
    got = variant_labels(ev, variants, ["config", "W"])
    expected = pd.Series(["steps=12", "steps=1500", "steps=12"], index=ev.index)
    pd.testing.assert_series_equal(got, expected, check_dtype=False, check_names=False)
    none = ev.iloc[:0]  # no rows: an empty text column aligned with the (empty) frame
    got = variant_labels(none, variants, ["config", "W"])
    assert got.empty and got.dtype == object
    pd.testing.assert_index_equal(got.index, none.index)


# -- the sort key of a variant text ----------------------------------------------------------


@pytest.mark.parametrize(
    "texts, expected",
    [
        (["steps=1500", "steps=12", "steps=300"], ["steps=12", "steps=300", "steps=1500"]),
        # several numbers: the first that differs decides, by value
        (
            ["steps=20, seq_len=512", "steps=3, seq_len=1024", "steps=20, seq_len=64"],
            ["steps=3, seq_len=1024", "steps=20, seq_len=64", "steps=20, seq_len=512"],
        ),
        # text before numbers decides as text; a text that is a prefix sorts first
        (["lr=0.3", "K=10", "K=9", "K", "W=2"], ["K", "K=9", "K=10", "W=2", "lr=0.3"]),
        # leading numbers and text that starts with a digit
        (["10x", "9y", "9", "x"], ["9", "9y", "10x", "x"]),
    ],
)
def test_natural_key_orders_numbers_by_value(texts, expected):
    assert sorted(texts, key=natural_key) == expected


@pytest.mark.parametrize("missing", [None, pd.NA])
def test_natural_key_of_no_text_is_that_of_the_empty_text(missing):
    assert natural_key(missing) == natural_key("")
    assert sorted(["b", missing, "a"], key=natural_key) == [missing, "a", "b"]


def test_natural_key_of_a_non_text():
    assert natural_key(12) == natural_key("12")
    assert natural_key(np.float64(1.5)) == natural_key("1.5")
