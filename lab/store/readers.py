"""The store's readers: runs, configs, metrics, evaluations, α, probe and battery results and
events as
pandas DataFrames, the run's name in a ``run`` column.

Each reader is one read transaction (`StoreConnection.snapshot`), so it sees one consistent
snapshot; ``Store.snapshot()`` extends one over several reader calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lab.store.connection import StoreConnection, UnknownRunError

if TYPE_CHECKING:  # pandas is imported by the readers only, so a writer process starts faster
    import pandas as pd


def _names(x: str | Iterable[str] | None) -> list[str] | None:
    if x is None:
        return None
    return [x] if isinstance(x, str) else list(x)


def _in(column: str, values: list[Any]) -> str:
    return f"{column} IN ({', '.join('?' * len(values))})"


class StoreReaders(StoreConnection):
    """The read methods of `lab.store.Store`."""

    def _frame(self, sql: str, params: Sequence[Any], dtypes: Mapping[str, str]) -> pd.DataFrame:
        import pandas as pd

        rows = self._read(sql, params)
        df = pd.DataFrame.from_records(rows, columns=list(dtypes))
        for col, dtype in dtypes.items():
            if dtype == "datetime":
                df[col] = pd.to_datetime(df[col], utc=True, format="ISO8601")
            elif dtype != "str":
                df[col] = df[col].astype(dtype)
        return df

    @staticmethod
    def _where(filters: list[tuple[str, list[Any] | None]]) -> tuple[str, list[Any]]:
        clauses, params = [], []
        for column, values in filters:
            if values is not None:
                clauses.append(_in(column, values))
                params += values
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params

    def runs(self, kind: str | None = None, status: str | None = None) -> pd.DataFrame:
        """All runs (optionally of one kind/status), oldest first; config_json as text."""
        where, params = self._where([("kind", _names(kind)), ("status", _names(status))])
        return self._frame(
            "SELECT id, name, kind, status, preset, seed, git_rev, run_dir, message, created_at,"
            " started_at, finished_at, config_json FROM runs" + where + " ORDER BY id",
            params,
            {
                "id": "int64",
                "name": "str",
                "kind": "str",
                "status": "str",
                "preset": "str",
                "seed": "Int64",
                "git_rev": "str",
                "run_dir": "str",
                "message": "str",
                "created_at": "datetime",
                "started_at": "datetime",
                "finished_at": "datetime",
                "config_json": "str",
            },
        )

    def config(self, run: str) -> dict:
        """The config dict that ``start_run`` stored for ``run``."""
        rows = self._read("SELECT config_json FROM runs WHERE name = ?", (run,))
        if not rows:
            raise UnknownRunError(f"no run named {run!r} in {self.path}")
        return json.loads(rows[0][0])

    def metrics(
        self, run: str | Iterable[str] | None = None, names: str | Iterable[str] | None = None
    ) -> pd.DataFrame:
        """Metrics in long format: run, step, name, value (NaN for a NaN/NULL value)."""
        where, params = self._where([("r.name", _names(run)), ("m.name", _names(names))])
        return self._frame(
            "SELECT r.name, m.step, m.name, m.value FROM metrics m JOIN runs r ON r.id = m.run_id"
            + where
            + " ORDER BY r.id, m.step, m.name",
            params,
            {"run": "str", "step": "int64", "name": "str", "value": "float64"},
        )

    def evals(self, run: str | Iterable[str] | None = None) -> pd.DataFrame:
        """Evaluations: run, step, dataset, context_len, kind, loss, perplexity, tokens, …"""
        where, params = self._where([("r.name", _names(run))])
        return self._frame(
            "SELECT r.name, e.step, e.dataset, e.context_len, e.kind, e.loss, e.perplexity,"
            " e.tokens, e.logged_at FROM evaluations e JOIN runs r ON r.id = e.run_id"
            + where
            + " ORDER BY r.id, e.step, e.dataset, e.context_len, e.kind",
            params,
            {
                "run": "str",
                "step": "int64",
                "dataset": "str",
                "context_len": "int64",
                "kind": "str",
                "loss": "float64",
                "perplexity": "float64",
                "tokens": "int64",
                "logged_at": "datetime",
            },
        )

    def alphas(self, run: str | Iterable[str] | None = None) -> pd.DataFrame:
        """α per layer in long format: run, step, layer, alpha."""
        where, params = self._where([("r.name", _names(run))])
        return self._frame(
            "SELECT r.name, a.step, a.layer, a.alpha FROM alphas a JOIN runs r ON r.id = a.run_id"
            + where
            + " ORDER BY r.id, a.step, a.layer",
            params,
            {"run": "str", "step": "int64", "layer": "int64", "alpha": "float64"},
        )

    def probes(self, task: str | Iterable[str] | None = None) -> pd.DataFrame:
        """Probe results, one row per cell and distance; extra_json as text."""
        where, params = self._where([("p.task", _names(task))])
        return self._frame(
            "SELECT r.name, p.task, p.mechanism, p.depth, p.init, p.seed, p.steps, p.distance,"
            " p.accuracy, p.extra_json, p.logged_at FROM probe_results p"
            " JOIN runs r ON r.id = p.run_id"
            + where
            + " ORDER BY p.task, p.mechanism, p.depth, p.init, p.seed, p.steps, p.distance",
            params,
            {
                "run": "str",
                "task": "str",
                "mechanism": "str",
                "depth": "int64",
                "init": "str",
                "seed": "int64",
                "steps": "int64",
                "distance": "int64",
                "accuracy": "float64",
                "extra_json": "str",
                "logged_at": "datetime",
            },
        )

    def battery(self, run: str | Iterable[str] | None = None) -> pd.DataFrame:
        """RULER / LEGO battery results, one row per (run, task, n, seed): step, items,
        correct, accuracy, chance, p_value, at_chance (bool), version, settings_json and
        by_length_json as text, logged_at."""
        where, params = self._where([("r.name", _names(run))])
        return self._frame(
            "SELECT r.name, b.task, b.n, b.seed, b.step, b.items, b.correct, b.accuracy,"
            " b.chance, b.p_value, b.at_chance, b.version, b.settings_json, b.by_length_json,"
            " b.logged_at FROM battery_results b JOIN runs r ON r.id = b.run_id"
            + where
            + " ORDER BY r.id, b.task, b.n, b.seed",
            params,
            {
                "run": "str",
                "task": "str",
                "n": "int64",
                "seed": "int64",
                "step": "int64",
                "items": "int64",
                "correct": "int64",
                "accuracy": "float64",
                "chance": "float64",
                "p_value": "float64",
                "at_chance": "bool",
                "version": "int64",
                "settings_json": "str",
                "by_length_json": "str",
                "logged_at": "datetime",
            },
        )

    def last_event_id(self) -> int:
        """The id of the store's latest event (0 when there is none).  Ids only grow, so a
        launcher that notes it knows which events came after its launch, whatever the clocks
        of the machines that wrote them (`fiblab.jobs.launch`)."""
        rows = self._read("SELECT max(id) FROM events", ())
        return int(rows[0][0] or 0)

    def events(self, run: str | Iterable[str] | None = None) -> pd.DataFrame:
        """The event log in order: id, run (None for store-wide events), time, kind, message."""
        where, params = self._where([("r.name", _names(run))])
        return self._frame(
            "SELECT e.id, r.name, e.time, e.kind, e.message FROM events e"
            " LEFT JOIN runs r ON r.id = e.run_id" + where + " ORDER BY e.id",
            params,
            {"id": "int64", "run": "str", "time": "datetime", "kind": "str", "message": "str"},
        )
