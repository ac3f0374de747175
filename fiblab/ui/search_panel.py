"""The schedule-search panel (notebook 06): pick a space, objectives, trials and a seed, launch
`fiblab search …` as a separate process, watch it search, stop it, resume it.

**launch** starts the search through `fiblab.jobs.search_launch` (the lifecycle of `fiblab.jobs.detached`,
as notebooks 02 and 03 launch theirs) in ``<runs>/searches/<name>/``; the kernel stays free and a
restart does not stop it.  A `fiblab.ui.common.Watcher` re-reads the search's Optuna study every
``every`` seconds: trials done / total, the best value so far per objective (a step line over the
trial numbers), the Pareto front when there are two objectives, and the per-layer α of the
leading three schedules beside the linear stagger (`fiblab.ui.search_view`).  **stop** terminates
it (finished trials stay in the study and the store); **resume** continues the study to its
trials.  On open the panel lists the searches under the runs folder (running, finished, stopped,
failed): **attach** shows one and fills the form with its settings.  `run()` launches and waits
(scripts, the smoke cell).
"""

from __future__ import annotations

import html
import threading

import ipywidgets as W

from analysis.experiments.search.objectives import OBJECTIVES
from fiblab.jobs import search_launch as SL
from fiblab.ui.common import (
    LaunchPanel,
    Watcher,
    error_widget,
    html_table,
    image_widget,
    png,
    runs_dir,
    set_png,
    show_error,
    store_path,
)
from fiblab.ui.runlist import LISTED, RunList, RunRow
from fiblab.ui.search_view import (
    SearchView,
    alpha_figure,
    front_figure,
    progress_figure,
    search_view,
)

__all__ = ["SearchPanel", "Searches", "SPACES"]

SPACES = (
    "linear",
    "coprime",
    "free",
    "linear+base",
    "free+base",
    "free+window",
    "free+base+window",
)


class Searches:
    """Searches launched with `fiblab.jobs.search_launch` under ``runs_dir``: a `RunList` source."""

    kind = "search"

    def __init__(self, runs_dir: str):
        self.runs_dir = runs_dir

    def rows(self) -> list[RunRow]:
        return [self.row(h, SL.state(h)) for h in SL.list_searches(self.runs_dir)]

    @classmethod
    def row(cls, h: SL.SearchHandle, s: SL.SearchState) -> RunRow:
        """A search's row from its state: the panel watching it shows its own (`RunList.show`),
        so the list and the panel's trial count agree."""
        detail = f"{s.done} / {s.total} trials · {h.space} · {'+'.join(h.objectives)}"
        return RunRow(cls.kind, h.name, s.state, detail)

    def stop(self, name: str) -> None:
        SL.request_stop(SL.attach(name, self.runs_dir))

    def resume(self, name: str) -> SL.SearchHandle:
        return SL.resume(SL.attach(name, self.runs_dir))


