"""Every attention path against the float64 oracle (`lab.kernels.oracle`).

* integer paths (shift, mask, dense) vs the oracle over the attended distances;
* interp vs the oracle over interpolated columns, with the paper's column rule re-implemented
  here;
* dLoss/dα vs finite differences.
"""

import math

import pytest
import torch
from memtrace import MaxNumel

from lab.kernels.oracle import oracle_attention
from lab.ladder.offsets import Ladder, fibonacci, powers_of_two
from lab.ladder.plan import attended_distances
from lab.sparse.attention import sparse_attention


def make_qkv(B, H, KV, T, D, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, T, D, generator=g, dtype=dtype),
        torch.randn(B, KV, T, D, generator=g, dtype=dtype),
        torch.randn(B, KV, T, D, generator=g, dtype=dtype),
    )


def oracle_integer(q, k, v, distances):
    """The float64 oracle over exactly the columns {t − d : d in distances, d <= t}."""
    return oracle_attention(q, k, v, [(d, None) for d in distances])


def oracle_interp(q, k, v, alpha, window, base):
    """The float64 oracle over the window plus each kept rung's interpolated column, with the
    paper's column rule written out here: a rung f is dropped when round(α·f) ≤ W, when
    floor(α·f) > T − 1 or when its floor is already taken."""
    T = q.shape[2]
    used = set(range(min(window, T - 1) + 1))
    cols = [(d, None) for d in sorted(used)]
    for f in base:
        x = alpha * f
        lo = math.floor(x)
        if round(x) <= window or lo > T - 1 or lo in used:
            continue
        used.add(lo)
        cols.append((lo, x - lo))
    return oracle_attention(q, k, v, cols)


CASES = [  # (window, alpha, base, rungs, T)
    (0, 1.0, "fib", 8, 20),
    (3, 0.5, "fib", 8, 80),
    (3, 0.77, "fib", 8, 80),
    (8, 1.5, "fib", 8, 80),
    (8, 1.23, "fib", 8, 30),
    (2, 1.0, "pow2", 15, 70),
    (5, 0.66, "pow2", 15, 70),
    (6, 1.5, "fib", 15, 40),
]


@pytest.mark.parametrize("W,alpha,base,rungs,T", CASES)
@pytest.mark.parametrize("H,KV", [(4, 4), (4, 2), (8, 2)])
@pytest.mark.parametrize("path", ["shift", "mask"])
def test_integer_paths_match_oracle(W, alpha, base, rungs, T, H, KV, path):
    q, k, v = make_qkv(2, H, KV, T, 8, seed=T + W)
    dists = attended_distances(alpha, T, Ladder(W, base=base, rungs=rungs))
    got = sparse_attention(
        q, k, v, alpha=alpha, ladder=Ladder(W, base=base, rungs=rungs), path=path
    )
    assert got.shape == q.shape
    assert (got.double() - oracle_integer(q, k, v, dists)).abs().max() <= 1e-5


def test_longer_than_largest_rung_full_base():
    # T = 1100 exceeds the largest fib rung 987; alpha = 0.5 sets and GQA 4
    q, k, v = make_qkv(1, 4, 1, 1100, 4, seed=3)
    for alpha in (0.5, 1.0):
        dists = attended_distances(alpha, 1100, Ladder(8))
        assert max(dists) in (494, 987)
        ref = oracle_integer(q, k, v, dists)
        for path in ("shift", "mask"):
            got = sparse_attention(q, k, v, alpha=alpha, ladder=Ladder(8), path=path)
            assert (got.double() - ref).abs().max() <= 1e-5


