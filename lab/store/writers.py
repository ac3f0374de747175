"""The store's writers: runs and their status, metrics, evaluations, α, probe records, battery
results, events.

Each write method is one short transaction (`StoreConnection._write`); logging the same
metric, evaluation, α or probe record again replaces it (events only append).  Values are checked on the way in: a metric, loss or α must be a number
(NaN is stored as NULL), a step or count an integer, else ValueError naming the value.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, is_dataclass
from datetime import datetime, timezone
from typing import Any

from lab.store.connection import StoreConnection

STATUSES = ("pending", "running", "done", "failed", "stopped")


def utc_now() -> str:
    """Now as the store writes times: ISO-8601, UTC, microseconds."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _stamp(at: str | None) -> str:
    """``at`` (an ISO-8601 time with its zone: when a journal's call was made, `lab.store.journal`)
    as the store writes times; now when None."""
    if at is None:
        return utc_now()
    try:
        t = datetime.fromisoformat(str(at))
    except ValueError:
        t = None
    if t is None or t.tzinfo is None:
        raise ValueError(f"at must be an ISO-8601 time with its zone, got {at!r}")
    return t.astimezone(timezone.utc).isoformat(timespec="microseconds")


def _json_default(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    for attr in ("tolist", "item"):  # numpy arrays/scalars, torch tensors
        if hasattr(obj, attr):
            return getattr(obj, attr)()
    return str(obj)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=_json_default)


def _real(value: Any, what: str) -> float | None:
    """A float for a REAL column (NaN becomes NULL, which SQLite would store anyway)."""
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    return None if math.isnan(v) else v


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    try:
        i = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be an integer, got {value!r}") from None
    if i != value and not (hasattr(value, "item") and i == value.item()):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return i


