"""Edges of the offsets, plan and schedule functions: bad input named in the message, defaults,
the α ↔ θ map on tensors, custom α ranges, aliases.  Every expected value is written by hand.
"""

import math

import numpy as np
import pytest
import torch

from lab.ladder import plan
from lab.ladder.offsets import (
    Ladder,
    alpha_from_theta,
    fibonacci,
    integer_columns,
    interp_columns,
    powers_of_two,
    resolve_base,
    round_distance,
    scaled_rungs,
    theta_from_alpha,
)
from lab.ladder.plan import attended_distances, layer_sets, plan_for, rung_distances
from lab.ladder.schedules import (
    check_alphas,
    coprime_order,
    coprime_stride,
    layer_alphas,
    linear_stagger,
)

WINDOW9 = list(range(9))


# --------------------------------------------------------------------------------------------
# bases
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -3, 2.0, "5"])
def test_fibonacci_refuses_a_non_positive_or_non_integer_k(bad):
    with pytest.raises(ValueError, match=rf"rungs K={bad!r} must be a positive integer"):
        fibonacci(bad)


@pytest.mark.parametrize("bad", [1, 0, 3.0, "8"])
def test_powers_of_two_refuses_lengths_below_two(bad):
    with pytest.raises(ValueError, match=rf"reach={bad!r} must be an integer >= 2"):
        powers_of_two(bad)


def test_powers_of_two_small_reaches():
    assert powers_of_two(2) == [1] and powers_of_two(3) == [1, 2] and powers_of_two(5) == [1, 2, 4]
    assert powers_of_two(4) == [1, 2]  # 4 > reach − 1 = 3


def test_resolve_base_by_name_and_custom():
    assert resolve_base("fib", 4, 1024) == [1.0, 2.0, 3.0, 5.0]
    assert resolve_base("pow2", 99, 9) == [1.0, 2.0, 4.0, 8.0]  # K unused, reach decides
    assert resolve_base((7, 2.5, 30), 1, 2) == [7.0, 2.5, 30.0]  # order kept, K unused
    assert all(type(v) is float for v in resolve_base([3, 7], 1, 2))
    with pytest.raises(ValueError, match="at least one distance"):
        resolve_base([], 15, 1024)
    for bad in (True, 0, float("inf"), float("nan"), "3"):
        with pytest.raises(ValueError, match=rf"custom base distance {bad!r} must be a positive"):
            resolve_base([1, bad], 15, 1024)
    with pytest.raises(ValueError, match=r"duplicate distances \[4\]: list each"):
        resolve_base([4, 1, 4], 15, 1024)
    with pytest.raises(ValueError, match="base='log' is unknown: use 'fib', 'pow2'"):
        resolve_base("log", 15, 1024)


# --------------------------------------------------------------------------------------------
# α ↔ θ
# --------------------------------------------------------------------------------------------
def test_alpha_from_theta_by_hand_on_floats_and_tensors():
    # sigmoid(ln 3) = 3/4, sigmoid(−ln 3) = 1/4
    assert alpha_from_theta(math.log(3)) == pytest.approx(1.25, abs=1e-15)
    assert alpha_from_theta(-math.log(3)) == pytest.approx(0.75, abs=1e-15)
    assert alpha_from_theta(math.log(3), alpha_min=0.2, alpha_span=2.0) == pytest.approx(1.7)
    theta = torch.tensor([math.log(3), -math.log(3), 0.0], dtype=torch.float64)
    got = alpha_from_theta(theta)
    assert got.tolist() == pytest.approx([1.25, 0.75, 1.0], abs=1e-15)
    got = alpha_from_theta(theta, alpha_min=0.2, alpha_span=2.0)
    assert got.tolist() == pytest.approx([1.7, 0.7, 1.2], abs=1e-15)
    t = torch.tensor(0.0, requires_grad=True)
    alpha_from_theta(t).backward()
    assert t.grad.item() == 0.25  # α_span · σ'(0)


