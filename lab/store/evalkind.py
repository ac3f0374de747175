"""The kind of an evaluation row: a typed record whose text is the store's ``kind`` column.

    full              whole windows at context_len, rung set recomputed (the paper's policy,
                      `recompute`; `Family.RECOMPUTED`: "full" is the store's text, kept)
    frozen            whole windows at context_len, rung set frozen at the training length
    full:block{j}     positions [j·T, (j+1)·T) of windows of length context_len (T: training)
    frozen:block{j}   the same under the frozen rung set
    bin{b}            mean NLL in position bin b of training-length windows
    light             the periodic cheap evaluation during training

Writers (`lab.training.train`, `lab.evaluation.evaluate`) build an `EvalKind` and store ``str(kind)``; readers
(`analysis.tables.runs`) get it back with `EvalKind.parse`, which is strict (``parse(str(k)) == k``
for every kind, and only the texts above parse), so the store's strings stay exactly what they
were and older stores read the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from lab.util.checks import nonneg_int

__all__ = ["Family", "EvalKind", "KIND_PATTERNS", "POLICY_FAMILY"]


class Family(Enum):
    # rung set recomputed at the evaluation length (the policy `recompute`).  Its text in the
    # store is "full", as every store written so far has it; the member says what it means.
    RECOMPUTED = "full"
    FROZEN = "frozen"  # rung set frozen at the training length
    BIN = "bin"  # one position bin of training-length windows
    LIGHT = "light"  # periodic cheap evaluation during training


#: The texts an evaluation kind can have ({j} / {b}: a block / bin number).
KIND_PATTERNS = ("full", "frozen", "full:block{j}", "frozen:block{j}", "bin{b}", "light")

#: The rung policy of an extrapolation (`lab.lm.modelconfig.RUNG_POLICIES`) → its family.
POLICY_FAMILY = {"recompute": Family.RECOMPUTED, "freeze": Family.FROZEN}

_TEXT = re.compile(
    r"^(?:(?P<policy>full|frozen)(?::block(?P<block>0|[1-9]\d*))?"
    r"|bin(?P<bin>0|[1-9]\d*)|(?P<light>light))$"
)


def _index(value, what: str) -> int:
    return nonneg_int(value, what)


@dataclass(frozen=True)
class EvalKind:
    """An evaluation kind: a family, plus the block (full / frozen) or the bin (bin)."""

    family: Family
    block: int | None = None
    bin: int | None = None

    def __post_init__(self):
        if not isinstance(self.family, Family):
            raise ValueError(f"family={self.family!r} must be a Family ({list(Family)})")
        if self.block is not None:
            if self.family not in (Family.RECOMPUTED, Family.FROZEN):
                raise ValueError(f"a {self.family.value} evaluation has no block")
            _index(self.block, "block")
        if self.family is Family.BIN:
            _index(self.bin, "bin")
        elif self.bin is not None:
            raise ValueError(f"a {self.family.value} evaluation has no bin")

    # -- constructors --------------------------------------------------------------------------
    @classmethod
    def recomputed(cls, block: int | None = None) -> EvalKind:
        return cls(Family.RECOMPUTED, block)

    @classmethod
    def frozen(cls, block: int | None = None) -> EvalKind:
        return cls(Family.FROZEN, block)

    @classmethod
    def of_bin(cls, b: int) -> EvalKind:
        return cls(Family.BIN, bin=b)

    @classmethod
    def light(cls) -> EvalKind:
        return cls(Family.LIGHT)

    @classmethod
    def of_policy(cls, policy: str, block: int | None = None) -> EvalKind:
        """The whole-window (or block) kind of a rung policy: recompute → full, freeze →
        frozen."""
        if policy not in POLICY_FAMILY:
            raise ValueError(f"policy={policy!r} must be one of {sorted(POLICY_FAMILY)}")
        return cls(POLICY_FAMILY[policy], block)

    # -- text ----------------------------------------------------------------------------------
    def __str__(self) -> str:
        if self.family is Family.BIN:
            return f"bin{self.bin}"
        if self.block is not None:
            return f"{self.family.value}:block{self.block}"
        return self.family.value

    @classmethod
    def parse(cls, text: str) -> EvalKind:
        """The kind written as ``text``; ValueError for any other text (see KIND_PATTERNS)."""
        m = _TEXT.match(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(
                f"evaluation kind {text!r} is unknown: kinds are {', '.join(KIND_PATTERNS)}"
            )
        if m["light"]:
            return cls.light()
        if m["bin"] is not None:
            return cls.of_bin(int(m["bin"]))
        return cls(Family(m["policy"]), None if m["block"] is None else int(m["block"]))

    @classmethod
    def read(cls, text: str) -> EvalKind | None:
        """`parse`, or None for a text that is no known kind (a store may hold others)."""
        try:
            return cls.parse(text)
        except ValueError:
            return None

    # -- questions -----------------------------------------------------------------------------
    @property
    def policy(self) -> str | None:
        """``full`` | ``frozen`` for whole-window and block kinds, else None."""
        return self.family.value if self.family in (Family.RECOMPUTED, Family.FROZEN) else None

    @property
    def is_whole(self) -> bool:
        """Whole windows under a rung policy (``full`` / ``frozen``)."""
        return self.policy is not None and self.block is None