class SearchPanel(LaunchPanel):
    """One search: the form, the buttons and the live view; display the object (or ``.widget``).

    State: ``handle`` (the `fiblab.jobs.search_launch.SearchHandle` watched), ``snap`` (its last
    `SearchState`), ``view`` (its last `SearchView`: trial values, best so far, front, leaders),
    ``error`` (the message shown, or None)."""

    def __init__(
        self,
        space: str = "linear",
        objectives=("distinct",),
        trials: int = 20,
        seed: int = 0,
        layers: int = 0,
        name: str = "",
        store: str | None = None,
        runs: str | None = None,
        render: bool = True,
        auto_refresh: bool = True,
        every: float = 2.0,
        env: dict | None = None,
    ):
        self.store = store_path() if store is None else store
        self.runs = runs or runs_dir()
        self.render, self.auto_refresh, self.every, self.env = render, auto_refresh, every, env
        self.handle: SL.SearchHandle | None = None
        self.snap: SL.SearchState | None = None
        self.view: SearchView | None = None
        self.error: str | None = None
        self.error_box = error_widget()
        self._lock = threading.RLock()
        self._storage = None  # the Optuna storage of the watched search (one engine, reused)
        self._drawn = None
        self._watch = Watcher(self, self._refresh_state, self._on_state, "fiblab-search-watch")
        self.space = W.Combobox(
            value=space, options=SPACES, description="space", ensure_option=False
        )
        self.space.add_class("fib-search-space")
        self.objectives = W.SelectMultiple(
            options=list(OBJECTIVES), value=tuple(objectives), description="objectives", rows=5
        )
        self.objectives.add_class("fib-search-objectives")
        self.trials = W.BoundedIntText(value=trials, min=1, max=100_000, description="trials")
        self.trials.add_class("fib-search-trials")
        self.seed = W.IntText(value=seed, description="seed")
        self.seed.add_class("fib-search-seed")
        self.layers = W.BoundedIntText(value=layers, min=0, max=256, description="layers L")
        self.layers.tooltip = "0: the objectives' convention (16 for the counts, 2 for probe / ppl)"
        self.layers.add_class("fib-search-layers")
        self.name = W.Text(value=name, description="name", placeholder="space-objectives-sSEED")
        self.name.add_class("fib-search-name")
        hint = W.HTML(
            "<small>several objectives: NSGA-II and a Pareto front · distinct, band, reach "
            "count in milliseconds; probe and ppl train a model per trial</small>"
        )
        self.launch_button = W.Button(description="launch search", icon="rocket",
                                      button_style="primary")  # fmt: skip
        self.launch_button.add_class("fib-search-launch")
        self.stop_button = W.Button(description="stop", icon="stop", disabled=True)
        self.stop_button.add_class("fib-search-stop")
        self.resume_button = W.Button(description="resume", icon="play", disabled=True)
        self.resume_button.add_class("fib-search-resume")
        self.launch_button.on_click(self._on_launch)
        self.stop_button.on_click(self._on_stop)
        self.resume_button.on_click(self._on_resume)
        self.status = W.HTML("no search launched: choose a space and objectives, press "
                             "<b>launch search</b> (or attach one from the list)")  # fmt: skip
        self.status.add_class("fib-search-status")
        self.count = W.HTML()
        self.count.add_class("fib-search-count")
        self.notice = W.HTML()  # a launch that continues an existing study says so
        self.notice.add_class("fib-search-notice")
        self.best = W.HTML()
        self.best.add_class("fib-search-best")
        self.leaders = W.HTML()
        self.leaders.add_class("fib-search-leaders")
        self.progress_image, self.front_image = image_widget(), image_widget()
        self.alpha_image = image_widget()
        self.drawn = W.HTML()  # what the figures show (they redraw when a trial completes)
        self.drawn.add_class("fib-search-drawn")
        self.log = W.HTML()
        self.runlist = RunList(
            [Searches(self.runs)], on_attach={"search": self.attach}, listed=LISTED + ("done",)
        )
        form = W.VBox(
            [
                W.HBox([self.space, self.trials, self.seed]),
                W.HBox([self.objectives, W.VBox([self.layers, self.name])]),
                hint,
            ]
        )
        self.widget = W.VBox(
            [
                self.runlist.widget,
                form,
                self.error_box,
                W.HBox([self.launch_button, self.stop_button, self.resume_button]),
                self.share_widget(),
                self.status,
                self.notice,
                self.count,
                self.best,
                self.progress_image,  # one panel per objective
                W.HBox([self.front_image, self.alpha_image]),  # 420 + 520 px: fits 1000 px
                self.drawn,
                self.leaders,
                self.log,
            ]
        )
        self.widget.add_class("fib-search-panel")

    # -- actions ---------------------------------------------------------------------------------
    def extra(self) -> list[str]:
        return ["--layers", str(self.layers.value)] if self.layers.value else []

    def launch(self, watch: bool | None = None) -> SL.SearchHandle:
        """Start the search the form describes (a ValueError before starting on bad input)."""
        show_error(self, None)
        if self.handle is not None and self.handle.is_alive():
            raise ValueError(
                f"search {self.handle.name!r} is still running: stop it first, or wait for it"
            )
        if not self.objectives.value:
            raise ValueError("no objective chosen: pick one (or two, for a Pareto front)")
        note = SL.continuing(
            self.space.value.strip(),
            list(self.objectives.value),
            self.seed.value,
            self.name.value.strip() or None,
            self.runs,
            self.trials.value,
        )
        self.notice.value = f"<i>{html.escape(note)}</i>" if note else ""
        self.handle = SL.launch_search(
            self.space.value.strip(),
            list(self.objectives.value),
            self.trials.value,
            self.seed.value,
            self.name.value.strip() or None,
            extra=self.extra(),
            store=self.store,
            runs_dir=self.runs,
            env=self.env,
        )
        self.name.value = self.handle.name
        self._started(watch)
        return self.handle

    def stop(self) -> None:
        """Terminate the search (finished trials are kept; resume continues the study)."""
        if self.handle is None:
            raise ValueError("no search to stop: launch one, or attach one from the list")
        SL.request_stop(self.handle)
        self.refresh()
        self.runlist.refresh()

    def resume(self, watch: bool | None = None) -> SL.SearchHandle:
        if self.handle is None:
            raise ValueError("no search to resume: attach one from the list above")
        self.handle = SL.resume(self.handle)
        self._started(watch)
        return self.handle

    def attach(self, name: str) -> None:
        """Watch a search launched earlier; its settings fill the form."""
        h = SL.attach(name, self.runs)
        self.space.value, self.objectives.value = h.space, tuple(h.objectives)
        self.trials.value, self.seed.value, self.name.value = h.trials, h.seed, h.name
        self.layers.value = (
            int(h.extra[h.extra.index("--layers") + 1]) if "--layers" in h.extra else 0
        )
        self.handle = h
        self._started()

    def wait(self, timeout: float | None = None, poll: float = 0.5) -> str:
        if self.handle is None:
            raise ValueError("no search to wait for: launch one first")
        SL.wait(self.handle, timeout=timeout, poll=poll, on_poll=self.refresh)
        return self.state

    def run(self, timeout: float | None = None) -> SearchView:
        """Launch and wait (scripts, the smoke cell); RuntimeError if it did not finish."""
        self.launch(watch=False)
        st = self.wait(timeout)
        self.runlist.refresh()
        if st != "done":
            raise RuntimeError(f"search {self.handle.name!r} ended {st}: {self.snap.message}")
        return self.view

    def _started(self, watch: bool | None = None) -> None:
        self._drawn, self._storage, self.view = None, None, None
        self.log.value = ""
        self.refresh()
        self.runlist.refresh()
        if self.auto_refresh if watch is None else watch:
            self._watch.start(self.every, self.state)

    def unwatch(self) -> None:
        self._watch.stop()

    def _refresh_state(self) -> str | None:
        s = self.refresh()
        return None if s is None else s.state

    def _on_state(self, state: str) -> None:
        self.runlist.refresh()

    # -- the live view ---------------------------------------------------------------------------
    def _study(self):
        h = self.handle
        if self._storage is None:
            if SL.load_study(h) is None:
                return None
            import optuna

            self._storage = optuna.storages.RDBStorage(h.storage)
        return SL.load_study(h, self._storage)

    def refresh(self) -> SL.SearchState | None:
        """Read the study and redraw (the figures only when a trial was added)."""
        if self.handle is None:
            return None
        with self._lock:
            study = self._study()
            snap = SL.state(self.handle, study) if study is not None else SL.state(self.handle)
            self.snap = snap
            if study is not None:
                self.view = search_view(study, SL.search_config(self.handle))
            self._render(snap)
            self.runlist.show(Searches.row(self.handle, snap))
        return snap

    def _render(self, s: SL.SearchState) -> None:
        alive = s.state in SL.LIVE
        self.launch_button.disabled = alive
        self.stop_button.disabled = s.state not in ("starting", "running")
        self.stop_button.button_style = "" if self.stop_button.disabled else "warning"
        self.resume_button.disabled = s.state not in ("stopped", "failed")
        note = {
            "starting": "Python, Optuna and the objectives load",
            "stopped": "press resume to continue the study to its trials",
            "done": f"the study is in {self.handle.folder}",
        }.get(s.state, "")
        self.status.value = (
            f"search <code>{html.escape(s.name)}</code>: "
            f"<b class='fib-search-state'>{s.state}</b>"
            + (f" — {html.escape(note)}" if note else "")
        )
        failed = self.view.failed if self.view is not None else 0
        self.count.value = f"trials <b class='fib-search-done'>{s.done} / {s.total}</b>" + (
            f" · <span class='fib-search-failed'>{failed} failed</span> (interrupted by a stop "
            f"or an error; not counted — resume runs new trials in their place)"
            if failed
            else ""
        )
        self.show_share()
        self.log.value = f"<pre>{html.escape(s.message)}</pre>" if s.message else ""
        v = self.view
        if v is None or not v.points:
            trained = [o for o in self.handle.objectives if OBJECTIVES[o].trained]
            self.best.value = (
                (
                    f"no trial finished yet: each trial first trains a model for "
                    f"{' and '.join(trained)} (minutes at the paper's scale, seconds at tiny)"
                    if trained
                    else "no trial finished yet: the first result shows here within seconds"
                )
                if alive
                else "no finished trial in this study: press resume (or launch) to run trials"
            )
            # nothing of another search (or of this one's earlier launch) stays on screen
            self.leaders.value = self.drawn.value = ""
            for im in (self.progress_image, self.front_image, self.alpha_image):
                im.layout.display = "none"
            self._drawn = None
            return
        self.best.value = "best so far: " + ", ".join(
            f"{n} <b class='fib-search-best-{n}'>{v.best_value(i):.6g}</b>"
            for i, n in enumerate(v.names)
        )
        self.leaders.value = html_table(
            ["schedule", *v.names, "base", "W", "α per layer"],
            [
                [x.name, *(f"{y:.4g}" for y in x.values), *([""] * (len(v.names) - len(x.values))),
                 x.base, x.window, " ".join(f"{a:.3f}" for a in x.alphas)]
                for x in v.leaders
            ],
            cls="fib-search-leaders-table",
        )  # fmt: skip
        key = (len(v.points), s.total, alive)
        if self.render and key != self._drawn:
            set_png(self.progress_image, png(progress_figure(v, s.total, running=alive)))
            if len(v.names) == 2:
                set_png(self.front_image, png(front_figure(v)))
            else:
                self.front_image.layout.display = "none"
            set_png(self.alpha_image, png(alpha_figure(v)))
            self._drawn = key
        if not self.render:
            return
        n, left = len(v.points), s.done - len(v.points)  # done counts the pruned trials too
        self.drawn.value = (
            f"<small>the figures show {n} completed trial{'' if n == 1 else 's'}"
            + (f"; {left} pruned (no value to draw)" if left > 0 else "")
            + "</small>"
        )
