"""The attended set: which columns one layer reads, decided once from α in float64.

A sparse layer with scale α reads the window {0..W} plus one column per kept rung of the base
(the rules live in `lab.ladder.offsets`).  `plan_for` is the one definition of those columns: it
forms α·f_k in IEEE double (`offsets.scaled_rungs`, whatever α's dtype — a float32 α is widened
exactly), applies the integer rule (``interpolate=False``: rounded, collisions *merge*) or the
interpolated rule (``interpolate=True``: lo = floor(α·f), collisions *drop*), and returns a frozen
`ColumnPlan`.  Every other way to ask is a named view of that record:

- `attended_distances` / `rung_distances` — one layer's integer set (all / beyond the window)
  as a sorted list, for the CLI, coverage counts and the ledger's exact checks;
- `layer_sets` — the integer set of each α of a schedule (the coverage probes);
- `ColumnPlan.kernel_inputs` / `ColumnPlan.oracle_columns` — the plan as kernel tensors / as
  (lo, frac) pairs for the float64 oracle;
- `ModelConfig.plan`, a layer's `plan()` and `FibLM.plans()` — `plan_for` under a model's
  ladder and rule, at its current α.

Caching.  A plan depends only on its arguments, α's float64 value among them, so `plan_for`
memoises it (an LRU keyed by the arguments): a fixed / staggered / coprime / pow2 layer builds its
plan once per (seq_len, reach); a learned layer once per value of α (its integer part — which
rungs, lo — moves with α), while the fractions α·f − lo are formed fresh on α's graph by
`kernel_inputs` on every call, so gradients stay exact.  The plan also keeps its kernel tensors
per (device, dtype).  `set_cache_enabled(False)` (or ``FIBLAB_PLAN_CACHE=0`` in the environment)
rebuilds every plan from scratch, as the code did before the cache: for timing comparisons.
torch is imported only by `kernel_inputs` and `oracle_columns`, so the probes stay torch-free.
`lab.kernels` never imports this module: kernels receive the tensors.
"""

from __future__ import annotations

import functools
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lab.ladder import offsets
from lab.ladder.offsets import Ladder

CACHE_ENV = "FIBLAB_PLAN_CACHE"
CACHE_SIZE = 1024


