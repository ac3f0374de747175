"""The attended set, checked against SPEC §2.2–2.7 and §9 (numbers copied into the test)."""

import math

import pytest

from lab.ladder.offsets import (
    Ladder,
    alpha_from_theta,
    fibonacci,
    interp_columns,
    powers_of_two,
    resolve_base,
    theta_from_alpha,
)
from lab.ladder.plan import attended_distances, rung_distances
from lab.ladder.schedules import layer_alphas

FIB15 = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987]


def test_fibonacci_has_no_duplicate_one():
    assert fibonacci(15) == FIB15
    assert fibonacci(1) == [1] and fibonacci(2) == [1, 2]
    # a brute-force recurrence, independent of the implementation
    a, b, seq = 1, 2, []
    for _ in range(25):
        seq.append(a)
        a, b = b, a + b
    assert fibonacci(25) == seq


def test_powers_of_two_reach_matched():
    assert powers_of_two(1024) == [2**i for i in range(10)]  # 1..512, 10 rungs
    assert powers_of_two(2048)[-1] == 1024
    assert powers_of_two(4096)[-2:] == [1024, 2048]
    assert powers_of_two(1025)[-1] == 1024


def test_alpha_theta_round_trip():
    assert alpha_from_theta(0.0) == 1.0
    for a in (0.55, 0.77, 1.0, 1.3, 1.45):
        assert math.isclose(alpha_from_theta(theta_from_alpha(a)), a, rel_tol=1e-12)
    for bad in (0.5, 1.5, 0.2, 2.0):
        with pytest.raises(ValueError, match=str(bad)):
            theta_from_alpha(bad)


def test_rung_sets_match_spec_2_7():
    assert rung_distances(1.0, 1024, Ladder(8)) == [13, 21, 34, 55, 89, 144, 233, 377, 610, 987]
    # half-to-even: 10.5 -> 10, 27.5 -> 28, 493.5 -> 494; 6.5 -> 6 lands in the window
    assert rung_distances(0.5, 1024, Ladder(8)) == [10, 17, 28, 44, 72, 116, 188, 305, 494]
    assert rung_distances(1.5, 1024, Ladder(8)) == [12, 20, 32, 51, 82, 134, 216, 350, 566, 915]
    # the gather rule at alpha=0.5 uses floor brackets instead
    targets = [0.5 * f for f in FIB15]
    assert [lo for _, lo in interp_columns(targets, 1024, Ladder(8))] == [
        10,
        17,
        27,
        44,
        72,
        116,
        188,
        305,
        493,
    ]


def test_interp_rule_drops_floor_in_window():
    # SPEC example: at W=8 a target 8.6 rounds to 9 > 8 but its floor 8 is in the window
    assert interp_columns([8.6], 1024, Ladder(8)) == []
    # an earlier rung's floor blocks a later one (drop, not merge)
    assert interp_columns([20.2, 20.7], 1024, Ladder(8)) == [(0, 20)]
    # beyond the reach
    assert interp_columns([100.5], 1024, Ladder(8, reach=100)) == []


def test_rounding_conventions():
    assert attended_distances(0.5, 1024, Ladder(8, rounding="floor"))[9:] == [
        10,
        17,
        27,
        44,
        72,
        116,
        188,
        305,
        493,
    ]
    assert attended_distances(0.5, 1024, Ladder(8, rounding="ceil"))[9:] == [
        11,
        17,
        28,
        45,
        72,
        117,
        189,
        305,
        494,
    ]
    with pytest.raises(ValueError, match="nearest"):
        attended_distances(0.5, 1024, Ladder(8, rounding="nearest"))


