"""The retrieval-probe panel (notebook 02): pick a grid, run it with a progress bar, read the
accuracy per distance, the α trajectories, and the Table-2 layout beside the paper's numbers.

`ProbePanel.settings()` and `.cells()` turn the widgets into `probes.settings` objects (pure,
testable); `.run()` (the Run button) trains the grid in the kernel through
`probes.grid.run_grid` — resumable: cells already in the results file are not retrained —
logs every record into the experiment store and redraws after each finished cell.

Distances mean, by task: ``marked`` — the two marker distances of the task (the paper's 200,
350); ``shift`` — the trained distance of each cell (one cell per distance); ``kv`` — unused (the
evaluation distances are fixed by the sampler).  The paper's Table-2 values are shown only when
the settings are the paper's (marked task, blur mechanism, scale ``paper``, distances 200/350).
"""

from __future__ import annotations

import html
import math
import os
from dataclasses import replace

import ipywidgets as W

from analysis.probe_table import format_table2, table2_rows
from fiblab.ui.common import (
    error_widget,
    guarded,
    html_table,
    image_widget,
    parse_numbers,
    png,
    runs_dir,
    set_png,
    show_error,
    smoke,
    store_path,
)
from lab.precision import PRECISIONS, describe_auto
from probes.grid import grid, run_grid
from probes.settings import INITS, MECHANISMS, SCALES, TASK_SCALES, Cell, ProbeSettings

TASKS = ("marked", "shift", "kv")


def default_distances(task: str, scale: str) -> str:
    """The distances text a task and scale start from (the scale's own marker distances; for
    shift the paper's 89, 233, 350, or 5, 13 at the tiny T=48)."""
    if task == "marked":
        return ", ".join(map(str, TASK_SCALES["marked"][scale].task.distances))
    if task == "shift":
        return "5, 13" if TASK_SCALES["shift"][scale].task.seq_len < 400 else "89, 233, 350"
    return ""


