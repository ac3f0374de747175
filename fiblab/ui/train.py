"""The training panel (notebook 03): launch a language-model run as a separate process, watch it
through the experiment store, and pick it up again after a kernel restart.

The Launch button calls `fiblab.jobs.launch.launch` (``python -m fiblab.cli train …`` in its own session,
or torchrun over every visible GPU), so the kernel stays free and a kernel restart does not stop
the run.  A background thread (``auto_refresh``) calls `refresh` every few seconds while the run
lives: what the process is doing (starting, preparing the data, the first step, training,
evaluating), loss and perplexity curves, tokens/s, an ETA from its own measured step and
evaluation times (`fiblab.jobs.train_eta`) and — for learned-α runs — α per layer.  Stop asks the loop
to checkpoint and exit after its current step; Resume continues from there.

On open the panel lists every run that is running, stopping, stopped or failed
(`fiblab.ui.runlist.RunList`: LM runs and the probe grids, which notebook 02 shows); *attach* shows that run here and fills the form with its settings, so the
form always describes the run on screen.  On a machine without GPUs a launch that would train for
more than an hour (the paper's presets: weeks) first says how long, and starts only on a second
click ("launch anyway"; `fiblab.jobs.train_estimate`).

One module of ≈ 450 lines on purpose: the form, the launch, the watching thread and attach share
the one run on screen; launching, the ETA and the run list already live in `fiblab.jobs` and
`fiblab.ui.runlist`.
"""

from __future__ import annotations

import html
import threading
import time

import ipywidgets as W

from fiblab.jobs import launch as LA
from fiblab.jobs.train_process import gpu_count
from fiblab.ui.common import (
    LaunchPanel,
    Watcher,
    error_widget,
    guarded,
    image_widget,
    png,
    runs_dir,
    set_png,
    show_error,
    smoke,
    store_path,
)
from fiblab.ui.runlist import LIVE, LMRuns, ProbeGrids, RunList
from fiblab.ui.train_form import (
    enable,
    form_values,
    long_run_warning,
    name_taken,
    preset_options,
    stats_html,
    status_html,
    training_clock,
)

LIST_EVERY = 10.0  # seconds between refreshes of the run list while a run is watched


