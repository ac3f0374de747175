"""Every figure of the notebooks and reports in the lab's one style (issue 14, item 3): seaborn's
theme in matplotlib's rcParams (checked against seaborn's own style dicts), PNGs shown at the
pixel size they were drawn (read back with PIL, compared with the Image widget's size), axes
labelled, one legend entry per layer or a colour key, seed bands spanning the lowest to the
highest seed (worked out here with numpy), the coverage heatmap's W line visible on the window
block and every attended distance visible in the rung heatmap (pixels read from the PNG)."""

import io
import math

import ipywidgets as W
import matplotlib as mpl
import numpy as np
import pandas as pd
import pytest
import seaborn as sns
from fixture_store import smoke_store
from matplotlib.colors import to_rgb
from PIL import Image

from analysis.figures import plots, structure, style
from analysis.reports.report import Report
from fiblab.ui.common import figure, png, set_png
from fiblab.ui.coverage_explore import explore
from fiblab.ui.coverage_figure import CoverageFigure
from fiblab.ui.probes import trajectory_png
from fiblab.ui.run_figures import probe_alphas, training_curves
from fiblab.ui.train import curves_png
from lab.ladder.offsets import Ladder
from lab.ladder.schedules import layer_alphas


def pil(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")


def px_size(fig) -> tuple[int, int]:
    w, h = fig.get_size_inches() * fig.dpi
    return round(w), round(h)


def legend_texts(leg) -> list[str]:
    return [t.get_text() for t in leg.get_texts()]


def data_axes(fig):
    """Axes that plot something (not colour bars, not switched off)."""
    return [
        a
        for a in fig.axes
        if a.axison
        and (a.get_lines() or a.images or a.collections or a.patches)
        and a.get_label() != "<colorbar>"
    ]


def assert_labelled(fig):
    axes = data_axes(fig)
    assert axes
    for a in axes:
        assert a.get_ylabel().strip(), f"axes {a.get_title()!r} has no y label"
        shared = a.get_shared_x_axes().get_siblings(a)
        assert any(s.get_xlabel().strip() for s in shared), f"{a.get_title()!r}: no x label"


# ----------------------------------------------------------------------------------- fixtures
def probe_records(depths=(2, 4), seeds=(0, 1, 2), steps=(0, 10, 20)):
    """Cells of a probe grid with α_ℓ(step, seed) = init_ℓ + 0.01·seed·step/10 + 0.001·ℓ."""
    recs = []
    for depth in depths:
        init = np.linspace(0.55, 1.45, depth)
        for seed in seeds:
            traj = [
                {"step": s, "alphas": [float(init[k] + 0.01 * seed * s / 10) for k in range(depth)]}
                for s in steps
            ]
            recs.append(
                {
                    "key": f"marked/blur/d{depth}/staggered/s{seed}/n20/b2/lr0.003/w8",
                    "mechanism": "blur",
                    "depth": depth,
                    "init": "staggered",
                    "seed": seed,
                    "task": "marked",
                    "alphas": traj[-1]["alphas"],
                    "acc": {"10": 0.5},
                    "trajectory": traj,
                }
            )
    return recs


def snapshot(alphas: bool):
    steps = np.arange(0, 100, 2)
    a = pd.DataFrame({k: 0.5 + 0.3 * k + 0.001 * steps for k in range(3)}, index=steps)
    return {
        "name": "run-x",
        "state": "running",
        "step": 98,
        "steps": 200,
        "loss_curve": pd.DataFrame({"step": steps, "value": 5.0 - 0.01 * steps}),
        "evals": pd.DataFrame(
            {
                "step": [50, 98],
                "dataset": "bible",
                "kind": ["light", "recompute"],
                "perplexity": [80.0, 60.0],
            }
        ),
        "alphas": a if alphas else pd.DataFrame(),
    }


def traj_frame():
    rows = [
        ("r", "lm", s, k, 0.55 + 0.45 * k + 1e-4 * s, 0.55 + 0.45 * k)
        for s in (0, 50, 100)
        for k in range(3)
    ]
    return pd.DataFrame(rows, columns=["run", "kind", "step", "layer", "alpha", "alpha_init"])


# -------------------------------------------------------------------------------------- theme
def test_the_theme_is_seaborns():
    figure(2, 2)  # any lab figure applies it …
    mpl.rcParams["axes.facecolor"] = "red"  # … also after someone changed the rcParams
    fig = style.figure(200, 100)
    want = {
        **sns.axes_style(THEME_STYLE := style.THEME["style"]),
        **sns.plotting_context(style.THEME["context"], font_scale=style.THEME["font_scale"]),
    }
    for key, value in want.items():
        assert mpl.rcParams[key] == value, key
    assert THEME_STYLE == "whitegrid" and mpl.rcParams["axes.grid"] is True
    cycle = [to_rgb(c) for c in mpl.rcParams["axes.prop_cycle"].by_key()["color"]]
    assert cycle == [to_rgb(c) for c in sns.color_palette(style.THEME["palette"])]
    assert fig.dpi == style.DPI == 96 and px_size(fig) == (200, 100)
    # a configuration has one colour everywhere, whatever its spelling
    assert style.config_color("stagger") == style.config_color("fib/stagger")
    assert style.config_color("fib-stagger") == plots.CONFIG_COLORS["fib/stagger"]
    assert style.config_color("pow2-stagger") == plots.CONFIG_COLORS["pow2/stagger"]
    assert len(set(plots.CONFIG_COLORS.values())) == len(plots.CONFIG_COLORS)


# ------------------------------------------------------------------------ shown at drawn size
def test_set_png_shows_the_png_at_its_pixel_size():
    image = W.Image(format="png")
    for w, h in ((208, 168), (980, 440)):
        data = png(figure(w / 96, h / 96))
        assert pil(data).size == (w, h)
        set_png(image, data)
        assert (image.width, image.height) == (str(w), str(h))
        assert (image.layout.width, image.layout.height) == (f"{w}px", "auto")
        assert image.layout.max_width == "100%" and not image.layout.min_width  # fits its area
        assert image.layout.display is None


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: CoverageFigure().draw(explore(layer_alphas("stagger", 16))), id="cov"),
        pytest.param(lambda: trajectory_png(probe_records()), id="probe"),
        pytest.param(lambda: trajectory_png(probe_records(depths=(2,), seeds=(0,))), id="probe1"),
        pytest.param(lambda: curves_png(snapshot(True)), id="curves-learned"),
        pytest.param(lambda: curves_png(snapshot(False)), id="curves"),
    ],
)
def test_widget_figures_fit_the_notebook_and_are_not_tiny(make):
    data = make()
    w, h = pil(data).size
    assert 600 <= w <= 1100 and 250 <= h  # the old α plot was 208×168, stretched 4.6×
    image = W.Image(format="png")
    set_png(image, data)
    assert (int(image.width), int(image.height)) == (w, h)


