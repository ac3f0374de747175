"""Laws of the attended set, the plan and the schedules (hypothesis), with brute-force oracles.

The attended set {0..W} ∪ {r(α·f) : W < r ≤ T − 1} is sorted, contains the window, lies below T,
and is monotone in T: the set at T is the set at any T' > T cut below T.  Each law is checked
against a restatement of the definition written here, never against `lab.ladder.offsets` itself.
"""

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from lab.ladder.offsets import Ladder
from lab.ladder.plan import attended_distances, plan_for

FAST = settings(max_examples=60, deadline=None, derandomize=True)  # the same examples every run
ROUNDERS = {"round": round, "floor": math.floor, "ceil": math.ceil}


def fib(K):
    a, b, out = 1, 2, []
    for _ in range(K):
        out.append(a)
        a, b = b, a + b
    return out


def brute_set(alpha, W, T, K, rounding, reach=None):
    limit = min(T, T if reach is None else reach) - 1
    r = ROUNDERS[rounding]
    rungs = {r(alpha * f) for f in fib(K)}
    return sorted(set(range(min(W, T - 1) + 1)) | {d for d in rungs if W < d <= limit})


def brute_interp(alpha, W, T, K):
    """[(k, lo)] of the kept rungs in base order: skip round(α·f) ≤ W, lo ≥ T, lo taken."""
    used, out = set(range(min(W, T - 1) + 1)), []
    for k, f in enumerate(fib(K)):
        lo = math.floor(alpha * f)
        if round(alpha * f) > W and lo < T and lo not in used:
            used.add(lo)
            out.append((k, lo))
    return out


alphas = st.floats(0.5, 1.5, allow_nan=False)
roundings = st.sampled_from(sorted(ROUNDERS))


@FAST
@given(
    alpha=alphas,
    W=st.integers(0, 12),
    T=st.integers(1, 400),
    K=st.integers(1, 16),
    rounding=roundings,
)
def test_attended_set_invariants(alpha, W, T, K, rounding):
    s = attended_distances(alpha, T, Ladder(W, rungs=K, rounding=rounding))
    assert s == brute_set(alpha, W, T, K, rounding)
    assert s == sorted(set(s))  # sorted, no repeats
    assert s[: min(W, T - 1) + 1] == list(range(min(W, T - 1) + 1))  # the window, first
    assert all(0 <= d < T for d in s)
    assert plan_for(alpha, T, Ladder(W, rungs=K, rounding=rounding)).distances == s


@FAST
@given(
    alpha=alphas,
    W=st.integers(0, 12),
    T=st.integers(1, 300),
    more=st.integers(1, 900),
    K=st.integers(1, 16),
    rounding=roundings,
)
def test_attended_set_is_monotone_in_t(alpha, W, T, more, K, rounding):
    short = attended_distances(alpha, T, Ladder(W, rungs=K, rounding=rounding))
    longer = attended_distances(alpha, T + more, Ladder(W, rungs=K, rounding=rounding))
    assert short == [d for d in longer if d < T]
    # a frozen reach keeps the short set's rungs at any length
    frozen = attended_distances(alpha, T + more, Ladder(W, rungs=K, rounding=rounding, reach=T))
    assert frozen == brute_set(alpha, W, T + more, K, rounding, reach=T)
    assert [d for d in frozen if d > W] == [d for d in short if d > W]


@FAST
@given(
    alpha=alphas,
    W=st.integers(0, 12),
    T=st.integers(1, 400),
    K=st.integers(1, 16),
)
@example(alpha=0.55, W=0, T=50, K=10)  # 0.55·2 = 1.1 and 0.55·3 = 1.65 share lo = 1: dropped
def test_interpolated_plan_invariants(alpha, W, T, K):
    p = plan_for(alpha, T, Ladder(W, rungs=K), interpolate=True)
    n = min(W, T - 1) + 1
    assert p.lo[:n] == tuple(range(n)) and p.n_window == n
    assert len(set(p.lo)) == len(p.lo)  # the drop rule: each lo once
    fs = fib(K)
    for c in range(n, len(p)):
        k, lo = p.rung[c], p.lo[c]
        assert p.interpolated[c] and p.f[c] == fs[k]
        assert lo == math.floor(alpha * fs[k]) and W < round(alpha * fs[k]) and lo < T
        assert 0.0 <= p.fracs[c] < 1.0
    assert list(zip(p.rung[n:], p.lo[n:])) == brute_interp(alpha, W, T, K)  # base order
    # reads: query t reads each column with t ≥ lo, and a second row when t ≥ lo + 1
    want = [
        sum((t >= d) + (i and t >= d + 1) for d, i in zip(p.lo, p.interpolated)) for t in range(T)
    ]
    assert p.reads_per_query() == want and p.reads() == sum(want)
