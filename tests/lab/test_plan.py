"""The attended-set plan (`lab.ladder.plan`) is the one source every consumer reads.

Oracles: distance lists written out by hand (README, SPEC §2.7, a worked interpolated case), exact
rational arithmetic (`fractions.Fraction`) for the float32-α case, and a brute-force restatement
of both rules in this file.  The property test draws random (α, W, K, T, base, rounding, reach)
and checks that the model's `attended_sets`, the coverage counters, the efficiency counts,
`evaluate.attended_columns` and the columns handed to `lab.kernels.columns_attention` (spied on
during a real forward) all equal the brute force.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
import torch

import lab.cost.efficiency as eff
from lab import kernels
from lab.evaluation.evaluate import attended_columns
from lab.ladder import plan
from lab.ladder.offsets import ALPHA_MIN, Ladder, theta_from_alpha
from lab.ladder.plan import plan_for
from lab.lm.model import FibLM
from lab.lm.modelconfig import ModelConfig, config_for
from probes.coverage import coverage

WINDOW9 = list(range(9))  # 0..8


# --------------------------------------------------------------------------------------------
# hand-written oracle cases
# --------------------------------------------------------------------------------------------
def test_readme_integer_sets():
    assert plan_for(0.5, 1024, Ladder(8)).distances == WINDOW9 + [
        10,
        17,
        28,
        44,
        72,
        116,
        188,
        305,
        494,
    ]
    assert plan_for(1.0, 1024, Ladder(8)).distances == WINDOW9 + [
        13,
        21,
        34,
        55,
        89,
        144,
        233,
        377,
        610,
        987,
    ]
    assert plan_for(1.0, 1024, Ladder(8, base="pow2")).distances == WINDOW9 + [
        16,
        32,
        64,
        128,
        256,
        512,
    ]
    # floor: 0.5·f = 0.5, 1, 1.5, 2.5, 4, 6.5, 10.5, 17, 27.5, 44.5, 72, 116.5, 188.5, 305, 493.5
    assert plan_for(0.5, 1024, Ladder(8, rounding="floor")).lo[9:] == (
        10,
        17,
        27,
        44,
        72,
        116,
        188,
        305,
        493,
    )


def test_stagger_layers_round_by_their_double_value():
    """SPEC §2.7's stagger at L = 16: layer 10 has α = 0.5 + 10/15 and 987α = 1151.4999999999998
    in double (1151, not the exact 1152); layer 9 has 55α = 60.50000000000001 → 61."""
    a10 = 0.5 + 10 / 15
    assert (
        1151 in plan_for(a10, 2048, Ladder(8)).lo and 1152 not in plan_for(a10, 2048, Ladder(8)).lo
    )
    a9 = 0.5 + 9 / 15  # 1.1·f: 14.3, 23.1, 37.4, 60.5, 97.9, 158.4, 256.3, 414.7, 671
    assert plan_for(a9, 1024, Ladder(8)).distances == WINDOW9 + [
        9,
        14,
        23,
        37,
        61,
        98,
        158,
        256,
        415,
        671,
    ]


def test_interpolated_case_by_hand():
    """α = 0.8, W = 8, T = 1024: 0.8·f for f = 13..987 is 10.4, 16.8, 27.2, 44, 71.2, 115.2,
    186.4, 301.6, 488, 789.6; f ≤ 8 rounds into the window (0.8·8 = 6.4), all lo are distinct."""
    p = plan_for(0.8, 1024, Ladder(8), interpolate=True)
    assert p.lo == tuple(WINDOW9) + (10, 16, 27, 44, 71, 115, 186, 301, 488, 789)
    assert p.interpolated == (False,) * 9 + (True,) * 10
    assert p.rung == (-1,) * 9 + tuple(range(5, 15))
    assert p.f[9:] == (13.0, 21.0, 34.0, 55.0, 89.0, 144.0, 233.0, 377.0, 610.0, 987.0)
    assert p.fracs[9:] == pytest.approx(
        [0.4, 0.8, 0.2, 0.0, 0.2, 0.2, 0.4, 0.6, 0.0, 0.6], abs=1e-9
    )
    assert p.columns()[8:11] == [(8, 1), (10, 2), (16, 2)]


def test_drop_and_merge_differ_by_hand():
    """α = 0.55, W = 2, K = 10: 0.55·f = 0.55, 1.1, 1.65, 2.75, 4.4, 7.15, 11.55, 18.7, 30.25,
    48.95.  Interpolated: 2.75 has lo = 2, taken by the window, so it is dropped; integer: 2.75
    rounds to 3, a new distance, kept."""
    interp = plan_for(0.55, 64, Ladder(2, rungs=10), interpolate=True)
    assert interp.lo == (0, 1, 2, 4, 7, 11, 18, 30, 48)
    integer = plan_for(0.55, 64, Ladder(2, rungs=10))
    assert integer.lo == (0, 1, 2, 3, 4, 7, 12, 19, 30, 49)
    # a collision between rungs: 3 and 3.2 both round to 3 (merge keeps the first rung) and
    # both floor to 3 (drop keeps the first rung, skips the second)
    merged = plan_for(1.0, 100, Ladder(1, base=[3, 3.2, 7]))
    assert merged.lo == (0, 1, 3, 7) and merged.rung == (-1, -1, 0, 2)
    dropped = plan_for(1.0, 100, Ladder(1, base=[3, 3.2, 7]), interpolate=True)
    assert dropped.lo == (0, 1, 3, 7) and dropped.rung == (-1, -1, 0, 2)
    # reach: rungs beyond min(T, reach) − 1 vanish; a window wider than T is capped at T − 1
    assert plan_for(1.0, 4096, Ladder(8, reach=1024)).lo[-1] == 987
    assert plan_for(1.0, 4, Ladder(8)).lo == (0, 1, 2, 3)


def test_reads_per_query_by_hand():
    """W = 1, T = 6, base [2.5] at α = 1: columns 0, 1 (one row) and lo = 2 interpolated (rows
    t − 2 and t − 3): query t reads 1, 2, 3, 4, 4, 4 rows."""
    p = plan_for(1.0, 6, Ladder(1, base=[2.5]), interpolate=True)
    assert p.columns() == [(0, 1), (1, 1), (2, 2)]
    assert p.reads_per_query() == [1, 2, 3, 4, 4, 4]
    assert p.reads() == 18 == eff.column_reads(p.columns(), 6)
    q = plan_for(1.0, 6, Ladder(1, base=[2.5]))  # integer: round(2.5) = 2 (half-even)
    assert q.reads_per_query() == [1, 2, 3, 3, 3, 3]


# --------------------------------------------------------------------------------------------
# float32 α: the plan is built from its exact double value
# --------------------------------------------------------------------------------------------
def test_float32_alpha_plans_in_float64():
    """float32(15/13)·13 is 15.0 in float32 arithmetic but 14.99999988… exactly (and in double):
    the plan's lo is the exact floor 14, with frac ≈ 1, for a float32 tensor as for its value."""
    a32 = torch.tensor(15 / 13, dtype=torch.float32, requires_grad=True)
    assert float(a32.detach() * 13) == 15.0  # what a float32 plan would have used
    exact = Fraction(float(a32.detach())) * 13
    assert math.floor(exact) == 14
    p32 = plan_for(a32, 64, Ladder(8), interpolate=True)
    p64 = plan_for(float(a32.detach()), 64, Ladder(8), interpolate=True)
    assert p32 == p64
    c = p32.rung.index(5)  # f = 13
    assert p32.lo[c] == 14 and p32.fracs[c] == pytest.approx(float(exact - 14), abs=1e-12)
    # the kernel gets the same lo, and the frac on the float32 α's graph with dfrac/dα = 13
    dists, fracs, interp = p32.kernel_inputs(a32)
    assert dists[c] == 14 and bool(interp[c]) and fracs.dtype == torch.float32
    fracs[c].backward()
    assert a32.grad.item() == 13.0