def test_notebook_04_and_05_images_are_sized_from_their_pngs(tmp_path):
    from fiblab.ui.results import AlphaExplorer, ResultsPanel

    store = smoke_store(str(tmp_path / "s.db"))
    ex = AlphaExplorer(store)
    assert ex.error is None and ex.figure is not None
    assert pil(ex.image.value).size == (int(ex.image.width), int(ex.image.height))
    assert pil(ex.image.value).size == px_size(ex.figure)
    panel = ResultsPanel(store, reports_dir=str(tmp_path / "reports"))
    assert panel.figures, "the fixture store has Tables 3 and 4"
    for image in (panel.extrap_image, panel.bins_image):
        assert pil(image.value).size == (int(image.width), int(image.height))


def test_report_figures_are_saved_at_the_size_drawn(tmp_path):
    fig = structure.receptive_field_curves({"fixed": [0.1, 0.5, 1.0]})
    path = tmp_path / "rf.png"
    structure.receptive_field_curves({"fixed": [0.1, 0.5, 1.0]}, path=path)
    assert Image.open(path).size == px_size(fig) == style.PANEL
    rep = Report("r")
    rep.figure(fig, "rf", "caption")
    rep.write(str(tmp_path / "out"))
    assert Image.open(tmp_path / "out" / "rf.png").size == style.PANEL  # not cropped


