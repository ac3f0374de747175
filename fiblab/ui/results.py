"""Learned-α trajectories (notebook 04) and the results panel (notebook 05).

`AlphaExplorer` lists the runs of the experiment store that logged α (language-model runs and
retrieval-probe runs, kind shown), plots α per layer over steps for the chosen ones
(`analysis.plots.alpha_trajectories`), tabulates the α range at each run's last step
(`analysis.trajectories.final_range`) and the largest distance from the initial α per layer
(`trajectories.drift`), and checks the paper's "learned α is inert" claim with a tolerance slider
(`trajectories.inert`): a plain sentence such as "3 of 4 runs stay within 0.05 of their init".

`ResultsPanel` rebuilds the paper's Tables 1–5 from the store (`analysis.tables`, finished runs
only; the LM runs to use, the dataset and the probe mechanism are chosen with widgets) and shows
each beside the published table (`analysis.tables.published`): Table 1's layout, Table 2 (the
marked probe), Table 3 (length extrapolation, rung set recomputed and frozen, and the
position-matched blocks), Table 4 (loss per position bin), Table 5 (seeds: mean, std and a
verdict line from `analysis.stats.assess` on "fib/stagger beats fib/fixed" wherever both have at
least two seeds), with the extrapolation and position-bin plots.  Given the authors' ``fib.db``
(a text box; by default ``../shared/reference/fib.db`` next to the project when it exists) it also
shows the paper's tables rebuilt from it.  **export report** writes
`analysis.results.build_report` to ``reports/<name>/`` (``report.md``, ``report.html``, PNGs).

Both panels only read the store: a missing store file is reported ("no runs yet — …"), never
created; **refresh** re-reads it (a running job may be writing to it).  A table without data says
so in its section; an unexpected exception goes to the panel's ``fib-error`` line and to
``panel.error``.  Tests set widget values and read the state: ``explorer.final_range``,
``explorer.sentence``, ``panel.sections[...]``, ``panel.verdicts``, ``panel.report_path``.
"""

from __future__ import annotations

import html
import math
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

import ipywidgets as W
import numpy as np
import pandas as pd

from analysis import (
    plots,
    tables_length,
    tables_paper,
    tables_position,
    tables_ppl,
    tables_probe,
    tables_seeds,
    tables_store,
)
from analysis import trajectories as TJ
from analysis.comparable import TableUnavailable
from analysis.stats import assess
from fiblab.ui.common import (
    ROOT,
    error_widget,
    guarded,
    html_table,
    image_widget,
    png,
    runs_dir,
    set_png,
    show_error,
    smoke,
    store_path,
)
from lab.drift import INERT_TOL
from lab.store import Store

__all__ = [
    "NO_RUNS",
    "AlphaExplorer",
    "ResultsPanel",
    "default_paper_db",
    "default_reports_dir",
    "inert_sentence",
    "frame_html",
]

#: What both panels say when the store holds nothing to show.
NO_RUNS = "no runs yet — run `fiblab demo` or notebook 03"
#: The two configurations Table 5's verdict line compares (a beats b?).
VERDICT_PAIR = ("fib/stagger", "fib/fixed")


# ------------------------------------------------------------------------------------------------
# shared helpers
# ------------------------------------------------------------------------------------------------
def default_paper_db() -> str:
    """The authors' database next to the project (``../shared/reference/fib.db``), or ``""``."""
    p = ROOT.parent / "shared" / "reference" / "fib.db"
    return str(p) if p.is_file() else ""


def default_reports_dir() -> str:
    """Where **export report** writes: ``reports/`` in the project; ``<FIBLAB_RUNS>/reports``
    at the smoke scale (so that the tests write nothing into the checkout)."""
    return os.path.join(runs_dir(), "reports") if smoke() else str(ROOT / "reports")


@contextmanager
def _reading(store):
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


def _store_label(store) -> str:
    return store.path if isinstance(store, Store) else os.fspath(store)


def _cell(x, decimals: int) -> str:
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, (float, np.floating)):
        return f"{float(x):.{decimals}f}"
    return str(x)


