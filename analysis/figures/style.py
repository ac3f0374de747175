"""The lab's one plotting style: seaborn's theme, the colours of configurations and layers, and
figures sized in pixels, so that a PNG is shown at exactly the size it was drawn.

Every figure of the reports (`analysis.figures.plots`) and the notebook widgets (`fiblab.ui`) is made by
`figure` here, which applies the theme first (seaborn's ``whitegrid`` style, ``notebook``
context, ``colorblind`` palette): there is no second style beside matplotlib's defaults, and a
user's own matplotlib figures in the notebooks look the same once a lab figure was drawn.

``DPI`` is 96, the CSS pixel (1/96 inch): a figure of ``width_px`` × ``height_px`` renders to a
PNG of that many pixels, which the widgets display 1:1 (`fiblab.ui.common.set_png` reads the
size back from the PNG), and a 10 pt label is as large as 10 pt text in the browser.

Colours: `config_color` gives a configuration (``fib/stagger``, ``dense``, any spelling of a
scheme such as ``stagger`` or ``pow2-stagger``) the same colour in every figure; `layer_colors`
gives layers 0 … L−1 an ordered sequential palette (dark: the first layer, light: the last), so
that depth reads as colour and layer ℓ has one colour in every panel of a figure.

seaborn is imported only when a figure is made (it takes seconds to import cold), so that
importing the analysis layer stays cheap.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Sequence

__all__ = [
    "PANEL",
    "panels",
    "save",
    "legend",
    "DPI",
    "THEME",
    "RC",
    "CONFIG_COLORS",
    "apply_theme",
    "figure",
    "png",
    "png_size",
    "config_color",
    "layer_colors",
    "legend_outside",
    "min_span",
    "seed_band",
]

DPI = 96
THEME = {"context": "notebook", "style": "whitegrid", "palette": "colorblind", "font_scale": 0.85}
#: Settings on top of seaborn's theme: pixel-exact output and legible small text.
RC = {
    "figure.dpi": DPI,
    "savefig.dpi": "figure",
    "savefig.bbox": None,  # never crop: the PNG keeps the size it was drawn at
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "axes.titleweight": "bold",
    "legend.frameon": True,
    "legend.framealpha": 0.9,
    "legend.edgecolor": "#cccccc",
}

#: One colour per configuration (seaborn's colorblind palette), the same in every figure.
CONFIG_COLORS = {
    "dense": "#4d4d4d",
    "fib/fixed": "#0173b2",
    "fib/learned": "#de8f05",
    "fib/stagger": "#029e73",
    "fib/coprime": "#d55e00",
    "pow2/fixed": "#cc78bc",
    "pow2/stagger": "#ca9161",
}
_CYCLE = ["#56b4e9", "#949494", "#fbafe4", "#ece133", "#8c564b", "#17becf", "#bcbd22"]


def apply_theme() -> None:
    """Set the lab's theme in matplotlib's rcParams (cheap; every lab figure calls it)."""
    import seaborn as sns

    sns.set_theme(**THEME, rc=RC)


def figure(width_px: int, height_px: int, layout: str | None = "constrained"):
    """A pyplot-free Agg figure of ``width_px`` × ``height_px`` pixels in the lab's theme (no
    global figure list; safe from threads)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if width_px < 1 or height_px < 1:
        raise ValueError(f"figure size {width_px}×{height_px} px: both must be at least 1 px")
    apply_theme()
    fig = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def png(fig) -> bytes:
    """PNG bytes of ``fig`` at its own size (figsize × dpi pixels, nothing cropped).  A figure
    whose layout is frozen (no engine, or ``set_layout_engine("none")`` after one) is drawn
    once, not twice as ``savefig`` does for a layout engine: a redraw costs half."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    buf = io.BytesIO()
    engine = fig.get_layout_engine()
    if engine is None or isinstance(engine, PlaceHolderLayoutEngine):
        canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
        canvas.print_png(buf, pil_kwargs={"compress_level": 1})  # fast; a widget's PNG
    else:
        fig.savefig(buf, format="png", dpi=fig.dpi)
    return buf.getvalue()


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's header."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or len(data) < 24:
        raise ValueError("not PNG data: expected the 8-byte PNG signature and an IHDR chunk")
    return struct.unpack(">II", data[16:24])


def _canonical(label: str) -> str | None:
    """``fib/stagger`` for any spelling of a registered scheme (``stagger``, ``fib-stagger``…)."""
    from lab.ladder.schemes import scheme

    try:
        return scheme(str(label)).paper
    except ValueError:
        return None


def config_color(label, i: int = 0) -> str:
    """The colour of a configuration label (a scheme name in any spelling); an unknown label
    gets the ``i``-th colour of a cycle of others."""
    key = str(label)
    if key not in CONFIG_COLORS:
        key = _canonical(key) or key
    return CONFIG_COLORS.get(key, _CYCLE[i % len(_CYCLE)])


def layer_colors(n: int) -> list:
    """``n`` ordered colours for layers 0 … n−1 (viridis without its pale yellow end)."""
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    if n <= 1:
        return [cmap(0.25)]
    return [cmap(0.85 * i / (n - 1)) for i in range(n)]


def legend_outside(ax, handles=None, title: str | None = None, ncol: int = 1, **kw):
    """A legend to the right of ``ax``, outside the data (constrained layout makes room)."""
    if handles is not None:
        kw["handles"] = handles
    return ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
        title=title,
        ncol=ncol,
        fontsize="small",
        title_fontsize="small",
        **kw,
    )


def min_span(ax, span: float) -> None:
    """Widen ``ax``'s y range to at least ``span`` around its middle, so that a drift of 0.003
    is not drawn as large as one of 0.3 (for α: 0.2 is four times the inertness tolerance)."""
    lo, hi = ax.get_ylim()
    if hi - lo < span:
        mid = (lo + hi) / 2
        ax.set_ylim(mid - span / 2, mid + span / 2)


def seed_band(
    ax,
    frame,
    x: str,
    y: str,
    hue: str,
    colors: Sequence | dict,
    units: str = "seed",
):
    """Mean over seeds of ``y`` against ``x``, one line per ``hue`` value, with a band from the
    lowest to the highest seed (seaborn's lineplot, ``errorbar=("pi", 100)``; a single seed
    draws its line alone).  ``frame`` is long: one row per (hue, seed, x)."""
    import seaborn as sns

    apply_theme()
    levels = list(dict.fromkeys(frame[hue]))
    palette = colors if isinstance(colors, dict) else dict(zip(levels, colors))
    sns.lineplot(
        data=frame,
        x=x,
        y=y,
        hue=hue,
        hue_order=levels,
        palette=palette,
        estimator="mean",
        errorbar=("pi", 100) if frame[units].nunique() > 1 else None,
        err_kws={"alpha": 0.2, "linewidth": 0},
        linewidth=1.4,
        legend=False,
        ax=ax,
    )
    return ax


#: The pixel size of one panel of a report figure (width, height).
PANEL = (720, 420)


def panels(nrows: int = 1, ncols: int = 1, size=PANEL):
    """A figure of nrows × ncols panels of ``size`` pixels each, and its axes (2-D array)."""
    fig = figure(int(size[0] * ncols), int(size[1] * nrows))
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def save(fig, path):
    """Write ``fig`` as a PNG at ``path`` (parent folders made) when a path is given; returns it."""
    if path is not None:
        folder = os.path.dirname(os.fspath(path))
        if folder:
            os.makedirs(folder, exist_ok=True)
        fig.savefig(path, dpi=fig.dpi, format="png")
    return fig


def legend(ax, n_entries: int, handles=None, title: str | None = None):
    """Inside the axes when short, to the right of them when long (it would hide data)."""
    if n_entries > 6:
        return legend_outside(ax, handles, title=title, ncol=2 if n_entries > 16 else 1)
    kw = {} if handles is None else {"handles": handles}
    return ax.legend(fontsize="small", title=title, title_fontsize="small", **kw)