def test_theta_from_alpha_by_hand():
    assert theta_from_alpha(1.25) == pytest.approx(math.log(3), abs=1e-15)
    assert theta_from_alpha(0.75) == pytest.approx(-math.log(3), abs=1e-15)
    assert theta_from_alpha(1.7, alpha_min=0.2, alpha_span=2.0) == pytest.approx(math.log(3))
    msg = (
        r"alpha=1.5 must lie strictly inside \(0.5, 1.5\); start it inside \(the paper's "
        r"learned schedules start in \[0.55, 1.45\]\)"
    )
    with pytest.raises(ValueError, match=msg):
        theta_from_alpha(1.5)
    with pytest.raises(ValueError, match=r"\(0.2, 2.2\)"):
        theta_from_alpha(2.2, alpha_min=0.2, alpha_span=2.0)


# --------------------------------------------------------------------------------------------
# validation and rounding
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,msg",
    [
        (dict(window=1.5), r"window W=1.5 must be an integer >= 0 \(distance 0 is self\)"),
        (dict(window=True), r"window W=True must be"),
        (
            dict(alpha="1"),
            r"alpha='1' must be a positive finite number \(the paper's range is \[0.5, 1.5\]\)",
        ),
        (dict(alpha=float("inf")), r"alpha=inf must be"),
        (dict(seq_len=True), r"seq_len=True must be a positive integer"),
        (dict(seq_len=8.0), r"seq_len=8.0 must be a positive integer"),
        (dict(reach=0), r"reach=0 must be a positive integer"),
        (dict(reach=True), r"reach=True must be a positive integer"),
        (dict(reach=4.0), r"reach=4.0 must be a positive integer"),
        (
            dict(rounding="nearest"),
            r"rounding='nearest' is unknown: use one of \('round', 'floor', 'ceil'\)",
        ),
    ],
)
def test_set_builders_name_the_bad_value(kwargs, msg):
    args = {**dict(alpha=1.0, window=2, seq_len=64), **kwargs}
    alpha, seq_len = args.pop("alpha"), args.pop("seq_len")
    with pytest.raises(ValueError, match=msg):
        rung_distances(alpha, seq_len, Ladder(**args))
    with pytest.raises(ValueError, match=msg):
        plan_for(alpha, seq_len, Ladder(**args))


def test_integer_and_interp_columns_check_their_lengths():
    for fn in (integer_columns, interp_columns):
        with pytest.raises(ValueError, match="window W=-1"):
            fn([3.0], 64, Ladder(-1))
        with pytest.raises(ValueError, match="seq_len=0 must be a positive integer"):
            fn([3.0], 0, Ladder(2))
    with pytest.raises(ValueError, match="reach=0 must be a positive integer"):
        integer_columns([3.0], 64, Ladder(2, reach=0))
    with pytest.raises(ValueError, match="rounding='up'"):
        integer_columns([3.6], 64, Ladder(2, rounding="up"))


def test_round_distance_conventions_by_hand():
    assert [round_distance(x) for x in (2.5, 3.5, 2.4999, 7.0)] == [2, 4, 2, 7]
    assert [round_distance(x, "floor") for x in (2.5, 3.99, 7.0)] == [2, 3, 7]
    assert [round_distance(x, "ceil") for x in (2.5, 3.01, 7.0)] == [3, 4, 7]
    assert all(type(round_distance(2.5, r)) is int for r in ("round", "floor", "ceil"))
    with pytest.raises(ValueError, match=r"rounding='up' is unknown: use one of \('round'"):
        round_distance(2.5, "up")


