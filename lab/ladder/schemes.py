"""The registry of attention schemes: one name ↔ the ModelConfig overrides ↔ the labels.

A *scheme* is what the paper compares: dense attention, or a base (Fibonacci / power-of-2 rungs)
with an α schedule (fixed, linear stagger, coprime stagger, learned; learned α through the
probes' annealed blur gather).  Every front end spells a scheme its own way today ("fib-stagger"
on the probe CLI, "stagger" in the efficiency table, "fib/stagger" in the paper's tables,
"fib_stagger" in the authors' run titles); each is an alias of one record here:

    name          canonical spelling (CLI, probe mechanisms, record keys)    "fib-stagger"
    overrides     the ModelConfig fields it sets                    schedule="stagger", base="fib"
    paper         the paper's table label                                     "fib/stagger"
    short         the short name of the efficiency / receptive-field tables     "stagger"
    label         a human label                          "Fibonacci rungs, linear stagger"
    aliases       other spellings accepted on input       "stagger", "fib/stagger", "linear"…
    title         the authors' run-title body, if they ran it                  "fib_stagger"

    scheme("linear").name == "fib-stagger";  scheme_of(cfg) -> Scheme | None (the inverse)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "Scheme",
    "SCHEMES",
    "scheme",
    "scheme_names",
    "scheme_of",
    "paper_label",
]


@dataclass(frozen=True)
class Scheme:
    """One named attention scheme (see the module docstring for the fields)."""

    name: str
    overrides: Mapping[str, Any] = field(hash=False)
    paper: str
    short: str
    label: str
    aliases: tuple[str, ...] = ()
    title: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))

    @property
    def attention(self) -> str:
        return self.overrides.get("attention", "sparse")

    @property
    def base(self) -> str | None:
        """``fib`` | ``pow2``; None for dense attention."""
        return None if self.attention == "dense" else self.overrides.get("base", "fib")

    @property
    def schedule(self) -> str | None:
        """The α schedule name; None for dense attention."""
        return None if self.attention == "dense" else self.overrides.get("schedule", "fixed")

    @property
    def learned(self) -> bool:
        return self.schedule == "learned"

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every spelling accepted on input: the name, the labels and the aliases."""
        out = [self.name, self.short, self.paper, *self.aliases]
        if self.title:
            out.append(self.title)
        return tuple(dict.fromkeys(out))

    def model_overrides(self) -> dict[str, Any]:
        """The ModelConfig overrides as a fresh dict (for ``config_for(preset, **…)``)."""
        return dict(self.overrides)


def _sparse(base: str, schedule: str, path: str = "auto") -> dict:
    return dict(attention="sparse", base=base, schedule=schedule, path=path)


#: The registry, in the order tables and CLIs list schemes.
SCHEMES: tuple[Scheme, ...] = (
    Scheme(
        "dense",
        dict(attention="dense", path="auto"),
        "dense",
        "dense",
        "dense causal attention",
        ("causal",),
    ),
    Scheme(
        "fib-fixed",
        _sparse("fib", "fixed"),
        "fib/fixed",
        "fixed",
        "Fibonacci rungs, α = 1 in every layer",
        ("fixed", "fib_fixed"),
        "fib_fixed",
    ),
    Scheme(
        "fib-stagger",
        _sparse("fib", "stagger"),
        "fib/stagger",
        "stagger",
        "Fibonacci rungs, linear stagger α 0.5 → 1.5 over depth",
        ("stagger", "linear", "fib-linear"),
        "fib_stagger",
    ),
    Scheme(
        "fib-coprime",
        _sparse("fib", "coprime"),
        "fib/coprime",
        "coprime",
        "Fibonacci rungs, the stagger's α permuted by a coprime stride",
        ("coprime", "hdc", "fib-hdc"),
        "fib_hdc",
    ),
    Scheme(
        "pow2",
        _sparse("pow2", "fixed"),
        "pow2/fixed",
        "pow2",
        "power-of-2 rungs, α = 1",
        ("pow2-fixed", "logsparse"),
        "logsparse",
    ),
    Scheme(
        "pow2-stagger",
        _sparse("pow2", "stagger"),
        "pow2/stagger",
        "pow2-stagger",
        "power-of-2 rungs, linear stagger",
        ("logsparse-stagger",),
        "logsparse_stagger",
    ),
    Scheme(
        "learned",
        _sparse("fib", "learned"),
        "fib/learned",
        "learned",
        "Fibonacci rungs, learned α (interpolated gather)",
        ("fib-learned",),
        "fib_learned",
    ),
    Scheme(
        "blur",
        _sparse("fib", "learned", path="blur"),
        "fib/blur",
        "blur",
        "Fibonacci rungs, learned α through the annealed blur gather (the probes')",
        ("fib-blur", "fib_blur"),
    ),
)

_BY_SPELLING: dict[str, Scheme] = {}
for _s in SCHEMES:
    for _k in _s.spellings:
        if _BY_SPELLING.setdefault(_k, _s) is not _s:
            raise RuntimeError(f"scheme spelling {_k!r} names two schemes")


def scheme_names() -> tuple[str, ...]:
    """The canonical names, in registry order."""
    return tuple(s.name for s in SCHEMES)


def scheme(name: str | Scheme, among=None, what: str = "scheme") -> Scheme:
    """The scheme called ``name`` (any spelling).  ``among`` (spellings) limits the choice and
    is what the error lists; ``what`` names the argument in it.

    Raises ValueError naming the value and the valid names."""
    if isinstance(name, Scheme):
        s = name
    else:
        s = _BY_SPELLING.get(name) if isinstance(name, str) else None
    valid = scheme_names() if among is None else tuple(among)
    if s is None or s.name not in {_BY_SPELLING[v].name for v in valid}:
        raise ValueError(f"{what}={name!r} is unknown: use one of {', '.join(valid)}")
    return s


def _model_fields(config) -> Mapping[str, Any]:
    """The model fields of a ModelConfig, its ``to_dict()``, or a ``TrainConfig.to_dict()``."""
    if isinstance(config, Mapping):
        inner = config.get("model")
        return inner if isinstance(inner, Mapping) else config
    return {
        k: getattr(config, k)
        for k in ("attention", "base", "schedule", "path")
        if hasattr(config, k)
    }


def scheme_of(config) -> Scheme | None:
    """The registered scheme a model config is (path ignored except the blur gather); None for
    a custom base or schedule (a list) or a combination the registry lacks (pow2 coprime)."""
    m = _model_fields(config)
    if m.get("attention", "sparse") == "dense":
        return SCHEMES[0]
    base, schedule = m.get("base", "fib"), m.get("schedule", "fixed")
    blur = m.get("path") == "blur"
    for s in SCHEMES:
        if (
            s.attention == "sparse"
            and s.base == base
            and s.schedule == schedule
            and (s.overrides.get("path") == "blur") == blur
        ):
            return s
    return None


def paper_label(base, schedule, attention: str = "sparse") -> str:
    """The paper's label of a configuration: ``"dense"`` or ``"base/schedule"`` (the
    registry's label where it has one); a custom base or schedule (a list) is ``custom``."""
    if attention == "dense":
        return SCHEMES[0].paper
    b = base if isinstance(base, str) else "custom"
    s = schedule if isinstance(schedule, str) else "custom"
    found = scheme_of({"attention": "sparse", "base": b, "schedule": s})
    return found.paper if found is not None else f"{b}/{s}"
