"""The results panel (notebook 05): `ResultsPanel`; notebook 04's `AlphaExplorer` is
`fiblab.ui.alphas` (importable from here too, as the notebooks do).

`ResultsPanel` rebuilds the paper's Tables 1–5 from the store (`analysis.tables.ppl` … `tables_seeds`, finished runs
only; the LM runs to use, the dataset and the probe mechanism are chosen with widgets) and shows
each beside the published table (`analysis.tables.beside.published`): Table 1's layout, Table 2
(the marked probe), Table 3 (length extrapolation, rung set recomputed and frozen, and the
position-matched blocks), Table 4 (loss per position bin), Table 5 (seeds: mean, std and a
verdict line from `analysis.statistics.assess.assess` on "fib/stagger beats fib/fixed" wherever both have at
least two seeds), with the extrapolation and position-bin plots.  Given the authors' ``fib.db``
(a text box; by default ``../shared/reference/fib.db`` next to the project when it exists) it also
shows the paper's tables rebuilt from it.  **export report** writes
`analysis.reports.results.build_report` to ``<runs>/reports/<name>/`` (``report.md``,
``report.html`` with its figures embedded, PNGs) and shows links that open both in JupyterLab
(relative to the notebook's folder, the kernel's working directory; `report_target` gives the
folder and its link from one path).  A table wider than the panel scrolls in its own box.  The sections themselves are built without widgets in `fiblab.ui.sections`.

The panel only reads the store: a missing store file is reported ("no runs yet — …"), never
created; **refresh** re-reads it (a running job may be writing to it).  A table without data says
so in its section; an unexpected exception goes to the panel's ``fib-error`` line and to
``panel.error``.  Tests set widget values and read the state: ``panel.sections[...]``,
``panel.verdicts``, ``panel.report_path``.

One module of ≈ 460 lines on purpose: one widget class whose sections share the runs picked and
the store read once per refresh; the tables, verdicts and report it shows are built elsewhere
(`analysis.tables`, `analysis.reports`).
"""

from __future__ import annotations

import html
import os
import re
import time
import urllib.parse
from pathlib import Path

import ipywidgets as W
import pandas as pd

from analysis.figures import plots
from analysis.tables import runs as tables_store
from fiblab.ui.alphas import RUNS_HINT, AlphaExplorer, inert_sentence
from fiblab.ui.common import (
    ROOT,
    Shown,
    error_widget,
    guarded,
    image_widget,
    png,
    set_png,
    show_error,
    store_path,
)
from fiblab.ui.results_common import (
    NO_RUNS,
    default_paper_db,
    default_reports_dir,
    frame_html,
    pick,
    reading,
    store_label,
)
from fiblab.ui.sections import (
    SECTION_TITLES,
    paper_db_view,
    section_html,
    seed_verdicts,
    store_sections,
    untabulated_probes,
    verdict_html,
)

__all__ = [
    "NO_RUNS",
    "AlphaExplorer",
    "ResultsPanel",
    "default_paper_db",
    "default_reports_dir",
    "report_target",
    "inert_sentence",
    "frame_html",
]


def _config_line(r) -> str:
    w = "" if pd.isna(r.W) else f" W={r.W}"
    seed = "" if pd.isna(r.seed) else f" seed {r.seed}"
    return f"{r.run}  · {r.config}{w}{seed} · T={r.seq_len}"


