"""What the α explorer (notebook 04) and the results panel (notebook 05) share: reading the
store without creating it, frames as small HTML tables, notes, dropdown values and default
paths."""

from __future__ import annotations

import html
import math
import os
from contextlib import contextmanager

import numpy as np
import pandas as pd

from fiblab.ui.common import ROOT, runs_dir
from lab.store import Store

__all__ = [
    "NO_RUNS",
    "default_paper_db",
    "default_reports_dir",
    "reading",
    "store_label",
    "frame_html",
    "note_html",
    "pick",
]

#: What both panels say when the store holds nothing to show.
NO_RUNS = "no runs yet — run `fiblab demo` or notebook 03"


def default_paper_db() -> str:
    """The authors' database next to the project (``../shared/reference/fib.db``), or ``""``."""
    p = ROOT.parent / "shared" / "reference" / "fib.db"
    return str(p) if p.is_file() else ""


def default_reports_dir() -> str:
    """Where **export report** writes: ``reports/`` in the runs folder (FIBLAB_RUNS, else the
    project's ``runs/``), beside the runs it reports on.  Not the checkout's ``reports/``: a
    JupyterLab whose root holds the runs folder but not that checkout got a link it could not
    open (issue 42); the tests write nothing into the checkout either."""
    return os.path.join(runs_dir(), "reports")


@contextmanager
def reading(store):
    """Yield an open `Store` for ``store`` (a path or a Store), or None when the file does not
    exist: a reader never creates a store.  A Store passed in is left open."""
    if isinstance(store, Store):
        yield store
        return
    path = os.fspath(store)
    if path != ":memory:" and not os.path.isfile(os.path.expanduser(path)):
        yield None
        return
    s = Store(path)
    try:
        yield s
    finally:
        s.close()


def store_label(store) -> str:
    """How messages name ``store``: its path."""
    return store.path if isinstance(store, Store) else os.fspath(store)


def _cell(x, decimals: int) -> str:
    if (
        x is None
        or x is pd.NA
        or x is pd.NaT
        or (isinstance(x, (float, np.floating)) and math.isnan(x))
    ):
        return "—"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, (float, np.floating)):
        return f"{float(x):.{decimals}f}"
    return str(x)


def frame_html(df: pd.DataFrame | None, decimals: int = 3, cls: str = "") -> str:
    """A DataFrame as a small HTML table: floats with ``decimals`` places, missing values "—"
    (as in report.html), headers that wrap after "_" (fineweb_edu_paper → fineweb_edu_ /
    paper), inside its own scroll box (``fib-table-box``): a table wider than the panel
    scrolls there, and the notebook beside it does not."""
    if df is None:
        return ""
    head = "".join(
        "<th style='padding:2px 8px;max-width:8em;vertical-align:bottom'>"
        f"{html.escape(str(c)).replace('_', '_<wbr>')}</th>"
        for c in df.columns
    )
    body = "".join(
        "<tr>"
        + "".join(
            "<td style='padding:1px 8px;text-align:right;white-space:nowrap'>"
            f"{html.escape(_cell(v, decimals))}</td>"
            for v in rec
        )
        + "</tr>"
        for rec in df.itertuples(index=False, name=None)
    )
    return (
        f"<style>{_BOX_STYLE}</style>"
        "<div class='fib-table-box' style='max-width:100%;overflow-x:auto;line-height:1.35'>"
        f"<table class='{cls}' style='border-collapse:collapse'><tr>{head}</tr>{body}</table>"
        "</div>"
    )


# an HTML widget's content is a flex item that grows to its widest child (min-width: auto),
# which would make the whole panel scroll sideways; letting the content that holds a table box
# shrink to the widget's width makes the box, and only the box, scroll
_BOX_STYLE = ".widget-html-content:has(.fib-table-box){min-width:0;max-width:100%}"


def note_html(text: str, cls: str = "fib-note") -> str:
    """``text`` as a grey italic note (``cls`` names it for the tests)."""
    return f"<div class='{cls}' style='color:#555;font-style:italic'>{html.escape(text)}</div>"


def pick(options: list[str], current, preferred: str | None = None):
    """The dropdown value after its options change: the current one if still offered, else the
    preferred one, else the first, else None."""
    if current in options:
        return current
    if preferred in options:
        return preferred
    return options[0] if options else None