# ------------------------------------------------------------------- labels, legends, keys
def report_figures():
    """Builders of every figure, by name (each test builds only the one it needs)."""
    t3 = pd.DataFrame(
        {
            "model": ["dense", "fib/stagger"],
            "W": pd.array([pd.NA, 8], dtype="Int64"),
            "ppl_T64": [30.0, 40.0],
            "ppl_T128": [45.0, 39.5],
            "frozen_ppl_T128": [np.nan, 39.8],
        }
    )
    t4 = pd.DataFrame(
        {
            "schedule": ["fib/fixed", "fib/stagger", "fib/fixed - fib/stagger"],
            "W": [8, 8, 8],
            "b0": [3.9, 3.86, 0.04],
            "b1": [3.8, 3.77, 0.03],
        }
    )
    t1 = pd.DataFrame(
        {"base": ["fib"] * 2, "schedule": ["stagger"] * 2, "W": [8, 12], "fineweb_edu": [42, 41]}
    )
    sets = {"fixed": [[0, 1, 3], [0, 1, 3]], "stagger": [[0, 1, 3], [0, 2, 6]]}
    return {
        "ppl_vs_W": lambda: plots.perplexity_vs_window(t1),
        "extrapolation": lambda: plots.extrapolation(t3),
        "position_bins": lambda: plots.position_bins(t4),
        "alpha": lambda: plots.alpha_trajectories(traj_frame()),
        "rungs": lambda: structure.rung_heatmap(sets["stagger"], 8),
        "coverage": lambda: structure.coverage_curves(sets, 8),
        "receptive": lambda: structure.receptive_field_curves({"fixed": [0.1, 0.5]}),
        "probe": lambda: probe_alphas(probe_records()),
        "curves": lambda: training_curves(snapshot(True)),
    }


@pytest.mark.parametrize("name", list(report_figures()))
def test_every_figure_has_labelled_axes_and_a_key(name):
    fig = report_figures()[name]()
    assert_labelled(fig)
    keys = [a.get_legend() for a in fig.axes if a.get_legend()] + list(fig.legends)
    assert keys, f"{name}: no legend or colour key"
    for leg in keys:
        assert all(t.strip() for t in legend_texts(leg))


def test_one_legend_entry_per_layer():
    fig = plots.alpha_trajectories(traj_frame())
    assert legend_texts(fig.axes[0].get_legend()) == ["layer 0", "layer 1", "layer 2", "initial α"]
    probe = probe_alphas(probe_records(depths=(2, 4)))
    texts = legend_texts(probe.legends[0])
    assert texts[:4] == [f"layer {k}" for k in range(4)]  # the deepest cell has 4 layers
    assert "lowest–highest seed" in texts and "initial α" in texts
    assert len(probe.legends) == 1  # one legend for every panel: layer ℓ has one colour
    curves = training_curves(snapshot(True))
    assert legend_texts(curves.axes[1].get_legend()) == [f"layer {k}" for k in range(3)]
    many = pd.DataFrame(
        [("r", "lm", s, k, 1.0, 1.0) for s in (0, 1) for k in range(24)],
        columns=["run", "kind", "step", "layer", "alpha", "alpha_init"],
    )
    texts = legend_texts(plots.alpha_trajectories(many).axes[0].get_legend())
    assert texts[0] == "layer 0" and "layer 23" in texts and len(texts) <= 17  # every few


def test_extrapolation_legend_says_what_solid_and_dashed_mean():
    fig = report_figures()["extrapolation"]()
    texts = legend_texts(fig.axes[0].get_legend())
    assert texts == ["dense", "fib/stagger W=8", "rungs recomputed for the length", "rungs frozen"]
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["64", "128"]  # the evaluated lengths, in tokens


