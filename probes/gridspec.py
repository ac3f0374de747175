"""What a probe grid is, in plain values: the task, the scale, the lists of mechanisms, depths,
inits and seeds, the distances, the steps, the precision and the jobs — and the settings and
cells they mean.

Notebook 02's form, the detached grid process (`fiblab.jobs.probe_launch`, which turns a spec into a
``fiblab probe …`` command) and a grid found again after a kernel restart all go through one
`GridSpec`, so the cells a process trains are the cells the form showed, and attaching a grid
fills the form with exactly its settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from lab.util.checks import nonneg_int, positive_int
from lab.util.wording import plural
from probes.grid import grid
from probes.settings import INITS, MECHANISMS, TASK_SCALES, Cell, ProbeSettings

__all__ = ["TASKS", "GridSpec", "with_steps"]

TASKS = ("marked", "shift", "kv")


def with_steps(settings: ProbeSettings, steps: int) -> ProbeSettings:
    """``settings`` trained for ``steps`` steps, logging α and loss at least 4 times (a short
    run keeps a trajectory)."""
    return replace(
        settings, steps=int(steps), log_every=max(1, min(settings.log_every, steps // 4 or 1))
    )


def _ints(values, what: str) -> tuple[int, ...]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{what}: {v!r} is not an integer; give whole numbers, e.g. 2, 4")
        out.append(v)
    return tuple(out)


@dataclass(frozen=True)
class GridSpec:
    """A grid as a person chooses it.  ``distances``: for ``marked`` the two marker distances
    (empty: the scale's), for ``shift`` the trained distances (one cell each), for ``kv``
    unused; ``steps`` 0: the scale's."""

    task: str = "marked"
    scale: str = "quick"
    mechanisms: tuple[str, ...] = ("blur",)
    depths: tuple[int, ...] = (2, 4, 8)
    inits: tuple[str, ...] = ("uniform", "staggered")
    seeds: tuple[int, ...] = (0, 1)
    distances: tuple[int, ...] = ()
    steps: int = 0
    precision: str = "auto"
    jobs: int = 1
    ray: str | None = None  # a Ray address (local, auto, HOST:PORT): the cells as Ray tasks

    def __post_init__(self):
        for name in ("mechanisms", "inits"):
            object.__setattr__(self, name, tuple(str(v) for v in getattr(self, name)))
        for name in ("depths", "seeds", "distances"):
            object.__setattr__(self, name, _ints(getattr(self, name), name))

    @classmethod
    def from_dict(cls, d: dict) -> GridSpec:
        """From `to_dict` (a grid.json); unknown keys are ignored (a newer file)."""
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def settings(self) -> ProbeSettings:
        """The ProbeSettings of every cell (ValueError on a task, scale or value that does not
        exist, naming the choices)."""
        if self.task not in TASK_SCALES:
            raise ValueError(f"task {self.task!r} is unknown: use one of {', '.join(TASKS)}")
        scales = TASK_SCALES[self.task]
        if self.scale not in scales:
            raise ValueError(
                f"scale {self.scale!r} is not defined for the {self.task} task: use one of "
                f"{', '.join(sorted(scales))}"
            )
        s = scales[self.scale]
        nonneg_int(self.steps, "steps", "0: the scale's")
        if self.steps:
            s = with_steps(s, self.steps)
        if self.task == "marked" and self.distances:
            s = replace(s, task=replace(s.task, distances=self.distances))  # MarkedCopy checks
        return replace(s, precision=self.precision)

    def cells(self) -> list[Cell]:
        """The grid's cells, in the order they are trained (ValueError on bad input)."""
        if not self.mechanisms:
            raise ValueError("no mechanism selected: pick at least one (e.g. blur)")
        if not self.depths:
            raise ValueError("depths is empty: write numbers separated by commas, e.g. 2, 4")
        if not self.seeds:
            raise ValueError("seeds is empty: write numbers separated by commas, e.g. 0, 1")
        odd = [m for m in self.mechanisms if m not in MECHANISMS]
        if odd:
            raise ValueError(f"mechanisms {odd} are unknown: use any of {', '.join(MECHANISMS)}")
        bad = [s for s in self.seeds if s < 0]
        if bad:
            raise ValueError(f"seeds {bad} must be >= 0 (e.g. 0, 1)")
        from lab.machine.precision import PRECISION_CHOICES

        if self.precision not in PRECISION_CHOICES:
            choices = ", ".join(PRECISION_CHOICES)
            raise ValueError(f"precision={self.precision!r} must be one of {choices}")
        odd = [i for i in self.inits if i not in INITS]
        if odd:
            raise ValueError(f"inits {odd} are unknown: use {' and/or '.join(INITS)}")
        bad = [d for d in self.depths if d < 1]
        if bad:
            raise ValueError(f"depths {bad} must be >= 1 (layers; the paper uses 2, 4, 8)")
        positive_int(self.jobs, "jobs", "cells run at once")
        if self.ray is not None and self.jobs > 1:
            raise ValueError(
                f"jobs={self.jobs} and ray={self.ray!r}: give one (with Ray the cluster sets "
                f"how many cells run at once)"
            )
        settings = self.settings()
        dists: tuple = (None,)
        if self.task == "shift":
            if not self.distances:
                raise ValueError("shift needs distances (the trained distances, e.g. 5, 13)")
            dists = self.distances
            T = settings.task.seq_len
            far = [d for d in dists if not 1 <= d < T]
            if far:
                raise ValueError(
                    f"shift distances {far} must lie in 1..{T - 1} (the task's "
                    f"seq_len is {T} at scale {self.scale!r})"
                )
        return grid(
            list(self.mechanisms),
            self.depths,
            list(self.inits) or ["uniform"],
            self.seeds,
            self.task,
            dists,
        )

    def keys(self) -> list[str]:
        """The record names of the cells (what the results file and the store call them)."""
        s = self.settings()
        return [c.key(s) for c in self.cells()]

    def describe(self) -> str:
        """One line: "4 cells × 150 steps (tiny marked; learned, blur; depths 2; seeds 0, 1)"."""
        s, n = self.settings(), len(self.cells())
        return (
            f"{plural(n, 'cell')} × {s.steps} steps ({self.scale} {self.task}; "
            f"{', '.join(self.mechanisms)}; depths {', '.join(map(str, self.depths))}; "
            f"seeds {', '.join(map(str, self.seeds))})"
        )
