"""The scale study's trend test (analysis.statistics.trend) against a hand-written oracle: the
OLS slope and its HC3 variance from the textbook formulas in numpy, the p from scipy's t, the
per-cell gap from scipy's Welch interval, the power against a Monte Carlo of the test itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from analysis.statistics.trend import cell_gap, trend_power, trend_test

CELLS = [((4, 128), 13), ((8, 128), 27), ((4, 512), 22), ((8, 512), 44)]


def runs_from(rng, slope, sigma=0.0115, n=10, base=3.73, gap0=0.004):
    out = []
    for k, (cell, d) in enumerate(CELLS):
        for scheme in ("stagger", "fixed"):
            for _ in range(n):
                mu = base + 0.01 * k - (gap0 + slope * d / 100 if scheme == "stagger" else 0)
                out.append((cell, d, scheme, math.exp(mu + rng.normal(0, sigma))))
    return out


def hc3_by_hand(runs):
    cells = sorted({r[0] for r in runs})
    X = np.array(
        [[float(c == r[0]) for c in cells] + [float(r[2] == "stagger"),
         float(r[2] == "stagger") * r[1] / 100] for r in runs]
    )  # fmt: skip
    y = np.log([r[3] for r in runs])
    XtX_inv = np.linalg.inv(X.T @ X)
    b = XtX_inv @ X.T @ y
    e = y - X @ b
    h = np.einsum("ij,jk,ik->i", X, XtX_inv, X)
    meat = (X * (e / (1 - h))[:, None] ** 2).T @ X
    V = XtX_inv @ meat @ XtX_inv
    return b[-1], math.sqrt(V[-1, -1]), len(y) - X.shape[1], b[-2]


def test_slope_se_and_p_match_the_textbook_hc3_fit():
    runs = runs_from(np.random.default_rng(3), slope=0.02)
    got = trend_test(runs)
    g, se, df, beta = hc3_by_hand(runs)
    # the figure's line is the fit's own gap −(β + γ·Δcov/100), not a slope through a mean
    assert got.stagger == pytest.approx(beta, rel=1e-9)
    assert got.fitted_gap([0, 100]) == pytest.approx([-beta, -beta - g], rel=1e-9)
    assert got.slope == pytest.approx(g, rel=1e-9) and got.se == pytest.approx(se, rel=1e-9)
    assert got.df == df == 80 - 6
    assert got.p == pytest.approx(stats.t.cdf(g / se, df), rel=1e-9)
    assert got.p + got.p_against == pytest.approx(1.0)
    h = stats.t.ppf(0.975, df) * se
    assert got.ci == pytest.approx((g - h, g + h), rel=1e-9)
    assert got.gain_per_100 == pytest.approx(-g)


def test_a_strong_trend_is_found_and_its_reversal_is_the_test_against():
    up = trend_test(runs_from(np.random.default_rng(0), slope=0.2))
    assert up.p < 1e-6 and up.slope < 0 and up.ci[1] < 0
    down = trend_test(runs_from(np.random.default_rng(0), slope=-0.2))
    assert down.p_against < 1e-6 and down.slope > 0


def test_the_cell_gaps_are_welch_intervals_of_ln_ppl():
    runs = runs_from(np.random.default_rng(1), slope=0.02)
    t = trend_test(runs)
    assert [c.cell for c in t.cells] == sorted(c for c, _ in CELLS)
    for c in t.cells:
        st = np.log([r[3] for r in runs if r[0] == c.cell and r[2] == "stagger"])
        fx = np.log([r[3] for r in runs if r[0] == c.cell and r[2] == "fixed"])
        ci = stats.ttest_ind(fx, st, equal_var=False).confidence_interval(0.95)
        assert c.gap == pytest.approx(fx.mean() - st.mean())
        assert c.ci == pytest.approx((ci.low, ci.high))
        assert (c.n_stagger, c.n_fixed) == (10, 10)
    one = cell_gap((4, 128), 13, [40.0], [41.0])
    assert math.isnan(one.ci[0]) and one.gap == pytest.approx(math.log(41 / 40))


def test_unfinished_runs_and_one_sided_cells_join_nothing():
    runs = runs_from(np.random.default_rng(2), slope=0.02)
    base = trend_test(runs)
    extra = runs + [((4, 128), 13, "stagger", float("nan")), ((16, 64), 99, "stagger", 40.0)]
    again = trend_test(extra)
    assert again.slope == base.slope and again.n_runs == base.n_runs == 80
    with pytest.raises(ValueError, match="two cells"):
        trend_test([r for r in runs if r[0] == (4, 128)])


def test_the_registered_power_is_the_tests_own_rate():
    """The registration's 0.20 (10 a side, σ 0.0115, slope 0.020) from the formula, and the
    formula against 400 simulated studies run through trend_test itself (a plain-OLS power
    said 0.57 here; the HC3 test's rate was 0.48)."""
    dcovs = [d for _, d in CELLS]
    assert trend_power(dcovs, 10, 0.0115, 0.020) == pytest.approx(0.20, abs=0.01)
    want = trend_power(dcovs, 5, 0.0115, 0.06)
    rng = np.random.default_rng(7)
    hits = sum(trend_test(runs_from(rng, 0.06, n=5)).p < 0.05 for _ in range(400))
    assert hits / 400 == pytest.approx(want, abs=0.07)  # 2.8 Monte Carlo standard errors


def test_the_scale_figure_draws_each_cells_gap_the_fit_and_the_papers_point():
    from analysis.figures.plots import scale_trend

    t = trend_test(runs_from(np.random.default_rng(4), slope=0.02))
    paper = {"layers": 16, "seq_len": 1024, "coverage_difference": 110, "gap": 0.0259}
    fig = scale_trend(t, paper, caption="the registered test")
    ax = fig.axes[0]
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_legend()
    pts = [ln for ln in ax.get_lines() if ln.get_linestyle() == "None"]
    cells = next(p for p in pts if p.get_marker() == "o")
    assert list(cells.get_xdata()) == [c.coverage_difference for c in t.cells]
    assert list(cells.get_ydata()) == pytest.approx([c.gap for c in t.cells])
    star = next(p for p in pts if p.get_marker() == "*")
    assert (star.get_xdata()[0], star.get_ydata()[0]) == (110, 0.0259)
    fit = next(ln for ln in ax.get_lines() if ln.get_linestyle() == "--")
    xs, ys = fit.get_xdata(), fit.get_ydata()
    assert (ys[-1] - ys[0]) / (xs[-1] - xs[0]) * 100 == pytest.approx(-t.slope)
    assert any("the registered test" in x.get_text() for x in ax.texts)
