"""The kind of an evaluation row: a typed record whose text is the store's ``kind`` column.

    recompute           whole windows at context_len, rung set recomputed for that length (the
                        paper's policy; ``--rung-policy recompute``)
    freeze              whole windows at context_len, rung set frozen at the training length
                        (``--rung-policy freeze``)
    recompute:block{j}  positions [j·T, (j+1)·T) of windows of length context_len (T: training)
    freeze:block{j}     the same under the frozen rung set
    bin{b}              mean NLL in position bin b of training-length windows
    light               the periodic cheap evaluation during training

A rung policy's name is its kind's text: one word in the CLI, the store and the code.  Stores
written before schema 4 said ``full`` / ``frozen``; migration 4 rewrites them (`LEGACY_TEXT`), and
a journal written then is read through `modern_text`.

Writers (`lab.training.train`, `lab.evaluation.evaluate`) build an `EvalKind` and store ``str(kind)``; readers
(`analysis.tables.runs`) get it back with `EvalKind.parse`, which is strict (``parse(str(k)) == k``
for every kind, and only the texts above parse).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from lab.util.checks import nonneg_int

__all__ = ["Family", "EvalKind", "KIND_PATTERNS", "LEGACY_TEXT", "modern_text"]


class Family(Enum):
    # The two rung policies (`lab.lm.modelconfig.RUNG_POLICIES`) are named as the CLI names them.
    RECOMPUTE = "recompute"  # rung set recomputed at the evaluation length
    FREEZE = "freeze"  # rung set frozen at the training length
    BIN = "bin"  # one position bin of training-length windows
    LIGHT = "light"  # periodic cheap evaluation during training


#: The texts an evaluation kind can have ({j} / {b}: a block / bin number).
KIND_PATTERNS = (
    "recompute",
    "freeze",
    "recompute:block{j}",
    "freeze:block{j}",
    "bin{b}",
    "light",
)

#: The policy words of stores before schema 4 (and of journals written then) → today's.
LEGACY_TEXT = {"full": "recompute", "frozen": "freeze"}
_POLICIES = tuple(f.value for f in (Family.RECOMPUTE, Family.FREEZE))

_TEXT = re.compile(
    r"^(?:(?P<policy>recompute|freeze)(?::block(?P<block>0|[1-9]\d*))?"
    r"|bin(?P<bin>0|[1-9]\d*)|(?P<light>light))$"
)


def modern_text(text: str) -> str:
    """``text`` with a pre-schema-4 policy word (``full`` / ``frozen``, alone or before
    ``:block{j}``) written as today's; any other text unchanged."""
    head, sep, tail = text.partition(":") if isinstance(text, str) else (text, "", "")
    return LEGACY_TEXT[head] + sep + tail if head in LEGACY_TEXT else text


def _index(value, what: str) -> int:
    return nonneg_int(value, what)


@dataclass(frozen=True)
class EvalKind:
    """An evaluation kind: a family, plus the block (recompute / freeze) or the bin (bin)."""

    family: Family
    block: int | None = None
    bin: int | None = None

    def __post_init__(self):
        if not isinstance(self.family, Family):
            raise ValueError(f"family={self.family!r} must be a Family ({list(Family)})")
        if self.block is not None:
            if self.family not in (Family.RECOMPUTE, Family.FREEZE):
                raise ValueError(f"a {self.family.value} evaluation has no block")
            _index(self.block, "block")
        if self.family is Family.BIN:
            _index(self.bin, "bin")
        elif self.bin is not None:
            raise ValueError(f"a {self.family.value} evaluation has no bin")

    # -- constructors --------------------------------------------------------------------------
    @classmethod
    def recompute(cls, block: int | None = None) -> EvalKind:
        return cls(Family.RECOMPUTE, block)

    @classmethod
    def freeze(cls, block: int | None = None) -> EvalKind:
        return cls(Family.FREEZE, block)

    @classmethod
    def of_bin(cls, b: int) -> EvalKind:
        return cls(Family.BIN, bin=b)

    @classmethod
    def light(cls) -> EvalKind:
        return cls(Family.LIGHT)

    @classmethod
    def of_policy(cls, policy: str, block: int | None = None) -> EvalKind:
        """The whole-window (or block) kind of a rung policy (its text is the policy's name)."""
        if policy not in _POLICIES:
            raise ValueError(f"policy={policy!r} must be one of {list(_POLICIES)}")
        return cls(Family(policy), block)

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
        """``recompute`` | ``freeze`` for whole-window and block kinds, else None."""
        return self.family.value if self.family in (Family.RECOMPUTE, Family.FREEZE) else None

    @property
    def is_whole(self) -> bool:
        """Whole windows under a rung policy (``recompute`` / ``freeze``)."""
        return self.policy is not None and self.block is None
