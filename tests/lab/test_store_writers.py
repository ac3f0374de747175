"""The store's writers: what a config holding numpy values, dataclasses, paths or sets is stored
as, a resumed run keeping its first start, and the exact message each bad value gets (with
nothing written)."""

from __future__ import annotations

import dataclasses
import datetime
import math
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest

from lab.store import Store


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "fiblab.db") as s:
        yield s


def count(store, table):
    with sqlite3.connect(store.path) as c:
        return c.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def raises_exactly(msg: str, call) -> None:
    """``call()`` raises a ValueError (not sqlite's IntegrityError) whose text is ``msg``."""
    with pytest.raises(ValueError) as e:
        call()
    assert type(e.value) is ValueError and str(e.value) == msg


@dataclasses.dataclass
class Schedule:
    base: str
    alphas: tuple


class OnlyItem:
    """A scalar that offers ``.item()`` but no ``.tolist()``."""

    def item(self):
        return 2.5

    def __str__(self):
        return "OnlyItem()"


# -- configs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, stored",
    [
        (Schedule("fibonacci", (0.5, 1.5)), {"base": "fibonacci", "alphas": [0.5, 1.5]}),
        (Schedule, str(Schedule)),  # the class itself is no record: its text
        (Path("runs") / "fib", str(Path("runs") / "fib")),
        ({"b", 2, "a"}, ["a", "b", 2]),  # mixed types: ordered by repr "'a'" < "'b'" < "2"
        (frozenset({10, 9}), [10, 9]),  # by repr: "10" < "9"
        (np.array([[1, 2], [3, 4]]), [[1, 2], [3, 4]]),
        (np.int64(7), 7),
        (np.float32(0.5), 0.5),
        (np.bool_(True), True),
        (OnlyItem(), 2.5),
        (datetime.date(2024, 5, 1), "2024-05-01"),  # anything else: its str
        (complex(1, 2), "(1+2j)"),
    ],
)
def test_config_values_json_cannot_hold_are_stored_as_plain_data(store, value, stored):
    store.start_run("r", {"x": value, "W": 8})
    assert store.config("r") == {"x": stored, "W": 8}


# -- runs --------------------------------------------------------------------------------------


def test_resume_keeps_the_first_start_and_a_restart_stamps_a_new_one(store):
    def started():
        return store.runs().set_index("name")["started_at"]["r"]

    store.start_run("r", {"W": 8})
    first = started()
    time.sleep(0.01)
    store.set_status("r", "failed", "killed")
    store.start_run("r", {"W": 8}, resume=True)
    assert started() == first
    assert store.runs()["status"].tolist() == ["running"]
    time.sleep(0.01)
    store.start_run("r", {"W": 8})  # from scratch
    assert started() > first


@pytest.mark.parametrize(
    "args, kwargs, msg",
    [
        (("", {}), {}, "run name must be a non-empty string, got ''"),
        ((3, {}), {}, "run name must be a non-empty string, got 3"),
        ((None, {}), {}, "run name must be a non-empty string, got None"),
        (("r", [("W", 8)]), {}, "config must be a dict, got list"),
        (("r", None), {}, "config must be a dict, got NoneType"),
        (("r", {}), {"seed": 1.5}, "seed must be an integer, got 1.5"),
        (("r", {}), {"seed": True}, "seed must be an integer, got True"),
        (("r", {}), {"seed": "0"}, "seed must be an integer, got '0'"),
    ],
)
def test_start_run_refuses_bad_values_by_name(store, args, kwargs, msg):
    raises_exactly(msg, lambda: store.start_run(*args, **kwargs))
    assert count(store, "runs") == 0


# -- metrics, evaluations, α -------------------------------------------------------------------


def test_metrics_and_alphas_refuse_bad_values_by_name(store):
    store.start_run("r", {})
    raises_exactly("step must be an integer, got 1.5", lambda: store.log_metrics("r", 1.5, {}))
    raises_exactly("step must be an integer, got 'x'", lambda: store.log_alphas("r", "x", [1.0]))
    raises_exactly(
        "alpha of layer 1 must be a number, got 'x'",
        lambda: store.log_alphas("r", 1, [0.5, "x", 1.5]),
    )
    assert count(store, "metrics") == count(store, "alphas") == 0


EVAL = {"run": "r", "step": 10, "dataset": "val", "context_len": 1024, "loss": 3.0, "tokens": 5}


@pytest.mark.parametrize(
    "bad, msg",
    [
        ({"loss": "low"}, "loss must be a number, got 'low'"),
        ({"loss": [3.0]}, "loss must be a number, got [3.0]"),
        ({"tokens": 2.5}, "tokens must be an integer, got 2.5"),
        ({"context_len": "1k"}, "context_len must be an integer, got '1k'"),
        ({"step": 1.5}, "step must be an integer, got 1.5"),
        ({"tokens": -1}, "need tokens >= 0 and context_len > 0, got -1, 1024"),
        ({"context_len": 0}, "need tokens >= 0 and context_len > 0, got 5, 0"),
        ({"context_len": -8}, "need tokens >= 0 and context_len > 0, got 5, -8"),
        ({"tokens": -1, "context_len": 0}, "need tokens >= 0 and context_len > 0, got -1, 0"),
    ],
)
def test_log_eval_refuses_bad_values_by_name(store, bad, msg):
    store.start_run("r", {})
    raises_exactly(msg, lambda: store.log_eval(**{**EVAL, **bad}))
    assert count(store, "evaluations") == 0


def test_log_eval_takes_the_smallest_sizes_and_an_unknown_loss(store):
    store.start_run("r", {})
    assert store.log_eval(**{**EVAL, "context_len": 1, "tokens": 0}) == math.exp(3.0)
    for loss in (None, float("nan")):  # no loss: the perplexity is unknown too
        assert math.isnan(store.log_eval(**{**EVAL, "loss": loss}))
    ev = store.evals("r")
    assert list(zip(ev["context_len"], ev["tokens"])) == [(1, 0), (1024, 5)]
    assert ev["loss"].isna().tolist() == [False, True]
    assert ev["perplexity"].isna().tolist() == [False, True]