def test_float32_theta_gives_the_float64_plan():
    """A learned layer's α comes from a float32 θ; its plan equals the plan of α's value in
    double, column for column, and each lo is floor of the exact product."""
    for a in (0.62, 15 / 13, 1.3077, 0.5 + 10 / 15):
        theta = torch.tensor(theta_from_alpha(a), dtype=torch.float32)
        alpha = ALPHA_MIN + torch.sigmoid(theta)  # float32, as the model computes it
        p = plan_for(alpha, 1024, Ladder(8), interpolate=True)
        assert p == plan_for(float(alpha), 1024, Ladder(8), interpolate=True)
        exact = Fraction(float(alpha))
        for lo, f, i in zip(p.lo, p.f, p.interpolated):
            if i:
                assert lo == math.floor(exact * Fraction(f))


# --------------------------------------------------------------------------------------------
# caching
# --------------------------------------------------------------------------------------------
def test_plans_are_cached_and_the_switch_turns_it_off():
    plan.clear_cache()
    a = plan_for(0.77, 512, Ladder(8))
    assert plan_for(0.77, 512, Ladder(8)) is a  # the same record: built once
    assert plan_for(0.77, 512, Ladder(8, reach=256)) is not a  # another reach, another plan
    prev = plan.set_cache_enabled(False)
    try:
        b = plan_for(0.77, 512, Ladder(8))
        assert b == a and b is not a
    finally:
        plan.set_cache_enabled(prev)
    plan.clear_cache()
    assert plan.cache_info().currsize == 0