# ---------------------------------------------------------------------------------- seed bands
def test_probe_seed_band_spans_lowest_to_highest_seed():
    recs = probe_records(depths=(2,), seeds=(0, 1, 2), steps=(0, 10, 20))
    fig = probe_alphas(recs)
    ax = fig.axes[0]
    assert "3 seeds" in ax.get_title()
    bands = [c for c in ax.collections if len(c.get_paths())]
    assert len(bands) == 2  # one band per layer
    init = np.linspace(0.55, 1.45, 2)
    for k, band in enumerate(sorted(bands, key=lambda c: c.get_paths()[0].vertices[:, 1].min())):
        v = band.get_paths()[0].vertices
        for step in (10, 20):
            ys = v[np.isclose(v[:, 0], step), 1]
            by_hand = [init[k] + 0.01 * seed * step / 10 for seed in (0, 1, 2)]
            assert ys.min() == pytest.approx(min(by_hand)) and ys.max() == pytest.approx(
                max(by_hand)
            )
    means = sorted(ax.get_lines()[:2], key=lambda ln: ln.get_ydata()[0])
    for k, line in enumerate(means):
        by_hand = [init[k] + 0.01 * np.mean([0, 1, 2]) * s / 10 for s in (0, 10, 20)]
        assert list(line.get_xdata()) == [0, 10, 20]
        assert list(line.get_ydata()) == pytest.approx(by_hand)
    one = probe_alphas(probe_records(depths=(2,), seeds=(0,)))
    assert not [c for c in one.axes[0].collections if len(c.get_paths())]  # one seed: no band
    assert "seed 0" in one.axes[0].get_title()


def test_probe_figure_without_alpha_says_why():
    dense = [dict(probe_records()[0], trajectory=[{"step": 0, "alphas": [None, None]}])]
    fig = probe_alphas(dense)
    assert "dense cells have no α" in fig.axes[0].texts[0].get_text()


# ------------------------------------------------------------------------ the coverage figure
def test_coverage_figure_has_a_colour_key_layer_labels_and_a_visible_W_line():
    rep = explore(layer_alphas("stagger", 16), window=8)
    cf = CoverageFigure()
    img = pil(cf.draw(rep))
    heat, cbar, reach = cf.fig.axes
    assert [t.get_text() for t in cbar.get_yticklabels()] == ["1", "2", "3", "≥ 4"]
    assert cbar.get_ylabel() == "attended distances in the bin"
    layer_labels = [t.get_text() for t in reach.get_yticklabels()]
    assert layer_labels == [str(k) for k in range(16)] and reach.get_ylabel() == "after layer"
    assert cf.window_text.get_text().strip() == "W = 8"
    # the window block (distances 1…8, every one attended) is drawn in the level-1 colour; the
    # W line at 8.5 must stand out from it in the rendered pixels
    block = np.array(to_rgb(cf.mesh.cmap(0))) * 255
    H = img.size[1]
    x, y = heat.transData.transform((8.5, 8.0))
    line_px = np.array(img.getpixel((int(round(x)), int(round(H - y)))), dtype=float)
    xb, yb = heat.transData.transform((3.0, 8.0))
    block_px = np.array(img.getpixel((int(xb), int(H - yb))), dtype=float)
    assert np.abs(block_px - block).max() < 20  # the sample point is inside the block
    assert np.abs(line_px - block).max() > 80  # and the line does not vanish in it
    # the explorer's bars have the reach values
    widths = [b.get_width() for b in cf.bars]
    assert widths == pytest.approx(rep["reachable"])


def test_coverage_redraw_stays_one_frozen_layout():
    cf = CoverageFigure()
    a = layer_alphas("stagger", 16)
    first = pil(cf.draw(explore(a)))
    fig = cf.fig
    a[3] += 0.05
    second = pil(cf.draw(explore(a)))
    assert cf.fig is fig and first.size == second.size  # data swapped, figure kept
    assert fig.get_layout_engine() is None or not fig.get_layout_engine().adjust_compatible


def test_rung_heatmap_shows_every_attended_distance():
    from lab.ladder.plan import attended_distances

    T = 1024  # more distances than the axes have pixels
    sets = [
        attended_distances(a, T, Ladder(8, base="fib", rungs=15, rounding="round"))
        for a in layer_alphas("stagger", 4)
    ]
    fig = structure.rung_heatmap(sets, T)
    img = np.asarray(pil(png(fig)), dtype=float)
    ax = fig.axes[0]
    H = img.shape[0]
    x0, _ = ax.transData.transform((-0.5, 0))
    x1, _ = ax.transData.transform((T - 0.5, 0))
    assert x1 - x0 < T  # a plain image would have to skip columns
    for layer, s in enumerate(sets):
        _, y = ax.transData.transform((0, layer))
        row = img[int(round(H - y))]
        for d in s:
            x, _ = ax.transData.transform((d, layer))
            near = row[int(math.floor(x)) - 1 : int(math.ceil(x)) + 2]
            assert near.min() < 120, f"layer {layer}: distance {d} is not visible"


