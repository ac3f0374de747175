"""Coverage and receptive-field laws (hypothesis) and the report fields, by hand and brute force.

The laws: coverage counts equal a brute-force union of per-layer sets built from the rounding
rule alone; the band mask and its gaps equal a direct scan; after the whole stack the reachable
set (a Minkowski sum) and the fewest hops do not depend on the layers' order.  The report tests
pin every field (names included: the CLI prints them as JSON) against hand counts.
"""

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.ladder.offsets import Ladder
from probes.coverage import band_mask, coverage, describe, gaps, schedule_coverage
from probes.receptive_field import (
    bits_to_list,
    compare,
    effective_field,
    min_hops,
    reachable,
    receptive_report,
    scheme_sets,
)

FIB15 = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987]
#: W=8, T=1024, α=1 (SPEC §2.7): the window and the ten rungs beyond it
FIXED = list(range(9)) + [13, 21, 34, 55, 89, 144, 233, 377, 610, 987]
#: α=0.5, half-to-even (SPEC §2.7; 6.5 → 6 lands in the window) and floor
HALF_ROUND = list(range(9)) + [10, 17, 28, 44, 72, 116, 188, 305, 494]
HALF_FLOOR = list(range(9)) + [10, 17, 27, 44, 72, 116, 188, 305, 493]
FAST = settings(max_examples=40, deadline=None, derandomize=True)  # the same examples every run


def _rounder(rounding):
    return {"round": round, "floor": math.floor, "ceil": math.ceil}[rounding]


def _brute_set(alpha, W, T, rounding):
    """{0..min(W, T−1)} ∪ {r(α·f) : W < r ≤ T − 1}, straight from the definition."""
    r = _rounder(rounding)
    return set(range(min(W, T - 1) + 1)) | {
        r(alpha * f) for f in FIB15 if W < r(alpha * f) <= T - 1
    }


def _brute_band(dists, band, T):
    return [any(abs(x - d) <= band for d in dists) for x in range(T)]


# --------------------------------------------------------------------------------------------
# laws
# --------------------------------------------------------------------------------------------
@FAST
@given(
    alphas=st.lists(st.floats(0.5, 1.5), min_size=1, max_size=6),
    W=st.integers(0, 10),
    T=st.integers(1, 200),
    rounding=st.sampled_from(["round", "floor", "ceil"]),
    band=st.integers(0, 6),
)
def test_coverage_counts_equal_a_brute_force_union(alphas, W, T, rounding, band):
    sets = [_brute_set(a, W, T, rounding) for a in alphas]
    union = set().union(*sets)
    r = coverage(alphas, T, Ladder(W, rounding=rounding), band=band)
    assert r["per_layer_sets"] == [sorted(s) for s in sets]
    assert r["per_layer"] == [len(s) for s in sets]
    assert r["union"] == len(union)
    assert r["union_beyond_window"] == sum(d > W for d in union)
    assert r["layers_per_distance"] == [sum(d in s for s in sets) for d in range(T)]
    covered = _brute_band(union, band, T)
    share = sum(covered[1:]) / (T - 1) if T > 1 else 1.0
    assert r["band_coverage"] == pytest.approx(share)


@FAST
@given(T=st.integers(1, 80), band=st.integers(0, 10), data=st.data())
def test_band_mask_is_a_direct_scan(T, band, data):
    dists = data.draw(st.lists(st.integers(0, T - 1), max_size=8))  # attended: 0 ≤ d < T
    assert band_mask(dists, band, T).tolist() == _brute_band(dists, band, T)


@FAST
@given(mask=st.lists(st.booleans(), max_size=40))
def test_gaps_are_the_false_runs_of_1_to_t(mask):
    holes = [x for x in range(1, len(mask)) if not mask[x]]
    got = gaps(np.array(mask, dtype=bool))
    assert [x for a, b in got for x in range(a, b + 1)] == holes  # every hole, in order
    assert all(a <= b for a, b in got)
    assert all(got[i][1] + 1 < got[i + 1][0] for i in range(len(got) - 1))  # maximal runs


def _brute_reach(sets, T):
    cur = {0}
    for s in sets:
        cur = {r + d for r in cur for d in s if r + d < T}
    return cur


layer_set = st.lists(st.integers(1, 30), max_size=4).map(lambda xs: sorted({0, *xs}))


@FAST
@given(sets=st.lists(layer_set, min_size=1, max_size=4), data=st.data())
def test_full_depth_reach_is_order_independent(sets, data):
    T = 64
    perm = data.draw(st.permutations(sets))
    full = reachable(sets, T)[-1]
    assert reachable(perm, T)[-1] == full
    assert set(bits_to_list(full)) == _brute_reach(sets, T)  # the Minkowski sum, cut at T
    assert min_hops(perm, T).tolist() == min_hops(sets, T).tolist()


