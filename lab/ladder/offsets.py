"""The rules of the attended set: offset bases, the α parameterisation, integer / interpolated
columns (a layer's set itself is `lab.ladder.plan.plan_for`'s `ColumnPlan`).

Every query at position t attends keys at distances δ = t − s drawn from

    window   {0, 1, …, W}                         (self plus the dense local window)
    rungs    {α·f : f in base}                    (scaled, then made integer or interpolated)

Two ways to turn a scaled rung α·f into keys exist, and the paper's models used both.  Both take
α·f in IEEE double, formed in one place (`scaled_rungs`); `lab.ladder.plan.plan_for` assembles from
them the per-layer record every consumer reads.

* **Integer sets** (`integer_columns`; the set as a list: `lab.ladder.plan.attended_distances`): each rung becomes one integer
  distance by a rounding convention (``"round"`` = Python's half-to-even, what the paper's fixed /
  staggered / coprime / pow2 models were trained with; ``"floor"``; ``"ceil"``).  Collision rule:
  *merge* — a rung that lands inside the window or on an earlier rung adds nothing (the set is a
  set).  Rungs beyond the reach (distance > min(T, reach) − 1) are dropped.

* **Interpolated columns** (`interp_columns`): rung k reads the key at the continuous distance
  α·f_k as ``(1 − frac)·key[t − lo] + frac·key[t − lo − 1]`` with ``lo = floor(α·f_k)``.  The
  paper's rule decides which rungs become columns: skip a rung when ``round(α·f) ≤ W``, when
  ``lo > min(T, reach) − 1``, or when ``lo`` is already used by the window or an earlier rung (collision
  rule: *drop*).  A kept column is valid for queries t ≥ lo.

`reach` is the length the rung set is computed for.  When a model trained at length T₀ is rebuilt
at a longer length T, the paper recomputes the set at T (``reach = T``: new, never-trained rungs
appear for α ≳ 1.04), whereas ``reach = T₀`` freezes the set at the training length.  Pure
functions only; nothing here depends on torch except the α/θ helpers, which accept tensors too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

from lab.util.checks import nonneg_int, positive_int

Base = Union[str, Sequence[float]]
ROUNDINGS = ("round", "floor", "ceil")
ALPHA_MIN = 0.5
ALPHA_SPAN = 1.0


# --------------------------------------------------------------------------------------------
# bases
# --------------------------------------------------------------------------------------------
def fibonacci(K: int = 15) -> list[int]:
    """The first K Fibonacci rungs 1, 2, 3, 5, 8, … (no duplicate 1). K=15 ends at 987."""
    K = positive_int(K, "rungs K", "the paper uses K=15")
    out = [1, 2]
    while len(out) < K:
        out.append(out[-1] + out[-2])
    return out[:K]


def powers_of_two(reach: int) -> list[int]:
    """The reach-matched power-of-2 base: 1, 2, 4, … while d <= reach − 1 (reach 1024 → 1…512)."""
    if not isinstance(reach, int) or reach < 2:
        raise ValueError(f"reach={reach!r} must be an integer >= 2 (a sequence length)")
    out, d = [], 1
    while d <= reach - 1:
        out.append(d)
        d *= 2
    return out


def resolve_base(base: Base, rungs: int, reach: int) -> list[float]:
    """Turn ``"fib"``, ``"pow2"`` or a custom list of distances into the list of unscaled rungs.

    ``rungs`` (K) applies to ``"fib"`` only; ``"pow2"`` depends on ``reach``; a custom list is used
    as given (order kept: it decides which rung wins a collision in the interpolated rule).
    """
    if isinstance(base, str):
        if base == "fib":
            return [float(f) for f in fibonacci(rungs)]
        if base == "pow2":
            return [float(f) for f in powers_of_two(reach)]
        raise ValueError(f"base={base!r} is unknown: use 'fib', 'pow2' or a list of distances")
    vals = list(base)
    if not vals:
        raise ValueError("a custom base must contain at least one distance")
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"custom base distance {v!r} must be a positive finite number")
    if len(set(vals)) != len(vals):
        dup = sorted({v for v in vals if vals.count(v) > 1})
        raise ValueError(f"custom base has duplicate distances {dup}: list each distance once")
    return [float(v) for v in vals]


# --------------------------------------------------------------------------------------------
# α = α_min + α_span·sigmoid(θ)
# --------------------------------------------------------------------------------------------
def alpha_from_theta(theta, alpha_min: float = ALPHA_MIN, alpha_span: float = ALPHA_SPAN):
    """α = α_min + α_span·sigmoid(θ); works on floats and tensors (keeps the autograd graph)."""
    if isinstance(theta, (int, float)):
        return alpha_min + alpha_span / (1.0 + math.exp(-theta))
    return alpha_min + alpha_span * theta.sigmoid()


def theta_from_alpha(
    alpha: float, alpha_min: float = ALPHA_MIN, alpha_span: float = ALPHA_SPAN
) -> float:
    """Inverse of `alpha_from_theta`: θ = ln((α − α_min) / (α_min + α_span − α)).

    α must lie strictly inside (α_min, α_min + α_span); the ends are sigmoid asymptotes.
    """
    hi = alpha_min + alpha_span
    if not (alpha_min < alpha < hi):
        raise ValueError(
            f"learned alpha={alpha!r} must lie strictly inside ({alpha_min}, {hi}); "
            f"start it inside (the paper's learned schedules start in [{alpha_min + 0.05}, "
            f"{hi - 0.05}])"
        )
    return math.log((alpha - alpha_min) / (hi - alpha))


# --------------------------------------------------------------------------------------------
# validation shared by the set builders
# --------------------------------------------------------------------------------------------
def check_window(window: int) -> None:
    nonneg_int(window, "window W", "distance 0 is self")


def check_alpha(alpha: float) -> None:
    if not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(
            f"alpha={alpha!r} must be a positive finite number (the paper's range "
            f"is [{ALPHA_MIN}, {ALPHA_MIN + ALPHA_SPAN}])"
        )


@dataclass(frozen=True)
class Ladder:
    """The rule's settings besides α and the length: one record, so they travel together.

    window   W: distances 0..W are always attended
    base     "fib", "pow2" or a custom list of distances (kept as a tuple)
    rungs    K, the number of Fibonacci rungs ("fib" only)
    rounding how an integer rung is made from α·f ("round", "floor", "ceil")
    reach    the length the rungs are computed for; None: the input length (see the docstring)

    A model's config builds one (`ModelConfig.ladder`); the plan, the attention paths, the
    coverage probes, the search and the CLI take it.  Frozen and hashable: it keys the plan
    cache.  Checked once, here.

    >>> Ladder(8).reach_at(1024), Ladder(8, reach=512).reach_at(4096)
    (1024, 512)
    """

    window: int
    base: Base = "fib"
    rungs: int = 15
    rounding: str = "round"
    reach: int | None = None

    def __post_init__(self) -> None:
        check_window(self.window)
        if not isinstance(self.base, str):
            object.__setattr__(self, "base", tuple(self.base))
        resolve_base(self.base, self.rungs, 2)  # an unknown or bad base fails here
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"rounding={self.rounding!r} is unknown: use one of {ROUNDINGS}")
        if self.reach is not None:
            positive_int(self.reach, "reach")

    def reach_at(self, seq_len: int) -> int:
        """The length the rungs are computed for when the input is ``seq_len`` long."""
        return seq_len if self.reach is None else self.reach

    def limit(self, seq_len: int) -> int:
        """The largest distance a rung may take at ``seq_len``: min(T, reach) − 1."""
        positive_int(seq_len, "seq_len")
        return min(seq_len, self.reach_at(seq_len)) - 1

    def values(self, seq_len: int) -> list[float]:
        """The unscaled rungs at ``seq_len`` (pow2's depend on the reach)."""
        return resolve_base(self.base, self.rungs, max(self.reach_at(seq_len), 2))


def round_distance(x: float, rounding: str = "round") -> int:
    """One scaled rung to an integer: 'round' (half-to-even, as trained), 'floor' or 'ceil'.

    ``x`` is α·f in IEEE double precision, exactly as the paper's code computed it, so a product
    that is a half-integer only in exact arithmetic rounds by its float value: the stagger's
    α = 0.5 + 10/15 times 987 is 1151.4999999999998 → 1151 (SPEC §2.7 lists 1152, the exact-
    arithmetic value), and α = 0.5 + 9/15 times 55 is 60.50000000000001 → 61.
    """
    if not math.isfinite(x):  # α·f overflowed (α = 1e308)
        raise ValueError(f"alpha × rung overflowed to {x}: use a smaller alpha")
    if rounding == "round":
        return int(round(x))
    if rounding == "floor":
        return int(math.floor(x))
    if rounding == "ceil":
        return int(math.ceil(x))
    raise ValueError(f"rounding={rounding!r} is unknown: use one of {ROUNDINGS}")


# --------------------------------------------------------------------------------------------
# integer attended sets (fixed / staggered / coprime / pow2 models; the mask and shift paths)
# --------------------------------------------------------------------------------------------
def scaled_rungs(alpha: float, values: Sequence[float]) -> list[float]:
    """α·f_k for each rung f_k of a resolved base (`resolve_base`), in order: the one place the
    product is formed, in IEEE double (a float32 α is widened exactly first; see
    `round_distance`)."""
    check_alpha(alpha)
    return [float(alpha) * float(f) for f in values]


def integer_columns(
    targets: Sequence[float], seq_len: int, ladder: Ladder
) -> list[tuple[int, int]]:
    """The integer rule: ``(k, d)`` pairs, base order, with d = r(α·f_k) the rounded target.

    Kept when W < d ≤ min(T, reach) − 1 and d is new (collision rule: *merge* — a rung landing
    on the window or on an earlier rung adds nothing; the first rung keeps the distance).
    """
    limit = ladder.limit(seq_len)
    seen: set[int] = set()
    out = []
    for k, x in enumerate(targets):
        d = round_distance(x, ladder.rounding)
        if d <= ladder.window or d > limit or d in seen:
            continue
        seen.add(d)
        out.append((k, d))
    return out


# --------------------------------------------------------------------------------------------
# interpolated columns (learned α; the interp path)
# --------------------------------------------------------------------------------------------
def interp_columns(targets: Sequence[float], seq_len: int, ladder: Ladder) -> list[tuple[int, int]]:
    """The paper's rule for which scaled rungs become interpolated columns.

    ``targets`` are the continuous distances α·f_k in base order.  Returns ``(k, lo)`` pairs for
    the kept rungs, where ``lo = floor(α·f_k)``: skip when round(α·f) ≤ W, lo > min(T, reach) − 1,
    or lo already taken by a window distance or an earlier kept rung (dropped, not merged).
    """
    limit = ladder.limit(seq_len)
    used = set(range(min(ladder.window, seq_len - 1) + 1))
    out = []
    for k, x in enumerate(targets):
        lo = math.floor(x)
        if round(x) <= ladder.window or lo > limit or lo in used:
            continue
        used.add(lo)
        out.append((k, lo))
    return out
