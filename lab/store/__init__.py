"""The experiment store: every number fiblab produces, in one SQLite file.

LM training runs, evaluations, learned-α trajectories, retrieval-probe and battery results go to
one SQLite database (default ``runs/fiblab.db``) that notebooks and ``analysis`` read while
training writes.  The file is in WAL journal mode, so readers never block the writer and the
writer never blocks readers; several processes may open it at once (writers wait on each other
for up to ``busy_timeout`` seconds).  Every write method is one short ``BEGIN IMMEDIATE`` …
``COMMIT`` transaction, and every reader runs in one read transaction, so it sees a consistent
snapshot (``Store.snapshot()`` extends one snapshot over several reader calls).  WAL needs a
local filesystem (not NFS/SMB).

The schema (tables, migrations) is in `lab.store.schema`, the kind of an evaluation row
(``kind`` column) in `lab.store.evalkind`, opening and transactions in
`lab.store.connection`, the write and read methods in `lab.store.writers` and
`lab.store.readers`; `Store` joins them.  Rows of the other tables point at ``runs.id``; the API
and the readers use run names, and readers return pandas DataFrames with a ``run`` column.

    with Store("runs/fiblab.db") as s:
        s.start_run("fib-stagger-60m-s0", cfg, preset="60m", seed=0, run_dir="runs/fib-stagger")
        s.log_metrics("fib-stagger-60m-s0", 100, {"train/loss": 4.1, "lr": 3e-4})
        s.log_eval("fib-stagger-60m-s0", 100, "val", 1024, loss=3.9, tokens=262_144)
        s.set_status("fib-stagger-60m-s0", "done")
        df = s.metrics("fib-stagger-60m-s0", names="train/loss")
"""

from __future__ import annotations

from lab.store.readers import StoreReaders
from lab.store.writers import StoreWriters

__all__ = ["Store"]


class Store(StoreWriters, StoreReaders):
    """The experiment store at ``path``: open it, log to it, read DataFrames from it.

    Safe to open from several processes (and to share between threads); a forked child opens
    its own connection on first use.  Use ``with Store(p) as s:`` or call ``close()``.
    """
