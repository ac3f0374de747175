"""Argument checks with one message each: the value, then what it must be
(``seq_len=0 must be a positive integer``), so a user reads what to change.  NumPy integers
count (they register as ``numbers.Integral``); numpy is not imported, so `fiblab --help` stays
light."""

from __future__ import annotations

import numbers
import re

__all__ = ["positive_int", "nonneg_int", "folder_name"]


def _why(hint: str) -> str:
    return f" ({hint})" if hint else ""


def positive_int(value, name: str, hint: str = "") -> int:
    """``value`` as an int when it is an integer ≥ 1 (bools and floats are not), else ValueError.
    ``hint`` says what the number counts or what to pass; it ends the message in brackets."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer{_why(hint)}")
    return int(value)


def nonneg_int(value, name: str, hint: str = "") -> int:
    """``value`` as an int when it is an integer ≥ 0 (bools and floats are not), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name}={value!r} must be an integer >= 0{_why(hint)}")
    return int(value)


def folder_name(value, what: str, example: str) -> str:
    """``value`` when it can name one folder under its parent (letters, digits, '.', '_', '-';
    not starting with '.' or '-'), else ValueError: a run, grid or search name becomes a folder,
    and '../x' or 'a/b' would put it outside the runs folder."""
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value):
        raise ValueError(
            f"{what} name {value!r} cannot be a folder name: use letters, digits, '.', '_' or "
            f"'-' (e.g. {example})"
        )
    return value
