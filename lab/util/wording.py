"""Counted nouns and durations in messages users read: "1 cell", "2 cells", never "1 cells";
"4m10s" for every ETA and elapsed time.

One rule for every layer (the CLI, the widgets, the reports and the core's error messages), so
that a count of one reads as English wherever it is printed.
"""

from __future__ import annotations

import math

__all__ = ["plural", "duration"]


def _plural_form(noun: str) -> str:
    """The regular English plural of ``noun`` (cell → cells, process → processes, entry → entries)."""
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if len(noun) > 1 and noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and ``noun``, the noun in the plural unless n is 1: ``plural(1, "cell") == "1 cell"``,
    ``plural(3, "cell") == "3 cells"``, ``plural(0, "run") == "0 runs"``.  ``many`` gives an
    irregular plural (``plural(2, "index", "indices")``)."""
    word = noun if n == 1 else (many if many is not None else _plural_form(noun))
    return f"{n} {word}"


def duration(s: float | None, unknown: str = "–") -> str:
    """A number of seconds as the lab prints every ETA and elapsed time: 12s, 4m10s, 2h05m,
    3d04h; ``unknown`` for None or a non-finite value (nothing measured yet)."""
    if s is None or not math.isfinite(s):
        return unknown
    s = int(round(max(s, 0.0)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