@FAST
@given(sets=st.lists(st.lists(st.integers(0, 20), min_size=1, max_size=3), min_size=1, max_size=3))
def test_reachable_without_the_zero_distance(sets):
    """A set need not contain 0: then the token does not stay put (bit 0 is not free)."""
    T = 40
    for ell, b in enumerate(reachable(sets, T)):
        assert set(bits_to_list(b)) == _brute_reach(sets[: ell + 1], T)


# --------------------------------------------------------------------------------------------
# coverage report fields
# --------------------------------------------------------------------------------------------
def test_coverage_report_fields_by_hand():
    r = coverage([1.1], 128, Ladder(8))  # default rounding "round", band = W, longer = 8
    assert r["convention"] == {
        "layers": 1,
        "window": 8,
        "rungs": 15,
        "seq_len": 128,
        "base": "fib",
        "rounding": "round",
        "band": 8,
        "window_counted": True,
    }
    assert r["alphas"] == [1.1]
    # 1.1·f for f = 8..89: 8.8, 14.3, 23.1, 37.4, 60.5 (60.50000000000001 → 61), 97.9
    assert r["per_layer_sets"] == [list(range(9)) + [9, 14, 23, 37, 61, 98]]
    # rungs a longer sequence (8 × 128: distances ≤ 1023) adds: 1.1·144 … 1.1·610; 1.1·987 =
    # 1085.7 lies beyond even that
    assert r["beyond_reach"] == [[158, 256, 415, 671]]
    floor = coverage([1.1], 128, Ladder(8, rounding="floor"))
    assert floor["beyond_reach"] == [[158, 256, 414, 671]]
    assert coverage([1.1], 128, Ladder(8), longer=9)["beyond_reach"] == [[158, 256, 415, 671, 1086]]


def test_coverage_counts_are_integers_in_json():
    r = coverage([1.0, 1.0], 6, Ladder(2))
    assert json.dumps(r["layers_per_distance"]) == "[2, 2, 2, 2, 0, 2]"  # {0, 1, 2, 3, 5}


def test_coverage_custom_base_is_listed():
    r = coverage([1.0], 100, Ladder(2, base=(3, 7, 50, 200)))
    assert r["convention"]["base"] == [3, 7, 50, 200]
    assert type(r["convention"]["base"]) is list
    assert r["per_layer_sets"] == [[0, 1, 2, 3, 7, 50]]


def test_band_share_at_the_shortest_lengths():
    assert coverage([1.0], 1, Ladder(0))["band_coverage"] == 1.0  # no distance 1..T−1 to cover
    r = coverage([1.0], 2, Ladder(0, base=[5]), band=0)  # the set {0}: distance 1 uncovered
    assert r["band_coverage"] == 0.0 and r["gaps"] == [(1, 1)]
    assert coverage([1.0], 2, Ladder(0), band=0)["band_coverage"] == 1.0  # rung 1 covers it


def test_negative_band_is_refused_by_name():
    with pytest.raises(ValueError, match="band=-1"):
        coverage([1.0], 64, Ladder(8), band=-1)


def test_schedule_coverage_defaults_and_arguments():
    r = schedule_coverage("fixed", 16)  # defaults: W=8, T=1024, fib, K=15, round, band W
    assert r["convention"] == {
        "layers": 16,
        "window": 8,
        "rungs": 15,
        "seq_len": 1024,
        "base": "fib",
        "rounding": "round",
        "band": 8,
        "window_counted": True,
        "schedule": "fixed",
    }
    assert r["per_layer_sets"] == [FIXED] * 16 and r["union"] == 19
    custom = schedule_coverage([1.0, 1.0], 2, seq_len=6, ladder=Ladder(2), band=0)
    assert custom["convention"]["schedule"] == "custom" and custom["convention"]["band"] == 0
    assert custom["band_coverage"] == 4 / 5  # {1, 2, 3, 5} of 1..5
    s3 = schedule_coverage("coprime", 16, stride=3)
    assert s3["alphas"] == [0.5 + ((3 * i) % 16) / 15 for i in range(16)]


def test_describe_line_by_hand():
    # band ±8 around {0..8, 13, 21, …, 987} covers 1..42 and seven runs of 17 (55 … 987):
    # 161 of 1023 = 15.7 %
    assert describe(schedule_coverage("fixed", 16)) == (
        "fixed: union 19 distinct distances (10 beyond the window) | per layer 19-19 | "
        "band ±8 covers 15.7% of 1..T-1 | convention: L=16 K=15 W=8 T=1024 base=fib "
        "rounding=round, window counted"
    )
    line = describe(coverage([0.5, 1.0], 1024, Ladder(8)))
    assert line.startswith("custom: union ") and "per layer 18-19 |" in line


