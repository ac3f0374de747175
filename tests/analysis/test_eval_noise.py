"""The paired window bootstrap of a comparison's gap (`analysis.statistics.eval_noise`) against analytic
standard errors and scipy's Welch test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from analysis.statistics.eval_noise import seed_se, window_bootstrap


def _sides(rng, W=400, shared=1.0, own=0.05, gap=0.02):
    """Two sides' per-window NLL: a window difficulty both sides share (σ = shared), each run's
    own per-window noise (σ = own), side b worse by ``gap``."""
    hard = rng.normal(4.0, shared, size=W)  # (W,)
    a = hard + rng.normal(0.0, own, size=(3, W))  # (3, W)
    b = hard + gap + rng.normal(0.0, own, size=(4, W))  # (4, W)
    return a, b


def test_gap_and_se_match_the_analytic_paired_values():
    rng = np.random.default_rng(1)
    a, b = _sides(rng)
    ev = window_bootstrap(a, b, n_boot=4000, seed=3)
    d = b.mean(0) - a.mean(0)
    # the gap is the ledger's: mean over runs of each run's mean (= ln ppl), b minus a
    assert ev.gap == pytest.approx(b.mean(1).mean() - a.mean(1).mean(), abs=1e-12)
    analytic = d.std(ddof=1) / math.sqrt(len(d))  # the bootstrap SE of a mean, large W
    assert ev.se == pytest.approx(analytic, rel=0.06)
    assert ev.ci[0] < ev.gap < ev.ci[1] and ev.windows == 400
    assert ev.ci[1] - ev.ci[0] == pytest.approx(2 * 1.96 * analytic, rel=0.1)


def test_pairing_removes_the_shared_window_difficulty():
    """With a shared difficulty 20× each run's own noise, the paired SE is the own noise's,
    far below what scoring the sides on independent windows would give."""
    rng = np.random.default_rng(2)
    a, b = _sides(rng, shared=1.0, own=0.05)
    ev = window_bootstrap(a, b)
    unpaired = math.sqrt(a.mean(0).var(ddof=1) / 400 + b.mean(0).var(ddof=1) / 400)
    own = math.sqrt(0.05**2 / 3 + 0.05**2 / 4) / math.sqrt(400)
    assert ev.se == pytest.approx(own, rel=0.1)
    assert ev.se < unpaired / 10


def test_seed_se_is_welchs_standard_error():
    a, b = np.array([3.51, 3.49, 3.55, 3.50]), np.array([3.60, 3.57, 3.62])
    t = stats.ttest_ind(b, a, equal_var=False).statistic
    assert seed_se(a, b) == pytest.approx((b.mean() - a.mean()) / t, rel=1e-12)
    assert math.isnan(seed_se([1.0], [2.0, 3.0]))


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="same windows"):
        window_bootstrap(np.zeros((2, 5)), np.zeros((2, 6)))
    with pytest.raises(ValueError, match="2 windows"):
        window_bootstrap(np.zeros((2, 1)), np.zeros((2, 1)))