def _href(path: str) -> str:
    """A link to ``path`` relative to the working directory (the notebook's folder, in a
    kernel JupyterLab started), URL-quoted; the absolute path where none exists (Windows:
    another drive)."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = os.path.abspath(path)
    return urllib.parse.quote(Path(rel).as_posix())


def report_target(reports_dir: str, name: str) -> tuple[str, str]:
    """The folder a report named ``name`` is written to (absolute) and the link to that same
    folder (`_href`): one computation, so the link opens the file written (issue 42: it
    pointed at another folder than the one written)."""
    folder = os.path.abspath(os.path.join(reports_dir, name))
    return folder, _href(folder)


class ResultsPanel(Shown):
    """The paper's tables from the store beside the published ones, the extrapolation and
    position plots, the seed verdict, the authors' database rebuilt, and report export.

    State: ``sections`` ({key: {"title", "ours", "paper", "message"}} for keys ``table1``,
    ``table2``, ``table3``, ``table3_blocks``, ``table4``, ``table5``: ``ours`` is the frame
    built from the store or None, ``message`` says why it is missing), ``verdicts`` (Table 5's
    verdict lines), ``assessments`` (their `analysis.statistics.assess.Verdict` objects), ``paper_sections``
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
        self.report_href: str | None = None
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
        self.runs_hint = W.HTML(f"<small style='color:#555'>{RUNS_HINT}</small>")
        self.runs_hint.add_class("fib-runs-hint")
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
            box = W.HTML(layout=W.Layout(max_width="100%"))
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
        self.paper_box = W.HTML(layout=W.Layout(max_width="100%"))
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
        # links as an output (not an HTML widget): JupyterLab's renderer resolves their
        # relative paths from the notebook and opens the files in the lab, not a new page
        self.export_links = W.Output()
        self.export_links.add_class("fib-export-links")
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
                self.runs_hint,
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
                self.export_links,
            ]
        )
        self.widget.add_class("fib-results-panel")

    @property
    def selected(self) -> list[str]:
        return list(self.runs.value)

    # -- reading the store -----------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the store: the finished LM runs, datasets and probe mechanisms offered (the
        choices are kept where they still exist; new runs are added to the selection), then
        every table."""
        show_error(self, None)
        with reading(self.store) as st:
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
            self.mechanism.value = pick(mechs, self.mechanism.value, "blur")
            self._update_datasets()
        finally:
            self._quiet = False
        self._loaded = True
        if n_runs == 0:
            self.message = f"{NO_RUNS} (store: {store_label(self.store)})"
        elif not names:
            marked = "marked" in set(probes["task"])
            probe_words = "; marked-task probe results are in Table 2" if marked else ""
            others = untabulated_probes(probes)
            self.message = (
                "no finished language-model runs yet — run `fiblab demo` or notebook 03"
                + probe_words
                + (f"; {others}" if others else "")
            )
        else:
            self.message = None
        self.compute()

    def _update_datasets(self) -> None:
        sel = self.selected
        ds: list[str] = []
        if sel:
            with reading(self.store) as st:
                if st is not None:
                    ev = tables_store.lm_evals(st, runs=sel)
                    ds = sorted(set(ev.loc[ev["kind"] != "light", "dataset"]))
        self.dataset.options = ds
        self.dataset.value = pick(ds, self.dataset.value, "fineweb_edu")

    def compute(self) -> None:
        """Every table, the verdict lines and the figures for the current choices."""
        sel, ds, mech = self.selected, self.dataset.value, self.mechanism.value
        self.sections = {}
        with reading(self.store) as st:
            self.sections = store_sections(
                st, sel, ds, mech, have_runs=bool(len(self.runs.options))
            )
        self._verdicts()
        self._render_sections()
        self._figures()
        self.status.value = (
            ""
            if self.message is None
            else (f"<div style='color:#1565c0'>{html.escape(self.message)}</div>")
        )

    def _verdicts(self) -> None:
        t5 = self.sections.get("table5", {}).get("ours")
        self.verdicts, self.assessments = seed_verdicts(t5)
        self.verdict_box.value = verdict_html(self.verdicts)

    def _render_sections(self) -> None:
        for key, sec in self.sections.items():
            self.section_boxes[key].value = section_html(key, sec)

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
        self.paper_sections, self.paper_db_path = {}, None
        sections, path, view = paper_db_view(self.resolve_paper_db())
        self.paper_sections, self.paper_db_path = sections, path
        self.paper_box.value = view

    # -- export ----------------------------------------------------------------------------------
    def export(self) -> str:
        """Write `analysis.reports.results.build_report` for the selected runs to
        ``<reports_dir>/<report name>/``; returns the path of report.md."""
        from analysis.reports.results import build_report

        name = self.report_name.value.strip()
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or ""):
            raise ValueError(
                f"report name {name!r}: use letters, digits, '.', '_' or '-' "
                f"(it becomes the folder reports/<name>/)"
            )
        out, base = report_target(self.reports_dir, name)
        with reading(self.store) as st:
            if st is None:
                raise ValueError(
                    f"nothing to export: there is no store at {store_label(self.store)} "
                    f"({NO_RUNS}, then export)"
                )
            report = build_report(
                st,
                runs=self.selected,
                title=f"fiblab results: {name}",
                dataset=self.dataset.value,
                paper_db=self.paper_db_path,
                mechanism=self.mechanism.value or "blur",  # what the panel shows
            )
            paths = report.write(out)
        self.report_paths = paths
        self.report_href = base  # the report folder as the links name it
        self.report_path = paths["report.md"]
        n_fig = len(paths) - 2
        self.export_status.value = (
            f"written: <code class='fib-report-path'>{html.escape(self.report_path)}</code> "
            f"(and report.html, which carries its {n_fig} figure{'s' if n_fig != 1 else ''} "
            f"inside it; report.md shows the PNGs beside it)"
        )
        links = " · ".join(
            f"<a class='fib-open-{name.replace('.', '-')}' href='{html.escape(href)}'>"
            f"open {name}</a>"
            for name, href in (
                ("report.html", f"{base}/report.html"),
                ("report.md", f"{base}/report.md"),
            )
        )
        self.export_links.outputs = (
            {
                "output_type": "display_data",
                "data": {"text/html": links, "text/plain": paths["report.html"]},
                "metadata": {},
            },
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
        self.export_links.outputs = ()  # no stale links to an earlier report
        self.export()