def frame_html(df: pd.DataFrame | None, decimals: int = 3, cls: str = "") -> str:
    """A DataFrame as a small HTML table: floats with ``decimals`` places, missing values '–'."""
    if df is None:
        return ""
    rows = [[_cell(v, decimals) for v in rec] for rec in df.itertuples(index=False, name=None)]
    return html_table([str(c) for c in df.columns], rows, cls)


def _note(text: str, cls: str = "fib-note") -> str:
    return f"<div class='{cls}' style='color:#555;font-style:italic'>{html.escape(text)}</div>"


def _pick(options: list[str], current, preferred: str | None = None):
    """The dropdown value after its options change: the current one if still offered, else the
    preferred one, else the first, else None."""
    if current in options:
        return current
    if preferred in options:
        return preferred
    return options[0] if options else None


# ------------------------------------------------------------------------------------------------
# notebook 04: learned-α trajectories
# ------------------------------------------------------------------------------------------------
def inert_sentence(inert: pd.DataFrame, tol: float) -> str:
    """The paper's inertness claim checked, in one sentence, from `trajectories.inert`'s frame:
    "3 of 4 runs stay within 0.05 of their init (largest drift 0.071: run x, layer 2)"."""
    if inert is None or inert.empty:
        return "no α trajectories selected"
    known = inert[inert["inert"].notna()]
    n, unknown = len(known), len(inert) - len(known)
    if n == 0:
        return (
            f"cannot check: none of the {len(inert)} selected runs has a known initial α "
            f"(no step-0 value and no schedule in its config)"
        )
    k = int(known["inert"].astype(bool).sum())
    s = (
        f"{k} of {n} run{'s' if n != 1 else ''} stay{'s' if n == 1 else ''} within {tol:g} of "
        f"{'their' if n != 1 else 'its'} init"
    )
    worst = known.loc[known["max_drift"].astype(float).idxmax()]
    s += (
        f" (largest drift {float(worst['max_drift']):.3f}: {worst['run']}, layer "
        f"{int(worst['worst_layer'])})"
    )
    if unknown:
        s += f"; {unknown} run{'s' if unknown != 1 else ''} without a known initial α not counted"
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


class AlphaExplorer:
    """Pick runs with α rows; α per layer over steps, the final range, the drift from init and
    the inertness check.  Display the object (or ``.widget``) in a notebook.

    State: ``available`` (one row per run with α: ``run``, ``kind``, ``layers``, ``last_step``),
    ``selected`` (the chosen run names), ``traj`` (their trajectory frame), ``final_range``,
    ``drift`` (per run and layer), ``inert`` (per run, at the slider's tolerance), ``sentence``,
    ``message`` (e.g. "no runs yet …", or None) and ``error``.
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
        self.available = pd.DataFrame(columns=["run", "kind", "layers", "last_step"])
        self.traj = _empty_traj()
        self.final_range = TJ.final_range(self.traj)
        self.drift = TJ.drift(self.traj)
        self.inert = TJ.inert(self.traj, tol)
        self.sentence = ""
        self.figure = None
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
        self.tolerance = W.FloatSlider(
            value=tol,
            min=0.0,
            max=0.5,
            step=0.005,
            readout_format=".3f",
            continuous_update=False,
            description="inert if |α − α_init| ≤",
            style=style,
            layout=W.Layout(width="420px"),
        )
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
        self.error_box = error_widget()
        self.runs.observe(self._on_runs, names="value")
        self.tolerance.observe(self._on_tolerance, names="value")
        self.refresh_button.on_click(self._on_refresh)
        self.refresh(select=runs)
        self.widget = W.VBox(
            [
                W.HBox([self.runs, W.VBox([self.refresh_button, self.tolerance])]),
                self.error_box,
                self.status,
                self.sentence_box,
                self.image,
                W.HTML("<b>α at each run's last step</b> (init: the range it started from)"),
                self.range_table,
                W.HTML("<b>inertness per run</b> (largest |α − α_init| over layers and steps)"),
                self.inert_table,
                W.HTML("<b>max |α − α_init| per layer</b> over the logged steps"),
                self.drift_table,
            ]
        )
        self.widget.add_class("fib-alpha-explorer")

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def selected(self) -> list[str]:
        return list(self.runs.value)

    # -- reading the store -----------------------------------------------------------------------
    def _read_available(self) -> pd.DataFrame:
        cols = ["run", "kind", "layers", "last_step"]
        with _reading(self.store) as st:
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
                    f"{_store_label(self.store)} (runs with α: {names or 'none'})"
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
                (f"{r.run}  [{r.kind}] · {r.layers} layers · step {r.last_step}", r.run)
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
                f"{NO_RUNS} (no α trajectories in {_store_label(self.store)}; "
                f"learned-α LM runs and retrieval probes log them)"
            )
        elif not sel:
            self.message = "no runs selected: pick one or more runs above"
        else:
            self.message = None
        if sel:
            with _reading(self.store) as st:
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
        self.figure = None
        if self.render and len(self.traj):
            runs = [r for r in sel if r in set(self.traj["run"])]
            self.figure = plots.alpha_trajectories(
                self.traj, runs=runs, title="α per layer (dotted: the layer's initial α)"
            )
            set_png(self.image, png(self.figure))
        elif not len(self.traj):
            self.image.layout.display = "none"
        self.update_inert()

    def update_inert(self) -> None:
        """The inertness check at the slider's tolerance."""
        tol = float(self.tolerance.value)
        self.inert = TJ.inert(self.traj, tol)
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
        return f"{len(self.selected)} runs: {self.sentence}"

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

    @guarded
    def _on_refresh(self, button=None):
        self.refresh()