@dataclass(frozen=True)
class ColumnPlan:
    """The C columns one layer reads at length ``seq_len``, window columns first.

    Integer plans list the distances sorted; interpolated plans list the kept rungs in base
    order (the order that decided collisions).  ``rung[c]`` is the base index k of column c
    (−1 for a window column) and ``f[c]`` its unscaled rung f_k (0.0 for the window), so an
    interpolated column reads distance α·f[c] = lo[c] + fracs[c].
    """

    alpha: float  # the float64 value the plan was built for
    lo: tuple[int, ...]  # (C,) the nearer key's distance: the distance, or ⌊α·f⌋ if interpolated
    interpolated: tuple[bool, ...]  # (C,) True: reads rows t − lo and t − lo − 1
    rung: tuple[int, ...]  # (C,) base index k, −1 for the window
    f: tuple[float, ...]  # (C,) the rung's base value f_k, 0.0 for the window
    seq_len: int
    ladder: Ladder  # window, base, rungs, rounding and the reach as asked (None: seq_len)
    reach: int  # the reach in force: ladder.reach_at(seq_len)
    interpolate: bool  # the rule: True interpolated (drop), False integer (merge)
    _tensors: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    def __len__(self) -> int:
        return len(self.lo)

    @property
    def n_window(self) -> int:
        """Columns of the dense window {0..min(W, T − 1)}."""
        return min(self.ladder.window, self.seq_len - 1) + 1

    @property
    def distances(self) -> list[int]:
        """The sorted distances of the columns (for an integer plan: the attended set)."""
        return sorted(self.lo)

    @property
    def fracs(self) -> tuple[float, ...]:
        """(C,) α·f_k − lo in float64 for interpolated columns, 0.0 for exact ones."""
        return tuple(
            self.alpha * f - lo if i else 0.0
            for lo, f, i in zip(self.lo, self.f, self.interpolated)
        )

    def columns(self) -> list[tuple[int, int]]:
        """(distance, rows) per column: 2 rows for an interpolated rung (lo and lo + 1), else 1."""
        return [(d, 2 if i else 1) for d, i in zip(self.lo, self.interpolated)]

    def reads_per_query(self) -> list[int]:
        """(T,) key rows query t reads: Σ_c [t ≥ lo_c] + Σ_{interpolated c} [t ≥ lo_c + 1] (at
        t = lo the second tap is clamped onto the same row 0)."""
        T = self.seq_len
        starts = [0] * (T + 1)  # difference array over positions
        for d, rows in self.columns():
            for r in range(rows):
                if d + r < T:
                    starts[d + r] += 1
        out, n = [], 0
        for t in range(T):
            n += starts[t]
            out.append(n)
        return out

    def reads(self) -> int:
        """(query, key row) reads over positions 0..T − 1."""
        return sum(self.reads_per_query())

    def kernel_inputs(self, alpha: Any = None, device=None, dtype=None):
        """The plan as `lab.kernels.columns_attention` inputs: (dists (C,) int64 on the host,
        fracs (C,) ``dtype`` on ``device``, interpolated (C,) bool on the host).

        ``alpha`` a 0-d tensor (the one the plan was built from): fracs = α·F − LO in one tensor
        op on α's graph, formed in float64 then cast to ``dtype``, so d(fracs)/dα = f_k exactly.
        Otherwise fracs are the plan's constants.  ``dtype`` defaults to α's (else float32).
        The host tensors (and constant fracs) are cached on the plan: treat them as read-only.
        """
        import torch

        dev = torch.device(device) if device is not None else None
        if isinstance(alpha, torch.Tensor):
            dev = alpha.device if dev is None else dev
            dtype = alpha.dtype if dtype is None else dtype
        dev = torch.device("cpu") if dev is None else dev
        dtype = torch.float32 if dtype is None else dtype
        host = self._tensors.get("host")
        if host is None:
            host = (
                torch.tensor(self.lo, dtype=torch.int64),
                torch.tensor(self.interpolated, dtype=torch.bool),
            )
            self._tensors["host"] = host
        dists, interp = host
        if not isinstance(alpha, torch.Tensor):
            key = ("fracs", dev, dtype)
            fracs = self._tensors.get(key)
            if fracs is None:
                fracs = torch.tensor(self.fracs, dtype=torch.float64).to(device=dev, dtype=dtype)
                self._tensors[key] = fracs
            return dists, fracs, interp
        wide = torch.float32 if alpha.device.type == "mps" else torch.float64  # no f64 on mps
        key = ("F, LO", alpha.device, wide)
        fl = self._tensors.get(key)
        if fl is None:
            fs = [f if i else 0.0 for f, i in zip(self.f, self.interpolated)]
            lo = [d if i else 0 for d, i in zip(self.lo, self.interpolated)]
            fl = (
                torch.tensor(fs, dtype=wide, device=alpha.device),  # F (C,)
                torch.tensor(lo, dtype=wide, device=alpha.device),  # LO (C,)
            )
            self._tensors[key] = fl
        F, LO = fl
        fracs = alpha.reshape(()).to(wide) * F - LO  # (C,) on α's graph
        return dists, fracs.to(device=dev, dtype=dtype), interp

    def oracle_columns(self, alpha: Any = None) -> list[tuple[int, Any]]:
        """(lo, frac) per column for `lab.kernels.oracle`: frac None for an exact column, else
        α·f − lo as a 0-d tensor (on ``alpha``'s graph when it is the tensor the plan was built
        from, in its dtype; float64 constants otherwise)."""
        import torch

        if not any(self.interpolated):
            return [(d, None) for d in self.lo]
        if not isinstance(alpha, torch.Tensor):
            alpha = torch.tensor(self.alpha, dtype=torch.float64)
        _, fracs, interp = self.kernel_inputs(alpha)  # fracs (C,) in α's dtype
        return [(d, fracs[c] if interp[c] else None) for c, d in enumerate(self.lo)]