@pytest.mark.parametrize(
    "W,fib_fixed,pow2_fixed,stag_lo,stag_hi",
    [(6, 18, 14, 16, 18), (8, 19, 15, 18, 19), (10, 21, 17, 19, 21), (12, 23, 19, 21, 23)],
)
def test_per_layer_set_sizes_spec(W, fib_fixed, pow2_fixed, stag_lo, stag_hi):
    assert len(attended_distances(1.0, 1024, Ladder(W))) == fib_fixed
    assert len(attended_distances(1.0, 1024, Ladder(W, base="pow2"))) == pow2_fixed
    sizes = [len(attended_distances(a, 1024, Ladder(W))) for a in layer_alphas("stagger", 16)]
    assert (min(sizes), max(sizes)) == (stag_lo, stag_hi)


def _union(alphas, seq_len, **ladder):
    return set().union(*(attended_distances(a, seq_len, Ladder(**ladder)) for a in alphas))


@pytest.mark.parametrize(
    "W,rounding,stagger",
    [
        (6, "round", 133),
        (8, "round", 133),
        (10, "round", 133),
        (12, "round", 133),
        (8, "floor", 139),
        (8, "ceil", 138),
    ],
)
def test_union_coverage_trained_config(W, rounding, stagger):
    fixed = {6: 18, 8: 19, 10: 21, 12: 23}[W]
    kw = dict(window=W, seq_len=1024, rounding=rounding)
    assert len(_union([1.0] * 16, **kw)) == fixed
    assert len(_union(layer_alphas("stagger", 16), **kw)) == stagger
    assert len(_union(layer_alphas("coprime", 16), **kw)) == stagger  # same multiset


def test_union_coverage_paper_convention_19_to_75():
    kw = dict(window=8, seq_len=1024, rungs=25)
    assert len(_union([1.0] * 8, **kw)) == 19
    assert len(_union(layer_alphas("stagger", 8), **kw)) == 75
    assert (
        len(_union(layer_alphas("stagger", 8), window=8, seq_len=1024, rungs=25, rounding="floor"))
        == 76
    )
    pow2 = dict(window=8, seq_len=1024, base="pow2")
    assert len(_union([1.0] * 16, **pow2)) == 15
    assert len(_union(layer_alphas("stagger", 16), **pow2)) == 101


def test_frozen_reach_drops_untrained_rungs():
    longer = attended_distances(1.5, 4096, Ladder(8))
    frozen = attended_distances(1.5, 4096, Ladder(8, reach=1024))
    assert 1480 in longer and max(frozen) == 915
    assert attended_distances(1.0, 4096, Ladder(8, base="pow2", reach=1024))[-1] == 512
    assert attended_distances(1.0, 4096, Ladder(8, base="pow2"))[-2:] == [1024, 2048]


def test_window_capped_at_sequence():
    assert attended_distances(1.0, 4, Ladder(8)) == [0, 1, 2, 3]
    assert attended_distances(1.0, 1, Ladder(0)) == [0]


def test_custom_base():
    assert attended_distances(1.0, 100, Ladder(2, base=[3, 7, 50, 200])) == [0, 1, 2, 3, 7, 50]
    with pytest.raises(ValueError, match="-3"):
        resolve_base([1, -3], 15, 1024)
    with pytest.raises(ValueError, match="duplicate"):
        resolve_base([1, 4, 4], 15, 1024)
    with pytest.raises(ValueError, match="'log'"):
        resolve_base("log", 15, 1024)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(alpha=1.0, window=-1, seq_len=64), "W=-1"),
        (dict(alpha=0.0, window=4, seq_len=64), "alpha=0.0"),
        (dict(alpha=-1.0, window=4, seq_len=64), "alpha=-1.0"),
        (dict(alpha=1.0, window=4, seq_len=64, rungs=0), "K=0"),
        (dict(alpha=1.0, window=4, seq_len=0), "seq_len=0"),
    ],
)
def test_bad_input_names_the_value(kwargs, needle):
    alpha, seq_len = kwargs.pop("alpha"), kwargs.pop("seq_len")
    with pytest.raises(ValueError, match=needle):
        attended_distances(alpha, seq_len, Ladder(**kwargs))