# --------------------------------------------------------------------------------------------
# receptive field
# --------------------------------------------------------------------------------------------
def _brute_field(sets, T, residual):
    """Enumerate every path: each layer stays put with `residual`, else picks a set member."""
    want = np.zeros(T)
    for combo in itertools.product(
        *[[(0, residual)] + [(d, (1 - residual) / len(s)) for d in s] for s in sets]
    ):
        delta = sum(d for d, _ in combo)
        if delta < T:
            want[delta] += np.prod([p for _, p in combo])
    return want


def test_effective_field_default_residual_and_the_fft_path():
    sets = [[0, 1, 3], [0, 2, 5]]
    assert np.allclose(effective_field(sets, 12)[-1], _brute_field(sets, 12, 0.0))
    big = [list(range(0, 140, 2)), list(range(0, 200, 3))]  # 70 and 67 > 64: the fft path
    T = 150  # 142, 146, … and 198 lie at or past T: their mass is dropped
    got = effective_field(big, T)
    w0 = np.zeros(T)
    w0[0:140:2] = 1 / 70
    assert np.allclose(got[0], w0, atol=1e-15)
    want = np.zeros(T)
    for a in big[0]:
        for b in big[1]:
            if a + b < T:
                want[a + b] += 1 / (70 * 67)
    assert np.allclose(got[1], want, atol=1e-15) and (got[1] >= 0).all()
    edge = [list(range(0, 2 * 64 + 2, 2))]  # 65 distances, the last one exactly T
    assert np.allclose(effective_field(edge, 130)[0][0:130:2], 1 / 65)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5])
def test_effective_field_refuses_residual_outside_0_1(bad):
    with pytest.raises(ValueError, match=f"residual={bad}"):
        effective_field([[0, 1]], 8, residual=bad)


def test_receptive_report_by_hand():
    # three layers {0, 1}: a binomial(3, 1/2) walk; distances 4..7 never reached
    assert receptive_report([[0, 1]] * 3, 8) == {
        "reachable_fraction": [2 / 8, 3 / 8, 4 / 8],
        "unreachable": 4,
        "max_min_hops": 3,
        "mean_min_hops": 1.5,  # hops 0, 1, 2, 3
        "effective_mean_distance": 1.5,
        "effective_mass_in_window": 1.0,
        "residual": 0.0,
    }
    # two layers {0, 3} at T=4: mass 1/4 on 6 is dropped; of the kept 3/4, 1/2 sits on 3
    r = receptive_report([[0, 3]] * 2, 4)
    assert r["effective_mass_in_window"] == 0.75 and r["effective_mean_distance"] == 2.0
    assert r["unreachable"] == 2 and r["mean_min_hops"] == 0.5  # hops 0 (at 0) and 1 (at 3)
    # residual 1/2 over one layer {0, 2}: p = 1/2·δ0 + 1/2·(1/2·δ0 + 1/2·δ2)
    half = receptive_report([[0, 2]], 4, residual=0.5)
    assert half["effective_mean_distance"] == 0.5 and half["residual"] == 0.5
    nothing = receptive_report([[5]], 4)  # every path leaves the sequence
    assert nothing["effective_mass_in_window"] == 0.0
    assert nothing["effective_mean_distance"] == 0.0


def test_scheme_sets_defaults_by_hand():
    assert scheme_sets("fixed", 2) == [FIXED, FIXED]  # W=8, T=1024, K=15
    # layer 0 of a stagger is α=0.5; with K=16, 0.5·1597 = 798.5 would join
    assert scheme_sets("stagger", 2)[0] == HALF_ROUND
    assert scheme_sets("stagger", 2, rounding="floor")[0] == HALF_FLOOR
    assert scheme_sets("dense", 1) == [list(range(1024))]


def test_compare_defaults():
    got = compare()
    assert list(got) == ["fixed", "stagger", "coprime", "pow2", "pow2-stagger", "dense"]
    assert got["fixed"] == receptive_report([FIXED] * 16, 1024)
    assert got["stagger"]["reachable_fraction"][0] == 18 / 1024  # HALF_ROUND
    assert got["pow2"]["reachable_fraction"][0] == 15 / 1024  # 0..8, 16, 32, …, 512
    assert got["dense"]["reachable_fraction"] == [1.0] * 16
    assert got["stagger"]["reachable_fraction"][-1] == got["coprime"]["reachable_fraction"][-1]
    assert all(r["residual"] == 0.0 for r in got.values())
    small = compare(layers=2, window=2, seq_len=16, schemes=("fixed",), residual=0.5)
    assert small == {"fixed": receptive_report([[0, 1, 2, 3, 5, 8, 13]] * 2, 16, 0.5)}
    # floor at α = 0.5 and 1.5 (1.5·f = 12, 19.5, 31.5, 51, 82.5, 133.5, 216, 349.5, 565.5, 915)
    floor = compare(layers=2, schemes=("stagger",), rounding="floor")
    sets = [HALF_FLOOR, list(range(9)) + [12, 19, 31, 51, 82, 133, 216, 349, 565, 915]]
    assert floor == {"stagger": receptive_report(sets, 1024)}