@pytest.mark.parametrize("alpha", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("base", ["fib", "pow2"])
def test_interp_equals_integer_paths_at_integer_offsets(alpha, base):
    q, k, v = make_qkv(2, 4, 2, 90, 8, seed=7)
    a = torch.tensor(alpha, dtype=torch.float64, requires_grad=True)
    got = sparse_attention(q, k, v, alpha=a, ladder=Ladder(4, base=base, rungs=10))
    ref = sparse_attention(q, k, v, alpha=alpha, ladder=Ladder(4, base=base, rungs=10), path="mask")
    assert (got - ref).abs().max() <= 1e-5


@pytest.mark.parametrize(
    "alpha,W,base", [(0.5, 3, "fib"), (0.77, 2, "fib"), (1.37, 4, "fib"), (0.9, 1, "pow2")]
)
@pytest.mark.parametrize("H,KV", [(2, 2), (4, 1)])
def test_interp_matches_float64_oracle(alpha, W, base, H, KV):
    T = 40
    q, k, v = make_qkv(1, H, KV, T, 4, seed=11, dtype=torch.float64)
    fbase = fibonacci(9) if base == "fib" else powers_of_two(T)
    got = sparse_attention(
        q,
        k,
        v,
        alpha=torch.tensor(alpha, dtype=torch.float64),
        ladder=Ladder(W, base=base, rungs=9),
    )
    assert (got - oracle_interp(q, k, v, alpha, W, fbase)).abs().max() <= 1e-10


def _loss(alpha, q, k, v, W, w_out):
    out = sparse_attention(q, k, v, alpha=alpha, ladder=Ladder(W, rungs=10))
    return (out * w_out).sum()


@pytest.mark.parametrize("alpha0", [0.77, 1.13, 0.61])
def test_alpha_gradient_matches_central_differences(alpha0):
    q, k, v = make_qkv(2, 4, 2, 120, 8, seed=5, dtype=torch.float64)
    w_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    a = torch.tensor(alpha0, dtype=torch.float64, requires_grad=True)
    _loss(a, q, k, v, 3, w_out).backward()
    h = 1e-6
    up = _loss(torch.tensor(alpha0 + h, dtype=torch.float64), q, k, v, 3, w_out)
    dn = _loss(torch.tensor(alpha0 - h, dtype=torch.float64), q, k, v, 3, w_out)
    fd = (up - dn).item() / (2 * h)
    assert abs(fd) > 1e-3
    assert abs(a.grad.item() - fd) <= 0.01 * abs(fd)


def test_alpha_gradient_nonzero_at_integer_alpha():
    # at alpha = 1 every alpha*f is an integer; the column set is constant on [1, 1 + eps), so the
    # autograd gradient must match the one-sided difference and be non-zero
    q, k, v = make_qkv(2, 4, 2, 120, 8, seed=6, dtype=torch.float64)
    w_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    a = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    base_loss = _loss(a, q, k, v, 3, w_out)
    base_loss.backward()
    h = 1e-7
    fd = (
        _loss(torch.tensor(1.0 + h, dtype=torch.float64), q, k, v, 3, w_out) - base_loss
    ).item() / h
    assert abs(a.grad.item()) > 1e-3
    assert abs(a.grad.item() - fd) <= 0.01 * abs(fd)


def test_dense_path_is_causal_attention():
    q, k, v = make_qkv(1, 4, 2, 33, 8)
    got = sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(0), path="dense")
    assert (got.double() - oracle_integer(q, k, v, range(33))).abs().max() <= 1e-5


def test_masked_keys_leak_nothing():
    # huge keys and values at a non-attended distance must not change the output
    q, k, v = make_qkv(1, 2, 2, 64, 8)
    dists = attended_distances(1.0, 64, Ladder(2, rungs=8))
    assert 4 not in dists
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 59], v2[:, :, 59] = 1e4, 1e6  # distance 4 from t=63
    for path in ("shift", "mask", "interp"):
        a = torch.tensor(1.0) if path == "interp" else 1.0
        o1 = sparse_attention(q, k, v, alpha=a, ladder=Ladder(2, rungs=8), path=path)
        o2 = sparse_attention(q, k2, v2, alpha=a, ladder=Ladder(2, rungs=8), path=path)
        assert torch.equal(o1[:, :, 63], o2[:, :, 63])
        assert torch.isfinite(o2).all()


def test_first_position_attends_only_itself():
    q, k, v = make_qkv(1, 2, 1, 16, 4)
    for path in ("shift", "mask", "interp"):
        a = torch.tensor(0.8) if path == "interp" else 0.8
        out = sparse_attention(q, k, v, alpha=a, ladder=Ladder(0, rungs=6), path=path)
        assert torch.allclose(out[:, :, 0], v[:, 0:1, 0].expand(1, 2, 4), atol=1e-6)


