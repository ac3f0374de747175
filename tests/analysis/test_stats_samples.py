"""Seed samples at their edges: one value or a scalar as a sample, frames grouped by several
columns or with a missing key, the summary's exact columns, Welch's test on unequal sizes against
scipy and with zero spread by hand, the bootstrap's bounds and defaults, and the exact messages a
user reads when the input is wrong."""

import itertools
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from analysis.statistics.assess import assess
from analysis.statistics.stats import (
    as_sample,
    bootstrap_ci,
    pooled_std,
    samples,
    welch,
)

NAN = float("nan")
A = [1.0, 2.0, 3.0]
B = [4.0, 6.0, 8.0, 10.0]


@pytest.mark.parametrize(
    "values, expected",
    [
        (3.0, [3.0]),  # a scalar is a sample of one
        (np.float64(2.5), [2.5]),
        (7, [7.0]),
        (NAN, []),  # a lone NaN is an empty sample
        ([1, NAN, 2], [1.0, 2.0]),
        ((4.0,), [4.0]),
    ],
)
def test_as_sample_is_a_flat_float_array(values, expected):
    x = as_sample(values)
    assert x.dtype == np.float64 and x.shape == (len(expected),)
    assert x.tolist() == expected


def _exact(message):
    return f"^{re.escape(message)}$"


ONE_D = "must be one-dimensional (one value per seed), got shape"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: as_sample([[1.0, 2.0], [3.0, 4.0]]), f"sample {ONE_D} (2, 2)"),
        (lambda: as_sample(["x"], "ppl"), "ppl must be a sequence of numbers, got ['x']"),
        (lambda: welch([[1.0, 2.0], [3.0, 4.0]], B), f"a {ONE_D} (2, 2)"),
        (lambda: welch(A, [[1.0, 2.0]]), f"b {ONE_D} (1, 2)"),
        (lambda: welch(["x", "y"], B), "a must be a sequence of numbers, got ['x', 'y']"),
        (lambda: welch(A, ["x", "y"]), "b must be a sequence of numbers, got ['x', 'y']"),
        (lambda: bootstrap_ci([[1.0, 2.0]], B), f"a {ONE_D} (1, 2)"),
        (lambda: bootstrap_ci(A, [[1.0], [2.0]]), f"b {ONE_D} (2, 1)"),
        (lambda: bootstrap_ci(["x"], B), "a must be a sequence of numbers, got ['x']"),
        (lambda: bootstrap_ci(A, ["y"]), "b must be a sequence of numbers, got ['y']"),
        (
            lambda: bootstrap_ci([], B),
            "bootstrap_ci needs values on both sides, got n=0 and n=4",
        ),
        (
            lambda: bootstrap_ci(A, [NAN]),
            "bootstrap_ci needs values on both sides, got n=3 and n=0",
        ),
        (lambda: bootstrap_ci(A, B, level=0), "level=0 must be in (0, 1), e.g. 0.95"),
        (lambda: bootstrap_ci(A, B, level=1), "level=1 must be in (0, 1), e.g. 0.95"),
        (lambda: bootstrap_ci(A, B, level=1.5), "level=1.5 must be in (0, 1), e.g. 0.95"),
        (lambda: bootstrap_ci(A, B, level=-0.5), "level=-0.5 must be in (0, 1), e.g. 0.95"),
        (lambda: pooled_std(), "pooled_std needs at least one sample"),
        (lambda: pooled_std(A, [[1.0, 2.0], [3.0, 4.0]]), f"sample 1 {ONE_D} (2, 2)"),
        (lambda: pooled_std([["x"]]), "sample 0 must be a sequence of numbers, got [['x']]"),
    ],
)
def test_bad_input_messages_name_the_argument(call, message):
    with pytest.raises(ValueError, match=_exact(message)):
        call()


# one row per seed; the dense baseline has no schedule (NaN), which is a configuration too
RUNS = pd.DataFrame(
    {
        "offsets": ["fib", "fib", "dense", "fib", "pow2", "fib", "dense", "pow2"],
        "schedule": ["stagger", "fixed", NAN, "stagger", "fixed", "fixed", NAN, "fixed"],
        "seed": [42, 42, 42, 43, 42, 43, 43, 43],
        "ppl": [42.0, 43.0, 40.0, 44.0, 50.0, 46.0, 41.0, NAN],
    }
)


def test_samples_by_two_columns_has_tuple_keys_in_order_of_appearance():
    got = samples(RUNS, ["offsets", "schedule"], "ppl")
    keys = list(got)
    assert keys[:2] == [("fib", "stagger"), ("fib", "fixed")]
    assert keys[2][0] == "dense" and math.isnan(keys[2][1])  # the NaN key is kept
    assert keys[3] == ("pow2", "fixed") and len(keys) == 4
    values = list(got.values())
    assert values[0].tolist() == [42.0, 44.0]
    assert values[1].tolist() == [43.0, 46.0]
    assert values[2].tolist() == [40.0, 41.0]
    assert values[3].tolist() == [50.0]  # NaN value dropped


def test_samples_keeps_a_missing_configuration_and_names_bad_values():
    got = samples(RUNS, "schedule", "ppl")
    keys = list(got)
    assert keys[:2] == ["stagger", "fixed"] and math.isnan(keys[2]) and len(keys) == 3
    assert list(got.values())[2].tolist() == [40.0, 41.0]
    bad = pd.DataFrame({"config": ["fib/x", "fib/x"], "ppl": ["a", "b"]})
    with pytest.raises(ValueError, match=r"^ppl of 'fib/x' must be a sequence of numbers, got "):
        samples(bad, "config", "ppl")
    with pytest.raises(
        ValueError,
        match=_exact(
            "samples: the frame lacks columns ['W'] (it has ['offsets', 'schedule', 'seed', 'ppl'])"
        ),
    ):
        samples(RUNS, ["offsets", "W"], "ppl")


