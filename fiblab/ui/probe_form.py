"""Notebook 02's form: the widgets that choose a probe grid, read as a `probes.gridspec.GridSpec`
(`spec()`, `settings()`, `cells()`: pure, testable), and filled back from one when a grid is
attached.  `fiblab.ui.probes.ProbePanel` is this form plus the buttons and the live view.
"""

from __future__ import annotations

import html
import os
from dataclasses import replace

import ipywidgets as W

from fiblab.cluster.ray_cluster import check_address
from fiblab.jobs import probe_launch as PL
from fiblab.ui.common import error_widget, guarded, parse_numbers, show_error
from lab.machine.cpu_share import cores as cores_here
from lab.machine.precision import PRECISIONS, describe_auto
from lab.util.wording import plural
from probes.gridspec import TASKS, GridSpec
from probes.settings import INITS, MECHANISMS, SCALES, TASK_SCALES, Cell, ProbeSettings

__all__ = ["ProbeForm", "default_distances", "TASKS"]


def default_distances(task: str, scale: str) -> str:
    """The distances text a task and scale start from (the scale's own marker distances; for
    shift the paper's 89, 233, 350, or 5, 13 at the tiny T=48)."""
    if task == "marked":
        return ", ".join(map(str, TASK_SCALES["marked"][scale].task.distances))
    if task == "shift":
        return "5, 13" if TASK_SCALES["shift"][scale].task.seq_len < 400 else "89, 233, 350"
    return ""