def test_scaled_rungs_and_columns_by_hand():
    assert scaled_rungs(0.5, [1.0, 3.0, 13.0]) == [0.5, 1.5, 6.5]
    assert scaled_rungs(1, [4.0]) == [4.0] and type(scaled_rungs(1, [4])[0]) is float
    with pytest.raises(ValueError, match="alpha=0"):
        scaled_rungs(0, [1.0])
    # W=2, T=20: 1.5 → 2 is in the window, 3.5 → 4, 4.4 → 4 merges, 19.2 → 19 is T − 1,
    # 20.4 → 20 is past it; with reach 10 only 4 survives
    targets = [1.5, 3.5, 4.4, 19.2, 20.4]
    assert integer_columns(targets, 20, Ladder(2)) == [(1, 4), (3, 19)]
    assert integer_columns(targets, 20, Ladder(2, reach=10)) == [(1, 4)]
    assert integer_columns(targets, 20, Ladder(2, rounding="ceil")) == [
        (1, 4),
        (2, 5),
    ]  # 20, 21 past
    # interpolated: 3.5 → lo 3, 4.4 → lo 4, 19.2 → lo 19; 1.5 rounds into the window
    assert interp_columns(targets, 20, Ladder(2)) == [(1, 3), (2, 4), (3, 19)]
    assert interp_columns(targets, 20, Ladder(2, reach=5)) == [(1, 3), (2, 4)]
    assert interp_columns([25.0], 20, Ladder(2, reach=40)) == []  # reach beyond T: T still caps


def test_rung_and_attended_defaults():
    # defaults: fib, K=15, round, reach = T
    assert rung_distances(1.0, 1024, Ladder(8)) == [13, 21, 34, 55, 89, 144, 233, 377, 610, 987]
    assert rung_distances(1.0, 1024, Ladder(8, rungs=5)) == []
    assert rung_distances(1.0, 2, Ladder(0, base="pow2")) == [1]  # pow2 at T=2: the base {1}
    assert attended_distances(1.0, 2, Ladder(0)) == [0, 1]  # the rung 1 is T − 1
    assert attended_distances(1.5, 2, Ladder(0)) == [0]  # 1.5 → 2 (half-even) is past T − 1
    assert attended_distances(0.5, 3, Ladder(0)) == [0, 1, 2]  # 0.5·2 = 1, 0.5·3 → 2 (half-even)
    assert attended_distances(1.0, 1024, Ladder(8, reach=100))[9:] == [13, 21, 34, 55, 89]


# --------------------------------------------------------------------------------------------
# the plan record
# --------------------------------------------------------------------------------------------
def test_plan_record_fields_by_hand():
    p = plan_for(1.0, 10, Ladder(2, base=[2.5, 4, 9, 30]))  # round(2.5) = 2 lands in the window
    assert p.lo == (0, 1, 2, 4, 9) and p.rung == (-1, -1, -1, 1, 2)
    assert p.f == (0.0, 0.0, 0.0, 4.0, 9.0) and p.interpolated == (False,) * 5
    assert (p.seq_len, p.reach, p.interpolate) == (10, 10, False)
    assert p.ladder == Ladder(2, base=(2.5, 4, 9, 30)) and p.ladder.reach is None
    assert p.alpha == 1.0 and type(p.alpha) is float
    assert len(p) == 5 and p.n_window == 3 and p.fracs == (0.0,) * 5
    assert p.columns() == [(0, 1), (1, 1), (2, 1), (4, 1), (9, 1)]
    assert p.reads_per_query() == [1, 2, 3, 3, 4, 4, 4, 4, 4, 5] and p.reads() == 34
    q = plan_for(1.0, 10, Ladder(2, base=[2.5, 4, 9, 30]), interpolate=True)  # lo 2 taken: dropped
    assert q.lo == (0, 1, 2, 4, 9) and q.interpolated == (False,) * 3 + (True,) * 2
    assert q.columns()[3:] == [(4, 2), (9, 2)]
    assert q.reads_per_query() == [1, 2, 3, 3, 4, 5, 5, 5, 5, 6]
    w = plan_for(1.0, 5, Ladder(20))  # a window wider than T
    assert w.n_window == 5 and w.lo == (0, 1, 2, 3, 4) and w.rung == (-1,) * 5
    f = plan_for(0.75, 30, Ladder(0, base=[10, 3]), interpolate=True)  # 7.5 and 2.25, base order
    assert f.lo == (0, 7, 2) and f.rung == (-1, 0, 1) and f.distances == [0, 2, 7]
    assert f.fracs == (0.0, 0.5, 0.25) and f.f == (0.0, 10.0, 3.0)


