"""The store's readers: each frame's columns, in order, with their dtypes — what a notebook or
``analysis`` indexes by name — for the evaluation and event logs."""

from __future__ import annotations

from datetime import datetime, timezone

import pandas as pd
import pytest

from lab.store import Store


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "fiblab.db") as s:
        yield s


def test_evals_columns_dtypes_and_logged_at_in_utc(store):
    store.start_run("r", {})
    before = pd.Timestamp(datetime.now(timezone.utc))
    store.log_eval("r", 10, "val", 1024, loss=3.0, tokens=5)
    after = pd.Timestamp(datetime.now(timezone.utc))
    ev = store.evals()
    assert list(ev.columns) == [
        "run",
        "step",
        "dataset",
        "context_len",
        "kind",
        "loss",
        "perplexity",
        "tokens",
        "logged_at",
    ]
    assert [str(ev[c].dtype) for c in ("step", "context_len", "loss", "tokens")] == [
        "int64",
        "int64",
        "float64",
        "int64",
    ]
    assert str(ev["logged_at"].dt.tz) == "UTC"
    assert before <= ev["logged_at"].iloc[0] <= after


def test_events_columns_dtypes_and_store_wide_events_have_no_run(store):
    store.start_run("r", {})
    store.log_event("r", "checkpoint", "saved")
    store.log_event(None, "note")
    ev = store.events()
    assert list(ev.columns) == ["id", "run", "time", "kind", "message"]
    assert str(ev["id"].dtype) == "int64" and str(ev["time"].dt.tz) == "UTC"
    assert ev["run"].iloc[0] == "r" and pd.isna(ev["run"].iloc[1])
    assert ev["message"].iloc[0] == "saved" and pd.isna(ev["message"].iloc[1])
    assert store.events("r")["kind"].tolist() == ["checkpoint"]