@pytest.mark.parametrize("learned", [False, True])
def test_shift_and_interp_memory_is_linear_in_T(learned):
    sizes = {}
    for T in (1024, 2048):
        q, k, v = make_qkv(1, 2, 1, T, 8)
        q.requires_grad_(True)
        a = torch.tensor(0.8, requires_grad=True) if learned else 0.8
        with MaxNumel() as m:
            sparse_attention(q, k, v, alpha=a, ladder=Ladder(8)).sum().backward()
        C = len(attended_distances(0.8, T, Ladder(8)))
        # never a (T, T) score matrix, never a (T, C, D) stack of gathered keys
        assert m.max_numel <= 2 * 2 * T * max(C, 8), (T, m.max_numel)
        sizes[T] = m.max_numel
    assert sizes[2048] <= 2.2 * sizes[1024]


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda q, k, v: sparse_attention(q[0], k, v, alpha=1.0, ladder=Ladder(2)), "4-D"),
        (
            lambda q, k, v: sparse_attention(q, k[:, :1], v, alpha=1.0, ladder=Ladder(2)),
            "same shape",
        ),
        (
            lambda q, k, v: sparse_attention(q[:, :3], k, v, alpha=1.0, ladder=Ladder(2)),
            "n_heads=3",
        ),
        (lambda q, k, v: sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(-2)), "W=-2"),
        (lambda q, k, v: sparse_attention(q, k, v, alpha=0.0, ladder=Ladder(2)), "alpha=0.0"),
        (
            lambda q, k, v: sparse_attention(q, k, v, alpha=1.0, ladder=Ladder(2), path="fast"),
            "'fast'",
        ),
        (
            lambda q, k, v: sparse_attention(
                q, k, v, alpha=torch.tensor(1.0), ladder=Ladder(2), path="mask"
            ),
            "interp",
        ),
        (
            lambda q, k, v: sparse_attention(q, k, v, alpha=torch.ones(3), ladder=Ladder(2)),
            r"\(3,\)",
        ),
    ],
)
def test_bad_input(call, needle):
    q, k, v = make_qkv(1, 4, 2, 16, 4)
    with pytest.raises(ValueError, match=needle):
        call(q, k, v)


@pytest.mark.parametrize("alpha", [1.0, 0.73, 1.37])
@pytest.mark.parametrize("H,KV", [(2, 2), (4, 1)])
def test_gradients_match_finite_differences(alpha, H, KV):
    # the shift / interp paths have a hand-written backward: check it against torch.gradcheck
    q, k, v = make_qkv(1, H, KV, 18, 3, seed=4, dtype=torch.float64)
    for x in (q, k, v):
        x.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: sparse_attention(q, k, v, alpha=alpha, ladder=Ladder(2, rungs=7)), (q, k, v)
    )
    if alpha == 1.0:
        return  # central differences in α would straddle the integer-offset jump
    a = torch.tensor(alpha, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v, a: sparse_attention(q, k, v, alpha=a, ladder=Ladder(2, rungs=7)),
        (q, k, v, a),
    )


def test_integer_gradients_match_dense_oracle():
    q, k, v = make_qkv(2, 4, 2, 70, 8, seed=8, dtype=torch.float64)
    w = torch.randn(q.shape, dtype=torch.float64)
    dists = attended_distances(0.6, 70, Ladder(3, rungs=9))
    grads = []
    for fn in (
        lambda q, k, v: sparse_attention(q, k, v, alpha=0.6, ladder=Ladder(3, rungs=9)),
        lambda q, k, v: oracle_integer(q, k, v, dists),
    ):
        xs = [x.clone().requires_grad_(True) for x in (q, k, v)]
        (fn(*xs) * w).sum().backward()
        grads.append([x.grad for x in xs])
    for g1, g2 in zip(*grads):
        assert (g1 - g2).abs().max() <= 1e-10
