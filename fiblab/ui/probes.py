"""The retrieval-probe panel (notebook 02): pick a grid, launch it as a separate process, watch
it train, stop it, resume it; read the accuracy per distance, the α trajectories and the Table-2
layout beside the paper's numbers.

The form (`fiblab.ui.probe_form`) is a `probes.gridspec.GridSpec` (`ProbePanel.spec()`,
`.settings()`, `.cells()`: pure, testable); the text of the live view is `fiblab.ui.probe_view`.  **launch** starts ``python -m fiblab.cli probe … --live <grid folder>`` through
`fiblab.jobs.probe_launch` in its own session, so the kernel stays free, Kernel › Interrupt or a
restart do not touch it, and a paper-scale grid can run for hours.  A background thread
(``auto_refresh``) redraws every ``every`` seconds from the grid's files: cells done, the running
cell's step, loss, α and live accuracy, the results table as cells finish, an ETA from measured
step times.  **stop** abandons the running cell between two steps (finished cells are kept, in
the results file and the store); **resume** runs the same command, which trains only the cells
not finished.  On open the panel lists the grids (and LM runs) that are running or stopped:
**attach** fills the form with that grid's settings and watches it.  `run()` (scripts, the smoke
cell) launches and waits.

Distances mean, by task: ``marked`` — the two marker distances of the task (the paper's 200,
350); ``shift`` — the trained distance of each cell (one cell per distance); ``kv`` — unused (the
evaluation distances are fixed by the sampler).  The paper's Table-2 values are shown only when
the settings are the paper's (marked task, blur mechanism, scale ``paper``, distances 200/350).
"""

from __future__ import annotations

import html
import math
import threading

import ipywidgets as W

from analysis.tables.probe_table import format_table2, table2_rows
from fiblab.jobs import probe_launch as PL
from fiblab.ui.common import (
    LaunchPanel,
    Watcher,
    image_widget,
    png,
    runs_dir,
    set_png,
    show_error,
    smoke,
    store_path,
)
from fiblab.ui.probe_form import TASKS, ProbeForm, default_distances
from fiblab.ui.probe_view import (
    legend_html,
    live_html,
    results_html,
    status_html,
)
from fiblab.ui.runlist import LMRuns, ProbeGrids, RunList
from lab.util.wording import plural

__all__ = ["ProbePanel", "default_distances", "trajectory_png", "TASKS"]


