"""Learned-α trajectories (notebook 04): `AlphaExplorer`.

It lists the runs of the experiment store that logged α (language-model runs and retrieval-probe
runs, kind shown), plots α per layer over steps for the chosen ones
(`analysis.figures.plots.alpha_trajectories`), tabulates the α range at each run's last step
(`analysis.figures.trajectories.final_range`) and the largest distance from the initial α per layer
(`trajectories.drift`), and checks the paper's "learned α is inert" claim with a tolerance slider
(`trajectories.inert`): a plain sentence such as "3 of 4 learned-α runs stay within 0.05 of their
init" (fixed-α runs log α too but cannot move, so they are not counted).
A layer list picks the layers drawn, and the view draws α or its drift α − α_init on an axis
fitted to the drift (``auto``: the drift when every drawn layer moved less than the tolerance,
where α's own axis would show flat lines), the axis's span stated.
It only reads the store (a missing file is reported, never created); **refresh** re-reads it.
The caption under the figure says how many runs and lines it draws (``explorer.lines``; CSS class
``fib-alpha-lines`` with ``data-lines``), and a hint under the list says how to pick several runs.
Tests set widget values and read ``explorer.final_range``, ``explorer.sentence``, ….

One module of ≈ 450 lines on purpose: one widget class whose handlers (runs, layers, view,
tolerance) redraw through one guarded path; the pure parts (`analysis.figures.trajectories`,
the plot) already live apart.
"""

from __future__ import annotations

import html
import json

import ipywidgets as W
import pandas as pd

from analysis.figures import plots
from analysis.figures import trajectories as TJ
from fiblab.ui.common import (
    Shown,
    error_widget,
    guarded,
    image_widget,
    png,
    set_png,
    show_error,
    store_path,
)
from fiblab.ui.results_common import NO_RUNS, frame_html, reading, store_label
from lab.ladder.drift import INERT_TOL
from lab.ladder.schemes import scheme
from lab.util.wording import plural

__all__ = ["RUNS_HINT", "AlphaExplorer", "inert_sentence", "learned_alpha", "line_count"]


def learned_alpha(config_json: str | None) -> bool:
    """Whether a stored run's α is trained (so that it could move at all): a probe's mechanism,
    an LM run's model schedule.  Fixed-α probe cells log their constant α too; counting them
    would make "learned α is inert" look confirmed by runs whose α cannot move."""
    try:
        config = json.loads(config_json) if config_json else {}
    except (TypeError, ValueError):
        return False
    if not isinstance(config, dict):
        return False
    if "mechanism" in config:  # a probe record
        try:
            return scheme(str(config["mechanism"])).learned
        except ValueError:
            return False
    model = config.get("model") if isinstance(config.get("model"), dict) else config
    return model.get("attention", "sparse") != "dense" and model.get("schedule") == "learned"


def inert_sentence(inert: pd.DataFrame, tol: float) -> str:
    """The paper's inertness claim checked, in one sentence, from `trajectories.inert`'s frame:
    "3 of 4 runs stay within 0.05 of their init (largest drift 0.071: run x, layer 2)".  With a
    ``learned`` column (the explorer adds it) only learned-α runs count: a fixed α cannot move,
    so it says nothing about the claim."""
    if inert is None or inert.empty:
        return "no α trajectories selected"
    what, fixed = "run", 0
    if "learned" in inert.columns:
        learned = inert["learned"].fillna(False).astype(bool)
        what, fixed = "learned-α run", int((~learned).sum())
        if fixed == len(inert):
            return (
                f"none of the {plural(fixed, 'shown run')} has learned α (their α is fixed and "
                f"cannot move), so there is nothing to check: pick learned-α runs"
                if fixed > 1
                else "the shown run has no learned α (its α is fixed and cannot move), so there "
                "is nothing to check: pick learned-α runs"
            )
        inert = inert[learned]
    known = inert[inert["inert"].notna()]
    n, unknown = len(known), len(inert) - len(known)
    if n == 0:
        return (
            f"cannot check: none of the {plural(len(inert), 'selected ' + what)} has a known "
            f"initial α (no step-0 value and no schedule in its config)"
        )
    k = int(known["inert"].astype(bool).sum())
    s = (
        f"{k} of {plural(n, what)} stay{'s' if n == 1 else ''} within {tol:g} of "
        f"{'their' if n != 1 else 'its'} init"
    )
    worst = known.loc[known["max_drift"].astype(float).idxmax()]
    s += (
        f" (largest drift {float(worst['max_drift']):.3f}: {worst['run']}, layer "
        f"{int(worst['worst_layer'])})"
    )
    if unknown:
        s += f"; {plural(unknown, what)} without a known initial α not counted"
    if fixed:
        s += f"; {plural(fixed, 'fixed-α run')} not counted (α that cannot move)"
    return s