class StoreWriters(StoreConnection):
    """The write methods of `lab.store.Store`."""

    def start_run(
        self,
        name: str,
        config: Mapping[str, Any],
        kind: str = "lm",
        preset: str | None = None,
        seed: int | None = None,
        run_dir: str | os.PathLike | None = None,
        git_rev: str | None = None,
        resume: bool = False,
        at: str | None = None,
    ) -> int:
        """Create run ``name`` (or restart it: same row, new config) with status 'running'.

        ``resume=True`` continues the run from a checkpoint: its first ``started_at`` is kept
        (a restart from scratch stamps a new one).  ``git_rev`` defaults to this checkout's
        commit (None outside git).  ``at``: when the start happened (a journal's replay passes
        the line's time, so a replayed old start does not look new); default now.  Returns the
        run's id.

        Two writers starting the same name (two processes, or two Store objects) share this
        one row: the later start's config wins, their metrics / evaluations / α at the same key
        are one row each (the later write's value), their events all append; nothing is
        duplicated or lost (tests/lab/test_store_crash.py).
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"run name must be a non-empty string, got {name!r}")
        if not isinstance(config, Mapping):
            raise ValueError(f"config must be a dict, got {type(config).__name__}")
        config_json = _dumps(dict(config))
        seed_ = None if seed is None else _int(seed, "seed")
        rev = git_rev if git_rev is not None else self._default_git_rev()
        rd = None if run_dir is None else os.fspath(run_dir)
        now = _stamp(at)
        with self._write() as conn:
            conn.execute(
                """INSERT INTO runs (name, kind, status, config_json, preset, seed, git_rev,
                                     run_dir, message, created_at, started_at, finished_at)
                   VALUES (?, ?, 'running', ?, ?, ?, ?, ?, NULL, ?, ?, NULL)
                   ON CONFLICT (name) DO UPDATE SET
                       kind = excluded.kind, status = 'running',
                       config_json = excluded.config_json, preset = excluded.preset,
                       seed = excluded.seed, git_rev = excluded.git_rev,
                       run_dir = excluded.run_dir, message = NULL,
                       started_at = CASE WHEN ? THEN COALESCE(runs.started_at, excluded.started_at)
                                    ELSE excluded.started_at END,
                       finished_at = NULL""",
                (name, kind, config_json, preset, seed_, rev, rd, now, now, bool(resume)),
            )
            return self._run_id(conn, name)

    def set_status(
        self, name: str, status: str, message: str | None = None, at: str | None = None
    ) -> None:
        """Set a run's status; 'running' stamps started_at, 'done'/'failed' stamp finished_at.

        ``message`` (e.g. the failure reason) replaces the run's message when given; ``at`` is
        the stamp's time (as `start_run`'s; default now).
        """
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        now = _stamp(at)
        started = "?" if status == "running" else "started_at"
        finished = (
            "?"
            if status in ("done", "failed")
            else "NULL"
            if status == "running"
            else "finished_at"
        )
        params: list[Any] = [status, message]
        params += [now] if status == "running" else []
        params += [now] if status in ("done", "failed") else []
        with self._write() as conn:
            cur = conn.execute(
                f"UPDATE runs SET status = ?, message = COALESCE(?, message), "
                f"started_at = {started}, finished_at = {finished} WHERE name = ?",
                (*params, name),
            )
            if cur.rowcount == 0:
                self._run_id(conn, name)  # raises UnknownRunError

    def log_metrics(self, run: str, step: int, values: Mapping[str, Any]) -> None:
        """Log ``{name: value}`` at ``step`` in one transaction; a logged key is replaced."""
        step_ = _int(step, "step")
        rows = [(str(k), _real(v, f"metric {k!r}")) for k, v in values.items()]
        with self._write() as conn:
            rid = self._run_id(conn, run)
            conn.executemany(
                """INSERT INTO metrics (run_id, step, name, value) VALUES (?, ?, ?, ?)
                   ON CONFLICT (run_id, step, name) DO UPDATE SET value = excluded.value""",
                [(rid, step_, k, v) for k, v in rows],
            )

    def log_eval(
        self,
        run: str,
        step: int,
        dataset: str,
        context_len: int,
        loss: float,
        tokens: int,
        kind: str = "recompute",
    ) -> float:
        """Log an evaluation: ``loss`` is the mean NLL (nats) per scored token, ``tokens`` the
        number scored.  Stores and returns ``perplexity = exp(loss)`` (inf on overflow)."""
        loss_ = _real(loss, "loss")
        if loss_ is None:
            ppl = math.nan
        else:
            try:
                ppl = math.exp(loss_)
            except OverflowError:
                ppl = math.inf
        tokens_ = _int(tokens, "tokens")
        ctx = _int(context_len, "context_len")
        if tokens_ < 0 or ctx <= 0:
            raise ValueError(f"need tokens >= 0 and context_len > 0, got {tokens_}, {ctx}")
        with self._write() as conn:
            rid = self._run_id(conn, run)
            conn.execute(
                """INSERT INTO evaluations (run_id, step, dataset, context_len, kind, loss,
                                            perplexity, tokens, logged_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (run_id, step, dataset, context_len, kind) DO UPDATE SET
                       loss = excluded.loss, perplexity = excluded.perplexity,
                       tokens = excluded.tokens, logged_at = excluded.logged_at""",
                (
                    rid,
                    _int(step, "step"),
                    dataset,
                    ctx,
                    kind,
                    loss_,
                    _real(ppl, "perplexity"),
                    tokens_,
                    utc_now(),
                ),
            )
        return ppl

    def log_alphas(self, run: str, step: int, alphas: Iterable[Any]) -> None:
        """Log one α per layer (layer = position in ``alphas``) at ``step``."""
        step_ = _int(step, "step")
        rows = [(layer, _real(a, f"alpha of layer {layer}")) for layer, a in enumerate(alphas)]
        with self._write() as conn:
            rid = self._run_id(conn, run)
            conn.executemany(
                """INSERT INTO alphas (run_id, step, layer, alpha) VALUES (?, ?, ?, ?)
                   ON CONFLICT (run_id, step, layer) DO UPDATE SET alpha = excluded.alpha""",
                [(rid, step_, layer, a) for layer, a in rows],
            )

    def log_probe(self, record: Mapping[str, Any]) -> str:
        """Store one retrieval-probe record (as ``probes.runner.run_cell`` returns it).

        Needs keys task, mechanism, depth, init, seed, steps and acc ({distance: accuracy});
        uses alphas, seconds, trajectory ([{step, alphas}]) and loss ([{step, loss}]) when
        present.  The record lands under a run of kind 'probe' named ``record['key']`` (or
        task/mechanism/d<depth>/<init>/s<seed>/n<steps>): one probe_results row per distance,
        the trajectory in alphas, the loss curve in metrics ('loss'), and everything else in
        extra_json.  Logging a record again replaces it.  Returns the run name.
        """
        need = ("task", "mechanism", "depth", "init", "seed", "steps", "acc")
        missing = [k for k in need if k not in record]
        if missing:
            raise ValueError(f"probe record lacks {missing} (has {sorted(record)})")
        task, mech, init = str(record["task"]), str(record["mechanism"]), str(record["init"])
        depth, seed = _int(record["depth"], "depth"), _int(record["seed"], "seed")
        steps = _int(record["steps"], "steps")
        name = str(record.get("key") or f"{task}/{mech}/d{depth}/{init}/s{seed}/n{steps}")
        acc = {
            _int(int(str(d)), "distance"): _real(a, f"accuracy at distance {d}")
            for d, a in dict(record["acc"]).items()
        }
        trajectory = list(record.get("trajectory") or [])
        if not trajectory and record.get("alphas") is not None:
            trajectory = [{"step": steps, "alphas": record["alphas"]}]
        alpha_rows = [
            (_int(t["step"], "trajectory step"), layer, _real(a, "alpha"))
            for t in trajectory
            for layer, a in enumerate(t["alphas"])
        ]
        loss_rows = [
            (_int(p["step"], "loss step"), _real(p["loss"], "loss"))
            for p in record.get("loss") or []
        ]
        columns = set(need) | {"trajectory", "loss"}
        extra = _dumps({k: v for k, v in record.items() if k not in columns})
        config = _dumps(
            {
                k: v
                for k, v in record.items()
                if k not in ("acc", "trajectory", "loss", "alphas", "seconds")
            }
        )
        now = utc_now()
        with self._write() as conn:
            row = conn.execute("SELECT kind FROM runs WHERE name = ?", (name,)).fetchone()
            if row is not None and row[0] != "probe":
                raise ValueError(f"run {name!r} already exists with kind {row[0]!r}, not 'probe'")
            conn.execute(
                """INSERT INTO runs (name, kind, status, config_json, seed, git_rev, created_at,
                                     started_at, finished_at)
                   VALUES (?, 'probe', 'done', ?, ?, ?, ?, NULL, ?)
                   ON CONFLICT (name) DO UPDATE SET
                       status = 'done', config_json = excluded.config_json,
                       seed = excluded.seed, git_rev = excluded.git_rev,
                       message = NULL, finished_at = excluded.finished_at""",
                (name, config, seed, record.get("git_rev") or self._default_git_rev(), now, now),
            )
            rid = self._run_id(conn, name)
            for table in ("probe_results", "alphas", "metrics"):  # the record replaces them
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (rid,))
            conn.executemany(
                """INSERT INTO probe_results (run_id, task, mechanism, depth, init, seed, steps,
                                              distance, accuracy, extra_json, logged_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (run_id, distance) DO UPDATE
                   SET run_id = excluded.run_id, accuracy = excluded.accuracy,
                       extra_json = excluded.extra_json, logged_at = excluded.logged_at""",
                [
                    (rid, task, mech, depth, init, seed, steps, d, a, extra, now)
                    for d, a in sorted(acc.items())
                ],
            )
            conn.executemany(
                """INSERT INTO alphas (run_id, step, layer, alpha) VALUES (?, ?, ?, ?)
                   ON CONFLICT (run_id, step, layer) DO UPDATE SET alpha = excluded.alpha""",
                [(rid, *r) for r in alpha_rows],
            )
            conn.executemany(
                """INSERT INTO metrics (run_id, step, name, value) VALUES (?, ?, 'loss', ?)
                   ON CONFLICT (run_id, step, name) DO UPDATE SET value = excluded.value""",
                [(rid, *r) for r in loss_rows],
            )
        return name

    def log_battery(self, run: str, result: Mapping[str, Any]) -> None:
        """Store one RULER / LEGO battery result of ``run`` (a `probes.battery_run.BatteryRow`
        or its dict): keys task, n (items per chain length), seed, step, items, correct,
        chance, p_value, at_chance, version, settings and by_length.  The accuracy stored is
        correct / items.  Logging the same (run, task, n, seed) again replaces the row."""
        r = asdict(result) if is_dataclass(result) and not isinstance(result, type) else result
        need = ("task", "n", "seed", "step", "items", "correct", "chance", "p_value")
        need += ("at_chance", "version", "settings", "by_length")
        missing = [k for k in need if k not in r]
        if missing:
            raise ValueError(f"battery result lacks {missing} (has {sorted(r)})")
        n, seed, items = _int(r["n"], "n"), _int(r["seed"], "seed"), _int(r["items"], "items")
        correct = _int(r["correct"], "correct")
        if n < 1 or seed < 0 or not 0 <= correct <= items or items < 1:
            raise ValueError(
                f"battery result needs n >= 1, seed >= 0 and 0 <= correct <= items >= 1; got "
                f"n={n}, seed={seed}, correct={correct}, items={items}"
            )
        chance = _real(r["chance"], "chance")
        if chance is None or not 0 < chance < 1:
            raise ValueError(f"chance must be a rate in (0, 1), got {r['chance']!r}")
        row = (
            str(r["task"]),
            n,
            seed,
            _int(r["step"], "step"),
            items,
            correct,
            correct / items,
            chance,
            _real(r["p_value"], "p_value"),
            int(bool(r["at_chance"])),
            _int(r["version"], "version"),
            _dumps(dict(r["settings"])),
            _dumps({str(k): _real(v, f"accuracy at {k}") for k, v in dict(r["by_length"]).items()}),
            utc_now(),
        )
        with self._write() as conn:
            rid = self._run_id(conn, run)
            conn.execute(
                """INSERT INTO battery_results (run_id, task, n, seed, step, items, correct,
                       accuracy, chance, p_value, at_chance, version, settings_json,
                       by_length_json, logged_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (run_id, task, n, seed) DO UPDATE SET
                       step = excluded.step, items = excluded.items,
                       correct = excluded.correct, accuracy = excluded.accuracy,
                       chance = excluded.chance, p_value = excluded.p_value,
                       at_chance = excluded.at_chance, version = excluded.version,
                       settings_json = excluded.settings_json,
                       by_length_json = excluded.by_length_json,
                       logged_at = excluded.logged_at""",
                (rid, *row),
            )

    def log_event(
        self, run: str | None, kind: str, message: str | None = None, at: str | None = None
    ) -> int:
        """Append an event for ``run`` (None: a store-wide event) at ``at`` (as `start_run`'s;
        default now); returns its id."""
        stamp = _stamp(at)
        with self._write() as conn:
            rid = None if run is None else self._run_id(conn, run)
            cur = conn.execute(
                "INSERT INTO events (run_id, time, kind, message) VALUES (?, ?, ?, ?)",
                (rid, stamp, kind, message),
            )
            return int(cur.lastrowid)
