"""Per-layer α schedules against SPEC §2.7's table (copied here)."""

import pytest

from lab.ladder.schedules import coprime_order, coprime_stride, layer_alphas

LINEAR16 = [
    0.5,
    0.5667,
    0.6333,
    0.7,
    0.7667,
    0.8333,
    0.9,
    0.9667,
    1.0333,
    1.1,
    1.1667,
    1.2333,
    1.3,
    1.3667,
    1.4333,
    1.5,
]
HDC16 = [
    0.5,
    0.9667,
    1.4333,
    0.8333,
    1.3,
    0.7,
    1.1667,
    0.5667,
    1.0333,
    1.5,
    0.9,
    1.3667,
    0.7667,
    1.2333,
    0.6333,
    1.1,
]


def test_linear_and_coprime_at_16_layers():
    assert [round(a, 4) for a in layer_alphas("stagger", 16)] == LINEAR16
    assert coprime_stride(16) == 7 and coprime_stride(8) == 3
    assert coprime_order(16) == [0, 7, 14, 5, 12, 3, 10, 1, 8, 15, 6, 13, 4, 11, 2, 9]
    assert [round(a, 4) for a in layer_alphas("coprime", 16)] == HDC16
    assert sorted(layer_alphas("coprime", 16)) == layer_alphas("stagger", 16)


def test_fixed_and_learned_init():
    assert layer_alphas("fixed", 16) == [1.0] * 16
    assert layer_alphas("learned", 4) == [1.0] * 4
    # a staggered start is clamped into [0.55, 1.45] as the paper's probes did
    assert layer_alphas("learned", 2, init="stagger") == [0.55, 1.45]
    with pytest.raises(ValueError, match="1.5"):
        layer_alphas("learned", 2, init=[0.7, 1.5])


def test_small_depths():
    assert layer_alphas("stagger", 1) == [1.0] and layer_alphas("coprime", 1) == [1.0]
    assert layer_alphas("stagger", 2) == [0.5, 1.5] == layer_alphas("coprime", 2)
    assert coprime_stride(4) == 1 and layer_alphas("coprime", 4) == layer_alphas("stagger", 4)
    assert layer_alphas("coprime", 5) == [layer_alphas("stagger", 5)[(2 * i) % 5] for i in range(5)]


def test_stride_settable_and_checked():
    assert coprime_order(16, stride=3) == [(3 * i) % 16 for i in range(16)]
    with pytest.raises(ValueError, match="S=4"):
        layer_alphas("coprime", 16, stride=4)


def test_custom_lists_validated():
    assert layer_alphas([0.5, 1.0, 1.5], 3) == [0.5, 1.0, 1.5]
    with pytest.raises(ValueError, match="2 values"):
        layer_alphas([1.0, 1.0], 3)
    with pytest.raises(ValueError, match="1.6"):
        layer_alphas([1.0, 1.6, 1.0], 3)
    with pytest.raises(ValueError, match="'zigzag'"):
        layer_alphas("zigzag", 3)
    with pytest.raises(ValueError, match="n_layers=0"):
        layer_alphas("fixed", 0)


def test_coprime_is_the_stagger_exactly_where_no_stride_is_coprime():
    from lab.ladder.schedules import coprime_is_stagger

    # by hand: L=4 → strides 2 (gcd 2) only, so S = 1; L=6 → 2, 3 share factors; L=5 → S = 2
    assert [L for L in range(1, 11) if coprime_is_stagger("coprime", L)] == [1, 2, 3, 4, 6]
    assert not coprime_is_stagger("coprime", 16) and not coprime_is_stagger("stagger", 4)
    assert not coprime_is_stagger("coprime", 4, stride=3)  # ℓ ↦ 3ℓ mod 4: the reversed ramp
    assert not coprime_is_stagger([0.5, 1.5], 2)
