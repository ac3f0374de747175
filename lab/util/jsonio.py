"""JSON that fiblab prints or writes for people and scripts: strict JSON, missing numbers as null.

Python's ``json`` writes ``NaN`` and ``Infinity``, which are not JSON: strict parsers (``jq``,
JavaScript, ``json.loads(..., parse_constant=...)`` checks) reject them. `dumps` / `dump` write
``null`` for NaN, ±inf, ``pd.NA`` and ``NaT``, numpy scalars and arrays as plain numbers and
lists, and refuse anything else that JSON cannot hold (``allow_nan=False`` stays on as a guard).

>>> dumps({"ppl": float("nan"), "n": np.int64(3)})    # doctest: +SKIP
'{"ppl": null, "n": 3}'
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np

__all__ = ["clean", "dumps", "dump", "append_line", "append_row", "read_rows"]


def _missing(obj) -> bool:
    """pd.NA and NaT (without importing pandas): the scalars that are missing by type."""
    name = type(obj).__name__
    return name in ("NAType", "NaTType")


def clean(obj: Any, default: Callable[[Any], Any] | None = None) -> Any:
    """``obj`` with every float that is not finite (and every missing scalar) as ``None``,
    numpy scalars / arrays as Python numbers / lists, tuples and sets as lists, dataclasses as
    dicts; ``default`` (as ``json.dumps``'s) converts anything else first."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, float):  # numpy float64 included
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, np.generic):
        return clean(obj.item(), default)
    if isinstance(obj, np.ndarray):
        return clean(obj.tolist(), default)
    if isinstance(obj, Mapping):
        return {str(k) if not isinstance(k, str) else k: clean(v, default) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(x, default) for x in obj]
    if isinstance(obj, (set, frozenset)):
        return [clean(x, default) for x in sorted(obj, key=repr)]
    if _missing(obj):
        return None
    if is_dataclass(obj) and not isinstance(obj, type):
        return clean(asdict(obj), default)
    if hasattr(obj, "isoformat"):  # datetimes, pandas Timestamps
        return obj.isoformat()
    if default is not None:
        return clean(default(obj), None)
    return obj  # json.dumps raises TypeError naming the type


def dumps(obj: Any, *, default: Callable[[Any], Any] | None = None, **kw) -> str:
    """``json.dumps`` of :func:`clean` ``(obj)``: strict JSON, NaN / inf as null."""
    return json.dumps(clean(obj, default), allow_nan=False, **kw)


def dump(obj: Any, fp, *, default: Callable[[Any], Any] | None = None, **kw) -> None:
    """``json.dump`` of :func:`clean` ``(obj)`` to the open text file ``fp``."""
    json.dump(clean(obj, default), fp, allow_nan=False, **kw)


def append_line(path: str, line: str) -> None:
    """Append one line to a JSON-lines file durably (flushed and fsynced), creating its folder;
    a torn last line left by a killed writer is closed first, so the new line stands alone.
    The one writer of the lab's JSONL files: probe records and store journals."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "ab+") as f:
        f.seek(0, os.SEEK_END)
        if f.tell():
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write((line + "\n").encode())
        f.flush()
        os.fsync(f.fileno())


def append_row(path: str, row: Any) -> None:
    """One record appended to a JSON-lines results file (`dumps`, then `append_line`): a writer
    cut short leaves whole rows, so a study resumes from what is there."""
    append_line(path, dumps(row))


def read_rows(path: str) -> list[dict]:
    """The records of a JSON-lines file; none when it does not exist yet.  A torn line (a
    writer killed mid-write; `append_line` closes it before the next row, so it may sit
    mid-file) is left out rather than failing the read: every whole row is kept."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return out
