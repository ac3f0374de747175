"""Every figure builds from a small fixture, writes a non-empty PNG, and plots the numbers it was
given (line data read back from the axes)."""

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from analysis.figures import plots, structure

PNG = b"\x89PNG\r\n\x1a\n"


def written(path):
    data = path.read_bytes()
    return len(data) > 1000 and data[:8] == PNG


def lines_by_label(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_perplexity_vs_window(tmp_path):
    t = pd.DataFrame(
        {
            "base": ["fib"] * 3 + ["pow2"],
            "schedule": ["stagger"] * 3 + ["fixed"],
            "W": [12, 6, 8, 8],
            "fineweb_edu": [42.0, 43.0, 42.5, 44.8],
        }
    )
    path = tmp_path / "sub" / "ppl.png"
    fig = plots.perplexity_vs_window(t, path=path)
    assert isinstance(fig, Figure) and written(path)
    lines = lines_by_label(fig.axes[0])
    assert list(lines["fib/stagger"].get_xdata()) == [6, 8, 12]  # sorted by W
    assert list(lines["fib/stagger"].get_ydata()) == [43.0, 42.5, 42.0]
    assert list(lines["pow2/fixed"].get_ydata()) == [44.8]
    with pytest.raises(ValueError, match="lacks columns.*wikipedia"):
        plots.perplexity_vs_window(t, dataset="wikipedia")


def test_extrapolation_both_policies(tmp_path):
    t = pd.DataFrame(
        {
            "model": ["dense", "fib/stagger"],
            "W": pd.array([pd.NA, 8], dtype="Int64"),
            "ppl_T64": [30.0, 40.0],
            "ppl_T128": [45.0, 39.5],
            "ppl_T256": [90.0, 39.0],
            "change_at_4x_percent": [200.0, -2.5],
            "frozen_ppl_T128": [np.nan, 39.8],
            "frozen_ppl_T256": [np.nan, 39.6],
        }
    )
    path = tmp_path / "extrap.png"
    fig = plots.extrapolation(t, path=path)
    assert written(path)
    lines = lines_by_label(fig.axes[0])
    assert set(lines) == {"dense", "fib/stagger W=8", "fib/stagger W=8 (frozen rungs)"}
    assert list(lines["dense"].get_xdata()) == [64, 128, 256]
    assert list(lines["dense"].get_ydata()) == [30.0, 45.0, 90.0]
    frozen = lines["fib/stagger W=8 (frozen rungs)"]
    assert list(frozen.get_xdata()) == [64, 128, 256]  # starts at T
    assert list(frozen.get_ydata()) == [40.0, 39.8, 39.6]
    assert frozen.get_linestyle() == "--"
    rel = lines_by_label(plots.extrapolation(t, relative=True).axes[0])
    assert list(rel["dense"].get_ydata()) == pytest.approx([1.0, 1.5, 3.0])
    with pytest.raises(ValueError, match="no ppl_T"):
        plots.extrapolation(t[["model", "W"]])


def test_position_bins_with_gap_panel(tmp_path):
    t = pd.DataFrame(
        {
            "schedule": ["fib/fixed", "fib/stagger", "fib/fixed - fib/stagger"],
            "W": [8, 8, 8],
            "b0": [3.9, 3.86, 0.04],
            "b1": [3.8, 3.77, 0.03],
            "b2": [3.77, 3.73, 0.04],
        }
    )
    path = tmp_path / "bins.png"
    fig = plots.position_bins(t, path=path)
    assert written(path) and len(fig.axes) == 2
    top, bottom = lines_by_label(fig.axes[0]), lines_by_label(fig.axes[1])
    assert list(top["fib/stagger W=8"].get_ydata()) == [3.86, 3.77, 3.73]
    assert list(top["fib/stagger W=8"].get_xdata()) == [0, 1, 2]
    assert list(bottom["fib/fixed - fib/stagger W=8"].get_ydata()) == [0.04, 0.03, 0.04]
    assert len(plots.position_bins(t.iloc[:2]).axes) == 1


def test_alpha_trajectories_one_line_per_layer(tmp_path):
    traj = pd.DataFrame(
        {
            "run": ["r"] * 6 + ["q"] * 2,
            "kind": "probe",
            "step": [0, 0, 50, 50, 100, 100, 0, 10],
            "layer": [0, 1] * 3 + [0, 0],
            "alpha": [0.55, 1.45, 0.57, 1.44, 0.6, 1.4, 1.0, 1.01],
            "alpha_init": [0.55, 1.45] * 3 + [1.0, 1.0],
        }
    )
    path = tmp_path / "alpha.png"
    fig = plots.alpha_trajectories(traj, path=path)
    assert written(path) and len(fig.axes) == 2  # one panel per run
    lines = lines_by_label(fig.axes[0])
    assert list(lines["layer 1"].get_xdata()) == [0, 50, 100]
    assert list(lines["layer 1"].get_ydata()) == [1.45, 1.44, 1.4]
    one = plots.alpha_trajectories(traj, runs="q", show_init=False)
    assert len(one.axes) == 1 and len(one.axes[0].get_lines()) == 1
    with pytest.raises(ValueError, match="no trajectory for runs"):
        plots.alpha_trajectories(traj, runs=["zzz"])


def test_rung_heatmap_image_is_the_sets(tmp_path):
    sets = [[0, 1, 2, 5], [0, 1, 2, 8, 30]]
    path = tmp_path / "rungs.png"
    fig = structure.rung_heatmap(sets, seq_len=10, path=path)
    assert written(path)
    img = np.asarray(fig.axes[0].images[0].get_array())
    expected = np.zeros((2, 10))
    expected[0, [0, 1, 2, 5]] = 1
    expected[1, [0, 1, 2, 8]] = 1  # 30 ≥ T is dropped
    assert (img == expected).all()
    assert np.asarray(structure.rung_heatmap(sets).axes[0].images[0].get_array()).shape == (2, 31)
    with pytest.raises(ValueError, match="no layers"):
        structure.rung_heatmap([])


def test_coverage_curves_count_the_union(tmp_path):
    schemes = {"fixed": [[0, 1, 3], [0, 1, 3]], "stagger": [[0, 1, 3], [0, 2, 6]]}
    path = tmp_path / "cov.png"
    fig = structure.coverage_curves(schemes, seq_len=8, path=path)
    assert written(path)
    lines = lines_by_label(fig.axes[0])
    # distinct attended distances ≤ δ for δ = 0..7; the union sizes label the lines
    assert list(lines["fixed (3)"].get_ydata()) == [1, 2, 2, 3, 3, 3, 3, 3]
    assert list(lines["stagger (5)"].get_ydata()) == [1, 2, 3, 4, 4, 4, 5, 5]


def test_receptive_field_curves(tmp_path):
    path = tmp_path / "rf.png"
    fig = structure.receptive_field_curves(
        {"fixed": [0.1, 0.3, 0.5], "dense": [1.0, 1.0, 1.0]}, path=path
    )
    assert written(path)
    lines = lines_by_label(fig.axes[0])
    assert list(lines["fixed"].get_xdata()) == [1, 2, 3]
    assert list(lines["fixed"].get_ydata()) == [0.1, 0.3, 0.5]
    with pytest.raises(ValueError, match="no schemes"):
        structure.receptive_field_curves({})
