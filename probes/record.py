"""The probe cell record: what one trained probe cell leaves behind, typed.

`probes.runner.run_cell` builds one, the grid's JSONL files hold its `to_dict()` (one line a
cell), `lab.store.Store.log_probe` writes it to the store (accuracies to ``probe_results``, the α
trajectory to ``alphas``, the loss curve to ``metrics``, everything else to ``extra_json``) and
`ProbeRecord.from_store` reads it back equal to what was written:

    rec = ProbeRecord.from_dict(run_cell(cell, settings))
    store.log_probe(rec.to_dict())
    assert ProbeRecord.from_store(store, rec.key) == rec

Older JSONL lines (no ``distance``, no ``task``) load with the defaults below.  Equality treats
NaN as equal to NaN (a dense cell's α is NaN in every layer).  The α drift of a record is
`lab.ladder.drift.alpha_drift` of its trajectory, from its step-0 point.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lab.ladder.drift import alpha_drift as _drift_of_points

__all__ = ["AlphaPoint", "LossPoint", "ProbeRecord", "alpha_drift", "records_from_store"]


@dataclass(frozen=True)
class AlphaPoint:
    """Every layer's α at one logged step (NaN for a dense layer)."""

    step: int
    alphas: tuple[float, ...]


@dataclass(frozen=True)
class LossPoint:
    step: int
    loss: float


_REQUIRED = ("mechanism", "depth", "init", "seed", "acc")
_FIELDS = (
    "key",
    "mechanism",
    "depth",
    "init",
    "seed",
    "task",
    "distance",
    "steps",
    "alphas",
    "acc",
    "seconds",
    "trajectory",
    "loss",
    "settings",
)


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ValueError(f"probe record: {what}={value!r} must be an integer")
    return value


def _float(value) -> float:
    return math.nan if value is None else float(value)