class ProbePanel:
    """Widgets for the probe grid; display the object (or ``.widget``) in a notebook.

    State: ``records`` (the grid's records after `run`), ``progress_steps`` (steps done),
    ``error`` (the message shown, or None), ``store`` / ``out_dir`` (where results go).
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
    ):
        scale = scale or ("tiny" if smoke() else "quick")
        self.store = store_path() if store is None else store
        self.out_dir = out_dir or os.path.join(runs_dir(), "probes")
        self.render = render
        self.records: list[dict] = []
        self.error: str | None = None
        self.progress_steps = 0
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
        self.distances = W.Text(
            value=default_distances(task, scale) if distances is None else distances,
            description="distances",
            style=style,
            disabled=task == "kv",
        )
        self.steps = W.BoundedIntText(
            value=steps, min=0, max=10**7, description="steps (0: scale's)", style=style
        )
        self.precision = W.Dropdown(
            # "auto (fp32 on this CPU)": what auto picks here, so a slow choice is visible
            options=[(describe_auto("cpu"), "auto"), *((p, p) for p in PRECISIONS)],
            value="auto",
            description="precision (bf16: autocast)",
            style=style,
        )
        self.run_button = W.Button(description="run grid", icon="play", button_style="primary")
        self.progress = W.IntProgress(value=0, min=0, max=1, description="progress")
        self.progress.add_class("fib-probe-progress")
        self.progress_label = W.HTML()
        self.plan = W.HTML()
        self.acc_table = W.HTML()
        self.acc_table.add_class("fib-probe-acc")
        self.table2 = W.HTML()
        self.table2.add_class("fib-table2")
        self.image = image_widget()
        self.error_box = error_widget()
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
        ):
            w.observe(self._on_change, names="value")
        self.run_button.on_click(self._on_run)
        self._on_change()
        self.widget = W.VBox(
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
                            ]
                        ),
                        self.mechanisms,
                        self.inits,
                    ]
                ),
                self.plan,
                self.error_box,
                W.HBox([self.run_button, self.progress, self.progress_label]),
                self.acc_table,
                self.image,
                self.table2,
            ]
        )
        self.widget.add_class("fib-probe-panel")

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    # -- widgets -> probes.retrieval -------------------------------------------------------------
    def settings(self) -> ProbeSettings:
        """The ProbeSettings the widgets select (raises ValueError on bad input)."""
        s = TASK_SCALES[self.task.value][self.scale.value]
        if self.steps.value:
            s = replace(
                s,
                steps=int(self.steps.value),
                log_every=max(1, min(s.log_every, self.steps.value // 4 or 1)),
            )
        if self.task.value == "marked" and self.distances.value.strip():
            dists = tuple(parse_numbers(self.distances.value, "distances", int))
            s = replace(s, task=replace(s.task, distances=dists))  # validated by MarkedCopy
        return replace(s, precision=self.precision.value)

    def cells(self) -> list[Cell]:
        """The grid's cells (raises ValueError on bad input)."""
        mechs = list(self.mechanisms.value)
        if not mechs:
            raise ValueError("no mechanism selected: pick at least one (e.g. blur)")
        inits = list(self.inits.value) or ["uniform"]
        depths = parse_numbers(self.depths.value, "depths", int)
        seeds = parse_numbers(self.seeds.value, "seeds", int)
        bad = [d for d in depths if d < 1]
        if bad:
            raise ValueError(f"depths {bad} must be >= 1 (layers; the paper uses 2, 4, 8)")
        dists: tuple = (None,)
        if self.task.value == "shift":
            dists = tuple(parse_numbers(self.distances.value, "distances", int))
            T = self.settings().task.seq_len
            far = [d for d in dists if not 1 <= d < T]
            if far:
                raise ValueError(
                    f"shift distances {far} must lie in 1..{T - 1} (the task's "
                    f"seq_len is {T} at scale {self.scale.value!r})"
                )
        return grid(mechs, depths, inits, seeds, self.task.value, dists)

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

    def results_path(self) -> str:
        return os.path.join(self.out_dir, f"{self.task.value}-{self.scale.value}.jsonl")

    # -- handlers --------------------------------------------------------------------------------
    @guarded
    def _on_task(self, change) -> None:
        """A new task or scale starts from its default distances."""
        self.distances.unobserve(self._on_change, names="value")
        try:
            self.distances.value = default_distances(self.task.value, self.scale.value)
        finally:
            self.distances.observe(self._on_change, names="value")
        self.distances.disabled = self.task.value == "kv"
        self._on_change()

    @guarded
    def _on_change(self, change=None) -> None:
        s, cells = self.settings(), self.cells()
        self.plan.value = (
            f"{len(cells)} cells × {s.steps} steps (T={s.task.seq_len}, batch "
            f"{s.batch}, lr {s.lr:g}); results in "
            f"<code>{html.escape(self.results_path())}</code>"
            + (" — the paper's settings" if self.paper_settings() else "")
        )
        show_error(self, None)

    @guarded
    def _on_run(self, button=None) -> None:
        self.run()

    # -- running ---------------------------------------------------------------------------------
    def run(self) -> list[dict]:
        """Train every cell of the grid not yet in the results file; returns the records."""
        show_error(self, None)
        settings, cells = self.settings(), self.cells()
        total = max(1, len(cells) * settings.steps)
        self.progress.max, self.progress.value, self.progress_steps = total, 0, 0
        finished: list[dict] = []
        state = {"base": 0}

        def bar(cell, done, n, loss, secs, alphas):  # run_cell's on_step callback
            self.progress_steps = state["base"] + done
            self.progress.value = min(total, self.progress_steps)
            eta = secs / max(done, 1) * (n - done)
            self.progress_label.value = (
                f"{cell.mechanism} depth {cell.depth} {cell.init} seed "
                f"{cell.seed}: step {done}/{n}, loss {loss:.3f}, "
                f"cell ETA {eta:.0f} s"
            )

        def on_record(rec):
            state["base"] += settings.steps
            finished.append(rec)
            self._show(finished, settings)

        self.run_button.disabled = True
        try:
            records = run_grid(
                cells,
                settings,
                self.results_path(),
                progress=False,
                on_record=on_record,
                on_step=bar,
            )
        finally:
            self.run_button.disabled = False
        self.records = records
        self.progress.value = total
        self.progress_label.value = (
            f"done: {len(records)} cells ({len(finished)} trained now, "
            f"{len(records) - len(finished)} from the results file)"
        )
        if self.store:
            from lab.store import Store

            with Store(self.store) as st:
                for rec in records:
                    st.log_probe(rec)
        self._show(records, settings)
        return records

    # -- outputs ---------------------------------------------------------------------------------
    def _show(self, records: list[dict], settings: ProbeSettings) -> None:
        if not records:
            return
        dists = sorted({d for r in records for d in r["acc"]}, key=int)
        rows = [
            [
                r["mechanism"],
                r["depth"],
                r["init"],
                r["seed"],
                f"{min(_finite(r['alphas']), default=math.nan):.3f}–"
                f"{max(_finite(r['alphas']), default=math.nan):.3f}",
            ]
            + [f"{r['acc'][d]:.2f}" if d in r["acc"] else "" for d in dists]
            for r in records
        ]
        self.acc_table.value = "<b>accuracy per distance</b>" + html_table(
            ["mechanism", "depth", "init", "seed", "α range"] + [f"@{d}" for d in dists], rows
        )
        if self.task.value == "marked":
            self.table2.value = self.table2_text(records)
        if self.render:
            set_png(self.image, trajectory_png(records))

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
