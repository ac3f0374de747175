"""A probe grid's live state, in small files beside its results: what a notebook reads while
cells train, and the stop request the training loop checks between steps.

A grid folder (``<runs>/probe-grids/<name>/``, `fiblab.jobs.probe_launch`) holds, besides its
results JSONL and log:

    progress.json    written by the grid process: its pid, the grid's cell keys in order, its
                     phase and, when it ends, ``exit`` (done | stopped | failed) with a message
    live/<id>.json   one per cell being trained, written by the process that trains it (a worker
                     when ``--jobs`` > 1): step, loss, α now, the α trajectory and live accuracy
                     so far, measured seconds per step; removed once the cell's record is in the
                     results file (or when the cell is abandoned)
    STOP             the stop request: every running cell checks for it between steps and is
                     abandoned (`StopRequested`); finished cells stay in the results file

Why files, not the experiment store: the store holds finished cells only (a probe run in it is
a whole record, which notebooks 04 and 05 read as a result) and has one writer, the grid's
main process; per-cell files let every worker report without a second writer, and a stopped
cell's partial values vanish with its file.  Writes are atomic (a reader never sees half a
file) and throttled (`LiveSpec.every_s`), so a fast cell does not spend its time writing JSON.
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field

from lab.training.stop import STOP_FILE, stop_requested
from lab.util.files import atomic_write

__all__ = [
    "PROGRESS_NAME",
    "LIVE_DIR",
    "StopRequested",
    "LiveSpec",
    "LiveCell",
    "read_live",
    "live_file",
    "write_progress",
    "read_progress",
    "clear",
]

PROGRESS_NAME = "progress.json"
LIVE_DIR = "live"


class StopRequested(Exception):
    """The grid was asked to stop (its STOP file exists): the running cell is abandoned."""


def _atomic_json(path: str, data: dict) -> None:
    atomic_write(path, json.dumps(_plain(data)))


def _plain(x):
    """JSON-safe: NaN → None (a dense layer's α), tuples → lists."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _read(path: str) -> dict | None:
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def clear(folder: str) -> None:
    """Remove what an earlier launch left: the stop request, live files, the progress file."""
    for path in [
        os.path.join(folder, STOP_FILE),
        os.path.join(folder, PROGRESS_NAME),
        *glob.glob(os.path.join(folder, LIVE_DIR, "*.json")),
    ]:
        if os.path.exists(path):
            os.remove(path)


def write_progress(folder: str, **fields) -> dict:
    """Merge ``fields`` into the grid's progress.json (written by its main process only)."""
    path = os.path.join(folder, PROGRESS_NAME)
    d = {**(_read(path) or {}), **fields, "updated": time.time()}
    os.makedirs(folder, exist_ok=True)
    _atomic_json(path, d)
    return d


def read_progress(folder: str) -> dict | None:
    return _read(os.path.join(folder, PROGRESS_NAME))


def read_live(folder: str) -> list[dict]:
    """The live files of the cells being trained now, oldest start first."""
    out = [_read(p) for p in glob.glob(os.path.join(folder, LIVE_DIR, "*.json"))]
    return sorted((d for d in out if d and "key" in d), key=lambda d: d.get("started", 0.0))


def live_file(folder: str, key: str) -> str:
    """Where the cell ``key`` of the grid writing to ``folder`` keeps its live file."""
    return os.path.join(folder, LIVE_DIR, hashlib.sha1(key.encode()).hexdigest()[:16] + ".json")


@dataclass(frozen=True)
class LiveSpec:
    """Where and how often the cells of a grid report (picklable: sent to worker processes).

    ``every_s``: at most one write a second per cell (and always at the first step and the
    last); ``eval_points``: live accuracy evaluations per cell on the cell's own evaluation
    batch (0: none) — the record's final accuracy is computed as before, these only show the
    curve while it trains and cost about one training step each."""

    folder: str
    every_s: float = 1.0
    eval_points: int = 10

    def stop_requested(self) -> bool:
        return stop_requested(self.folder)

    def open(self, cell, key: str, steps: int) -> LiveCell:
        return LiveCell(self, cell, key, steps)

    def read(self, key: str) -> dict | None:
        """A cell's live file (None when it has none)."""
        return _read(live_file(self.folder, key))

    def remove(self, key: str) -> None:
        """Drop a cell's live file (its record is in the results file now)."""
        path = live_file(self.folder, key)
        if os.path.exists(path):
            os.remove(path)


@dataclass
class LiveCell:
    """One cell's live file, kept by the process that trains it.

    The file is a partial probe record (key, mechanism, depth, init, seed, task, steps,
    ``trajectory`` [{step, alphas}], ``loss`` [{step, loss}]) — so whatever draws records draws
    it — plus ``step``, ``phase`` (building: model and first step, which compiles the attention
    kernel on first use | training | evaluating), ``alphas`` (now), ``acc`` (the latest live
    accuracy), ``acc_trajectory`` [{step, acc}], ``started`` / ``first_step_at`` / ``updated``
    (wall clock) and ``step_s`` (seconds per step measured after the first step)."""

    spec: LiveSpec
    cell: object
    key: str
    steps: int
    _last: float = 0.0
    _data: dict = field(default_factory=dict)

    def __post_init__(self):
        c = self.cell
        os.makedirs(os.path.join(self.spec.folder, LIVE_DIR), exist_ok=True)
        self._data = {
            "key": self.key,
            "mechanism": c.mechanism,
            "depth": c.depth,
            "init": c.init,
            "seed": c.seed,
            "task": c.task,
            "distance": c.distance,
            "steps": self.steps,
            "step": 0,
            "phase": "building",
            "alphas": [],
            "acc": {},
            "trajectory": [],
            "loss": [],
            "acc_trajectory": [],
            "started": time.time(),
            "first_step_at": None,
            "step_s": None,
            "pid": os.getpid(),
        }
        self._write()

    @property
    def path(self) -> str:
        return live_file(self.spec.folder, self.key)

    def _write(self) -> None:
        self._last = time.monotonic()
        self._data["updated"] = time.time()
        _atomic_json(self.path, self._data)

    def due(self, done: int) -> bool:
        """Whether `step` should write now (first step, last step, or ``every_s`` elapsed)."""
        return (
            done in (1, self.steps)
            or self._data["first_step_at"] is None
            or time.monotonic() - self._last >= self.spec.every_s
        )

    def eval_due(self, done: int) -> bool:
        n = self.spec.eval_points
        return n > 0 and done < self.steps and done % max(1, self.steps // n) == 0

    def step(self, done: int, loss: float, alphas, trajectory, losses) -> None:
        """After optimizer step `done` (1-based): the values now and the points so far."""
        d, now = self._data, time.time()
        if d["first_step_at"] is None:
            d["first_step_at"], d["first_step"] = now, done
        elif done > d["first_step"]:
            d["step_s"] = (now - d["first_step_at"]) / (done - d["first_step"])
        d.update(
            step=done,
            phase="training",
            loss_now=loss,
            alphas=list(alphas),
            trajectory=list(trajectory) + [{"step": done, "alphas": list(alphas)}],
            loss=list(losses),
        )
        self._write()

    def accuracy(self, done: int, acc: dict) -> None:
        self._data["acc"] = dict(acc)
        self._data["acc_trajectory"].append({"step": done, "acc": dict(acc)})
        self._write()

    def evaluating(self) -> None:
        self._data["phase"] = "evaluating"
        self._write()

    def abandon(self) -> None:
        """Remove the file (the cell stopped or failed; it has no record)."""
        if os.path.exists(self.path):
            os.remove(self.path)
