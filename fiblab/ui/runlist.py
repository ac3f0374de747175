"""The runs a panel can pick up again: every LM run and probe grid launched under the runs folder
that is running, stopping, stopped or failed, each with attach / stop / resume buttons.

A kernel restart loses the panel's handle but not the process (both launchers start their runs
in a new session and record them in a JSON file beside their outputs), so on open every panel
shows this list and a user clicks *attach* instead of typing a run's name.  The list is fed by
*sources*, one per kind of run, each a small object with:

    kind                      a label shown in the table ("LM run", "probe grid")
    rows() -> list[RunRow]    the runs of that kind, most recent first
    stop(name) / resume(name) act on one of them (resume returns whatever the launcher returns)

`LMRuns` is the training runs' source (`fiblab.jobs.launch`), `ProbeGrids` the probe grids'
(`fiblab.jobs.probe_launch`); every panel lists both.
A panel passes ``on_attach={kind: callback}`` for the kinds it can show; the other kinds' attach
button is disabled, with a tooltip naming the notebook that shows them.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import ipywidgets as W

from fiblab.jobs import detached
from fiblab.jobs import launch as LA
from fiblab.jobs import probe_launch as PL
from fiblab.jobs.train_eta import format_duration
from fiblab.ui.common import Shown, error_widget, guarded, show_error
from lab.util.wording import plural

LIVE = detached.LIVE
RESUMABLE = ("stopped", "failed")
LISTED = LIVE + RESUMABLE  # finished runs are in the store's tables, not here

__all__ = ["RunRow", "LMRuns", "ProbeGrids", "RunList", "LISTED"]


@dataclass(frozen=True)
class RunRow:
    """One run as the list shows it."""

    kind: str
    name: str
    state: str  # starting | running | stopping | stopped | failed | done
    detail: str  # progress in words: "step 67 / 300", "3 of 8 cells"


class LMRuns:
    """Training runs launched with `fiblab.jobs.launch` under ``runs_dir``."""

    kind = "LM run"

    def __init__(self, runs_dir: str):
        self.runs_dir = runs_dir

    def handle(self, name: str) -> LA.RunHandle:
        return LA.attach(name, self.runs_dir)

    def rows(self) -> list[RunRow]:
        return [self.row(h.name, LA.snapshot(h)) for h in LA.list_runs(self.runs_dir)]

    @classmethod
    def row(cls, name: str, s: dict) -> RunRow:
        """A run's row from its snapshot (`fiblab.jobs.launch.snapshot`): the panel watching the run
        shows the list's row from the same snapshot as its status line, so the two agree."""
        detail = f"step {s['step']} / {s['steps']}"
        if s["state"] == "starting" and s.get("phase"):
            detail += f" · {s['phase']}"
        if s["state"] in LIVE and math.isfinite(s.get("eta_s", math.nan)):
            detail += f" · about {format_duration(s['eta_s'])} left"
        return RunRow(cls.kind, name, s["state"], detail)

    def stop(self, name: str) -> None:
        LA.request_stop(self.handle(name))

    def resume(self, name: str) -> LA.RunHandle:
        return LA.resume(self.handle(name))


class ProbeGrids:
    """Probe grids launched with `fiblab.jobs.probe_launch` under ``runs_dir``: a `RunList` source."""

    kind = "probe grid"

    def __init__(self, runs_dir: str):
        self.runs_dir = runs_dir

    def handle(self, name: str) -> PL.GridHandle:
        return PL.attach(name, self.runs_dir)

    def rows(self) -> list[RunRow]:
        return [self.row(h.name, PL.snapshot(h)) for h in PL.list_grids(self.runs_dir)]

    @classmethod
    def row(cls, name: str, s: PL.GridSnapshot) -> RunRow:
        """A grid's row from its snapshot: the panel watching the grid shows it from the same
        snapshot as its status line, so the two agree."""
        detail = f"{s.done} of {plural(s.total, 'cell')} done"
        if s.state in LIVE and math.isfinite(s.eta_s):
            detail += f" · about {format_duration(s.eta_s)} left"
        return RunRow(cls.kind, name, s.state, detail)

    def stop(self, name: str) -> None:
        PL.request_stop(self.handle(name))

    def resume(self, name: str) -> PL.GridHandle:
        return PL.resume(self.handle(name))