def test_plan_for_reads_numbers_and_tensors():
    want = plan_for(0.75, 40, Ladder(2))
    assert (
        plan_for(np.float64(0.75), 40, Ladder(2)) == want and plan_for(3 / 4, 40, Ladder(2)) is want
    )
    assert plan_for(torch.tensor(0.75, dtype=torch.float64), 40, Ladder(2)) == want
    assert plan_for(torch.tensor([0.75]), 40, Ladder(2)) == want  # one value, any shape
    assert plan_for(1, 40, Ladder(2)) is plan_for(1.0, 40, Ladder(2))  # an int α is its float
    with pytest.raises(
        ValueError, match=r"alpha tensor must hold one value \(0-d\); got shape \(2, 1\)"
    ):
        plan_for(torch.ones(2, 1), 40, Ladder(2))
    assert plan_for(0.75, 40, Ladder(2, reach=20)).reach == 20 and want.reach == 40


def test_kernel_inputs_by_hand():
    p = plan_for(0.75, 30, Ladder(0, base=[10, 3]), interpolate=True)
    dists, fracs, interp = p.kernel_inputs()
    assert dists.tolist() == [0, 7, 2] and dists.dtype == torch.int64
    assert interp.tolist() == [False, True, True] and interp.dtype == torch.bool
    assert fracs.tolist() == [0.0, 0.5, 0.25] and fracs.dtype == torch.float32
    _, f64, _ = p.kernel_inputs(dtype=torch.float64, device="cpu")
    assert f64.dtype == torch.float64 and f64.device.type == "cpu"
    a = torch.tensor(0.75, dtype=torch.float64, requires_grad=True)
    _, fa, _ = p.kernel_inputs(a)
    assert fa.dtype == torch.float64 and fa.tolist() == [0.0, 0.5, 0.25]
    fa.sum().backward()
    assert a.grad.item() == 13.0  # d/dα of (10α − 7) + (3α − 2)
    b = torch.tensor(0.75, dtype=torch.float64, requires_grad=True)
    _, fb, _ = p.kernel_inputs(b, dtype=torch.float32)
    assert fb.dtype == torch.float32 and fb.tolist() == [0.0, 0.5, 0.25]
    (fb * torch.tensor([5.0, 1.0, 2.0])).sum().backward()
    assert b.grad.item() == 16.0  # 10·1 + 3·2, the window column carries no α