# ------------------------------------------------------------------------------------------------
# notebook 05: results
# ------------------------------------------------------------------------------------------------
SECTION_TITLES = {
    "table1": "Table 1 — held-out perplexity (base × schedule × W; seeds averaged)",
    "table2": "Table 2 — the marked two-distance retrieval probe",
    "table3": "Table 3 — length extrapolation (ppl_T{L}: rungs recomputed for L, the paper's "
    "policy; frozen_ppl_T{L}: the training-length rung set)",
    "table3_blocks": "Table 3, position-matched — block j = positions [j·T, (j+1)·T) of the "
    "long windows",
    "table4": "Table 4 — mean NLL (nats) per position bin of the training window (last row: "
    "fixed − stagger)",
    "table5": "Table 5 — seeds: perplexity per seed, mean, std (sample) and std_pop (the "
    "paper's population std)",
}
_DECIMALS = {"table1": 2, "table2": 3, "table3": 2, "table3_blocks": 2, "table4": 3, "table5": 3}
_PAPER_OF = {"table1": 1, "table2": 2, "table3": 3, "table3_blocks": None, "table4": 4, "table5": 5}


def _config_line(r) -> str:
    w = "" if pd.isna(r.W) else f" W={r.W}"
    seed = "" if pd.isna(r.seed) else f" seed {r.seed}"
    return f"{r.run}  · {r.config}{w}{seed} · T={r.seq_len}"


