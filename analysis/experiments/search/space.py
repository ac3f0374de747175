"""Search spaces of per-layer α schedules, described without Optuna.

A space is one α part and any modifiers, joined by ``+`` (``linear``, ``free+base``,
``coprime+window``):

    linear    α at the first and the last layer, a straight ramp between (the paper's stagger is
              0.5 → 1.5)
    coprime   the stagger's values reassigned by ℓ ↦ S·ℓ mod L, S any stride coprime with L
    free      one α per layer
    base      the rung base, fib or pow2 (reach-matched)
    window    the dense window W, 1..max_window

Without an α part the schedule is the linear stagger.  `SearchSpace.params` lists the
dimensions (`Param`, plain values a sampler maps to its own distributions) and
`SearchSpace.decode` turns one assignment into a `Candidate` (per-layer α via
`lab.ladder.schedules`, base, W), the input of every objective.  Pure functions of plain values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from lab.ladder.offsets import ALPHA_MIN, ALPHA_SPAN
from lab.ladder.schedules import coprime_order, layer_alphas, linear_stagger

ALPHA_PARTS = ("linear", "coprime", "free")
MODIFIERS = ("base", "window")
PARTS = ALPHA_PARTS + MODIFIERS
ALPHA_LO, ALPHA_HI = ALPHA_MIN, ALPHA_MIN + ALPHA_SPAN


@dataclass(frozen=True)
class Param:
    """One dimension: ``kind`` 'float' (low..high), 'int' (low..high inclusive) or 'choice'."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple = ()


@dataclass(frozen=True)
class Candidate:
    """What a trial evaluates: per-layer α, the base and the window (the rest is the space's)."""

    alphas: tuple[float, ...]
    base: str = "fib"
    window: int = 8

    def label(self) -> str:
        return f"{self.base} W={self.window} α " + " ".join(f"{a:.3f}" for a in self.alphas)


@dataclass(frozen=True)
class SearchSpace:
    """A space under one convention: L layers, K rungs, length T (W and base unless searched)."""

    parts: tuple[str, ...]
    layers: int = 16
    window: int = 8
    rungs: int = 15
    seq_len: int = 1024
    base: str = "fib"
    max_window: int = 16
    name: str = field(default="", compare=False)

    def __post_init__(self):
        if not self.name:
            object.__setattr__(self, "name", "+".join(self.parts) or "stagger")

    def params(self) -> list[Param]:
        """The dimensions a sampler draws, in a fixed order."""
        out: list[Param] = []
        L = self.layers
        if "linear" in self.parts:
            out += [
                Param("alpha_first", "float", ALPHA_LO, ALPHA_HI),
                Param("alpha_last", "float", ALPHA_LO, ALPHA_HI),
            ]
        if "coprime" in self.parts:
            out.append(Param("stride", "choice", choices=coprime_strides(L)))
        if "free" in self.parts:
            out += [Param(f"alpha_{ell}", "float", ALPHA_LO, ALPHA_HI) for ell in range(L)]
        if "base" in self.parts:
            out.append(Param("base", "choice", choices=("fib", "pow2")))
        if "window" in self.parts:
            out.append(Param("window", "int", 1, self.max_window))
        return out

    def decode(self, values: Mapping) -> Candidate:
        """The candidate of one assignment of `params` (a ValueError names a missing one)."""
        missing = [p.name for p in self.params() if p.name not in values]
        if missing:
            raise ValueError(f"space {self.name!r} needs values for {missing}")
        L = self.layers
        if "linear" in self.parts:
            a0, a1 = float(values["alpha_first"]), float(values["alpha_last"])
            alphas = [a0] if L == 1 else [a0 + (a1 - a0) * ell / (L - 1) for ell in range(L)]
        elif "coprime" in self.parts:
            ramp = linear_stagger(L)
            alphas = [ramp[slot] for slot in coprime_order(L, int(values["stride"]))]
        elif "free" in self.parts:
            alphas = [float(values[f"alpha_{ell}"]) for ell in range(L)]
        else:
            alphas = linear_stagger(L)
        alphas = [min(max(a, ALPHA_LO), ALPHA_HI) for a in alphas]  # float error at the ends
        return Candidate(
            alphas=tuple(layer_alphas(alphas, L)),
            base=str(values.get("base", self.base)),
            window=int(values.get("window", self.window)),
        )

    def reference(self, schedule: str) -> Candidate:
        """A named schedule ('stagger', 'coprime', 'fixed') under this space's convention."""
        return Candidate(tuple(layer_alphas(schedule, self.layers)), self.base, self.window)


def coprime_strides(n_layers: int) -> tuple[int, ...]:
    """Strides S in 1..L−1 with gcd(S, L) = 1 (each a permutation of the layers); (1,) at L=1."""
    return tuple(s for s in range(1, max(n_layers, 2)) if math.gcd(s, n_layers) == 1)


def parse_space(text: str, **convention) -> SearchSpace:
    """``"linear"``, ``"free+base"``, … → a `SearchSpace` (one-line ValueError naming the fix)."""
    parts = tuple(p.strip() for p in str(text).split("+") if p.strip())
    bad = [p for p in parts if p not in PARTS]
    if not parts or bad:
        raise ValueError(
            f"search space {text!r} is unknown: use one of {ALPHA_PARTS}, optionally with "
            f"+base and/or +window (e.g. free+base)"
        )
    alpha = [p for p in parts if p in ALPHA_PARTS]
    if len(alpha) > 1 or len(set(parts)) != len(parts):
        raise ValueError(
            f"search space {text!r} names {alpha or 'a part'} twice or more: give at most one of "
            f"{ALPHA_PARTS}, each part once"
        )
    space = SearchSpace(parts=parts, name=str(text), **convention)
    if space.layers < 1 or space.window < 0 or space.max_window < 1:
        raise ValueError(f"layers={space.layers} and window={space.window} must be >= 1 and >= 0")
    return space
