"""Files written whole or not at all: the one way the lab replaces a file that others read.

A reader (a notebook polling a run's phase, a second process, the next run after a kill) sees
either the old file or the new one, never half of one: the bytes go to a temporary file beside
the target, are flushed to disk (fsync), and the temporary file is renamed over the target
(``os.replace``, atomic on one filesystem).  The temporary name is the writer's own (its pid and
a random part), so two writers of one path never share one; it starts with a dot and ends in
``.tmp``, so readers that list ``*.json`` or ``*.bin`` never see it (`is_temporary` tells).
Builders that must not run twice at once (a prepared-data entry, the CPU kernel's build) take
`exclusive_lock`: an flock the OS drops when its holder dies, so a killed builder never leaves
the next one waiting.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no lock (`exclusive_lock` says so)
    fcntl = None

__all__ = ["atomic_path", "atomic_write", "exclusive_lock", "is_temporary"]

SUFFIX = ".tmp"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """``with atomic_path(p) as tmp:`` write the file ``tmp``; when the block ends without an
    error, ``tmp`` is fsynced and renamed over ``p`` (its folder created if missing); on an
    error ``tmp`` is removed and ``p`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: str | os.PathLike, data: str | bytes) -> str:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` whole or not at all; returns the
    path as a string."""
    with atomic_path(path) as tmp:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
    return str(path)


def is_temporary(name: str) -> bool:
    """Whether a file name is an `atomic_path` temporary (left behind by a killed writer)."""
    return name.startswith(".") and name.endswith(SUFFIX)


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike, waiting: str | None = None) -> Iterator[bool]:
    """``with exclusive_lock(p) as held:`` one process at a time in the block, by an exclusive
    ``flock`` on the file ``p`` (created, its folder too).  ``held`` is False where no flock can
    be had (not POSIX, a folder we cannot write, a file system without flock): the block then
    runs unlocked and the caller decides what that allows.  ``waiting``, if given, is printed to
    stderr when another holder makes us wait, rather than sit silent."""
    fd = None
    if fcntl is not None:
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError:
            fd = None
    try:
        if fd is not None:
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if waiting:
                        print(waiting, file=sys.stderr, flush=True)
                    fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                os.close(fd)
                fd = None
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)  # drops the flock