class ResultsPanel:
    """The paper's tables from the store beside the published ones, the extrapolation and
    position plots, the seed verdict, the authors' database rebuilt, and report export.

    State: ``sections`` ({key: {"title", "ours", "paper", "message"}} for keys ``table1``,
    ``table2``, ``table3``, ``table3_blocks``, ``table4``, ``table5``: ``ours`` is the frame
    built from the store or None, ``message`` says why it is missing), ``verdicts`` (Table 5's
    verdict lines), ``assessments`` (their `analysis.stats.Verdict` objects), ``paper_sections``
    (the tables rebuilt from fib.db), ``figures`` ({"extrapolation", "position_bins"}),
    ``report_path`` (report.md after an export), ``message`` and ``error``.
    """

    def __init__(
        self,
        store=None,
        paper_db: str | None = None,
        reports_dir: str | None = None,
        name: str | None = None,
        render: bool = True,
    ):
        self.store = store_path() if store is None else store
        self.reports_dir = reports_dir or default_reports_dir()
        self.render = render
        self.error: str | None = None
        self.message: str | None = None
        self.sections: dict[str, dict] = {}
        self.verdicts: list[str] = []
        self.assessments: list = []
        self.paper_sections: dict[str, dict] = {}
        self.paper_db_path: str | None = None
        self.figures: dict = {}
        self.report_path: str | None = None
        self.report_paths: dict | None = None
        self._loaded = False
        self._quiet = False
        style = {"description_width": "initial"}
        self.runs = W.SelectMultiple(
            options=[],
            rows=6,
            description="LM runs (finished)",
            style=style,
            layout=W.Layout(width="640px"),
        )
        self.dataset = W.Dropdown(options=[], description="dataset", style=style)
        self.mechanism = W.Dropdown(options=[], description="Table 2 mechanism", style=style)
        self.refresh_button = W.Button(
            description="refresh",
            icon="refresh",
            tooltip="re-read the store (a run may be writing to it)",
        )
        self.status = W.HTML()
        self.status.add_class("fib-status")
        self.section_boxes = {}
        for key in SECTION_TITLES:
            box = W.HTML()
            box.add_class(f"fib-{key.replace('_', '-')}")
            self.section_boxes[key] = box
        self.verdict_box = W.HTML()
        self.verdict_box.add_class("fib-verdict")
        self.extrap_image = image_widget()
        self.bins_image = image_widget()
        self.paper_db = W.Text(
            value=default_paper_db() if paper_db is None else paper_db,
            description="authors' fib.db",
            continuous_update=False,
            placeholder="path to the authors' results database (optional)",
            style=style,
            layout=W.Layout(width="640px"),
        )
        self.paper_box = W.HTML()
        self.paper_box.add_class("fib-paperdb")
        self.report_name = W.Text(
            value=name or time.strftime("results-%Y%m%d-%H%M"),
            description="report name",
            style=style,
        )
        self.export_button = W.Button(
            description="export report", icon="file-text", button_style="primary"
        )
        self.export_status = W.HTML()
        self.export_status.add_class("fib-export")
        self.error_box = error_widget()
        self.runs.observe(self._on_selection, names="value")
        self.dataset.observe(self._on_selection, names="value")
        self.mechanism.observe(self._on_selection, names="value")
        self.paper_db.observe(self._on_paper_db, names="value")
        self.refresh_button.on_click(self._on_refresh)
        self.export_button.on_click(self._on_export)
        self.refresh()
        self.load_paper_db()
        b = self.section_boxes
        self.widget = W.VBox(
            [
                W.HBox([self.runs, W.VBox([self.dataset, self.mechanism, self.refresh_button])]),
                self.error_box,
                self.status,
                b["table1"],
                b["table5"],
                self.verdict_box,
                b["table3"],
                self.extrap_image,
                b["table3_blocks"],
                b["table4"],
                self.bins_image,
                b["table2"],
                W.HTML("<h4>The authors' results database</h4>"),
                self.paper_db,
                self.paper_box,
                W.HTML("<h4>Export</h4>"),
                W.HBox([self.report_name, self.export_button]),
                self.export_status,
            ]
        )
        self.widget.add_class("fib-results-panel")

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def selected(self) -> list[str]:
        return list(self.runs.value)

    # -- reading the store -----------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the store: the finished LM runs, datasets and probe mechanisms offered (the
        choices are kept where they still exist; new runs are added to the selection), then
        every table."""
        show_error(self, None)
        with _reading(self.store) as st:
            if st is None:
                lm = pd.DataFrame(columns=["run", "config", "W", "seed", "seq_len"])
                probes = pd.DataFrame(columns=["task", "mechanism"])
                n_runs = 0
            else:
                lm = tables_store.lm_runs(st)
                probes = st.probes()
                n_runs = len(st.runs())
        before = {v for _, v in self.runs.options}
        names = list(lm["run"])
        if self._loaded:
            keep = [r for r in self.selected if r in names] + [r for r in names if r not in before]
        else:
            keep = names
        mechs = sorted(set(probes.loc[probes["task"] == "marked", "mechanism"]))
        self._quiet = True
        try:
            self.runs.options = [(_config_line(r), r.run) for r in lm.itertuples()]
            self.runs.value = tuple(r for r in names if r in set(keep))
            self.mechanism.options = mechs
            self.mechanism.value = _pick(mechs, self.mechanism.value, "blur")
            self._update_datasets()
        finally:
            self._quiet = False
        self._loaded = True
        if n_runs == 0:
            self.message = f"{NO_RUNS} (store: {_store_label(self.store)})"
        elif not names:
            self.message = (
                "no finished language-model runs yet — run `fiblab demo` or "
                "notebook 03; probe results are in Table 2"
            )
        else:
            self.message = None
        self.compute()

    def _update_datasets(self) -> None:
        sel = self.selected
        ds: list[str] = []
        if sel:
            with _reading(self.store) as st:
                if st is not None:
                    ev = tables_store.lm_evals(st, runs=sel)
                    ds = sorted(set(ev.loc[ev["kind"] != "light", "dataset"]))
        self.dataset.options = ds
        self.dataset.value = _pick(ds, self.dataset.value, "fineweb_edu")

    def _section(self, key: str, build) -> None:
        """Build one section: ``build()`` returns (frame, note); a table that cannot be built
        (`analysis.comparable.TableUnavailable`: why, and what to run) or an empty frame becomes the
        section's message, and the notes of a built one (``attrs["notes"]``: duplicate runs
        resolved) join its note. Any other exception is a bug and reaches the panel's error."""
        n = _PAPER_OF[key]
        sec = {
            "title": SECTION_TITLES[key],
            "ours": None,
            "note": None,
            "message": None,
            "paper": tables_paper.published(n) if n else None,
        }
        try:
            df, note = build()
            if df is None or df.empty:
                sec["message"] = "no data in the store for this table"
            else:
                notes = [note] if note else []
                sec["ours"] = df
                sec["note"] = "; ".join(notes + list(df.attrs.get("notes", []))) or None
        except TableUnavailable as e:
            sec["message"] = f"no data in the store for this table: {e}"
        self.sections[key] = sec

    def _missing(self, key: str, why: str) -> None:
        def build():
            raise TableUnavailable(why)

        self._section(key, build)

    def compute(self) -> None:
        """Every table, the verdict lines and the figures for the current choices."""
        sel, ds, mech = self.selected, self.dataset.value, self.mechanism.value
        self.sections = {}
        with _reading(self.store) as st:
            if st is None or not sel:
                why = (
                    "no finished language-model runs in the store"
                    if not len(self.runs.options)
                    else "no LM runs selected"
                )
                for key in ("table1", "table3", "table3_blocks", "table4", "table5"):
                    self._missing(key, why)
            else:
                self._section("table1", lambda: (tables_ppl.table1_from_store(st, runs=sel), None))
                t3 = None

                def table3():
                    nonlocal t3
                    t3 = tables_length.table3_from_store(st, ds, runs=sel, blocks=True)
                    whole = [c for c in t3.columns if "_block" not in c]
                    return t3[whole], None

                def table3_blocks():
                    if t3 is None:
                        raise TableUnavailable(
                            "Table 3 has no length-extrapolation evaluations to split into blocks"
                        )
                    blk = [c for c in t3.columns if "_block" in c]
                    if not blk:
                        raise TableUnavailable(
                            "no position-matched block evaluations in the store",
                            "evaluate a run with `fiblab eval runs/NAME` (it logs them)",
                        )
                    keys = [c for c in ("model", "W", "variant") if c in t3.columns]
                    return t3[keys + blk + ["seeds"]], None

                self._section("table3", table3)
                self._section("table3_blocks", table3_blocks)
                self._section(
                    "table4", lambda: (tables_position.table4_from_store(st, ds, runs=sel), None)
                )
                self._section(
                    "table5", lambda: (tables_seeds.table5_from_store(st, ds, runs=sel), None)
                )
            if st is None or mech is None:
                self._missing(
                    "table2", "no marked-probe results (notebook 02 or `fiblab probe marked`)"
                )
            else:
                self._section("table2", lambda: self._table2(st, mech))
        self._verdicts()
        self._render_sections()
        self._figures()
        self.status.value = (
            ""
            if self.message is None
            else (f"<div style='color:#1565c0'>{html.escape(self.message)}</div>")
        )

    @staticmethod
    def _table2(st, mech):
        cells = tables_probe.probe_cells_from_store(st.probes("marked"))
        cells = cells[cells["mechanism"] == mech]
        steps = sorted(int(s) for s in cells["steps"].dropna().unique())
        note = None
        if len(steps) > 1:
            note = (
                f"cells of {mech} were trained for {steps} steps: showing the "
                f"{steps[-1]}-step cells"
            )
        t2 = tables_probe.table2(cells, mech, "marked", steps=steps[-1] if len(steps) > 1 else None)
        return t2, note

    def _verdicts(self) -> None:
        self.verdicts, self.assessments = [], []
        t5 = self.sections.get("table5", {}).get("ours")
        a_name, b_name = VERDICT_PAIR
        if t5 is None or t5.empty:
            self.verdicts = [f"{a_name} vs {b_name}: no seed table yet"]
        else:
            seed_cols = [c for c in t5.columns if re.fullmatch(r"seed\d+", c)]
            # rows of other variants (column "variant": e.g. steps=12) are compared only with
            # the other configuration's row of the same variant text
            var = t5["variant"] if "variant" in t5.columns else pd.Series("", index=t5.index)

            def values(config, w, v):
                rows = t5[(t5["config"] == config) & (t5["W"] == w) & (var == v)]
                return (
                    []
                    if rows.empty
                    else [float(x) for x in rows.iloc[0][seed_cols] if not pd.isna(x)]
                )

            windows = sorted(
                {
                    (int(w), v)
                    for c, w, v in zip(t5["config"], t5["W"], var)
                    if c in VERDICT_PAIR and not pd.isna(w)
                }
            )
            for w, vt in windows:
                a, b = values(a_name, w, vt), values(b_name, w, vt)
                at = f"at W={w}" + (f" ({vt})" if vt else "")
                if len(a) >= 2 and len(b) >= 2:
                    v = assess(a, b, f"{a_name} beats {b_name} {at}")
                    self.assessments.append(v)
                    self.verdicts.append(v.line)
                else:
                    self.verdicts.append(
                        f"{a_name} vs {b_name} {at}: no verdict, it needs at least 2 seeds "
                        f"of each (have {len(a)} and {len(b)})"
                    )
            if not windows:
                self.verdicts = [f"{a_name} vs {b_name}: the selected runs have neither"]
        self.verdict_box.value = (
            "<div><b>verdict (Welch's t-test on perplexity over seeds)"
            "</b><ul>"
            + "".join(f"<li>{html.escape(v)}</li>" for v in self.verdicts)
            + "</ul></div>"
        )

    def _render_sections(self) -> None:
        for key, sec in self.sections.items():
            d = _DECIMALS[key]
            parts = [f"<h4>{html.escape(sec['title'])}</h4>"]
            if sec["ours"] is None:
                ours = _note(sec["message"], "fib-no-data")
            else:
                ours = frame_html(sec["ours"], d, f"fib-ours-{key}")
                if sec["note"]:
                    ours += _note(sec["note"])
            parts.append(
                "<div style='display:flex;gap:2em;flex-wrap:wrap;align-items:"
                "flex-start'><div><b>this store</b>" + ours + "</div>"
            )
            if sec["paper"] is not None:
                parts.append(f"<div><b>the paper</b>{frame_html(sec['paper'], d)}</div>")
            parts.append("</div>")
            self.section_boxes[key].value = "".join(parts)

    def _figures(self) -> None:
        self.figures = {}
        t3 = self.sections.get("table3", {}).get("ours")
        t4 = self.sections.get("table4", {}).get("ours")
        for key, image, frame, make in (
            (
                "extrapolation",
                self.extrap_image,
                t3,
                lambda t: plots.extrapolation(
                    t, title="perplexity vs evaluation length (solid: recomputed, dashed: frozen)"
                ),
            ),
            (
                "position_bins",
                self.bins_image,
                t4,
                lambda t: plots.position_bins(t, title="NLL per position bin"),
            ),
        ):
            fig = None
            if frame is not None and self.render:
                try:
                    fig = make(frame)
                except ValueError:
                    fig = None
            if fig is None:
                image.layout.display = "none"
            else:
                self.figures[key] = fig
                set_png(image, png(fig))

    # -- the authors' database -------------------------------------------------------------------
    def resolve_paper_db(self) -> str | None:
        """The fib.db path of the text box (a relative path is tried from the working folder,
        then from the project); None when the box is empty."""
        text = self.paper_db.value.strip()
        if not text:
            return None
        p = Path(text).expanduser()
        if not p.is_absolute() and not p.exists() and (ROOT / p).exists():
            p = ROOT / p
        return str(p)

    def load_paper_db(self) -> None:
        """The paper's tables rebuilt from the authors' database, beside the published ones."""
        from analysis import paperdb

        self.paper_sections, self.paper_db_path = {}, None
        path = self.resolve_paper_db()
        if path is None:
            self.paper_box.value = _note(
                "no database given: the paper's tables are shown "
                "beside ours above; give the path of the authors' "
                "fib.db to rebuild them from their data"
            )
            return
        if not os.path.isfile(path):
            self.paper_box.value = _note(f"no file at {path}", "fib-no-data")
            return
        try:
            fp = paperdb.load_final_ppl(path)
        except ValueError as e:
            self.paper_box.value = _note(f"cannot read {path}: {e}", "fib-no-data")
            return
        self.paper_db_path = path
        builders = {
            "table1": (
                "Table 1 from fib.db (_paper: published, _diff: rebuilt − published)",
                lambda: tables_paper.with_paper(
                    tables_ppl.table1(fp, decimals=2), tables_paper.published(1)
                ),
                2,
            ),
            "table5": (
                "Table 5 from fib.db (W=12, FineWeb-Edu)",
                lambda: tables_paper.with_paper(
                    tables_seeds.table5_from_final_ppl(fp, decimals=2), tables_paper.published(5)
                ),
                2,
            ),
            "table2": (
                "Table 2 from fib.db's marked-probe rows",
                lambda: tables_probe.table2_from_paperdb(paperdb.load_retrieval(path)),
                3,
            ),
        }
        parts = [f"<div>read from <code>{html.escape(path)}</code></div>"]
        for key, (title, build, d) in builders.items():
            try:
                df, msg = build(), None
            except TableUnavailable as e:
                df, msg = None, str(e)
            self.paper_sections[key] = {"title": title, "table": df, "message": msg}
            parts.append(
                f"<h4>{html.escape(title)}</h4>"
                + (
                    frame_html(df, d)
                    if df is not None
                    else _note(f"not available: {msg}", "fib-no-data")
                )
            )
        self.paper_box.value = "".join(parts)

    # -- export ----------------------------------------------------------------------------------
    def export(self) -> str:
        """Write `analysis.results.build_report` for the selected runs to
        ``<reports_dir>/<report name>/``; returns the path of report.md."""
        from analysis.results import build_report

        name = self.report_name.value.strip()
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or ""):
            raise ValueError(
                f"report name {name!r}: use letters, digits, '.', '_' or '-' "
                f"(it becomes the folder reports/<name>/)"
            )
        out = os.path.join(self.reports_dir, name)
        with _reading(self.store) as st:
            if st is None:
                raise ValueError(
                    f"{NO_RUNS}: there is no store at {_store_label(self.store)} to report on"
                )
            report = build_report(
                st,
                runs=self.selected,
                title=f"fiblab results: {name}",
                dataset=self.dataset.value,
                paper_db=self.paper_db_path,
            )
            paths = report.write(out)
        self.report_paths = paths
        self.report_path = paths["report.md"]
        n_fig = len(paths) - 2
        self.export_status.value = (
            f"written: <code class='fib-report-path'>{html.escape(self.report_path)}</code> "
            f"(and report.html, {n_fig} figure{'s' if n_fig != 1 else ''})"
        )
        return self.report_path

    def summary(self) -> str:
        """One line: the runs and which tables have data."""
        if self.message and not self.selected:
            return self.message
        have = [k for k, s in self.sections.items() if s["ours"] is not None]
        return (
            f"{len(self.selected)} LM runs; tables with data: {', '.join(have) or 'none'}; "
            + " | ".join(self.verdicts)
        )

    # -- handlers (errors are shown, not swallowed) ------------------------------------------------
    @guarded
    def _on_selection(self, change=None):
        if self._quiet:
            return
        show_error(self, None)
        if change is not None and change.get("owner") is self.runs:
            self._quiet = True
            try:
                self._update_datasets()
            finally:
                self._quiet = False
        self.compute()

    @guarded
    def _on_refresh(self, button=None):
        self.refresh()

    @guarded
    def _on_paper_db(self, change=None):
        show_error(self, None)
        self.load_paper_db()

    @guarded
    def _on_export(self, button=None):
        show_error(self, None)
        self.export_status.value = ""
        self.export()
