"""Argument checks with one message each: the value, then what it must be
(``seq_len=0 must be a positive integer``), so a user reads what to change."""

from __future__ import annotations

import numpy as np

__all__ = ["positive_int", "nonneg_int"]


def positive_int(value, name: str) -> int:
    """``value`` as an int when it is an integer ≥ 1 (bools and floats are not), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return int(value)


def nonneg_int(value, name: str) -> int:
    """``value`` as an int when it is an integer ≥ 0 (bools and floats are not), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name}={value!r} must be an integer >= 0")
    return int(value)