def _canon(x):
    """A comparable form: NaN → a marker, tuples → lists, dicts by key."""
    if isinstance(x, float) and math.isnan(x):
        return "<nan>"
    if isinstance(x, Mapping):
        return {str(k): _canon(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_canon(v) for v in x]
    return x


@dataclass(eq=False)
class ProbeRecord:
    """One probe cell's result (the fields of the JSONL line, in its order)."""

    key: str
    mechanism: str
    depth: int
    init: str
    seed: int
    task: str = "marked"
    distance: int | None = None  # shift: the trained distance
    steps: int | None = None
    alphas: tuple[float, ...] = ()  # final α per layer
    acc: dict[str, float] = field(default_factory=dict)  # distance (as text) → accuracy
    seconds: float | None = None
    trajectory: tuple[AlphaPoint, ...] = ()
    loss: tuple[LossPoint, ...] = ()
    settings: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # any other keys of the line, kept as they are

    # -- dict / JSONL ------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProbeRecord:
        """From a JSONL line or a `run_cell` dict; ValueError naming what is missing."""
        if isinstance(d, ProbeRecord):
            return d
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            raise ValueError(f"probe record lacks {missing} (has {sorted(d)})")
        task = str(d.get("task") or "marked")
        depth, seed = _int(d["depth"], "depth"), _int(d["seed"], "seed")
        steps = None if d.get("steps") is None else _int(d["steps"], "steps")
        key = d.get("key") or f"{task}/{d['mechanism']}/d{depth}/{d['init']}/s{seed}/n{steps}"
        return cls(
            key=str(key),
            mechanism=str(d["mechanism"]),
            depth=depth,
            init=str(d["init"]),
            seed=seed,
            task=task,
            distance=None if d.get("distance") is None else _int(d["distance"], "distance"),
            steps=steps,
            alphas=tuple(_float(a) for a in d.get("alphas") or ()),
            acc={str(k): float(v) for k, v in dict(d["acc"]).items()},
            seconds=None if d.get("seconds") is None else float(d["seconds"]),
            trajectory=tuple(
                AlphaPoint(
                    _int(p["step"], "trajectory step"), tuple(_float(a) for a in p["alphas"])
                )
                for p in d.get("trajectory") or ()
            ),
            loss=tuple(
                LossPoint(_int(p["step"], "loss step"), _float(p["loss"]))
                for p in d.get("loss") or ()
            ),
            settings=dict(d.get("settings") or {}),
            extra={k: v for k, v in d.items() if k not in _FIELDS},
        )

    def to_dict(self) -> dict:
        """The JSONL line (and `Store.log_probe`'s input): plain JSON types."""
        return {
            "key": self.key,
            "mechanism": self.mechanism,
            "depth": self.depth,
            "init": self.init,
            "seed": self.seed,
            "task": self.task,
            "distance": self.distance,
            "steps": self.steps,
            "alphas": list(self.alphas),
            "acc": dict(self.acc),
            "seconds": self.seconds,
            "trajectory": [{"step": p.step, "alphas": list(p.alphas)} for p in self.trajectory],
            "loss": [{"step": p.step, "loss": p.loss} for p in self.loss],
            "settings": dict(self.settings),
            **self.extra,
        }

    def __eq__(self, other) -> bool:
        if not isinstance(other, ProbeRecord):
            return NotImplemented
        return _canon(self.to_dict()) == _canon(other.to_dict())

    # -- the store ---------------------------------------------------------------------------
    @classmethod
    def from_store(cls, store, name: str) -> ProbeRecord:
        """The record `Store.log_probe` wrote under the probe run ``name``: accuracies from
        ``probe_results``, the trajectory from ``alphas``, the loss curve from ``metrics``, the
        rest from ``extra_json`` and the run's config."""
        runs = store.runs(kind="probe")
        row = runs[runs["name"] == name]
        if row.empty:
            raise ValueError(f"the store {store.path} has no probe run named {name!r}")
        probes = store.probes()
        return _from_rows(
            name,
            row["config_json"].iloc[0],
            probes[probes["run"] == name],
            store.alphas(name),
            store.metrics(name, names="loss"),
        )

    # -- summaries ---------------------------------------------------------------------------
    def drift(self) -> float:
        """`lab.ladder.drift.alpha_drift` of the trajectory from its first point (NaN without one)."""
        return alpha_drift(self)


def _from_rows(name, config_json, results, alphas, losses) -> ProbeRecord:
    config = json.loads(config_json) if config_json else {}
    if results.empty:
        raise ValueError(f"probe run {name!r} has no probe_results rows")
    extra = json.loads(results["extra_json"].iloc[0] or "{}")
    first = results.iloc[0]
    trajectory = [
        {"step": int(step), "alphas": g.sort_values("layer")["alpha"].tolist()}
        for step, g in alphas.groupby("step", sort=True)
    ]
    d = {
        **config,
        **extra,
        "key": extra.get("key", config.get("key", name)),
        "task": first["task"],
        "mechanism": first["mechanism"],
        "depth": int(first["depth"]),
        "init": first["init"],
        "seed": int(first["seed"]),
        "steps": int(first["steps"]),
        "acc": {str(int(d)): float(a) for d, a in zip(results["distance"], results["accuracy"])},
        "trajectory": trajectory,
        "loss": [
            {"step": int(s), "loss": float(v)} for s, v in zip(losses["step"], losses["value"])
        ],
    }
    return ProbeRecord.from_dict(d)


def records_from_store(store, task: str | None = None) -> list[ProbeRecord]:
    """Every probe record in the store (of ``task``), in the store's probe order."""
    probes = store.probes(task)
    runs = store.runs(kind="probe").set_index("name")
    al, ls = store.alphas(list(dict.fromkeys(probes["run"]))), store.metrics(names="loss")
    out = []
    for name, g in probes.groupby("run", sort=False):
        out.append(
            _from_rows(
                name,
                runs.loc[name, "config_json"],
                g,
                al[al["run"] == name],
                ls[ls["run"] == name],
            )
        )
    return out


def alpha_drift(record) -> float:
    """A probe record's α drift (`lab.ladder.drift.alpha_drift`): max over layers and logged steps
    of |α − α at the first logged step|; NaN when the record has no trajectory."""
    if isinstance(record, ProbeRecord):
        points = [p.alphas for p in record.trajectory]
    else:
        points = [p["alphas"] for p in record.get("trajectory") or ()]
    return _drift_of_points(points) if points else math.nan
