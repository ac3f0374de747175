"""The training panel (notebook 03): launch a language-model run as a separate process and watch
it through the experiment store.

The Launch button calls `fiblab.launch.launch` (``python -m fiblab.cli train …`` in its own session,
or torchrun over every visible GPU), so the kernel stays free and a kernel restart does not stop
the run.  A background thread (``auto_refresh``) calls `refresh` every few seconds while the run
lives: loss and perplexity curves, tokens/s, ETA and — for learned-α runs — α per layer.  Stop
asks the loop to checkpoint and exit after its current step; Resume continues from there.  After
a kernel restart, `TrainPanel.attach(name)` finds a run by its launch.json.
"""

from __future__ import annotations

import html
import math
import threading

import ipywidgets as W

from fiblab import launch as LA
from fiblab.ui.common import (
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
from lab.trainconfig import TRAIN_PRESETS


def preset_options() -> list[str]:
    """CPU-sized presets first, then the paper's matrix."""
    small = [p for p in TRAIN_PRESETS if p.startswith("cpu-") or p == "tiny"]
    return small + sorted(p for p in TRAIN_PRESETS if p not in small)


def _fmt_secs(s: float) -> str:
    if not math.isfinite(s):
        return "–"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class TrainPanel:
    """Widgets to launch, watch, stop and resume one training run.

    State: ``handle`` (the `fiblab.launch.RunHandle`), ``snap`` (the last `fiblab.launch.snapshot`),
    ``state`` (its state string), ``error`` (the message shown, or None).
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
        self.handle: LA.RunHandle | None = None
        self.snap: dict | None = None
        self.error: str | None = None
        self._lock = threading.RLock()
        self._watcher: threading.Thread | None = None
        self._stop_watch = threading.Event()
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
            value=0, min=0, max=64, style=style, description="processes (0: one per GPU)"
        )
        self.launch_button = W.Button(description="launch", icon="rocket", button_style="primary")
        self.stop_button = W.Button(
            description="stop", icon="stop", button_style="warning", disabled=True
        )
        self.resume_button = W.Button(description="resume", icon="play", disabled=True)
        self.refresh_button = W.Button(description="refresh", icon="refresh", disabled=True)
        self.status = W.HTML(value="no run launched")
        self.status.add_class("fib-run-status")
        self.stats = W.HTML()
        self.image = image_widget()
        self.log = W.HTML()
        self.error_box = error_widget()
        self.launch_button.on_click(self._on_launch)
        self.stop_button.on_click(self._on_stop)
        self.resume_button.on_click(self._on_resume)
        self.refresh_button.on_click(self._on_refresh)
        self.widget = W.VBox(
            [
                W.HBox(
                    [
                        W.VBox([self.preset, self.data, self.steps, self.name, self.nproc]),
                        self.overrides,
                    ]
                ),
                W.HBox(
                    [self.launch_button, self.stop_button, self.resume_button, self.refresh_button]
                ),
                self.error_box,
                self.status,
                self.stats,
                self.image,
                self.log,
            ]
        )
        self.widget.add_class("fib-train-panel")

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def state(self) -> str:
        return "idle" if self.snap is None else self.snap["state"]

    # -- actions ---------------------------------------------------------------------------------
    def launch(self) -> LA.RunHandle:
        """Start the run the widgets describe (raises ValueError before starting on bad input)."""
        show_error(self, None)
        if self.handle is not None and LA.is_alive(self.handle):
            raise ValueError(f"run {self.handle.name!r} is still running: stop it first")
        self.handle = LA.launch(
            self.preset.value,
            name=self.name.value.strip() or None,
            steps=self.steps.value or None,
            data=self.data.value.strip() or None,
            overrides=self.overrides.value,
            store=self.store,
            runs_dir=self.runs,
            nproc=self.nproc.value or None,
            env=self.env,
        )
        self._started()
        return self.handle

    def stop(self) -> None:
        """Ask the run to checkpoint and exit after its current step."""
        if self.handle is None:
            raise ValueError("no run to stop: launch one first")
        LA.request_stop(self.handle)
        self.refresh()

    def resume(self) -> LA.RunHandle:
        """Continue the (stopped or failed) run from its last checkpoint."""
        if self.handle is None:
            raise ValueError("no run to resume: launch one, or TrainPanel.attach(name)")
        self.handle = LA.resume(self.handle)
        self._started()
        return self.handle

    def attach(self, name: str) -> LA.RunHandle:
        """Watch a run launched earlier (e.g. before a kernel restart)."""
        self.handle = LA.attach(name, self.runs)
        self._started()
        return self.handle

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> str:
        """Block (refreshing) until the run's process exits; returns its final state."""
        if self.handle is None:
            raise ValueError("no run to wait for: launch one first")
        LA.wait(self.handle, timeout=timeout, poll=poll, on_poll=self.refresh)
        return self.state

    def _started(self) -> None:
        for b in (self.stop_button, self.refresh_button):
            b.disabled = False
        self.resume_button.disabled = True
        self.refresh()
        if self.auto_refresh:
            self.watch()

    def watch(self) -> None:
        """Refresh every ``every`` seconds in a background thread until the run ends."""
        self.unwatch()
        self._stop_watch = threading.Event()
        ev = self._stop_watch

        def loop():
            while not ev.wait(self.every):
                try:
                    snap = self.refresh()
                except Exception as e:  # noqa: BLE001 - shown in the UI
                    show_error(self, e)
                    continue
                if snap is not None and snap["state"] in LA.TERMINAL:
                    break

        self._watcher = threading.Thread(target=loop, name="fiblab-train-watch", daemon=True)
        self._watcher.start()

    def unwatch(self) -> None:
        """Stop the background refresh (the run itself goes on)."""
        self._stop_watch.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=5)
        self._watcher = None

    # -- the live view ---------------------------------------------------------------------------
    def refresh(self) -> dict | None:
        """Read the run's state and curves from the store and redraw."""
        if self.handle is None:
            return None
        with self._lock:
            snap = LA.snapshot(self.handle)
            self.snap = snap
            self._render(snap)
        return snap

    def _render(self, s: dict) -> None:
        st = s["state"]
        colour = {
            "done": "#2e7d32",
            "failed": "#b00020",
            "stopped": "#ef6c00",
            "stopping": "#ef6c00",
        }.get(st, "#1565c0")
        self.status.value = (
            f"<b>{html.escape(s['name'])}</b>: <span class='fib-run-state' "
            f"style='color:{colour}'>{st}</span> · step {s['step']}/"
            f"{s['steps']}" + (f" · {html.escape(s['message'])}" if s["message"] else "")
        )
        alive = st in ("starting", "running", "stopping")
        self.stop_button.disabled = not alive
        self.resume_button.disabled = st not in ("stopped", "failed")
        self.launch_button.disabled = alive
        ppl = s["ppl"]
        self.stats.value = (
            f"loss {s['loss']:.4f} · held-out ppl {ppl:.2f} · {s['tokens_per_s']:,.0f} tokens/s"
            f" · ETA {_fmt_secs(s['eta_s'])}"
            if math.isfinite(s["loss"])
            else ""
        )
        if st == "failed":
            self.log.value = f"<pre>{html.escape(LA.log_tail(self.handle, 15))}</pre>"
        else:
            self.log.value = ""
        if self.render and len(s["loss_curve"]):
            set_png(self.image, curves_png(s))

    # -- button handlers (errors are shown, not swallowed) ---------------------------------------
    @guarded
    def _on_launch(self, button=None):
        self.launch()

    @guarded
    def _on_stop(self, button=None):
        self.stop()

    @guarded
    def _on_resume(self, button=None):
        self.resume()

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