def test_pooled_std_of_one_two_value_sample():
    # one degree of freedom: √((0 − 1)² + (2 − 1)²) / 1) = √2, a lone value adds nothing
    assert pooled_std([0.0, 2.0]) == pytest.approx(math.sqrt(2))
    assert pooled_std([7.0], [0.0, 2.0]) == pytest.approx(math.sqrt(2))
    assert math.isnan(pooled_std([7.0]))


def welch_dof(a, b):
    """Welch–Satterthwaite degrees of freedom, in float64 by the textbook formula."""
    va = np.var(a, ddof=1) / len(a)
    vb = np.var(b, ddof=1) / len(b)
    return (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))


PAIRS = [
    ([42.02, 41.96, 42.26], [43.12, 43.16, 43.31]),  # Table 5-like, three seeds a side
    ([1.0, 2.0, 3.0, 7.0, 5.5], [4.0, 6.0]),
    ([0.3, -1.2], [2.5, 2.6, 2.4, 3.9, 1.1, 0.0]),
    ([10.0, 10.5, 9.0], [10.2, 9.9, 10.1, 10.4]),  # means close: p near 1
]


@pytest.mark.parametrize("a, b", PAIRS)
@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_welch_matches_scipy(a, b, alternative):
    r = welch(a, b, alternative)
    ref = st.ttest_ind(a, b, equal_var=False, alternative=alternative)
    assert r.alternative == alternative
    assert r.t == pytest.approx(ref.statistic, rel=1e-12)
    assert r.dof == pytest.approx(ref.df, rel=1e-12)
    assert r.dof == pytest.approx(welch_dof(a, b), rel=1e-12)
    assert r.p == pytest.approx(ref.pvalue, rel=1e-10)


def test_welch_of_equal_means_has_p_one():
    r = welch([1.0, 3.0], [0.0, 2.0, 4.0])
    assert r.t == 0.0 and r.p == 1.0


@pytest.mark.parametrize(
    "a, b, alternative, t, p",
    [
        # zero spread on both sides: the difference is certain, in its direction only
        ([1.0, 1.0], [2.0, 2.0], "two-sided", -math.inf, 0.0),
        ([1.0, 1.0], [2.0, 2.0], "less", -math.inf, 0.0),
        ([1.0, 1.0], [2.0, 2.0], "greater", -math.inf, 1.0),
        ([3.0, 3.0, 3.0], [2.0, 2.0], "two-sided", math.inf, 0.0),
        ([3.0, 3.0, 3.0], [2.0, 2.0], "less", math.inf, 1.0),
        ([3.0, 3.0, 3.0], [2.0, 2.0], "greater", math.inf, 0.0),
    ],
)
def test_welch_zero_spread(a, b, alternative, t, p):
    r = welch(a, b, alternative)
    assert (r.t, r.p, r.alternative) == (t, p, alternative)
    assert isinstance(r.dof, float) and math.isnan(r.dof)


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_welch_zero_spread_equal_means_is_undefined(alternative):
    r = welch([5.0, 5.0], [5.0, 5.0, 5.0], alternative)
    assert r.alternative == alternative
    for v in (r.t, r.dof, r.p):
        assert isinstance(v, float) and math.isnan(v)


# eight distinct values a side: resample means are nearly all distinct, so the quantiles move
# with any change of the random stream
CA = [41.93, 42.17, 42.02, 41.88, 42.31, 42.05, 41.99, 42.26]
CB = [42.71, 43.02, 42.58, 43.34, 42.9, 42.66, 43.11, 42.83]


def test_bootstrap_defaults_and_the_interval_verdicts_print_instead():
    default = bootstrap_ci(CA, CB)
    assert default == bootstrap_ci(CA, CB, n=10_000, level=0.95, seed=0)
    # verdicts print Welch's t-interval, which the percentile bootstrap undercuts at few seeds
    lo, hi = st.ttest_ind(CA, CB, equal_var=False).confidence_interval(0.95)
    assert assess(CA, CB, "a beats b").ci == pytest.approx((-hi, -lo))
    a3, b3 = CA[:3], CB[:3]
    boot, t = bootstrap_ci(a3, b3), assess(a3, b3, "a beats b").ci
    assert t[0] < boot[0] and boot[1] < t[1]
    assert default != bootstrap_ci(CA, CB, seed=1)
    assert default != bootstrap_ci(CA, CB, n=10_001)
    lo, hi = default
    assert lo < np.mean(CB) - np.mean(CA) < hi


def resample_means(x):
    """Every equally likely bootstrap mean of ``x``."""
    return {float(np.mean(r)) for r in itertools.product(x, repeat=len(x))}


def test_bootstrap_of_one_resample_is_one_resampled_gap():
    a, b = [1.0, 2.0, 4.0], [3.0, 5.0, 9.0]
    gaps = [mb - ma for ma in resample_means(a) for mb in resample_means(b)]
    for seed in range(5):
        lo, hi = bootstrap_ci(a, b, n=1, seed=seed)
        assert lo == hi
        assert any(math.isclose(lo, g, abs_tol=1e-12) for g in gaps)
    lo, hi = bootstrap_ci(a, b, n=2, level=0.5)
    assert min(gaps) <= lo <= hi <= max(gaps)