def test_model_forward_builds_each_plan_once(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "torch")
    cfg = ModelConfig(
        d_model=16, n_layers=3, n_heads=2, n_kv_heads=1, vocab_size=32, seq_len=40, window=2
    )
    model = FibLM(ModelConfig(**{**cfg.to_dict(), "schedule": "stagger"}))
    ids = torch.zeros(1, 40, dtype=torch.long)
    plan.clear_cache()
    model(ids)
    misses = plan.cache_info().misses
    model(ids)
    model(ids)
    assert plan.cache_info().misses == misses  # no new plan after the first forward


def test_learned_fracs_are_fresh_on_the_graph_each_forward():
    """The cached plan of a learned α gives fracs on the current α's graph: dα is exact."""
    a = torch.tensor(0.83, dtype=torch.float64, requires_grad=True)
    p = plan_for(a, 200, Ladder(3, rungs=12), interpolate=True)
    w = torch.linspace(-1, 1, len(p), dtype=torch.float64)
    for _ in range(2):  # the second call reuses the cached F, LO tensors
        a.grad = None
        _, fracs, _ = plan_for(a, 200, Ladder(3, rungs=12), interpolate=True).kernel_inputs(a)
        (fracs * w).sum().backward()
        want = sum(float(w[c]) * f for c, (f, i) in enumerate(zip(p.f, p.interpolated)) if i)
        assert a.grad.item() == pytest.approx(want, rel=1e-14)
    # a moved α crosses a floor: a new plan, built for the new value
    moved = plan_for(0.83 + 0.01, 200, Ladder(3, rungs=12), interpolate=True)
    assert moved.lo != p.lo


def test_oracle_columns_are_the_plan_as_a_list():
    a = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    cols = plan_for(a, 1024, Ladder(8), interpolate=True).oracle_columns(a)
    p = plan_for(0.8, 1024, Ladder(8), interpolate=True)
    assert [d for d, _ in cols] == list(p.lo)
    assert [f is not None for _, f in cols] == list(p.interpolated)
    assert [float(f.detach()) for _, f in cols if f is not None] == pytest.approx(
        p.fracs[9:], abs=1e-12
    )
    (frac,) = [f for _, f in cols if f is not None][:1]
    frac.backward()  # on α's graph: d(α·f − lo)/dα = f of the first kept rung
    assert a.grad.item() == p.f[9]
    assert [d for d, _ in plan_for(0.5, 1024, Ladder(8)).oracle_columns()] == plan_for(
        0.5, 1024, Ladder(8)
    ).distances