def test_the_training_figure_and_its_legend_fit_an_output_area():
    """Notebook 03's live figure (issue 28: 1000 px in a ≈ 970 px output area, its legend cut to
    "lay…"): at most 900 px wide, and every legend drawn inside the figure."""
    from fiblab.ui.run_figures import TWO_PANELS_PX

    fig = training_curves(snapshot(True))
    w, h = px_size(fig)
    assert w == TWO_PANELS_PX <= 900
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    legends = [a.get_legend() for a in fig.axes if a.get_legend() is not None] + fig.legends
    assert legends
    for lg in legends:
        box = lg.get_window_extent(r)
        assert 0 <= box.x0 and box.x1 <= w + 0.5, (box, w)


def test_probe_alpha_figure_names_fixed_cells_and_nothing_overlaps():
    """Issue 42 (7): the figure was titled "learned α" over fixed-α cells, its two panel titles
    ran into each other and its legend covered the title."""
    cells = []
    for dist in (5, 13):
        for r in probe_records(depths=(8,), seeds=(0,)):
            key = r["key"].replace("staggered", "-") + f"/d{dist}"
            cells.append(dict(r, mechanism="fib-stagger", init="-", distance=dist, key=key))
    learned = [dict(r, distance=13) for r in probe_records(depths=(4,), seeds=(0, 1))]
    fig = probe_alphas(cells + learned)
    titles = [ax.get_title() for ax in fig.axes[:3]]
    assert "fixed α" in titles[0] and "distance 5" in titles[0]
    assert "distance 13" in titles[1] and "learned" not in titles[1]
    assert "learned α, staggered init" in titles[2].replace("\n", " ")
    assert "learned" not in fig.get_suptitle()
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = [ax.title.get_window_extent(r) for ax in fig.axes[:3]]
    for a, b in zip(boxes, boxes[1:]):
        assert a.x1 < b.x0, "neighbouring panel titles overlap"
    sup = fig._suptitle.get_window_extent(r)
    assert not fig.legends[0].get_window_extent(r).overlaps(sup), "the legend covers the title"


def test_coverage_bars_label_every_share_without_rounding_it_onto_another():
    """Issue 42 (7): at L = 24 the 100 % bars had no label and a 0.1 % share read "0 %"."""
    from fiblab.ui.coverage_figure import share_label

    assert [share_label(r) for r in (1.0, 0.0, 0.001, 0.0004, 0.996, 0.9999, 0.42)] == [
        "100%", "0%", "0.1%", "<0.1%", "99.6%", ">99.9%", "42%",
    ]  # fmt: skip
    rep = explore(layer_alphas("stagger", 24), window=8, seq_len=16384)
    cf = CoverageFigure()
    cf.draw(rep)
    texts = [t.get_text() for t in cf.values]
    assert len(texts) == 24 and all(texts), "every bar is labelled"
    for text, r in zip(texts, rep["reachable"]):
        assert text == share_label(r)
    assert "100%" in texts  # a deep stack reaches every position


def test_probe_alpha_step_labels_never_run_together():
    """The fifth browser walk: at 3,000 steps in three columns the step axis read
    "0 400 800 120016002000 24002800".  Oracle: the drawn tick labels' pixel boxes, from
    matplotlib's renderer, do not overlap on any panel."""
    recs = []
    for depth in (2, 4, 8):  # three panels in a row: each ≈ 270 px wide
        recs += probe_records(depths=(depth,), seeds=(0,), steps=tuple(range(0, 3001, 100)))
    fig = probe_alphas(recs)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    checked = 0
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        boxes.sort(key=lambda b: b.x0)
        for left, right in zip(boxes, boxes[1:]):
            assert left.x1 + 2 <= right.x0, [t.get_text() for t in ax.get_xticklabels()]
            checked += 1
    assert checked >= 3
