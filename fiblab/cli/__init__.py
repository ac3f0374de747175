"""The `fiblab` command line: `main` parses (`fiblab.cli.parser` builds the whole command tree
and holds the command list `fiblab --help` prints), calls the command's handler, and turns a
user's bad input into one line and exit code 2.  Every command with real work has a module of
its own (train, probe, demo, report, measure, search, doctor, …).
"""

from __future__ import annotations

import sqlite3
import sys
import warnings

from fiblab.cli.parser import build_parser


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """The lab's own warnings ("fiblab: …") as one plain line; others as Python prints them."""
    if str(message).startswith("fiblab:"):
        return f"{message}\n"
    return _PLAIN_FORMAT(message, category, filename, lineno, line)


_PLAIN_FORMAT = warnings.formatwarning


def os_error_line(e: OSError) -> str:
    """One line for a file-system error: the path, the reason, the fix."""
    if e.filename is None:
        return f"{e}: check the paths given (or the defaults: FIBLAB_STORE, FIBLAB_RUNS)"
    return (
        f"{e.filename!r}: {e.strerror or e}; check the path (its folder must exist or be "
        f"creatable, and writable), or pass another"
    )


def main(argv: list[str] | None = None) -> int:
    previous, warnings.formatwarning = warnings.formatwarning, _format_warning
    try:
        args = build_parser().parse_args(argv)
        try:
            return args.fn(args)
        except ValueError as e:
            print(f"fiblab: error: {e}", file=sys.stderr)
            return 2
        except OSError as e:  # a path given (or defaulted) that cannot be read or written
            print(f"fiblab: error: {os_error_line(e)}", file=sys.stderr)
            return 2
        except sqlite3.DatabaseError as e:
            print(
                f"fiblab: error: the experiment store cannot be used ({e}): pass --store with "
                f"a fiblab store (a new path makes one), or '' to skip it",
                file=sys.stderr,
            )
            return 2
    finally:
        warnings.formatwarning = previous
