"""Per-layer α schedules.

    fixed     α_ℓ = 1 in every layer
    stagger   α_ℓ = α_min + α_span·ℓ/(L−1)            (0.5 → 1.5 over depth; "linear")
    coprime   the stagger's values reassigned by ℓ ↦ S·ℓ mod L, with S the largest s ≤ L/2
              coprime with L (S=7 at L=16, S=3 at L=8); "hdc" in the authors' code (hybrid
              dilated convolution's anti-gridding), an accepted alias
    learned   θ_ℓ trainable; `layer_alphas("learned", L, init=...)` gives the initial α
              (α=1 by default; a named schedule's start is clamped to [0.55, 1.45] at the
              default α_min and α_span, a custom list must lie strictly inside (0.5, 1.5))
    custom    any list of L values, passed instead of a name

Small depths: L=1 gives α=[1.0] for stagger and coprime (a ramp of one point sits at its middle);
L=2 gives [0.5, 1.5].  When no s in 2..L/2 is coprime with L (L ≤ 4 and L=6), the coprime
schedule uses S=1 and equals the linear stagger.  All functions are pure and return floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Union

from lab.ladder.offsets import ALPHA_MIN, ALPHA_SPAN
from lab.util.checks import positive_int
from lab.util.wording import plural

Schedule = Union[str, Sequence[float]]
SCHEDULES = ("fixed", "stagger", "coprime", "learned")
# A learned schedule's *initial* α is clamped to [α_min + INIT_MARGIN, α_min + α_span − INIT_MARGIN]
# ([0.55, 1.45] at the defaults), as the paper's probes did; while training nothing is clamped
# (α = α_min + α_span·sigmoid(θ) stays inside the open interval by construction).
INIT_MARGIN = 0.05


def _check_layers(n_layers: int) -> None:
    positive_int(n_layers, "n_layers")


def coprime_stride(n_layers: int) -> int:
    """Largest s in L//2, L//2 − 1, …, 2 with gcd(s, L) = 1; 1 when none exists (then = linear)."""
    _check_layers(n_layers)
    for s in range(n_layers // 2, 1, -1):
        if math.gcd(s, n_layers) == 1:
            return s
    return 1


def linear_stagger(
    n_layers: int, alpha_min: float = ALPHA_MIN, alpha_span: float = ALPHA_SPAN
) -> list[float]:
    """α_ℓ = α_min + α_span·ℓ/(L−1); L=1 gives the middle of the range."""
    _check_layers(n_layers)
    if n_layers == 1:
        return [alpha_min + alpha_span / 2]
    # evaluated as 0.5 + 1.0·(ℓ/(L−1)) in doubles, bit-identical to the paper's trained schedule
    return [alpha_min + alpha_span * (ell / (n_layers - 1)) for ell in range(n_layers)]


def coprime_order(n_layers: int, stride: int | None = None) -> list[int]:
    """Slot of each layer under ℓ ↦ S·ℓ mod L (L=16, S=7: 0, 7, 14, 5, 12, 3, …)."""
    _check_layers(n_layers)
    s = coprime_stride(n_layers) if stride is None else stride
    if isinstance(s, bool) or not isinstance(s, int) or s < 1 or math.gcd(s, n_layers) != 1:
        raise ValueError(
            f"coprime stride S={s!r} must be a positive integer with gcd(S, "
            f"{n_layers}) = 1, or the slots are not a permutation of the layers"
        )
    return [(s * ell) % n_layers for ell in range(n_layers)]


def check_alphas(
    values: Sequence[float],
    n_layers: int,
    *,
    alpha_min: float = ALPHA_MIN,
    alpha_span: float = ALPHA_SPAN,
    open_interval: bool = False,
) -> list[float]:
    """Validate a custom per-layer list: L values in [α_min, α_min+α_span] (open when learned)."""
    _check_layers(n_layers)
    vals = [float(v) for v in values]
    if len(vals) != n_layers:
        raise ValueError(
            f"a custom schedule has {plural(len(vals), 'value')} but the model has "
            f"{plural(n_layers, 'layer')}: give one alpha per layer"
        )
    lo, hi = alpha_min, alpha_min + alpha_span
    for ell, a in enumerate(vals):
        inside = lo < a < hi if open_interval else lo <= a <= hi
        if not (math.isfinite(a) and inside):
            kind = "strictly inside" if open_interval else "in"
            raise ValueError(
                f"alpha={a!r} at layer {ell} must be {kind} [{lo}, {hi}]"
                + (" (a learned alpha cannot sit on a sigmoid asymptote)" if open_interval else "")
            )
    return vals


def layer_alphas(
    schedule: Schedule,
    n_layers: int,
    *,
    stride: int | None = None,
    init: Schedule = "fixed",
    alpha_min: float = ALPHA_MIN,
    alpha_span: float = ALPHA_SPAN,
) -> list[float]:
    """Per-layer α for a named schedule or a custom list.

    ``stride`` sets the coprime S; ``init`` is the starting point of a learned schedule: a named
    schedule is clamped to [α_min+0.05, α_min+α_span−0.05] as the paper did; a custom list must
    lie strictly inside (α_min, α_min+α_span) or a ValueError names the offending value.
    """
    _check_layers(n_layers)
    if not isinstance(schedule, str):
        return check_alphas(schedule, n_layers, alpha_min=alpha_min, alpha_span=alpha_span)
    if schedule == "fixed":
        return [1.0] * n_layers
    if schedule in ("stagger", "linear"):
        return linear_stagger(n_layers, alpha_min, alpha_span)
    if schedule in ("coprime", "hdc"):
        ramp = linear_stagger(n_layers, alpha_min, alpha_span)
        return [ramp[slot] for slot in coprime_order(n_layers, stride)]
    if schedule == "learned":
        if init == "learned":
            raise ValueError(
                "init='learned' is circular: start a learned schedule from "
                "'fixed', 'stagger', 'coprime' or a list"
            )
        if not isinstance(init, str):  # a custom start must be learnable
            return check_alphas(
                init, n_layers, alpha_min=alpha_min, alpha_span=alpha_span, open_interval=True
            )
        start = layer_alphas(
            init, n_layers, stride=stride, alpha_min=alpha_min, alpha_span=alpha_span
        )
        lo, hi = alpha_min + INIT_MARGIN, alpha_min + alpha_span - INIT_MARGIN
        return [min(max(a, lo), hi) for a in start]
    raise ValueError(
        f"schedule={schedule!r} is unknown: use one of {SCHEDULES} or a list of {n_layers} alphas"
    )


def coprime_is_stagger(schedule, n_layers: int, stride: int | None = None) -> bool:
    """Whether ``schedule`` is the coprime one and gives exactly the linear stagger's α at this
    depth (no stride in 2..L/2 is coprime with L: L ≤ 4 and L = 6, or stride 1). Such runs are
    the stagger under another name: a comparison of the two would compare a run with itself."""
    if schedule not in ("coprime", "hdc"):
        return False
    return layer_alphas(schedule, n_layers, stride=stride) == layer_alphas("stagger", n_layers)
