"""The store's connection: opening the file, checking and migrating it, and its transactions.

The file is in WAL journal mode, so readers never block the writer and the writer never blocks
readers; several processes may open it at once (writers wait on each other for up to
``busy_timeout`` seconds).  A write is one short ``BEGIN IMMEDIATE`` … ``COMMIT`` transaction
(`_write`), and every read runs in one read transaction (`snapshot`), so it sees a consistent
snapshot.  WAL needs a local filesystem (not NFS/SMB).  A file that is not a fiblab store is
refused before SQLite writes to it; an older schema is migrated (`lab.store.schema`).
`StoreConnection` is the base of `lab.store.Store`; its writers and readers build on it.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lab.store.schema import SCHEMA_VERSION, migrate

DEFAULT_PATH = "runs/fiblab.db"
BUSY_TIMEOUT_S = 30.0
GIT_TIMEOUT_S = 10.0  # a git that hangs (a stale lock, a slow network mount) must not hang us
_SQLITE_HEADER = b"SQLite format 3\x00"


class UnknownRunError(KeyError, ValueError):
    """A run name that the store does not hold (both a KeyError and a ValueError)."""

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return str(self.args[0]) if self.args else ""


def git_revision(path: str | os.PathLike | None = None) -> str | None:
    """The commit hash checked out at ``path`` (default: this package's folder), or None.

    None outside a git checkout, without a ``git`` executable, when git fails for any reason
    or takes longer than ``GIT_TIMEOUT_S`` seconds.
    """
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "--verify", "HEAD"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,  # git must never wait on (or eat) the caller's input
        )
    except (OSError, subprocess.SubprocessError):
        return None
    rev = out.stdout.strip()
    if (
        out.returncode != 0
        or len(rev) not in (40, 64)
        or any(c not in "0123456789abcdef" for c in rev)
    ):
        return None
    return rev


def _rejected(path: str, why: str) -> ValueError:
    return ValueError(
        f"{path} {why}; it was left untouched: give the path of a fiblab store or of a new "
        f"file, or move this file aside"
    )


def check_file(path: str) -> None:
    """Refuse an existing file that is not an SQLite database (or a folder), before SQLite
    touches it: ValueError naming it and the fix.  Absent or empty is a new store.  The
    command line runs it on ``--store`` before any work (`fiblab.cli.argtypes.store_arg`)."""

    if os.path.isdir(path):
        raise _rejected(path, "is a directory, not an SQLite database")
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e}") from e
    if head and head != _SQLITE_HEADER:
        raise _rejected(path, f"is not an SQLite database (it starts with {head[:8]!r})")


class StoreConnection:
    """One store file's connection: opened (and migrated) on construction, reopened in a
    forked child, closed by ``close()`` or ``with``; writers and readers subclass it."""

    def __init__(
        self, path: str | os.PathLike = DEFAULT_PATH, *, timeout: float = BUSY_TIMEOUT_S
    ) -> None:
        self.path = os.fspath(path)
        self.timeout = float(timeout)
        self._lock = threading.RLock()
        self._snapshot_depth = 0
        self._git_rev: str | None | bool = False  # False: not looked up yet
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._memory = self.path == ":memory:"
        if not self._memory:
            self.path = os.path.abspath(os.path.expanduser(self.path))
            self._check_file()
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._conn = self._open()

    # -- opening -------------------------------------------------------------------------------

    def _reject(self, why: str) -> ValueError:
        return _rejected(self.path, why)

    def _check_file(self) -> None:
        check_file(self.path)

    def _set_wal(self, conn: sqlite3.Connection) -> str:
        """Switch to WAL.  The switch needs an exclusive lock and SQLite does not always run the
        busy handler for it (two processes opening a new file at once), so retry until timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            self._check_schema(conn)  # read-only checks, before anything is written
            if not self._memory:
                mode = self._set_wal(conn)
                if str(mode).lower() != "wal":
                    raise ValueError(
                        f"{self.path}: SQLite could not switch to WAL journal mode "
                        f"(got {mode!r}); put the store on a local filesystem"
                    )
                conn.execute("PRAGMA synchronous = NORMAL")  # WAL: durable against crashes
            migrate(conn)  # with foreign keys off: see MIGRATIONS[1]
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.OperationalError:  # locked, unreadable, …: not a verdict on the file
            conn.close()
            raise
        except sqlite3.DatabaseError as e:  # "file is not a database", malformed, …
            conn.close()
            raise self._reject(f"could not be opened as an SQLite database ({e})") from e
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        # one read transaction: another process may be creating the schema right now, and the
        # version and the table list must come from the same snapshot
        conn.execute("BEGIN")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%'"
                )
            ]
        finally:
            conn.execute("COMMIT")
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"{self.path} has store schema version {version}, newer than this "
                f"fiblab's {SCHEMA_VERSION}; update fiblab to read it"
            )
        if version == 0:
            if tables:
                raise self._reject(
                    f"is an SQLite database of something else (tables "
                    f"{sorted(tables)[:5]}, no fiblab schema version)"
                )

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"Store({self.path!r}) is closed")
        if os.getpid() != self._pid:
            # A forked child must not use (or close) the parent's connection: open its own.
            self._pid = os.getpid()
            self._snapshot_depth = 0
            self._lock = threading.RLock()
            self._conn = self._open()
        return self._conn

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._conn is not None and os.getpid() == self._pid:
                self._conn.close()
            self._conn = None

    def __enter__(self) -> StoreConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.path!r}{', closed' if self._conn is None else ''})"

    @property
    def schema_version(self) -> int:
        with self._lock:
            return self._connection().execute("PRAGMA user_version").fetchone()[0]

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            if self._snapshot_depth:
                raise RuntimeError("cannot write inside Store.snapshot(); write after it ends")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def snapshot(self) -> Iterator[StoreConnection]:
        """Hold one read transaction: every reader called inside sees the same snapshot.

        Keep it short: while it is open the WAL cannot be checkpointed past it.
        """
        with self._lock:
            conn = self._connection()
            outer = self._snapshot_depth == 0
            if outer:
                conn.execute("BEGIN")
                conn.execute("SELECT 1 FROM runs LIMIT 1").fetchall()  # start the snapshot now
            self._snapshot_depth += 1
            try:
                yield self
            finally:
                self._snapshot_depth -= 1
                if outer and conn.in_transaction:
                    conn.execute("COMMIT")

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self.snapshot():
            return self._connection().execute(sql, params).fetchall()

    def _run_id(self, conn: sqlite3.Connection, run: str) -> int:
        row = conn.execute("SELECT id FROM runs WHERE name = ?", (run,)).fetchone()
        if row is None:
            raise UnknownRunError(
                f"no run named {run!r} in {self.path}; start it with "
                f"Store.start_run({run!r}, config) first"
            )
        return row[0]

    def _default_git_rev(self) -> str | None:
        if self._git_rev is False:
            self._git_rev = git_revision()
        return self._git_rev  # type: ignore[return-value]