def _empty_traj() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run": pd.Series(dtype=str),
            "kind": pd.Series(dtype=str),
            "step": pd.Series(dtype="int64"),
            "layer": pd.Series(dtype="int64"),
            "alpha": pd.Series(dtype=float),
            "alpha_init": pd.Series(dtype=float),
        }
    )


#: Under the run list: a SelectMultiple needs Ctrl-click to pick more than one, which nobody guesses.
RUNS_HINT = (
    "click a run to show it alone · <b>Ctrl</b>-click (<b>⌘</b>-click on a Mac) adds or removes "
    "one · <b>Shift</b>-click picks a range"
)


def line_count(traj: pd.DataFrame, runs) -> int:
    """How many α lines the figure draws for ``runs``: one per run and layer with a logged α."""
    g = traj[traj["run"].isin(list(runs)) & traj["alpha"].notna()]
    return int(g.groupby("run")["layer"].nunique().sum()) if len(g) else 0


class AlphaExplorer(Shown):
    """Pick runs with α rows; α per layer over steps, the final range, the drift from init and
    the inertness check.  Display the object (or ``.widget``) in a notebook.

    State: ``available`` (one row per run with α: ``run``, ``kind``, ``layers``, ``last_step``,
    ``learned``: whether its α is trained),
    ``selected`` (the chosen run names), ``traj`` (their trajectory frame), ``final_range``,
    ``drift`` (per run and layer), ``inert`` (per run, at the slider's tolerance), ``sentence``,
    ``lines`` (α lines in the figure: one per plotted run and layer), ``message`` (e.g. "no runs
    yet …", or None) and ``error``.
    """

    def __init__(
        self,
        store=None,
        runs=None,
        tol: float = INERT_TOL,
        max_default: int = 6,
        render: bool = True,
    ):
        self.store = store_path() if store is None else store
        self.render = render
        self.max_default = max_default
        self.error: str | None = None
        self.message: str | None = None
        self.available = pd.DataFrame(columns=["run", "kind", "layers", "last_step", "learned"])
        self.traj = _empty_traj()
        self.final_range = TJ.final_range(self.traj)
        self.drift = TJ.drift(self.traj)
        self.inert = TJ.inert(self.traj, tol)
        self.sentence = ""
        self.figure = None
        self.lines = 0
        self.drawn = "alpha"  # what the figure shows: "alpha" or "drift" (α − α_init)
        self._loaded = False
        self._quiet = False
        style = {"description_width": "initial"}
        self.runs = W.SelectMultiple(
            options=[],
            rows=8,
            description="runs with α",
            style=style,
            layout=W.Layout(width="640px"),
        )
        self.runs_hint = W.HTML(f"<small style='color:#555'>{RUNS_HINT}</small>")
        self.runs_hint.add_class("fib-runs-hint")
        self.tolerance = W.FloatSlider(
            value=tol,
            min=0.0,
            max=0.5,
            step=0.005,
            readout_format=".3f",
            continuous_update=False,
            description="inert if |α − α_init| ≤",
            style=style,
            layout=W.Layout(width="480px", min_width="480px"),  # its own row: never clipped
        )
        self.tolerance.add_class("fib-tolerance")
        # which layers to draw (default: all of the selected runs'), and α or its drift
        self.layers = W.SelectMultiple(
            options=[], rows=4, description="layers", layout=W.Layout(width="220px")
        )
        self.layers.add_class("fib-layers")
        self.view = W.ToggleButtons(
            options=[("α", "alpha"), ("drift α − α_init", "drift"), ("auto", "auto")],
            value="auto",
            tooltip="auto: the drift when every drawn layer moved less than the tolerance",
        )
        self.view.add_class("fib-alpha-view")
        self.refresh_button = W.Button(
            description="refresh",
            icon="refresh",
            tooltip="re-read the store (a run may be writing to it)",
        )
        self.status = W.HTML()
        self.status.add_class("fib-status")
        self.sentence_box = W.HTML()
        self.sentence_box.add_class("fib-inert")
        self.range_table = W.HTML()
        self.range_table.add_class("fib-final-range")
        self.drift_table = W.HTML()
        self.drift_table.add_class("fib-drift")
        self.inert_table = W.HTML()
        self.inert_table.add_class("fib-inert-table")
        self.image = image_widget()
        self.caption = W.HTML()
        self.caption.add_class("fib-alpha-caption")
        self.error_box = error_widget()
        self.runs.observe(self._on_runs, names="value")
        self.layers.observe(self._on_layers, names="value")
        self.view.observe(self._on_layers, names="value")
        self.tolerance.observe(self._on_tolerance, names="value")
        self.refresh_button.on_click(self._on_refresh)
        self.refresh(select=runs)
        self.widget = W.VBox(
            [
                W.HBox([self.runs, self.refresh_button]),
                self.runs_hint,
                self.tolerance,
                W.HBox([self.layers, self.view]),
                self.error_box,
                self.status,
                self.sentence_box,
                self.image,
                self.caption,
                W.HTML("<b>α at each run's last step</b> (init: the range it started from)"),
                self.range_table,
                W.HTML("<b>inertness per run</b> (largest |α − α_init| over layers and steps)"),
                self.inert_table,
                W.HTML("<b>max |α − α_init| per layer</b> over the logged steps"),
                self.drift_table,
            ]
        )
        self.widget.add_class("fib-alpha-explorer")

    @property
    def selected(self) -> list[str]:
        return list(self.runs.value)

    # -- reading the store -----------------------------------------------------------------------
    def _read_available(self) -> pd.DataFrame:
        cols = ["run", "kind", "layers", "last_step", "learned"]
        with reading(self.store) as st:
            if st is None:
                return pd.DataFrame(columns=cols)
            info = st.runs(kind=["lm", "probe"])
            al = st.alphas(list(info["name"])) if len(info) else st.alphas([])
        al = al[al["alpha"].notna()]
        if al.empty:
            return pd.DataFrame(columns=cols)
        agg = al.groupby("run").agg(layers=("layer", "nunique"), last_step=("step", "max"))
        info = info[info["name"].isin(agg.index)]  # store order: oldest first
        return pd.DataFrame(
            {
                "run": info["name"].to_numpy(),
                "kind": info["kind"].to_numpy(),
                "layers": agg.loc[info["name"], "layers"].to_numpy(),
                "last_step": agg.loc[info["name"], "last_step"].to_numpy(),
                "learned": [learned_alpha(c) for c in info["config_json"]],
            },
            columns=cols,
        )

    def refresh(self, select=None) -> None:
        """Re-read the store: the list of runs with α and every output.  The selection is kept
        where it still exists (``select`` replaces it); on the first look, or when the store had
        no α before, the ``max_default`` most recent runs are selected."""
        show_error(self, None)
        avail = self._read_available()
        names = list(avail["run"])
        if select is not None:
            select = [select] if isinstance(select, str) else list(select)
            unknown = [r for r in select if r not in names]
            if unknown:
                raise ValueError(
                    f"no α trajectories for runs {unknown} in "
                    f"{store_label(self.store)} (runs with α: {names or 'none'})"
                )
            keep = select
        elif self._loaded and len(self.available):
            keep = [r for r in self.selected if r in names]
        else:  # first look, or the store had no α before
            keep = names[-self.max_default :] if self.max_default else names
        self.available = avail
        self._quiet = True
        try:
            self.runs.options = [
                (
                    f"{r.run}  [{r.kind}] · {plural(r.layers, 'layer')} · α to step {r.last_step}",
                    r.run,
                )
                for r in avail.itertuples()
            ]
            self.runs.value = tuple(keep)
        finally:
            self._quiet = False
        self._loaded = True
        self.compute()

    def compute(self) -> None:
        """Trajectories of the selected runs, their summaries and the figure."""
        sel = self.selected
        if self.available.empty:
            self.message = (
                f"{NO_RUNS} (no α trajectories in {store_label(self.store)}; "
                f"learned-α LM runs and retrieval probes log them)"
            )
        elif not sel:
            self.message = "no runs selected: pick one or more runs above"
        else:
            self.message = None
        if sel:
            with reading(self.store) as st:
                self.traj = TJ.from_store(st, runs=sel) if st is not None else _empty_traj()
        else:
            self.traj = _empty_traj()
        self.final_range = TJ.final_range(self.traj)
        self.drift = TJ.drift(self.traj)
        self.status.value = (
            ""
            if self.message is None
            else (f"<div style='color:#1565c0'>{html.escape(self.message)}</div>")
        )
        self.range_table.value = frame_html(self.final_range, 3) if len(self.traj) else ""
        if len(self.drift):
            wide = self.drift.pivot_table(
                index="run", columns="layer", values="max_drift", aggfunc="first", dropna=False
            )
            wide = wide.reindex([r for r in sel if r in wide.index])
            wide.columns = [f"layer {c}" for c in wide.columns]
            self.drift_table.value = frame_html(wide.reset_index(), 3)
        else:
            self.drift_table.value = ""
        self._set_layers()
        self.draw()
        self.update_inert()

    def _set_layers(self) -> None:
        """The layer list from the selected runs' trajectories, keeping the choice that still
        exists (all layers when none of it does)."""
        have = sorted(int(k) for k in self.traj["layer"].unique()) if len(self.traj) else []
        keep = [k for k in self.layers.value if k in have] or have
        self._quiet = True
        try:
            self.layers.options = [(f"layer {k}", k) for k in have]
            self.layers.value = tuple(keep)
        finally:
            self._quiet = False

    @property
    def drift_view(self) -> bool:
        """Whether the figure draws α − α_init: chosen, or (auto) when every drawn layer with a
        known init moved less than the tolerance, where α's own axis shows flat lines."""
        if self.view.value != "auto":
            return self.view.value == "drift"
        d = self.drift[self.drift["layer"].isin(self.layers.value)] if len(self.drift) else None
        if d is None or d.empty or d["max_drift"].isna().all():
            return False
        return bool(d["max_drift"].max() < self.tolerance.value)

    def draw(self) -> None:
        """The figure and its caption for the selected runs, layers and view."""
        self.figure = None
        sel = self.selected
        picked = list(self.layers.value)
        traj = self.traj[self.traj["layer"].isin(picked)] if len(self.traj) else self.traj
        runs = [r for r in sel if r in set(traj["run"])]
        self.lines = line_count(traj, runs)
        drift = self.drift_view and "alpha_init" in traj and traj["alpha_init"].notna().any()
        self.drawn = "drift" if drift else "alpha"
        span = ""
        if drift and len(traj):
            d = (traj["alpha"] - traj["alpha_init"]).abs().max()
            span = f"; y: α − α_init, largest |drift| {d:.4f}"
        self.caption.value = (
            f"<small class='fib-alpha-lines' data-lines='{self.lines}' data-runs='{len(runs)}' "
            f"data-view='{self.drawn}'>plotted: {plural(len(runs), 'run')}, "
            f"{plural(self.lines, 'α line')} (one per run and layer; layers "
            f"{', '.join(map(str, picked))}){span}</small>"
            if runs
            else ""
        )
        if self.render and runs:
            title = (
                "α − α_init per layer (the drift, on its own scale)"
                if drift
                else "α per layer (dotted: the layer's initial α)"
            )
            self.figure = plots.alpha_trajectories(
                traj, runs=runs, title=title, layers=picked, drift=drift
            )
            set_png(self.image, png(self.figure))
            self.image.layout.display = None
        elif not runs:
            self.image.layout.display = "none"

    @guarded
    def _on_layers(self, change=None):
        if not self._quiet:
            self.draw()

    def update_inert(self) -> None:
        """The inertness check at the slider's tolerance."""
        tol = float(self.tolerance.value)
        self.inert = TJ.inert(self.traj, tol)
        learned = dict(zip(self.available["run"], self.available["learned"]))
        self.inert["learned"] = [bool(learned.get(r, False)) for r in self.inert["run"]]
        self.sentence = inert_sentence(self.inert, tol) if len(self.traj) else ""
        self.sentence_box.value = (
            ""
            if not self.sentence
            else (
                f"<div style='font-size:1.1em'><b>The paper: learned α is inert.</b> Here: "
                f"<span class='fib-inert-sentence'>{html.escape(self.sentence)}</span>.</div>"
            )
        )
        self.inert_table.value = frame_html(self.inert, 3) if len(self.inert) else ""

    def summary(self) -> str:
        """One line: what is selected and the inertness sentence (or the message)."""
        if self.message:
            return self.message
        return f"{plural(len(self.selected), 'run')}: {self.sentence}"

    # -- handlers (errors are shown, not swallowed) ------------------------------------------------
    @guarded
    def _on_runs(self, change=None):
        if not self._quiet:
            show_error(self, None)
            self.compute()

    @guarded
    def _on_tolerance(self, change=None):
        show_error(self, None)
        self.update_inert()
        if self.view.value == "auto":  # the tolerance decides the auto view
            self.draw()

    @guarded
    def _on_refresh(self, button=None):
        self.refresh()
