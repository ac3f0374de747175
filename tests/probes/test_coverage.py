"""Coverage and receptive-field counters against SPEC §9 and brute force."""

import itertools
import json
import random

import numpy as np
import pytest

from fiblab.cli import main as cli_main
from lab.ladder.offsets import Ladder
from probes.coverage import coverage, schedule_coverage
from probes.receptive_field import (
    bits_to_list,
    effective_field,
    min_hops,
    reachable,
    reachable_fraction,
    scheme_sets,
)

# SPEC §9 (copied): (layers, K, W, rounding, base) -> (fixed union, stagger union)
SPEC9 = [
    (16, 15, 6, "round", "fib", 18, 133),
    (16, 15, 8, "round", "fib", 19, 133),
    (16, 15, 10, "round", "fib", 21, 133),
    (16, 15, 12, "round", "fib", 23, 133),
    (16, 15, 8, "floor", "fib", 19, 139),
    (16, 15, 8, "ceil", "fib", 19, 138),
    (8, 15, 8, "round", "fib", 19, 74),
    (8, 15, 8, "floor", "fib", 19, 75),
    (8, 25, 8, "round", "fib", 19, 75),
    (8, 25, 8, "floor", "fib", 19, 76),
    (16, 15, 8, "round", "pow2", 15, 101),
]


@pytest.mark.parametrize("L,K,W,rounding,base,fixed,stagger", SPEC9)
def test_spec9_union_table(L, K, W, rounding, base, fixed, stagger):
    kw = dict(layers=L, seq_len=1024, ladder=Ladder(W, base=base, rungs=K, rounding=rounding))
    assert schedule_coverage("fixed", **kw)["union"] == fixed
    assert schedule_coverage("stagger", **kw)["union"] == stagger
    if base == "fib" and L == 16:
        assert schedule_coverage("coprime", **kw)["union"] == stagger


def test_spec9_beyond_window_and_floor_at_w12():
    r = schedule_coverage("fixed", 16, ladder=Ladder(8))
    assert r["union_beyond_window"] == 10  # the paper's "19" counts 9 window
    assert schedule_coverage("stagger", 16, ladder=Ladder(8))["union_beyond_window"] == 124
    assert schedule_coverage("stagger", 8, ladder=Ladder(12, rounding="floor"))["union"] == 76


def _brute_set(alpha, W, T, fib, rounding):
    r = {"round": round, "floor": int, "ceil": lambda x: -int(-x // 1)}[rounding]
    s = set(range(min(W, T - 1) + 1))
    for f in fib:
        d = r(alpha * f)
        if W < d <= T - 1:
            s.add(d)
    return s


@pytest.mark.parametrize("seed", range(6))
def test_brute_force_recount_on_random_schedules(seed):
    rng = random.Random(seed)
    L, W, T, b = (
        rng.randint(1, 12),
        rng.randint(0, 12),
        rng.choice([64, 300, 1024]),
        rng.randint(0, 10),
    )
    rounding = rng.choice(["round", "floor", "ceil"])
    alphas = [rng.uniform(0.5, 1.5) for _ in range(L)]
    fib = [1, 2]
    while len(fib) < 15:
        fib.append(fib[-1] + fib[-2])
    sets = [_brute_set(a, W, T, fib, rounding) for a in alphas]
    union = set().union(*sets)
    r = coverage(alphas, T, Ladder(W, rounding=rounding), band=b)
    assert r["per_layer"] == [len(s) for s in sets]
    assert r["union"] == len(union)
    assert r["union_beyond_window"] == len([d for d in union if d > W])
    assert r["layers_per_distance"] == [sum(d in s for s in sets) for d in range(T)]
    covered = [any(abs(x - d) <= b for d in union) for x in range(1, T)]
    assert r["band_coverage"] == pytest.approx(sum(covered) / (T - 1))
    holes = [x for x in range(1, T) if not covered[x - 1]]
    assert [x for g0, g1 in r["gaps"] for x in range(g0, g1 + 1)] == holes
    for ell, s in enumerate(sets):
        share = sum(any(abs(x - d) <= b for d in s) for x in range(1, T)) / (T - 1)
        assert r["band_coverage_per_layer"][ell] == pytest.approx(share)


def test_beyond_reach_lists_untrained_rungs():
    r = schedule_coverage("stagger", 16, ladder=Ladder(8))
    new = set().union(*map(set, r["beyond_reach"]))
    assert new == {1086, 1151, 1217, 1283, 1349, 1415, 1480}
    assert [i for i, x in enumerate(r["beyond_reach"]) if x] == list(range(9, 16))


def _brute_reach(sets, T):
    out, cur = [], {0}
    for s in sets:
        cur = {r + d for r in cur for d in s if r + d < T}
        out.append(cur)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_reachable_and_hops_match_enumeration(seed):
    rng = random.Random(seed)
    T = 60
    sets = [sorted({0} | set(rng.sample(range(1, 40), rng.randint(1, 4)))) for _ in range(4)]
    bits = reachable(sets, T)
    for b, want in zip(bits, _brute_reach(sets, T)):
        assert set(bits_to_list(b)) == want
    hops = min_hops(sets, T)
    for delta in range(T):
        best = -1
        for combo in itertools.product(*sets):
            if sum(combo) == delta:
                n = sum(1 for d in combo if d)
                best = n if best < 0 else min(best, n)
        assert hops[delta] == best


def test_effective_field_matches_enumeration():
    sets = [[0, 1, 3], [0, 2, 5], [0, 1, 8]]
    T, res = 40, 0.25
    want = np.zeros(T)
    # each layer: stay with prob res, else uniform over its set (0 included)
    for combo in itertools.product(
        *[[(None, res)] + [(d, (1 - res) / len(s)) for d in s] for s in sets]
    ):
        delta = sum(d for d, _ in combo if d is not None)
        want[delta] += np.prod([p for _, p in combo])
    got = effective_field(sets, T, residual=res)[-1]
    assert np.allclose(got, want) and got.sum() == pytest.approx(1.0)


def test_order_independent_only_at_full_depth():
    lin, cop = scheme_sets("stagger", 16), scheme_sets("coprime", 16)
    rl, rc = reachable(lin, 1024), reachable(cop, 1024)
    assert rl[-1] == rc[-1]
    assert any(a != b for a, b in zip(rl[:-1], rc[:-1]))


def test_dense_reaches_everything_after_one_layer():
    assert reachable_fraction(scheme_sets("dense", 3, seq_len=512), 512) == [1.0, 1.0, 1.0]
    assert min_hops(scheme_sets("dense", 2, seq_len=512), 512).max() == 1


def test_cli_coverage_json(capsys):
    assert (
        cli_main(
            [
                "coverage",
                "--layers",
                "8",
                "--window",
                "8",
                "--rungs",
                "25",
                "--seq-len",
                "1024",
                "--schedule",
                "stagger",
                "--base",
                "fib",
                "--rounding",
                "round",
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert r["union"] == 75 and r["union_beyond_window"] == 66 and len(r["per_layer"]) == 8
    assert 0 < r["band_coverage"] < 1 and r["convention"]["rounding"] == "round"
    assert cli_main(["receptive-field", "--layers", "4", "--schedule", "fixed", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert len(r["reachable_fraction"]) == 4 and r["reachable_fraction"][0] == 19 / 1024