class ProbeForm:
    """The grid's widgets.  ``runs`` is where grids live (``<runs>/probe-grids/<name>/``);
    ``handle`` is the grid being watched, if any (its name is not reused for other settings);
    ``error`` the message shown in ``error_box``, or None."""

    def __init__(
        self,
        task: str = "marked",
        scale: str = "quick",
        mechanisms=("blur",),
        depths=(2, 4, 8),
        inits=("uniform", "staggered"),
        seeds=(0, 1),
        steps: int = 0,
        distances: str | None = None,
        jobs: int = 1,
        name: str = "",
        runs: str = "runs",
    ):
        self.runs = runs
        self.handle = None
        self.error: str | None = None
        self._filling = False  # `fill` is setting the widgets: no handler runs
        self.error_box = error_widget()
        self._fields(task, scale, mechanisms, depths, inits, seeds, steps, distances, jobs, name)
        self._wire()
        self._on_change()
        self.form = self._layout()

    # -- construction: the fields, their handlers, the layout ----------------------------------
    def _fields(self, task, scale, mechanisms, depths, inits, seeds, steps, distances, jobs, name):
        """The grid's fields, each with the CSS class the browser tests find it by."""
        style = {"description_width": "initial"}
        self.task = W.Dropdown(options=list(TASKS), value=task, description="task", style=style)
        self.scale = W.Dropdown(
            options=["paper", "quick", "tiny"], value=scale, description="scale", style=style
        )
        self.mechanisms = W.SelectMultiple(
            options=list(MECHANISMS),
            value=tuple(mechanisms),
            description="mechanisms",
            rows=6,
            style=style,
        )
        self.inits = W.SelectMultiple(
            options=list(INITS),
            value=tuple(inits),
            description="inits (learned α)",
            rows=2,
            style=style,
        )
        self.depths = W.Text(value=", ".join(map(str, depths)), description="depths", style=style)
        self.seeds = W.Text(value=", ".join(map(str, seeds)), description="seeds", style=style)
        self.seeds.add_class("fib-probe-seeds")
        self.distances = W.Text(
            value=default_distances(task, scale) if distances is None else distances,
            description="distances",
            style=style,
            disabled=task == "kv",
        )
        self.steps = W.BoundedIntText(
            value=steps, min=0, max=10**7, description="steps (0: scale's)", style=style
        )
        self.steps.add_class("fib-probe-steps")
        self.precision = W.Dropdown(
            # "auto (fp32 on this CPU)": what auto picks here, so a slow choice is visible
            options=[(describe_auto("cpu"), "auto"), *((p, p) for p in PRECISIONS)],
            value="auto",
            description="precision (bf16: autocast)",
            style=style,
            layout=W.Layout(width="max-content", min_width="360px"),  # "auto (fp32 on this CPU)"
        )
        cores = cores_here()
        self.jobs = W.BoundedIntText(
            value=jobs,
            min=1,
            max=max(64, jobs),
            description=f"jobs (cells at once; {plural(cores, 'core')} here)",
            style=style,
        )
        self.jobs.add_class("fib-probe-jobs")
        self.ray = W.Text(
            value="",
            description="Ray address",
            placeholder="(none: here; local, auto, HOST:PORT)",
            style=style,
        )  # the cells as Ray tasks (fiblab.cluster.ray_run); the cluster then sets the cells at once
        self.ray.add_class("fib-probe-ray")
        self.name = W.Text(
            value=name, description="grid name", placeholder="(task-scale)", style=style
        )
        self.name.add_class("fib-probe-name")
        self.plan = W.HTML()
        self.plan.add_class("fib-probe-plan")

    def _wire(self) -> None:
        """Task and scale reset the distances to theirs; every field re-plans the grid."""
        self.task.observe(self._on_task, names="value")
        self.scale.observe(self._on_task, names="value")
        for w in (
            self.mechanisms,
            self.inits,
            self.depths,
            self.seeds,
            self.distances,
            self.steps,
            self.precision,
            self.jobs,
            self.ray,
            self.name,
        ):
            w.observe(self._on_change, names="value")

    def _layout(self) -> W.VBox:
        """The fields beside the mechanisms and inits lists, a hint on picking several, the
        plan."""
        return W.VBox(
            [
                W.HBox(
                    [
                        W.VBox(
                            [
                                self.task,
                                self.scale,
                                self.steps,
                                self.depths,
                                self.seeds,
                                self.distances,
                                self.precision,
                                self.jobs,
                                self.ray,
                                self.name,
                            ]
                        ),
                        self.mechanisms,
                        self.inits,
                    ]
                ),
                W.HTML(
                    "<small>mechanisms and inits: Ctrl-click (⌘-click on a Mac) picks several, "
                    "Shift-click a range</small>"
                ),
                self.plan,
            ]
        )

    # -- widgets -> probes.gridspec --------------------------------------------------------------
    def spec(self) -> GridSpec:
        """The GridSpec the widgets select (raises ValueError on bad input)."""
        task = self.task.value
        ray = check_address(self.ray.value.strip()) if self.ray.value.strip() else None
        dists: tuple = ()
        if task in ("marked", "shift") and self.distances.value.strip():
            dists = tuple(parse_numbers(self.distances.value, "distances", int))
        return GridSpec(
            task=task,
            scale=self.scale.value,
            mechanisms=tuple(self.mechanisms.value),
            depths=tuple(parse_numbers(self.depths.value, "depths", int)),
            inits=tuple(self.inits.value),
            seeds=tuple(parse_numbers(self.seeds.value, "seeds", int)),
            distances=dists,
            steps=int(self.steps.value),
            precision=self.precision.value,
            jobs=1 if ray else int(self.jobs.value),  # with Ray the cluster sets it
            ray=ray,
        )

    def settings(self) -> ProbeSettings:
        """The ProbeSettings the widgets select (raises ValueError on bad input)."""
        return self.spec().settings()

    def cells(self) -> list[Cell]:
        """The grid's cells (raises ValueError on bad input)."""
        if not self.mechanisms.value:
            raise ValueError("no mechanism selected: pick at least one (e.g. blur)")
        return self.spec().cells()

    def paper_settings(self) -> bool:
        """Whether the settings are the paper's Table-2 settings (so its numbers compare)."""
        try:
            # the paper's probes ran under bf16 autocast: either precision compares
            return (
                self.task.value == "marked"
                and replace(self.settings(), precision="auto") == SCALES["paper"]
            )
        except ValueError:
            return False

    def grid_name(self) -> str:
        """The name a launch uses: the name box, else `fiblab.jobs.probe_launch.default_name`."""
        return self.name.value.strip() or PL.default_name(self.spec(), self.runs)

    def results_path(self) -> str:
        return os.path.join(PL.grids_dir(self.runs), self.grid_name(), PL.RESULTS_NAME)

    # -- handlers --------------------------------------------------------------------------------
    @guarded
    def _on_task(self, change) -> None:
        """A new task or scale starts from its default distances."""
        if self._filling:
            return
        self.distances.unobserve(self._on_change, names="value")
        try:
            self.distances.value = default_distances(self.task.value, self.scale.value)
        finally:
            self.distances.observe(self._on_change, names="value")
        self.distances.disabled = self.task.value == "kv"
        self._on_change()

    @guarded
    def _on_change(self, change=None) -> None:
        if self._filling:
            return
        spec = self.spec()
        s, cells = spec.settings(), self.cells()
        h = self.handle
        if (
            h is not None
            and self.name.value.strip() == h.name
            and not PL.same_grid({"spec": h.spec}, spec)
        ):
            self.name.value = ""  # other settings are another grid: not the watched one's name
        self.plan.value = (
            f"{plural(len(cells), 'cell')} × {s.steps} steps (T={s.task.seq_len}, batch "
            f"{s.batch}, lr {s.lr:g}); grid <code>{html.escape(self.grid_name())}</code>, "
            f"results in <code>{html.escape(self.results_path())}</code>"
            + (" — the paper's settings" if self.paper_settings() else "")
        )
        show_error(self, None)

    def fill(self, spec: GridSpec, name: str) -> None:
        """Set every widget from ``spec`` (handlers held back until the end)."""
        self._filling = True
        try:
            self.task.value, self.scale.value = spec.task, spec.scale
            self.mechanisms.value = tuple(m for m in spec.mechanisms if m in MECHANISMS)
            self.inits.value = tuple(i for i in spec.inits if i in INITS)
            self.depths.value = ", ".join(map(str, spec.depths))
            self.seeds.value = ", ".join(map(str, spec.seeds))
            self.distances.value = (
                ", ".join(map(str, spec.distances))
                if spec.distances
                else default_distances(spec.task, spec.scale)
            )
            self.distances.disabled = spec.task == "kv"
            self.steps.value, self.precision.value = spec.steps, spec.precision
            self.jobs.value, self.name.value = spec.jobs, name
            self.ray.value = spec.ray or ""
        finally:
            self._filling = False
        self._on_change()