def test_cli_offsets_interp_lists_the_plan(capsys):
    from fiblab.cli import main

    assert main(["offsets", "--alpha", "0.8", "--window", "8", "--interp"]) == 0
    out = capsys.readouterr().out
    assert ": 19" in out.splitlines()[0]
    los = [int(line.split()[0][3:]) for line in out.splitlines()[1:]]
    assert los == [10, 16, 27, 44, 71, 115, 186, 301, 488, 789]


# --------------------------------------------------------------------------------------------
# the property test: every consumer agrees with a brute force of the two rules
# --------------------------------------------------------------------------------------------
def brute_base(base, rungs, reach):
    if base == "fib":
        out = [1, 2]
        while len(out) < rungs:
            out.append(out[-1] + out[-2])
        return [float(f) for f in out[:rungs]]
    if base == "pow2":
        return [float(2**i) for i in range(64) if 2**i <= max(reach, 2) - 1]
    return [float(f) for f in base]


def brute_integer(alpha, W, T, fs, rounding, reach):
    r = {"round": round, "floor": math.floor, "ceil": math.ceil}[rounding]
    rung = {int(r(alpha * f)) for f in fs}
    return sorted(set(range(min(W, T - 1) + 1)) | {d for d in rung if W < d <= min(T, reach) - 1})


def brute_interp(alpha, W, T, fs, reach):
    """[(lo, interpolated)]: window, then the kept rungs in base order (the drop rule)."""
    used = set(range(min(W, T - 1) + 1))
    cols = [(d, False) for d in sorted(used)]
    for f in fs:
        x = alpha * f
        lo = math.floor(x)
        if round(x) <= W or lo > min(T, reach) - 1 or lo in used:
            continue
        used.add(lo)
        cols.append((lo, True))
    return cols


def brute_reads(cols, T):
    return sum(1 for t in range(T) for d, i in cols for r in range(2 if i else 1) if t >= d + r)


# exact values, half-integer products, and float32 values whose float32 products with a rung
# land on an integer that the exact product (and the double one) stays just below
F32_EDGES = [float(torch.tensor(n / f)) for n, f in ((15, 13), (17, 13), (25, 21), (21, 34))]
EDGE_ALPHAS = [0.5, 1.0, 1.5, 0.8, 0.5 + 10 / 15, 0.5 + 9 / 15, *F32_EDGES]


def draw(rng: random.Random) -> dict:
    learned = rng.random() < 0.35
    L = rng.choice([1, 2, 3])
    alphas = []
    for _ in range(L):
        a = rng.choice(EDGE_ALPHAS) if rng.random() < 0.4 else rng.uniform(0.5, 1.5)
        if learned:
            a = min(max(a, 0.52), 1.48)
        alphas.append(a)
    T = rng.choice([1, 2, 7, 33, 64, 97, 150, 230])
    kind = rng.choice(["fib", "fib", "pow2", "custom"])
    base = kind
    if kind == "custom":
        base = tuple(rng.sample([0.7, 1.5, 2.0, 3.3, 4.5, 9.0, 12.5, 20.0, 47.5, 90.0, 300.0], 5))
    reach = T if rng.random() < 0.6 else rng.randint(1, T)
    return dict(
        alphas=alphas,
        learned=learned,
        window=rng.randint(0, 10),
        rungs=rng.randint(1, 16),
        seq_len=T,
        base=base,
        rounding=rng.choice(["round", "floor", "ceil"]),
        reach=reach,
        path="auto" if learned else rng.choice(["auto", "auto", "interp"]),
    )


def config(case: dict) -> ModelConfig:
    sched = dict(schedule="learned", learned_init=tuple(case["alphas"]))
    if not case["learned"]:
        sched = dict(schedule=tuple(case["alphas"]))
    return ModelConfig(
        d_model=8,
        n_layers=len(case["alphas"]),
        n_heads=2,
        n_kv_heads=1,
        vocab_size=16,
        seq_len=case["seq_len"],
        base=case["base"],
        rungs=case["rungs"],
        window=case["window"],
        rounding=case["rounding"],
        path=case["path"],
        rung_policy="freeze",
        train_seq_len=case["reach"],
        **sched,
    )