class TrainPanel(LaunchPanel):
    """Widgets to launch, watch, stop and resume one training run, and the list of runs to pick
    up again.

    State: ``handle`` (the `fiblab.jobs.launch.RunHandle` shown), ``snap`` (the last
    `fiblab.jobs.launch.snapshot`), ``state`` (its state string), ``error`` (the message shown, or
    None), ``warning`` (the long-run warning awaiting a second click, or None), ``runlist``.
    ``sources``: the run-list sources beside the LM runs (default: the probe grids, which
    notebook 02 shows);
    ``gpus``: the visible GPUs (default: counted).
    """

    def __init__(
        self,
        preset: str | None = None,
        steps: int | None = None,
        name: str = "",
        data: str = "bible",
        overrides: str = "",
        store: str | None = None,
        runs: str | None = None,
        auto_refresh: bool = True,
        every: float = 3.0,
        render: bool = True,
        env: dict | None = None,
        sources=None,
        gpus: int | None = None,
    ):
        small = smoke()
        preset = preset or ("tiny" if small else "cpu-stagger")
        if steps is None:
            steps = 8 if small else 0
        if small and not overrides:
            overrides = "eval_every=0\nckpt_every=4\neval_batch=64"
        self.store = store_path() if store is None else store
        self.runs = runs or runs_dir()
        self.auto_refresh = auto_refresh
        self.every = every
        self.render = render
        self.env = env
        self.gpus = gpu_count() if gpus is None else gpus
        self.handle: LA.RunHandle | None = None
        self.snap: dict | None = None
        self._training_since: dict = {}  # (run, pid) -> the training phase's first start seen
        self.error: str | None = None
        self.warning: str | None = None
        self._armed: tuple | None = None  # the form a "launch anyway" click would start
        self._listed = time.monotonic()  # when the run list was last refreshed
        self._lock = threading.RLock()
        self._watch = Watcher(self, self._refresh_state, self._on_state, "fiblab-train-watch")
        self._form(preset, data, steps, name, overrides)
        self._buttons_and_outputs()
        self.runlist = RunList(
            [LMRuns(self.runs), *(sources if sources is not None else [ProbeGrids(self.runs)])],
            on_attach={"LM run": self.attach},
            where={"probe grid": "notebook 02"},
        )
        self.widget = self._layout()

    # -- construction: the form, the buttons and outputs, the layout ---------------------------
    def _form(self, preset, data, steps, name, overrides) -> None:
        """The launch form's fields (the GPU process count shown only where a GPU is)."""
        style = {"description_width": "initial"}
        self.preset = W.Dropdown(
            options=preset_options(), value=preset, description="preset", style=style
        )
        self.data = W.Text(
            value=data,
            description="data",
            style=style,
            placeholder="bible, a file/folder, or name=src@w,…",
        )
        self.steps = W.BoundedIntText(
            value=steps, min=0, max=10**8, description="steps (0: preset's)", style=style
        )
        self.name = W.Text(
            value=name, description="run name", placeholder="(the preset's)", style=style
        )
        self.overrides = W.Textarea(
            value=overrides,
            description="overrides",
            placeholder="one key=value per line, e.g. lr=5e-4 or model.window=12",
            style=style,
            layout=W.Layout(width="420px", height="70px"),
        )
        self.nproc = W.BoundedIntText(
            value=0,
            min=0,
            max=64,
            style=style,
            description=f"processes (0: one per GPU; {self.gpus} here)",
        )
        self.ray = W.Text(
            value="",
            description="Ray address",
            placeholder="(none: here; local, auto, HOST:PORT)",
            style=style,
        )  # the run as one Ray task there (fiblab train --ray); empty: this machine
        self.nproc_note = W.HTML("one process, on the CPU (no GPU is visible)")
        self.nproc_note.add_class("fib-nproc-note")
        if not self.gpus:  # nothing to choose: say what happens instead
            self.nproc.layout.display = "none"
        else:
            self.nproc_note.layout.display = "none"

    def _buttons_and_outputs(self) -> None:
        """launch / stop / resume / refresh wired to their handlers, what the panel shows, and
        each field's CSS class (the browser tests find them by it; an edit disarms "launch
        anyway")."""
        self.launch_button = W.Button(description="launch", icon="rocket", button_style="primary")
        self.launch_button.add_class("fib-train-launch")
        self.stop_button = W.Button(description="stop", icon="stop", disabled=True)
        self.stop_button.add_class("fib-train-stop")
        self.resume_button = W.Button(description="resume", icon="play", disabled=True)
        self.resume_button.add_class("fib-train-resume")
        self.refresh_button = W.Button(description="refresh", icon="refresh", disabled=True)
        self.status = W.HTML(value="no run shown: launch one, or attach one from the list above")
        self.status.add_class("fib-run-status")
        self.stats = W.HTML()
        self.stats.add_class("fib-run-stats")
        self.image = image_widget()
        self.image.add_class("fib-run-curves")
        self.log = W.HTML()
        self.warning_box = W.HTML()
        self.warning_box.add_class("fib-launch-warning")
        self.error_box = error_widget()
        self.launch_button.on_click(self._on_launch)
        self.stop_button.on_click(self._on_stop)
        self.resume_button.on_click(self._on_resume)
        self.refresh_button.on_click(self._on_refresh)
        for key in ("preset", "data", "steps", "name", "overrides", "nproc", "ray"):
            w = getattr(self, key)
            w.add_class(f"fib-train-{key}")
            w.observe(self._disarm, names="value")

    def _layout(self) -> W.VBox:
        """The run list, the form, the buttons, the CPU share, then warnings, errors and the
        attached run's status, numbers, curves and log."""
        widget = W.VBox(
            [
                self.runlist.widget,
                W.HBox(
                    [
                        W.VBox(
                            [
                                self.preset,
                                self.data,
                                self.steps,
                                self.name,
                                self.nproc,
                                self.nproc_note,
                                self.ray,
                            ]
                        ),
                        self.overrides,
                    ],
                    # a narrow output area (a 1100 px window) puts the overrides below the
                    # fields instead of cutting them off on the right
                    layout=W.Layout(flex_flow="row wrap"),
                ),
                W.HBox(
                    [self.launch_button, self.stop_button, self.resume_button, self.refresh_button],
                    layout=W.Layout(flex_flow="row wrap"),
                ),
                self.share_widget(),
                self.warning_box,
                self.error_box,
                self.status,
                self.stats,
                self.image,
                self.log,
            ]
        )
        widget.add_class("fib-train-panel")
        return widget

    # -- actions ---------------------------------------------------------------------------------
    def config(self):
        """The TrainConfig the form describes (ValueError naming a bad preset or override)."""
        return LA.build_config(
            self.preset.value,
            name=self.name.value.strip() or None,
            steps=self.steps.value or None,
            data=self.data.value.strip() or None,
            overrides=self.overrides.value,
            runs_dir=self.runs,
        )

    def ray_address(self) -> str | None:
        """The form's Ray address (ValueError naming a bad one), None when empty: here."""
        from fiblab.cluster.ray_cluster import check_address

        text = self.ray.value.strip()
        return check_address(text) if text else None

    def launch(self, anyway: bool = False) -> LA.RunHandle | None:
        """Start the run the widgets describe (ValueError before starting on bad input).  A run
        that would take over an hour on this GPU-less machine is not started: the estimate is
        shown and the next launch (``anyway=True``, or a second click) starts it."""
        show_error(self, None)
        if self.handle is not None and self.handle.is_alive():
            raise ValueError(
                f"run {self.handle.name!r} (shown below) is still running: stop it first, "
                f"or wait for it to finish"
            )
        cfg = self.config()
        self.ray_address()  # a bad address fails before anything starts
        self._refuse_taken(cfg)
        key = self._form_key()
        if not anyway and self._armed != key and self._too_long(cfg):
            self._armed = key
            return None
        self._disarm()
        self.handle = LA.launch(
            self.preset.value,
            name=self.name.value.strip() or None,
            steps=self.steps.value or None,
            data=self.data.value.strip() or None,
            overrides=self.overrides.value,
            store=self.store,
            runs_dir=self.runs,
            nproc=None if self.ray_address() else self.nproc.value or None,
            env=self.env,
            ray=self.ray_address(),
        )
        self._started()
        return self.handle

    def stop(self) -> None:
        """Ask the run to checkpoint and exit after its current step."""
        if self.handle is None:
            raise ValueError("no run to stop: attach one from the list above, or launch one")
        LA.request_stop(self.handle)
        self.refresh()

    def resume(self) -> LA.RunHandle:
        """Continue the (stopped or failed) run from its last checkpoint."""
        if self.handle is None:
            raise ValueError("no run to resume: attach one from the list above, or launch one")
        show_error(self, None)
        self.handle = LA.resume(self.handle)
        self._started()
        return self.handle

    def attach(self, name: str) -> None:
        """Show a run launched earlier (e.g. before a kernel restart): its settings fill the
        form, and the view follows it.  Returns nothing (the panel shows the run)."""
        h = LA.attach(name, self.runs)
        show_error(self, None)
        self.handle = h
        self._fill_form(h)
        self._started()

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> str:
        """Block (refreshing) until the run's process exits; returns its final state."""
        if self.handle is None:
            raise ValueError("no run to wait for: launch one first")
        LA.wait(self.handle, timeout=timeout, poll=poll, on_poll=self.refresh)
        return self.state

    def _started(self) -> None:
        self.refresh_button.disabled = False
        self.refresh()
        if self.auto_refresh:
            self.watch()

    def _fill_form(self, h: LA.RunHandle) -> None:
        v = form_values(h)
        if v["preset"] not in self.preset.options:  # e.g. a seed variant, fib-stagger-w12-s43
            self.preset.options = [*self.preset.options, v["preset"]]
        self.preset.value = v["preset"]
        self.name.value = v["name"]
        self.steps.value = v["steps"]
        self.data.value = v["data"]
        self.overrides.value = v["overrides"]
        self.nproc.value = v["nproc"]
        self.ray.value = v["ray"]

    def _form_key(self) -> tuple:
        return tuple(
            w.value
            for w in (
                self.preset, self.data, self.steps, self.name, self.overrides, self.nproc, self.ray,
            )
        )  # fmt: skip

    def _refuse_taken(self, cfg) -> None:
        taken = name_taken(cfg, self.runs)
        if taken is not None:
            message, show = taken
            if show:
                self.attach(cfg.name)  # its settings fill the form; stop / resume act on it
            raise ValueError(message)

    def _too_long(self, cfg) -> bool:
        """Ask first (`fiblab.ui.train_form.long_run_warning`): shown, and the button armed."""
        if self.ray_address():  # its speed is the cluster's, not this machine's
            self.warning = None
            return False
        self.warning = long_run_warning(cfg, self.store, self.gpus)
        if self.warning is None:
            return False
        self.warning_box.value = (
            f"<div style='color:#8a4b00;font-weight:bold'>⚠ {html.escape(self.warning)}</div>"
        )
        self.launch_button.description = "launch anyway"
        self.launch_button.button_style = "danger"
        return True

    def _disarm(self, change=None) -> None:
        """The form changed (or a launch started): forget the pending warning."""
        self._armed = None
        self.warning = None
        self.warning_box.value = ""
        self.launch_button.description = "launch"
        if not self.launch_button.disabled:
            self.launch_button.button_style = "primary"

    def watch(self) -> None:
        """Refresh every ``every`` seconds in a background thread until the run ends."""
        self._watch.start(self.every, self.state)

    def unwatch(self) -> None:
        """Stop the background refresh (the run itself goes on)."""
        self._watch.stop()

    def _refresh_state(self) -> str | None:
        snap = self.refresh()
        return None if snap is None else snap["state"]

    def _on_state(self, state: str) -> None:
        self.runlist.refresh()  # the list shows states too

    # -- the live view ---------------------------------------------------------------------------
    def refresh(self) -> dict | None:
        """Read the run's state and curves from the store and redraw."""
        if self.handle is None:
            return None
        with self._lock:
            before = self.state
            h = self.handle
            snap = training_clock(self._training_since, (h.name, h.pid), LA.snapshot(h))
            self.snap = snap
            self._render(snap)
            if before != snap["state"] or time.monotonic() - self._listed > LIST_EVERY:
                self._listed = time.monotonic()
                self.runlist.refresh()  # the list shows every run's state and step too
            else:  # this run's row from this snapshot: the list and the status line agree
                self.runlist.show(LMRuns.row(self.handle.name, snap))
            self._draw(snap)  # the slowest part last: the words above are never behind it
        return snap

    def _render(self, s: dict) -> None:
        st = s["state"]
        self.status.value = status_html(s)
        alive = st in LIVE
        enable(self.stop_button, st in ("starting", "running"), "warning")
        enable(self.resume_button, st in ("stopped", "failed"), "success")
        self.launch_button.disabled = alive
        self.launch_button.button_style = "" if alive else "primary"
        if not alive and self._armed is not None:
            self.launch_button.button_style = "danger"
        self.stats.value = stats_html(s)
        self.show_share()
        if st == "failed":
            self.log.value = f"<pre>{html.escape(self.handle.log_tail(15))}</pre>"
        else:
            self.log.value = ""

    def _draw(self, s: dict) -> None:
        if self.render and len(s["loss_curve"]):
            set_png(self.image, curves_png(s))
        else:  # nothing to draw (yet): no image rather than the last run's or a broken one
            self.image.layout.display = "none"

    # -- button handlers (errors are shown, not swallowed) ---------------------------------------
    @guarded
    def _on_refresh(self, button=None):
        self.refresh()

    def summary(self) -> str:
        """One line for logs: name, state, step, loss, held-out perplexity."""
        if self.snap is None:
            return "no run"
        s = self.snap
        return (
            f"{s['name']}: {s['state']} at step {s['step']}/{s['steps']}, loss "
            f"{s['loss']:.4f}, ppl {s['ppl']:.2f}"
        )


def curves_png(s: dict) -> bytes:
    """Loss (raw and running mean, held-out evaluations as ln perplexity) over steps, and α per
    layer for learned runs (`fiblab.ui.run_figures.training_curves`)."""
    from fiblab.ui.run_figures import training_curves

    return png(training_curves(s))
