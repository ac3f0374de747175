"""Every attention path attends exactly a hand-written key set (SPEC §2.4 / §2.6 / §2.7).

No expected set here is computed by the lab: each is written out below with its arithmetic
(α·f, then Python's half-to-even `round`, `floor` or `ceil`; the window; the T − 1 cap), taken
from SPEC §2.7's tables where it has one.  Each case is checked two ways against each
implementation (the shift path with impl torch and cpp, the mask path, the interpolated path
with impl torch and cpp, and the model's forward):

* values: the output equals a float64 brute-force softmax over exactly those keys, written
  here as a dense (T, T) mask (no lab code: not even `lab.kernels.oracle` for integer sets);
* support: the last query's gradient reaches key rows t − d for exactly the listed d.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from lab.kernels import cpu
from lab.kernels.oracle import oracle_attention
from lab.ladder.offsets import Ladder
from lab.lm.model import build_model
from lab.sparse.attention import sparse_attention

W8 = list(range(9))  # the window {0..8}

# (alpha, W, K, T, rounding, distances) — the attended set of one query, written by hand
INTEGER_SETS = [
    # SPEC §2.7, α = 1: the Fibonacci rungs themselves
    (1.0, 8, 15, 1000, "round", W8 + [13, 21, 34, 55, 89, 144, 233, 377, 610, 987]),
    # T-truncation: at T = 987 the rung 987 exceeds T − 1 = 986 and is dropped
    (1.0, 8, 15, 987, "round", W8 + [13, 21, 34, 55, 89, 144, 233, 377, 610]),
    # SPEC §2.7, α = 0.5, half-to-even: 6.5 → 6 (window), 10.5 → 10, 27.5 → 28, 44.5 → 44,
    # 116.5 → 116, 188.5 → 188, 493.5 → 494
    (0.5, 8, 15, 1000, "round", W8 + [10, 17, 28, 44, 72, 116, 188, 305, 494]),
    # SPEC §2.7, α = 1.5: 349.5 → 350, 565.5 → 566; 1480.5 → 1480 > 999 dropped
    (1.5, 8, 15, 1000, "round", W8 + [12, 20, 32, 51, 82, 134, 216, 350, 566, 915]),
    # α = 0.5, W = 0, K = 10: 0.5 → 0 (window), 1, 1.5 → 2, 2.5 → 2 (merges), 4, 6.5 → 6,
    # 10.5 → 10, 17, 27.5 → 28, 44.5 → 44
    (0.5, 0, 10, 50, "round", [0, 1, 2, 4, 6, 10, 17, 28, 44]),
    # α = 1.5, W = 2, K = 10: 1.5 → 2 (window), 3, 4.5 → 4, 7.5 → 8, 12, 19.5 → 20, 31.5 → 32,
    # 51, 82.5 → 82, 133.5 → 134 > T − 1 = 82 dropped; at T = 83 the last query alone reads 82
    (1.5, 2, 10, 83, "round", [0, 1, 2, 3, 4, 8, 12, 20, 32, 51, 82]),
    # … and at T = 82 the rung 82 is past the end
    (1.5, 2, 10, 82, "round", [0, 1, 2, 3, 4, 8, 12, 20, 32, 51]),
]

ROUNDING_SETS = [
    # SPEC §2.7's floor brackets at α = 0.5 (as an integer set): 10, 17, 27, 44, …, 493
    (0.5, 8, 15, 1000, "floor", W8 + [10, 17, 27, 44, 72, 116, 188, 305, 493]),
    # ceil at α = 0.5: 10.5 → 11, 27.5 → 28, 44.5 → 45, 116.5 → 117, 188.5 → 189, 493.5 → 494
    (0.5, 8, 15, 1000, "ceil", W8 + [11, 17, 28, 45, 72, 117, 189, 305, 494]),
    # α = 0.5, W = 0, K = 10 — floor: 0, 1, 1, 2, 4, 6, 10, 17, 27, 44
    (0.5, 0, 10, 50, "floor", [0, 1, 2, 4, 6, 10, 17, 27, 44]),
    # … ceil: 1, 1, 2, 3, 4, 7, 11, 17, 28, 45
    (0.5, 0, 10, 50, "ceil", [0, 1, 2, 3, 4, 7, 11, 17, 28, 45]),
    # α = 1.5, W = 2, K = 10, T = 200 — floor: 1, 3, 4, 7, 12, 19, 31, 51, 82, 133
    (1.5, 2, 10, 200, "floor", [0, 1, 2, 3, 4, 7, 12, 19, 31, 51, 82, 133]),
    # … ceil: 2, 3, 5, 8, 12, 20, 32, 51, 83, 134 (integers 3, 12, 51 stay put)
    (1.5, 2, 10, 200, "ceil", [0, 1, 2, 3, 5, 8, 12, 20, 32, 51, 83, 134]),
    # α = 0.77, W = 3, K = 9: 0.77, 1.54, 2.31, 3.85, 6.16, 10.01, 16.17, 26.18, 42.35
    (0.77, 3, 9, 60, "round", [0, 1, 2, 3, 4, 6, 10, 16, 26, 42]),
    (0.77, 3, 9, 60, "floor", [0, 1, 2, 3, 6, 10, 16, 26, 42]),
    (0.77, 3, 9, 60, "ceil", [0, 1, 2, 3, 4, 7, 11, 17, 27, 43]),
]

# (alpha, W, K, T, window distances, [(lo, f_k) kept rungs]) — interpolated columns (SPEC §2.6):
# a rung is skipped when round(α·f) ≤ W, floor(α·f) > T − 1, or floor(α·f) is already used
INTERP_COLUMNS = [
    # SPEC §2.7, the gather path at α = 0.5: lo = 10, 17, 27, …, 493 with frac 0 or 0.5
    (
        0.5,
        8,
        15,
        1000,
        W8,
        [(10, 21), (17, 34), (27, 55), (44, 89), (72, 144), (116, 233), (188, 377), (305, 610)]
        + [(493, 987)],
    ),
    # α = 1.5, W = 2, K = 10, T = 83: 1.5 rounds to 2 (skip); 3, 4.5, 7.5, 12, 19.5, 31.5, 51,
    # 82.5 kept at their floors; 133.5 has floor 133 > 82 (skip)
    (
        1.5,
        2,
        10,
        83,
        [0, 1, 2],
        [(3, 2), (4, 3), (7, 5), (12, 8), (19, 13), (31, 21), (51, 34)] + [(82, 55)],
    ),
    # α = 0.55, W = 1: 0.55 and 1.1 round to ≤ 1; 1.65 rounds to 2 > W but its floor 1 is in the
    # window (skip, SPEC's 8.6 example); 2.75, 4.4, 7.15, 11.55, 18.7 kept
    (0.55, 1, 8, 40, [0, 1], [(2, 5), (4, 8), (7, 13), (11, 21), (18, 34)]),
    # α = 0.6, W = 0: 0.6 (floor 0 taken), 1.2 kept at 1, 1.8 dropped (floor 1 taken by the
    # earlier rung: drop, not merge), 3.0, 4.8, 7.8
    (0.6, 0, 6, 20, [0], [(1, 2), (3, 5), (4, 8), (7, 13)]),
]


@pytest.fixture(scope="module")
def cpp():
    """The fused C++ kernel, or a skip where this machine cannot build it."""
    from torch.utils.cpp_extension import is_ninja_available

    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")) or not is_ninja_available():
        pytest.skip("no C++ toolchain (compiler and ninja): the fused CPU kernel cannot be built")
    status = cpu.status()
    assert status is True, status
    return "cpp"


def make_qkv(T, H=2, KV=1, D=4, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(1, H, T, D, generator=g, dtype=dtype),
        torch.randn(1, KV, T, D, generator=g, dtype=dtype),
        torch.randn(1, KV, T, D, generator=g, dtype=dtype),
    )


def brute_force(q, k, v, distances):
    """float64 softmax attention where query t reads key t − d for exactly d in `distances`
    (d ≤ t): a dense (T, T) mask, GQA by repeating each KV head."""
    q, k, v = q.double(), k.double(), v.double()
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    T = q.shape[2]
    t = torch.arange(T)
    delta = t[:, None] - t[None, :]  # (T, T) query − key
    allowed = torch.zeros(T, T, dtype=torch.bool)
    for d in distances:
        allowed |= delta == d
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5  # (B, H, T, T)
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v


def key_support(fn, q, k, v):
    """The distances d whose key row T − 1 − d the last query's output depends on (non-zero
    gradient of out[..., T − 1, :] with respect to k)."""
    T = q.shape[2]
    kk = k.clone().requires_grad_()
    out = fn(q, kk, v)
    w = torch.randn(out.shape[:2] + out.shape[3:], generator=torch.Generator().manual_seed(1))
    (grad,) = torch.autograd.grad((out[:, :, T - 1] * w).sum(), kk)
    rows = (grad.abs().sum((0, 1, 3)) != 0).nonzero().flatten().tolist()
    return sorted(T - 1 - s for s in rows)


INTEGER_IMPLS = [("shift", "torch"), ("shift", "cpp"), ("mask", "auto")]  # (path, impl)


@pytest.mark.parametrize("alpha,W,K,T,rounding,dists", INTEGER_SETS + ROUNDING_SETS)
@pytest.mark.parametrize("path,impl", INTEGER_IMPLS)
def test_integer_paths_attend_the_hand_written_set(
    request, path, impl, alpha, W, K, T, rounding, dists
):
    if impl == "cpp":
        request.getfixturevalue("cpp")
    q, k, v = make_qkv(T, seed=T + W)

    def fn(q, k, v):
        return sparse_attention(
            q, k, v, alpha=alpha, ladder=Ladder(W, rungs=K, rounding=rounding), path=path, impl=impl
        )

    assert (fn(q, k, v).double() - brute_force(q, k, v, dists)).abs().max() <= 1e-5
    assert key_support(fn, q, k, v) == dists


@pytest.mark.parametrize("alpha,W,K,T,window,rungs", INTERP_COLUMNS)
@pytest.mark.parametrize("impl", ["torch", "cpp"])
def test_interp_path_reads_the_hand_written_columns(request, alpha, W, K, T, window, rungs, impl):
    if impl == "cpp":
        request.getfixturevalue("cpp")
    q, k, v = make_qkv(T, seed=T, dtype=torch.float64)
    a = torch.tensor(alpha, dtype=torch.float64, requires_grad=True)
    got = sparse_attention(q, k, v, alpha=a, ladder=Ladder(W, rungs=K), impl=impl)
    a_ref = torch.tensor(alpha, dtype=torch.float64, requires_grad=True)
    cols = [(d, None) for d in window] + [(lo, a_ref * f - lo) for lo, f in rungs]
    ref = oracle_attention(q, k, v, cols)
    assert (got - ref).abs().max() <= 1e-10
    (da,) = torch.autograd.grad(got.sum(), a)
    (da_ref,) = torch.autograd.grad(ref.sum(), a_ref)
    assert abs(da_ref.item()) > 1e-6 and abs(da.item() - da_ref.item()) <= 1e-8
    # support of the last query: the window, each lo, and lo + 1 where the fraction is non-zero
    # (lo + 1 beyond the first row clamps onto row 0)
    support = set(window)
    for lo, f in rungs:
        support |= {lo, min(lo + 1, T - 1)} if alpha * f != lo else {lo}  # row 0 clamp
    fn = lambda q, k, v: sparse_attention(
        q,
        k,
        v,
        alpha=torch.tensor(alpha, dtype=torch.float64),
        ladder=Ladder(W, rungs=K),
        impl=impl,
    )
    assert key_support(fn, q, k, v) == sorted(support)


# (schedule α, rounding, the layer's distances at T = 64, W = 2, K = 10)
MODEL_SETS = [
    # α = 0.5: 0.5, 1, 1.5, 2.5, 4, 6.5, 10.5, 17, 27.5, 44.5
    (0.5, "round", [0, 1, 2, 4, 6, 10, 17, 28, 44]),
    (0.5, "floor", [0, 1, 2, 4, 6, 10, 17, 27, 44]),
    (0.5, "ceil", [0, 1, 2, 3, 4, 7, 11, 17, 28, 45]),
    # α = 1.5: 1.5, 3, 4.5, 7.5, 12, 19.5, 31.5, 51, 82.5 (> 63), 133.5 (> 63)
    (1.5, "round", [0, 1, 2, 3, 4, 8, 12, 20, 32, 51]),
    (1.5, "floor", [0, 1, 2, 3, 4, 7, 12, 19, 31, 51]),
    (1.5, "ceil", [0, 1, 2, 3, 5, 8, 12, 20, 32, 51]),
]


@pytest.mark.parametrize("alpha,rounding,dists", MODEL_SETS)
def test_model_layer_attends_the_hand_written_set(alpha, rounding, dists):
    """One sparse layer with the config's rounding: the last position's logits depend on the
    embeddings at exactly T − 1 − d, d in the hand-written set (every other op is per position),
    and the model's own plan lists that set."""
    torch.manual_seed(0)
    model = build_model("tiny", n_layers=1, rungs=10, schedule=(alpha,), rounding=rounding)
    T = model.cfg.seq_len
    assert model.plans()[0].distances == dists
    held = {}

    def leaf(_module, _inp, out):
        held["x"] = out.detach().requires_grad_()
        return held["x"]

    handle = model.embed.register_forward_hook(leaf)
    try:
        logits, _ = model(torch.randint(0, 64, (1, T), generator=torch.Generator().manual_seed(2)))
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(logits[0, T - 1].sum(), held["x"])
    rows = (grad[0].abs().sum(-1) != 0).nonzero().flatten().tolist()
    assert sorted(T - 1 - s for s in rows) == dists