@pytest.mark.parametrize("seed", range(40))
def test_every_consumer_agrees(seed, monkeypatch):
    case = draw(random.Random(seed))
    cfg = config(case)
    W, T, R, K = case["window"], case["seq_len"], case["reach"], case["rungs"]
    fs = brute_base(case["base"], K, R)
    assert cfg.rung_reach == R
    torch.manual_seed(seed)
    model = FibLM(cfg)
    alphas = model.alphas()  # learned: the float32 α the layers hold
    interp = cfg.interpolated
    assert interp == (case["learned"] or case["path"] == "interp")

    # the oracle columns of each layer
    if interp:
        want_cols = [brute_interp(a, W, T, fs, R) for a in alphas]
    else:
        want_cols = [
            [(d, False) for d in brute_integer(a, W, T, fs, case["rounding"], R)] for a in alphas
        ]
    want_sets = [brute_integer(a, W, T, fs, case["rounding"], R) for a in alphas]
    schedule_sets = [brute_integer(a, W, T, fs, case["rounding"], R) for a in cfg.layer_alphas()]

    # the plan itself
    plans = model.plans()
    assert [list(zip(p.lo, p.interpolated)) for p in plans] == want_cols
    assert cfg.layer_plans(alphas) == plans
    assert cfg.layer_plans() == plans  # a fresh model's stored α, without building one

    # the model's integer sets (of the α it holds) and the coverage counters (of the schedule's)
    assert cfg.attended_sets() == want_sets
    assert plan.layer_sets(
        cfg.layer_alphas(),
        T,
        Ladder(W, base=case["base"], rungs=K, rounding=case["rounding"], reach=R),
    ) == (schedule_sets)
    if R == T:  # coverage computes sets at the sequence length
        rep = coverage(
            cfg.layer_alphas(), T, Ladder(W, base=case["base"], rungs=K, rounding=case["rounding"])
        )
        assert rep["per_layer_sets"] == schedule_sets
        assert rep["per_layer"] == [len(s) for s in schedule_sets]
        assert rep["layers_per_distance"] == [sum(d in s for s in schedule_sets) for d in range(T)]
        assert rep["union"] == len(set().union(*schedule_sets))

    # the efficiency counts
    a = eff.analyze(cfg, alphas)
    assert a["columns"] == [len(c) for c in want_cols]
    assert a["union"] == eff.analyze(cfg)["union"] == len(set().union(*want_sets))  # model's α
    assert a["reads"] == [brute_reads(c, T) for c in want_cols]
    want_rows = [[(d, 2 if i else 1) for d, i in c] for c in want_cols]
    assert eff.layer_columns(cfg, alphas) == want_rows
    assert eff.layer_columns(cfg) == want_rows
    for p, c in zip(plans, want_cols):
        assert sum(p.reads_per_query()) == brute_reads(c, T)

    # the evaluation's attended columns
    assert attended_columns(model) == [sorted(d for d, _ in c) for c in want_cols]

    # the kernel's columns, spied on during a real forward
    seen = []
    real = kernels.columns_attention

    def spy(q, k, v, dists, fracs, scale, impl="auto", *, interpolated=None):
        seen.append((dists.tolist(), interpolated.tolist(), fracs.detach().double().tolist()))
        return real(q, k, v, dists, fracs, scale, impl, interpolated=interpolated)

    monkeypatch.setattr(kernels, "columns_attention", spy)
    monkeypatch.setenv(kernels.ENV, "torch")
    ids = torch.randint(0, 16, (1, T), generator=torch.Generator().manual_seed(seed))
    _, loss = model(ids, ids)
    assert [list(zip(d, i)) for d, i, _ in seen] == want_cols
    for (dists, flags, fracs), alpha in zip(seen, alphas):
        for lo, flag, frac in zip(dists, flags, fracs):
            # frac = α·f − lo in double, cast once to the model's float32; 0 for exact columns
            f = next((f for f in fs if math.floor(alpha * f) == lo), None) if flag else None
            want = 0.0 if f is None else float(torch.tensor(alpha * f - lo, dtype=torch.float32))
            assert frac == want
    loss.backward()  # the plan's fracs carry the graph through a real backward
    if case["learned"]:
        assert all(b.attn.theta.grad is not None for b in model.blocks)


