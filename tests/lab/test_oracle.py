"""The float64 oracle (`lab.kernels.oracle`) on cases worked by hand.

T = 3, D = 1, one head, scale 1: q = [1, 1, 1], k = [0, ln 3, 0], v = [4, 8, 12].  With the
columns {0, 1}: t = 0 reads row 0 only (4); t = 1 weighs row 1 by e^{ln 3} = 3 and row 0 by 1
(3/4·8 + 1/4·4 = 7); t = 2 weighs row 2 by 1 and row 1 by 3 (1/4·12 + 3/4·8 = 9).
"""

import math

import pytest
import torch

from lab.kernels.oracle import oracle_attention

LN3 = math.log(3.0)


def _tiny(dtype=torch.float64):
    q = torch.tensor([1.0, 1.0, 1.0], dtype=dtype).view(1, 1, 3, 1)
    k = torch.tensor([0.0, LN3, 0.0], dtype=dtype).view(1, 1, 3, 1)
    v = torch.tensor([4.0, 8.0, 12.0], dtype=dtype).view(1, 1, 3, 1)
    return q, k, v


def _flat(out):
    return out.reshape(-1).tolist()


def test_integer_columns_by_hand():
    out = oracle_attention(*_tiny(), [(0, None), (1, None)], scale=1.0)
    assert out.dtype == torch.float64 and out.shape == (1, 1, 3, 1)
    assert _flat(out) == pytest.approx([4.0, 7.0, 9.0], abs=1e-12)


def test_zero_frac_is_an_integer_column_and_inputs_are_promoted():
    a = oracle_attention(*_tiny(torch.float32), [(0, 0.0), (1, 0)], scale=1.0)
    assert a.dtype == torch.float64
    assert _flat(a) == pytest.approx([4.0, 7.0, 9.0], abs=1e-6)


def test_no_valid_column_outputs_zero_and_no_gradient():
    """Only the column at distance 1 (frac 1/2): t = 0 reads nothing -> 0; t = 1 blends rows
    0 and max(−1, 0) = 0 -> 4; t = 2 blends rows 1 and 0 -> 6."""
    q, k, v = (x.clone().requires_grad_() for x in _tiny())
    out = oracle_attention(q, k, v, [(1, 0.5)], scale=1.0)
    assert _flat(out) == pytest.approx([0.0, 4.0, 6.0], abs=1e-12)
    (dq,) = torch.autograd.grad(out.sum(), q)
    assert dq[0, 0, 0, 0] == 0 and torch.isfinite(dq).all()
    # a column past the end is read by no query at all
    assert _flat(oracle_attention(*_tiny(), [(3, None)])) == [0.0, 0.0, 0.0]


def test_interpolated_column_by_hand():
    """Columns {0, (1, 1/2)}: t = 2 weighs row 2 (logit 0) by 1 and the blend ½·row1 + ½·row0
    (logit ln3/2) by √3, values 12 and 6."""
    out = oracle_attention(*_tiny(), [(0, None), (1, 0.5)], scale=1.0)
    r3 = math.sqrt(3.0)
    assert _flat(out) == pytest.approx([4.0, 7.0, (12 + 6 * r3) / (1 + r3)], abs=1e-12)


def test_a_repeated_column_counts_twice():
    out = oracle_attention(*_tiny(), [(0, None), (0, None), (1, None)], scale=1.0)
    assert _flat(out)[1] == pytest.approx(6 / 7 * 8 + 1 / 7 * 4, abs=1e-12)


def test_frac_gradient_by_hand():
    """t = 1 alone, columns {(1, f)}: one column, so out = the blended value (1−f)·4 + f·4 = 4 at
    t = 1 and (1−f)·8 + f·4 at t = 2: d out[2]/df = 4 − 8 = −4."""
    f = torch.tensor(0.25, dtype=torch.float64, requires_grad=True)
    out = oracle_attention(*_tiny(), [(1, f)], scale=1.0)
    (df,) = torch.autograd.grad(out[0, 0, 2, 0], f)
    assert df.item() == pytest.approx(-4.0, abs=1e-12)


def test_gqa_head_reads_its_kv_head():
    """H = 4, KV = 2: heads 2 and 3 read KV head 1, equal to a one-head run on that KV head."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 6, 3, generator=g, dtype=torch.float64)
    k = torch.randn(2, 2, 6, 3, generator=g, dtype=torch.float64)
    v = torch.randn(2, 2, 6, 3, generator=g, dtype=torch.float64)
    cols = [(0, None), (2, 0.3), (5, None)]
    out = oracle_attention(q, k, v, cols)
    for h in range(4):
        kv = h // 2
        one = oracle_attention(q[:, h : h + 1], k[:, kv : kv + 1], v[:, kv : kv + 1], cols)
        assert torch.equal(out[:, h : h + 1], one)
    assert not torch.allclose(out[:, 1], out[:, 2])


def test_bad_input():
    q, k, v = _tiny()
    with pytest.raises(ValueError, match="columns is empty"):
        oracle_attention(q, k, v, [])
    with pytest.raises(ValueError, match="distance -1"):
        oracle_attention(q, k, v, [(-1, None)])
    with pytest.raises(ValueError, match="n_heads=3"):
        oracle_attention(q.expand(1, 3, 3, 1), k.expand(1, 2, 3, 1), v.expand(1, 2, 3, 1), [(0, 0)])