# --------------------------------------------------------------------------------------------
# building plans
# --------------------------------------------------------------------------------------------
def _build(alpha: float, seq_len: int, ladder: Ladder, interpolate: bool) -> ColumnPlan:
    offsets.check_alpha(alpha)
    ladder.limit(seq_len)  # checks seq_len
    fs = ladder.values(seq_len)
    targets = offsets.scaled_rungs(alpha, fs)  # α·f_k, float64, base order
    if interpolate:
        kept = offsets.interp_columns(targets, seq_len, ladder)  # base order
    else:
        kept = sorted(offsets.integer_columns(targets, seq_len, ladder), key=lambda c: c[1])
    n_win = min(ladder.window, seq_len - 1) + 1
    return ColumnPlan(
        alpha=alpha,
        lo=tuple(range(n_win)) + tuple(d for _, d in kept),
        interpolated=(False,) * n_win + (interpolate,) * len(kept),
        rung=(-1,) * n_win + tuple(k for k, _ in kept),
        f=(0.0,) * n_win + tuple(fs[k] for k, _ in kept),
        seq_len=seq_len,
        ladder=ladder,
        reach=ladder.reach_at(seq_len),
        interpolate=interpolate,
    )


_cached_build = functools.lru_cache(maxsize=CACHE_SIZE, typed=True)(_build)  # 1 ≠ True
_CACHE = {"enabled": os.environ.get(CACHE_ENV, "1").strip() != "0"}


def plan_for(alpha: float, seq_len: int, ladder: Ladder, interpolate: bool = False) -> ColumnPlan:
    """The columns a layer of scale α reads at length ``seq_len`` under ``ladder``.

    ``alpha`` a number (a 0-d tensor is read once, as its float64 value); ``interpolate`` picks
    the rule: False the integer set (``ladder.rounding``), True the interpolated columns.

    >>> plan_for(1.0, 1024, Ladder(8)).lo[9:]
    (13, 21, 34, 55, 89, 144, 233, 377, 610, 987)
    """
    if hasattr(alpha, "detach"):  # a tensor: one host transfer
        if alpha.numel() != 1:
            raise ValueError(
                f"alpha tensor must hold one value (0-d); got shape {tuple(alpha.shape)}"
            )
        alpha = float(alpha.detach())
    elif isinstance(alpha, numbers.Real) and not isinstance(alpha, bool):
        alpha = float(alpha)  # numpy scalars too
    offsets.check_alpha(alpha)
    if not isinstance(ladder, Ladder):
        raise TypeError(f"ladder={ladder!r} must be a lab.ladder.offsets.Ladder, e.g. Ladder(8)")
    args = (alpha, seq_len, ladder, bool(interpolate))
    return _cached_build(*args) if _CACHE["enabled"] else _build(*args)


def attended_distances(alpha: float, seq_len: int, ladder: Ladder) -> list[int]:
    """Sorted integer distances one query attends, {0..W} ∪ rungs: ``plan_for(...).distances``.

    >>> attended_distances(1.0, 1024, Ladder(8))[9:]
    [13, 21, 34, 55, 89, 144, 233, 377, 610, 987]
    """
    return plan_for(alpha, seq_len, ladder).distances


def rung_distances(alpha: float, seq_len: int, ladder: Ladder) -> list[int]:
    """Sorted integer rung distances beyond the window, {r(α·f) : W < r ≤ min(T, reach) − 1}:
    the integer plan's columns after its window."""
    plan = plan_for(alpha, seq_len, ladder)
    return sorted(plan.lo[plan.n_window :])


def layer_sets(alphas: Sequence[float], seq_len: int, ladder: Ladder) -> list[list[int]]:
    """Each layer's sorted integer attended distances (one integer plan per α)."""
    return [plan_for(a, seq_len, ladder).distances for a in alphas]


# --------------------------------------------------------------------------------------------
# the cache switch
# --------------------------------------------------------------------------------------------
def set_cache_enabled(enabled: bool) -> bool:
    """Turn the plan cache on or off for this process; returns the previous setting."""
    prev = _CACHE["enabled"]
    _CACHE["enabled"] = bool(enabled)
    return prev


def cache_enabled() -> bool:
    return _CACHE["enabled"]


def clear_cache() -> None:
    """Forget every cached plan (and the kernel tensors they hold)."""
    _cached_build.cache_clear()


def cache_info():
    """functools' hits / misses / size of the plan cache."""
    return _cached_build.cache_info()