def test_bad_input_names_the_value():
    cases = [
        (dict(alpha=float("nan")), "alpha=nan"),
        (dict(alpha=-1.0), "alpha=-1.0"),
        (dict(window=-1), "window W=-1"),
        (dict(window=True), "window W=True"),  # not the cached window=1 plan
        (dict(seq_len=0), "seq_len=0"),
        (dict(reach=0), "reach=0"),
        (dict(rounding="nearest"), "rounding='nearest'"),
        (dict(base="fibo"), "base='fibo'"),
        (dict(base=[3, 3]), "duplicate"),
    ]
    plan_for(1.0, 64, Ladder(1))  # window=1 in the cache
    for override, msg in cases:
        kw = dict(alpha=1.0, window=1, seq_len=64)
        kw.update(override)
        alpha, seq_len = kw.pop("alpha"), kw.pop("seq_len")
        with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace("[", r"\[")):
            plan_for(alpha, seq_len, Ladder(**kw))
    with pytest.raises(TypeError, match="ladder=8 must be a lab.ladder.offsets.Ladder"):
        plan_for(1.0, 64, 8)
    with pytest.raises(ValueError, match="one value"):
        plan_for(torch.ones(2), 64, Ladder(1))
    with pytest.raises(AttributeError):  # frozen
        plan_for(1.0, 64, Ladder(1)).lo = (0,)


def test_the_overhead_benchmark_runs(capsys, monkeypatch):
    """benchmarks/plan_overhead.py at the tiny preset: one row per schedule, cache on and off
    (a smoke run; the numbers are measured elsewhere)."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "plan_overhead.py")
    spec = importlib.util.spec_from_file_location("plan_overhead", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setenv(kernels.ENV, "torch")
    was = plan.cache_enabled()
    argv = ["--preset", "tiny", "--repeats", "1", "--iters", "2", "--schedules", "fixed", "learned"]
    assert mod.main(argv) == 0
    assert plan.cache_enabled() == was  # the switch is restored
    rows = capsys.readouterr().out.splitlines()
    from lab.machine.hardware import machine

    assert rows[0] == machine().line()  # the machine first (benchmarks/header.py)
    rows = rows[1:]
    assert rows[1].split()[:3] == ["schedule", "fwd", "on"]
    assert [r.split()[0] for r in rows[2:]] == ["fixed", "learned"]
    assert all(len(r.split()) == 7 for r in rows[2:])


def test_a_learned_configs_sets_are_those_of_the_alpha_its_model_holds():
    """A learned stagger at L=2 starts layer 1 at the clamp 1.45: 1.45·610 = 884.5 in float64
    rounds half-to-even to 884, but the float32 θ the model holds gives α a hair above 1.45, so
    the model's rung is 885.  `attended_sets` said 884 (the schedule's α, not the model's) while
    `layer_plans` used the model's; both now read the α a fresh model holds."""
    cfg = config_for(
        "tiny", seq_len=1024, window=8, rungs=15, schedule="learned", learned_init="stagger"
    )
    assert cfg.n_layers == 2
    held = FibLM(cfg).alphas()
    assert cfg.layer_alphas()[1] == 1.45 and held[1] > 1.45  # the float32 round trip
    assert round(1.45 * 610) == 884 and round(held[1] * 610) == 885
    sets = cfg.attended_sets()
    assert 885 in sets[1] and 884 not in sets[1]
    assert sets == plan.layer_sets(held, 1024, cfg.ladder)