def test_layer_sets_defaults():
    assert layer_sets([1.0, 0.5], 1024, Ladder(8)) == [
        WINDOW9 + [13, 21, 34, 55, 89, 144, 233, 377, 610, 987],
        WINDOW9 + [10, 17, 28, 44, 72, 116, 188, 305, 494],
    ]
    assert layer_sets([1.0], 1024, Ladder(8, reach=100)) == [WINDOW9 + [13, 21, 34, 55, 89]]
    assert layer_sets([0.5], 1024, Ladder(8, rounding="floor"))[0][9:] == [
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
    assert layer_sets([1.0], 40, Ladder(2, base="pow2", rungs=1)) == [[0, 1, 2, 4, 8, 16, 32]]


def test_cache_switch_reports_its_state():
    was = plan.cache_enabled()
    try:
        assert plan.set_cache_enabled(False) is was
        assert plan.cache_enabled() is False
        assert plan.set_cache_enabled(1) is False and plan.cache_enabled() is True
        plan.clear_cache()
        plan_for(0.61, 50, Ladder(3))
        plan_for(0.61, 50, Ladder(3))
        info = plan.cache_info()
        assert (info.hits, info.misses, info.currsize) == (1, 1, 1)
    finally:
        plan.set_cache_enabled(was)


# --------------------------------------------------------------------------------------------
# schedules
# --------------------------------------------------------------------------------------------
def test_coprime_stride_by_brute_force():
    for L in range(1, 40):
        want = max((s for s in range(2, L // 2 + 1) if math.gcd(s, L) == 1), default=1)
        assert coprime_stride(L) == want
    assert [coprime_stride(L) for L in (5, 6, 9, 12)] == [2, 1, 4, 5]
    with pytest.raises(ValueError, match="n_layers=0 must be a positive integer"):
        coprime_stride(0)
    with pytest.raises(ValueError, match="n_layers=True"):
        coprime_stride(True)
    with pytest.raises(ValueError, match="n_layers=2.0"):
        coprime_stride(2.0)


def test_linear_stagger_custom_range_by_hand():
    assert linear_stagger(3) == [0.5, 1.0, 1.5]
    assert linear_stagger(5, alpha_min=0.2, alpha_span=2.0) == pytest.approx(
        [0.2, 0.7, 1.2, 1.7, 2.2]
    )
    assert linear_stagger(1, alpha_min=0.2, alpha_span=2.0) == [1.2]
    assert layer_alphas("linear", 3) == [0.5, 1.0, 1.5]
    assert layer_alphas("stagger", 3, alpha_min=0.2, alpha_span=2.0) == [0.2, 1.2, 2.2]
    assert layer_alphas("hdc", 5) == [0.5, 1.0, 1.5, 0.75, 1.25]  # S=2: slots 0, 2, 4, 1, 3
    assert layer_alphas("coprime", 5, alpha_min=0.2, alpha_span=2.0) == pytest.approx(
        [0.2, 1.2, 2.2, 0.7, 1.7]
    )
    assert layer_alphas("coprime", 5, stride=3) == [0.5, 1.25, 0.75, 1.5, 1.0]  # 0, 3, 1, 4, 2


@pytest.mark.parametrize("bad", [0, 2, True, 2.0, -1])
def test_coprime_order_refuses_a_bad_stride(bad):
    with pytest.raises(
        ValueError,
        match=rf"coprime stride S={bad!r} must be a positive integer with gcd\(S, 4\) = 1",
    ):
        coprime_order(4, stride=bad)


def test_coprime_order_accepts_stride_one():
    assert coprime_order(4, stride=1) == [0, 1, 2, 3] and coprime_order(4, stride=3) == [0, 3, 2, 1]


def test_check_alphas_ranges_and_messages():
    assert check_alphas([0.5, 1.5], 2) == [0.5, 1.5]  # closed interval
    assert check_alphas((1, 2.0), 2, alpha_min=1.0, alpha_span=1.0) == [1.0, 2.0]
    assert all(type(a) is float for a in check_alphas([1, 1], 2))
    with pytest.raises(
        ValueError,
        match=r"alpha=0.5 at layer 1 must be strictly inside \[0.5, 1.5\] \(a learned alpha cannot sit on a sigmoid asymptote\)",
    ):
        check_alphas([1.0, 0.5], 2, open_interval=True)
    with pytest.raises(ValueError, match=r"alpha=1.5 at layer 0 must be strictly inside"):
        check_alphas([1.5, 1.0], 2, open_interval=True)
    with pytest.raises(ValueError, match=r"alpha=0.49 at layer 0 must be in \[0.5, 1.5\]$"):
        check_alphas([0.49], 1)
    with pytest.raises(ValueError, match=r"alpha=nan at layer 0"):
        check_alphas([float("nan")], 1)
    with pytest.raises(ValueError, match=r"alpha=2.5 at layer 0 must be in \[1.0, 2.0\]"):
        check_alphas([2.5], 1, alpha_min=1.0, alpha_span=1.0)
    with pytest.raises(
        ValueError,
        match="a custom schedule has 1 value but the model has 2 layers: give one alpha per layer",
    ):
        check_alphas([1.0], 2)
    assert layer_alphas([2.0], 1, alpha_min=1.0, alpha_span=1.0) == [2.0]


def test_learned_schedule_starts_by_hand():
    assert layer_alphas("learned", 3, init="stagger") == [0.55, 1.0, 1.45]
    assert layer_alphas("learned", 3, init="coprime") == [0.55, 1.0, 1.45]  # L=3: S=1
    assert layer_alphas("learned", 5, init="coprime", stride=3) == [0.55, 1.25, 0.75, 1.45, 1.0]
    custom = layer_alphas("learned", 3, init="stagger", alpha_min=0.2, alpha_span=2.0)
    assert custom == pytest.approx([0.25, 1.2, 2.15])
    assert layer_alphas("learned", 2, init=[0.6, 1.4]) == [0.6, 1.4]  # kept, not clamped
    assert layer_alphas("learned", 1, init=[2.0], alpha_min=1.0, alpha_span=2.0) == [2.0]
    with pytest.raises(ValueError, match="init='learned' is circular"):
        layer_alphas("learned", 2, init="learned")
    with pytest.raises(ValueError, match="strictly inside"):
        layer_alphas("learned", 2, init=[0.5, 1.0])
    with pytest.raises(
        ValueError,
        match=r"schedule='zigzag' is unknown: use one of \('fixed', 'stagger', 'coprime', 'learned'\) or a list of 3 alphas",
    ):
        layer_alphas("zigzag", 3)


# --------------------------------------------------------------------------------------------
# the ladder record
# --------------------------------------------------------------------------------------------
def test_ladder_record_by_hand():
    lad = Ladder(8, base=[3, 1, 2])  # a custom base, order kept, stored as a tuple
    assert lad.base == (3, 1, 2) and hash(lad) == hash(Ladder(8, base=(3, 1, 2)))
    assert (lad.reach_at(64), lad.limit(64)) == (64, 63)
    frozen = Ladder(8, reach=100)
    assert (frozen.reach_at(4096), frozen.limit(4096), frozen.limit(50)) == (100, 99, 49)
    assert Ladder(0, base="pow2", reach=9).values(4096) == [1.0, 2.0, 4.0, 8.0]
    assert Ladder(0, rungs=4).values(2) == [1.0, 2.0, 3.0, 5.0]
    with pytest.raises(AttributeError):  # frozen: it keys the plan cache
        lad.window = 2
    # equal records reach the same cached plan
    assert plan_for(1.0, 64, Ladder(2, rungs=6)) is plan_for(1.0, 64, Ladder(2, rungs=6))


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        (dict(window=-1), r"window W=-1 must be an integer >= 0"),
        (dict(window=2, base="log"), r"base='log' is unknown"),
        (dict(window=2, base=[]), r"at least one distance"),
        (dict(window=2, rungs=0), r"rungs K=0 must be a positive integer"),
        (dict(window=2, rounding="up"), r"rounding='up' is unknown"),
        (dict(window=2, reach=0), r"reach=0 must be a positive integer"),
    ],
)
def test_ladder_refuses_bad_settings_when_built(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        Ladder(**kwargs)


def test_model_config_ladder_is_its_fields():
    from lab.lm.modelconfig import config_for

    cfg = config_for("tiny", window=3, base="pow2", rounding="floor")
    assert cfg.ladder == Ladder(3, base="pow2", rungs=cfg.rungs, rounding="floor", reach=64)
    assert cfg.ladder is cfg.ladder  # built once: every layer's forward reads it
    longer = config_for(cfg, seq_len=256, train_seq_len=64, rung_policy="freeze")
    assert longer.ladder.reach == 64 and config_for(cfg, seq_len=256).ladder.reach == 256
