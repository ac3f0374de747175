"""A store-shaped journal: a training run's store writes as JSON lines, replayed into the store
later by its one writer.

A run trained on another machine (a Ray task, `fiblab.cluster.ray_run`) must not open the SQLite store
(WAL needs a local filesystem, and the store has one writer: the driver).  `lab.training.train.train`
takes ``store=StoreJournal(path)`` instead: every `start_run` / `log_metrics` / `log_eval` /
`log_alphas` / `log_event` / `set_status` call becomes one line of ``path`` (in the run's own
folder, on the storage the nodes share), appended durably, so a retried task (a node lost) adds
to the lines of its earlier attempt.  `replay` then writes them into a `lab.store.Store`:
metrics, evaluations and α are upserts (replaying twice changes nothing), and events already in
the store for the run (an earlier, interrupted replay of the same journal) are not appended
again, so nothing is duplicated or lost.  Each line carries when its call was made (``t``), and
a replayed start, status or event is stamped with that time: a resumed run's driver replays
the earlier attempt's lines too, and stamped "now" they looked like this attempt's (its row
restarted and ended as the resume began: "stopping" in every view).
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from lab.store.evalkind import modern_text
from lab.store.writers import utc_now
from lab.util.jsonio import append_line

JOURNAL_NAME = "store-journal.jsonl"
METHODS = ("start_run", "set_status", "log_metrics", "log_eval", "log_alphas", "log_event")
STAMPED = ("start_run", "set_status", "log_event")  # the store writes that stamp a time (``at``)


def _plain(x: Any) -> Any:
    """JSON-safe values: numbers as floats / ints (NaN as None), tuples as lists."""
    if hasattr(x, "item") and not isinstance(x, (list, tuple, dict)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else x
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


class StoreJournal:
    """The write methods `lab.training.train.train` calls on a store, appended to ``path`` as
    ``{"call": method, "args": [...], "kwargs": {...}, "t": ISO time}`` lines."""

    def __init__(self, path: str):
        self.path = os.fspath(path)

    def _log(self, method: str, *args: Any, **kwargs: Any) -> None:
        line = {
            "call": method,
            "args": _plain(list(args)),
            "kwargs": _plain(kwargs),
            "t": utc_now(),
        }
        append_line(self.path, json.dumps(line, default=str))

    def start_run(self, name: str, config: Mapping[str, Any], **kwargs: Any) -> None:
        self._log("start_run", name, dict(config), **kwargs)

    def set_status(self, name: str, status: str, message: str | None = None) -> None:
        self._log("set_status", name, status, message)

    def log_metrics(self, run: str, step: int, values: Mapping[str, Any]) -> None:
        self._log("log_metrics", run, step, dict(values))

    def log_eval(
        self,
        run: str,
        step: int,
        dataset: str,
        context_len: int,
        loss: float,
        tokens: int,
        kind: str = "recompute",
    ) -> None:
        self._log("log_eval", run, step, dataset, context_len, loss, tokens, kind=kind)

    def log_alphas(self, run: str, step: int, alphas: Iterable[Any]) -> None:
        self._log("log_alphas", run, step, list(alphas))

    def log_event(self, run: str | None, kind: str, message: str | None = None) -> None:
        self._log("log_event", run, kind, message)

    def close(self) -> None:
        """Nothing to close: every line is on disk when its call returns."""


def read_journal(path: str) -> list[dict]:
    """The journal's calls in order; a torn last line (a killed writer) is ignored, and a
    missing file is an empty journal."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and entry.get("call") in METHODS:
                out.append(entry)
    return out


def finished(entries: list[dict]) -> bool:
    """Whether the journal's run ended done (its last status call says 'done')."""
    statuses = [e["args"][1] for e in entries if e["call"] == "set_status"]
    return bool(statuses) and statuses[-1] == "done"


def replay(entries: list[dict], store, start: int = 0) -> int:
    """Write a journal's calls from index ``start`` on into ``store`` (a `lab.store.Store`) in
    order; returns the number of calls written.  Events the store already holds for a run (a
    previous replay of this append-only journal, cut short, or the lines before ``start``) are
    skipped, so replaying again duplicates nothing; ``start`` lets a driver follow a growing
    journal (replay what it had, later ``start=len(what it had)``).

    An event is "already held" by its kind, message and time (the line's ``t``; kind and
    message alone for a line written before lines had one), each held one consumed once:
    others write events for the run too (the launcher's "terminated"), and a count of the
    store's events then skipped as many of the journal's real ones; and a run trained again
    under a finished one's name logs the same words ("start", "step 0"), which by words alone
    were never copied (its launcher then could not tell that it had begun)."""
    runs = {e["args"][0] for e in entries if e["call"] == "start_run"}
    held: dict[str, Counter] = {}
    for run in runs:
        try:
            ev = store.events(run)
        except KeyError:  # not in the store yet (UnknownRunError is a KeyError)
            ev = None
        rows = [] if ev is None else zip(ev["kind"], ev["message"], ev["time"])
        held[run] = Counter()
        for k, m, t in rows:
            held[run][(str(k), _text(m), None)] += 1  # a line without a time matches by words
            held[run][(str(k), _text(m), _micros(t))] += 1
    written = 0
    for i, e in enumerate(entries):
        args, kwargs = list(e["args"]), dict(e.get("kwargs") or {})
        if e["call"] == "log_event" and args[0] in held:
            words = (str(args[1]), _text(args[2] if len(args) > 2 else kwargs.get("message")))
            key = (*words, _micros(e["t"]) if e.get("t") else None)
            if held[args[0]][key] > 0:
                held[args[0]][key] -= 1
                held[args[0]][(*words, None)] -= 1
                continue
        if i < start:
            continue
        if e["call"] in ("log_metrics", "log_alphas"):  # None back to NaN for the store
            args[2] = _nan(args[2])
        if e["call"] == "log_eval" and "kind" in kwargs:  # a journal from before schema 4
            kwargs["kind"] = modern_text(kwargs["kind"])
        if e["call"] in STAMPED and e.get("t"):  # when it happened (lines before 2026-12: now)
            kwargs["at"] = e["t"]
        getattr(store, e["call"])(*args, **kwargs)
        written += 1
    return written


def _micros(t: Any) -> int:
    """A time (an ISO string, a datetime or a pandas Timestamp) as integer microseconds since
    the epoch: one key for a journal line's time and the store's copy of it."""
    if isinstance(t, str):
        t = datetime.fromisoformat(t)
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return (t - _EPOCH) // timedelta(microseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _text(message: Any) -> str:
    """An event's message as the store gives it back ('' for none)."""
    return "" if message is None or message != message else str(message)  # NaN: none


def _nan(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: math.nan if v is None else v for k, v in x.items()}
    return [math.nan if v is None else v for v in x]