class RunList(Shown):
    """A table of the listed runs of every source, refreshed on demand (``refresh()``, the
    refresh button, or the panel's own timer).  ``rows`` is what is shown; ``error`` the last
    message (also in the widget's ``fib-error`` box)."""

    def __init__(
        self,
        sources,
        on_attach: dict | None = None,
        where: dict | None = None,
        listed: tuple = LISTED,
    ):
        self.sources = list(sources)
        self.listed = tuple(listed)  # the states shown (notebook 06 adds "done")
        self.on_attach = dict(on_attach or {})
        self.where = dict(where or {})  # kind → "notebook 02": where to attach the others
        self.rows: list[RunRow] = []
        self.error: str | None = None
        self.error_box = error_widget()
        self.title = W.HTML()
        self.table = W.VBox()
        self.refresh_button = W.Button(description="refresh list", icon="refresh")
        self.refresh_button.on_click(lambda b: self.refresh())
        self.widget = W.VBox(
            [W.HBox([self.title, self.refresh_button]), self.table, self.error_box]
        )
        self.widget.add_class("fib-runlist")
        self.refresh()

    @guarded
    def refresh(self) -> list[RunRow]:
        rows = []
        for src in self.sources:
            rows += [r for r in src.rows() if r.state in self.listed]
        old, self.rows = self.rows, rows
        n = len(rows)
        which = "running, finished, stopped or failed" if "done" in self.listed else None
        self.title.value = (
            f"<b>{n} run{'' if n == 1 else 's'} to pick up</b> ({which or 'running, stopped or failed'})"
            if n
            else "<b>no run is running or stopped</b> — launch one below"
        )
        keys = [(r.kind, r.name, r.state) for r in rows]
        if keys == [(r.kind, r.name, r.state) for r in old] and len(self.table.children) == n:
            for w, r in zip(self.table.children, rows):  # same runs and buttons: new words only
                w.children[0].value = self._label(r)
        else:
            self.table.children = [self._row_widget(r) for r in rows]
        show_error(self, None)
        return rows

    def show(self, row: RunRow) -> None:
        """One listed run's words from ``row`` (the panel's own snapshot of it) between the
        list's refreshes; a run not listed, or in another state, refreshes the whole list."""
        at = [i for i, r in enumerate(self.rows) if (r.kind, r.name) == (row.kind, row.name)]
        if row.state not in self.listed and not at:
            return
        if not at or self.rows[at[0]].state != row.state:
            self.refresh()
            return
        self.rows[at[0]] = row
        if at[0] < len(self.table.children):
            self.table.children[at[0]].children[0].value = self._label(row)

    def _source(self, kind: str):
        return next(s for s in self.sources if s.kind == kind)

    @staticmethod
    def _label(r: RunRow) -> str:
        return (
            f"<code>{html.escape(r.name)}</code> · {html.escape(r.kind)} · "
            f"<b>{html.escape(r.state)}</b> · {html.escape(r.detail)}"
        )

    def _row_widget(self, r: RunRow) -> W.HBox:
        label = W.HTML(self._label(r), layout=W.Layout(width="560px"))
        attach = W.Button(description="attach", icon="link", layout=W.Layout(width="90px"))
        stop = W.Button(description="stop", icon="stop", layout=W.Layout(width="80px"))
        resume = W.Button(description="resume", icon="play", layout=W.Layout(width="90px"))
        can_attach = r.kind in self.on_attach
        attach.disabled = not can_attach
        attach.tooltip = (
            "show this run in the panel below (its settings fill the form)"
            if can_attach
            else f"a {r.kind} is shown in {self.where.get(r.kind, 'its own notebook')}"
        )
        stop.disabled = r.state not in ("starting", "running")
        stop.tooltip = "stop after the current step (finished work is kept)"
        resume.disabled = r.state not in RESUMABLE
        resume.tooltip = "continue from where it stopped"
        attach.on_click(lambda b, r=r: self._attach(r))
        stop.on_click(lambda b, r=r: self._act(r, "stop"))
        resume.on_click(lambda b, r=r: self._act(r, "resume"))
        row = W.HBox([label, attach, stop, resume])
        row.add_class("fib-runlist-row")
        row.add_class(f"fib-runlist-{r.state}")
        return row

    @guarded
    def _attach(self, r: RunRow):
        return self.on_attach[r.kind](r.name)

    @guarded
    def _act(self, r: RunRow, action: str):
        out = getattr(self._source(r.kind), action)(r.name)
        if action == "resume" and r.kind in self.on_attach:
            self.on_attach[r.kind](r.name)  # watch what was just resumed
        self.refresh()
        return out