class ProbePanel(ProbeForm, LaunchPanel):
    """One probe grid: the form (`fiblab.ui.probe_form.ProbeForm`), the buttons and the live
    view; display the object (or ``.widget``) in a notebook.

    State: ``handle`` (the `fiblab.jobs.probe_launch.GridHandle` watched), ``snap`` (its last
    `GridSnapshot`), ``records`` (its finished cells), ``progress_steps`` (steps done),
    ``error`` (the message shown, or None), ``store`` / ``runs`` (where results go; grids live
    in ``<runs>/probe-grids/<name>/``).  ``out_dir`` is an older name for ``runs``.
    """

    def __init__(
        self,
        task: str = "marked",
        scale: str | None = None,
        mechanisms=("blur",),
        depths=(2, 4, 8),
        inits=("uniform", "staggered"),
        seeds=(0, 1),
        steps: int = 0,
        distances: str | None = None,
        store: str | None = None,
        out_dir: str | None = None,
        render: bool = True,
        runs: str | None = None,
        jobs: int = 1,
        name: str = "",
        auto_refresh: bool = True,
        every: float = 2.0,
        env: dict | None = None,
    ):
        super().__init__(
            task=task,
            scale=scale or ("tiny" if smoke() else "quick"),
            mechanisms=mechanisms,
            depths=depths,
            inits=inits,
            seeds=seeds,
            steps=steps,
            distances=distances,
            jobs=jobs,
            name=name,
            runs=runs or out_dir or runs_dir(),
        )
        self.store = store_path() if store is None else store
        self.render = render
        self.auto_refresh = auto_refresh
        self.every = every
        self.env = env
        self.handle: PL.GridHandle | None = None
        self.snap: PL.GridSnapshot | None = None
        self.records: list[dict] = []
        self.progress_steps = 0
        self._lock = threading.RLock()
        self._watch = Watcher(self, self._refresh_state, self._on_state, "fiblab-probe-watch")
        self._drawn = None  # what the α figure shows now (redrawn only when it changes)
        self.launch_button = W.Button(
            description="launch grid", icon="rocket", button_style="primary"
        )
        self.launch_button.add_class("fib-probe-launch")
        self.stop_button = W.Button(description="stop", icon="stop", disabled=True)
        self.stop_button.add_class("fib-probe-stop")
        self.resume_button = W.Button(description="resume", icon="play", disabled=True)
        self.resume_button.add_class("fib-probe-resume")
        self.status = W.HTML(value="no grid launched")
        self.status.add_class("fib-probe-status")
        self.progress = W.IntProgress(value=0, min=0, max=1, description="steps")
        self.progress.add_class("fib-probe-progress")
        self.progress_label = W.HTML()
        self.progress_label.add_class("fib-probe-activity")
        self.live = W.HTML()
        self.live.add_class("fib-probe-live")
        self.acc_table = W.HTML()
        self.acc_table.add_class("fib-probe-acc")
        self.legend = W.HTML()
        self.legend.add_class("fib-probe-legend")
        self.table2 = W.HTML()
        self.table2.add_class("fib-table2")
        self.log = W.HTML()
        self.image = image_widget()
        self.launch_button.on_click(self._on_launch)
        self.stop_button.on_click(self._on_stop)
        self.resume_button.on_click(self._on_resume)
        self.runlist = RunList(
            [ProbeGrids(self.runs), LMRuns(self.runs)],
            on_attach={"probe grid": self.attach},
            where={"LM run": "notebook 03"},
        )
        self.widget = W.VBox(
            [
                self.runlist.widget,
                self.form,
                self.error_box,
                W.HBox([self.launch_button, self.stop_button, self.resume_button]),
                self.share_widget(),
                self.status,
                W.HBox([self.progress, self.progress_label]),
                self.live,
                self.acc_table,
                self.legend,
                self.image,
                self.table2,
                self.log,
            ]
        )
        self.widget.add_class("fib-probe-panel")

    # -- actions ---------------------------------------------------------------------------------
    def launch(self, watch: bool | None = None) -> PL.GridHandle:
        """Start the grid the widgets describe as a separate process (ValueError before starting
        on bad input).  The same cells under the same name continue that grid."""
        show_error(self, None)
        if self.handle is not None and self.handle.is_alive():
            raise ValueError(
                f"probe grid {self.handle.name!r} is still running: stop it first, or wait "
                f"for it to finish"
            )
        spec = self.spec()
        self.cells()
        self.handle = PL.launch_grid(
            spec, self.grid_name(), store=self.store, runs_dir=self.runs, env=self.env
        )
        self.name.value = self.handle.name
        self._started(watch)
        return self.handle

    def stop(self) -> None:
        """Ask the grid to stop: the running cell is abandoned, finished cells are kept."""
        if self.handle is None:
            raise ValueError("no probe grid to stop: launch one, or attach one from the list")
        PL.request_stop(self.handle)
        self.refresh()

    def resume(self, watch: bool | None = None) -> PL.GridHandle:
        """Run the stopped (or failed) grid again: only its unfinished cells train."""
        if self.handle is None:
            raise ValueError("no probe grid to resume: attach one from the list above")
        self.handle = PL.resume(self.handle)
        self._started(watch)
        return self.handle

    def attach(self, name: str) -> None:
        """Watch a grid launched earlier (e.g. before a kernel restart); its settings fill the
        form, so launch and resume act on that grid."""
        h = PL.attach(name, self.runs)
        self.fill(h.grid_spec(), h.name)
        self.handle = h
        self._started()

    def wait(self, timeout: float | None = None, poll: float = 0.5) -> str:
        """Block (refreshing) until the grid's process exits; returns its final state."""
        if self.handle is None:
            raise ValueError("no probe grid to wait for: launch one first")
        PL.wait(self.handle, timeout=timeout, poll=poll, on_poll=self.refresh)
        return self.state

    def run(self, timeout: float | None = None) -> list[dict]:
        """Launch the grid and wait for it (scripts and the smoke cell; the buttons do not
        block): returns its records; RuntimeError if it did not finish."""
        self.launch(watch=False)
        st = self.wait(timeout)
        self.runlist.refresh()
        if st != "done":
            raise RuntimeError(
                f"probe grid {self.handle.name!r} ended {st}: {self.snap.message or 'see its log'}"
            )
        return self.records

    def _started(self, watch: bool | None = None) -> None:
        self._drawn = None
        self.log.value = ""
        self.refresh()
        self.runlist.refresh()
        if self.auto_refresh if watch is None else watch:
            self.watch()

    def watch(self) -> None:
        """Refresh every ``every`` seconds in a background thread until the grid ends."""
        self._watch.start(self.every, self.state)

    def unwatch(self) -> None:
        """Stop the background refresh (the grid itself goes on)."""
        self._watch.stop()

    def _refresh_state(self) -> str | None:
        snap = self.refresh()
        return None if snap is None else snap.state

    def _on_state(self, state: str) -> None:
        self.runlist.refresh()  # the list shows states too

    # -- the live view ---------------------------------------------------------------------------
    def refresh(self) -> PL.GridSnapshot | None:
        """Read the grid's state, records and live cells, and redraw."""
        if self.handle is None:
            return None
        with self._lock:
            snap = PL.snapshot(self.handle)
            self.snap = snap
            self._render(snap)
            # this grid's row from the same snapshot: the list and the status line agree
            self.runlist.show(ProbeGrids.row(self.handle.name, snap))
        return snap

    def _render(self, s: PL.GridSnapshot) -> None:
        alive = s.state in ("starting", "running", "stopping")
        self.launch_button.disabled = alive
        self.stop_button.disabled = s.state not in ("starting", "running")
        self.stop_button.button_style = "" if self.stop_button.disabled else "warning"
        self.resume_button.disabled = s.state not in ("stopped", "failed")
        self.status.value = status_html(s)
        self.show_share()
        self.progress.max = max(1, s.steps_total)
        self.progress.value = min(self.progress.max, s.steps_done)
        self.progress_steps = s.steps_done
        if s.state == "done":
            earlier = s.done - s.trained_now
            self.progress_label.value = (
                f"done: {plural(s.done, 'cell')} ({s.trained_now} trained now, "
                f"{earlier} from the results file)"
            )
        else:
            self.progress_label.value = html.escape(s.activity)
        self.live.value = live_html(s.running) if alive else ""
        self.records = list(s.records)
        self._show(s.records, s.running if alive else [])
        self.log.value = (
            f"<pre>{html.escape(s.message)}</pre>" if s.state == "failed" and s.message else ""
        )

    # -- outputs ---------------------------------------------------------------------------------
    def _show(self, records: list[dict], running: list[dict] = ()) -> None:
        if records:
            self.acc_table.value = results_html(records)
            if self.task.value == "marked":
                self.table2.value = self.table2_text(records)
        else:
            self.acc_table.value = self.table2.value = ""
        drawable = [r for r in running if r.get("trajectory")]
        self.legend.value = legend_html() if records or running else ""
        key = (len(records), tuple((r["key"], r.get("step")) for r in drawable))
        if self.render and (records or drawable) and key != self._drawn:
            set_png(self.image, trajectory_png(list(records) + drawable))
            self._drawn = key

    def table2_text(self, records: list[dict]) -> str:
        """The Table-2 layout per mechanism; the paper's columns only at the paper's settings."""
        match = self.paper_settings()
        parts = []
        for mech in dict.fromkeys(r["mechanism"] for r in records):
            rows = table2_rows(records, mech, paper=match)
            parts.append(f"mechanism {mech}\n{format_table2(rows)}")
        note = (
            "the paper's Table 2 (blur, marked task) is beside ours"
            if match
            else "paper columns hidden: these settings are not the paper's (marked task, scale "
            "'paper', 2,500 steps, distances 200/350)"
        )
        return (
            f"<b>Table-2 layout</b> <small>({html.escape(note)})</small>"
            f"<pre>{html.escape(chr(10).join(parts))}</pre>"
        )


def _finite(xs):
    return [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]


def trajectory_png(records: list[dict], max_cells: int = 8) -> bytes:
    """α per layer over training steps: one panel per group of cells differing only in their
    seed (mean line, lowest–highest seed band; the first ``max_cells`` groups), one legend
    naming the layers (`fiblab.ui.run_figures.probe_alphas`)."""
    from fiblab.ui.run_figures import probe_alphas

    return png(probe_alphas(records, max_cells))
