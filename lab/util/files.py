"""Files written whole or not at all: the one way the lab replaces a file that others read.

A reader (a notebook polling a run's phase, a second process, the next run after a kill) sees
either the old file or the new one, never half of one: the bytes go to a temporary file beside
the target, are flushed to disk (fsync), and the temporary file is renamed over the target
(``os.replace``, atomic on one filesystem).  The temporary name is the writer's own (its pid and
a random part), so two writers of one path never share one; it starts with a dot and ends in
``.tmp``, so readers that list ``*.json`` or ``*.bin`` never see it (`is_temporary` tells).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "atomic_write", "is_temporary"]

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
