"""How notebook 02 shows a probe grid: its status line, the running cells' live values, the
results table with a legend for the cells' names, and the grids in the run list.

Pure text from a `fiblab.jobs.probe_launch.GridSnapshot` (tested without widgets); the panel
(`fiblab.ui.probes.ProbePanel`) puts it into its widgets.
"""

from __future__ import annotations

import html
import math

from fiblab.jobs import probe_launch as PL
from fiblab.ui.common import html_table
from lab.util.wording import duration, plural
from probes.settings import KEY_LEGEND

__all__ = [
    "fmt_duration",
    "status_html",
    "live_html",
    "results_html",
    "legend_html",
    "alpha_range",
]

COLOURS = {"done": "#2e7d32", "failed": "#b00020", "stopped": "#ef6c00", "stopping": "#ef6c00"}


def fmt_duration(s: float) -> str:
    """42s, 3m05s, 2h07m ('' when unknown): `lab.util.wording.duration`."""
    return duration(s, unknown="")


def _finite(xs):
    return [x for x in xs or () if x is not None and not (isinstance(x, float) and math.isnan(x))]


def alpha_range(alphas) -> str:
    """ "0.550–1.450" over the layers, or "–" for dense cells (no α)."""
    a = _finite(alphas)
    return f"{min(a):.3f}–{max(a):.3f}" if a else "–"


def status_html(s: PL.GridSnapshot) -> str:
    """ "<name>: running · 2 of 4 cells done · about 1m20s left", with how it ended."""
    colour = COLOURS.get(s.state, "#1565c0")
    parts = [
        f"<b>{html.escape(s.name)}</b>: <span class='fib-probe-state' "
        f"style='color:{colour}'>{s.state}</span>",
        f"{s.done} of {plural(s.total, 'cell')} done",
    ]
    if s.state == "running":  # no ETA while starting, stopping, or after the end
        eta = fmt_duration(s.eta_s)
        parts.append(
            f"about {eta} left (from measured step times)" if eta else "ETA after a few steps"
        )
    left = s.total - s.done
    if s.state == "stopped":  # the process's own line says "run the same command": here, resume
        parts.append(
            f"stopped by request; finished cells are kept — resume trains the "
            f"{plural(left, 'unfinished cell')}"
            if left
            else "stopped by request after its last cell"
        )
    elif s.state == "failed":
        parts.append(
            "the process ended without finishing (its log is below); resume trains the "
            f"{plural(left, 'unfinished cell')}"
        )
    return " · ".join(parts)


def live_html(running: list[dict]) -> str:
    """The cells training now: step, loss, α now, the latest live accuracy."""
    if not running:
        return ""
    rows = []
    for r in running:
        acc = " ".join(f"@{d} {a:.2f}" for d, a in (r.get("acc") or {}).items())
        loss = r.get("loss_now")
        rows.append(
            [
                r["key"],
                r.get("phase", ""),
                f"{r.get('step', 0)} / {r.get('steps', '?')}",
                "" if loss is None else f"{loss:.3f}",
                alpha_range(r.get("alphas")),
                acc or "(after the first evaluation)",
            ]
        )
    return "<b>training now</b>" + html_table(
        ["cell", "phase", "step", "loss", "α now", "accuracy now"], rows, "fib-probe-live-table"
    )


def results_html(records: list[dict]) -> str:
    """One row per finished cell: its name, the knobs, α's range, accuracy per distance."""
    if not records:
        return ""
    dists = sorted({d for r in records for d in r["acc"]}, key=int)
    rows = [
        [r["key"], r["mechanism"], r["depth"], r["init"], r["seed"], alpha_range(r["alphas"])]
        + [f"{r['acc'][d]:.2f}" if d in r["acc"] else "" for d in dists]
        + [fmt_duration(r.get("seconds"))]
        for r in records
    ]
    return f"<b>accuracy per distance</b> ({plural(len(records), 'finished cell')})" + html_table(
        ["cell", "mechanism", "depth", "init", "seed", "α range"]
        + [f"@{d}" for d in dists]
        + ["time"],
        rows,
        "fib-probe-results",
    )


def legend_html() -> str:
    return f"<small><b>cell names</b>: {html.escape(KEY_LEGEND)}</small>"
