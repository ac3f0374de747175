"""Live scalar logging beside the store: one interface, ``sink.scalars(step, {tag: value})``.

Training (`lab.training.train.train(log=...)`) and the probe runner (`probes.runner.run_cell(log=...)`)
send each point they write to the store to a sink too, and `lab.training.replay` replays the
store's rows into the same sink with the same tags, so a run logged live and a run exported
afterwards look the same.  The store stays the lab's own database; a sink is a view of it.

A `LogSpec` (kind + folder) says where to log; it is a small picklable record, not a part of the
run's configuration, so logging never changes a run's identity (`lab.store.variant`, the store's run
name, a probe's key): each process (a probe worker too) opens its own sink from it with
`open_sink`.  The kinds: ``tensorboard`` (`lab.training.tblog`, one folder per run under the log
folder).  An MLflow or W&B adapter would be a module beside `lab.training.tblog` with the same two
methods and one more branch in `LogSpec.open`.

Tags (shared by live logging and the replay):

    loss, lr, grad_norm, tokens_per_s      the store's metric names, as they are (and eval_s:
                                            the seconds a light evaluation took)
    ppl/<dataset>/<kind>                    held-out perplexity at the training length
    ppl/<dataset>/<kind>/T<context_len>     … at another length (`fiblab eval`)
    alpha/layer_00, alpha/layer_01, …       per-layer α (layers with no α are left out)
    acc/<distance>                          a probe's accuracy, at its last step
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from lab.util import paths

__all__ = [
    "default_logdir",
    "KINDS",
    "LogSpec",
    "ScalarSink",
    "acc_scalars",
    "alpha_scalars",
    "eval_tag",
    "open_sink",
    "run_folder",
]


def default_logdir() -> str:
    """<runs>/tensorboard: beside the runs (`lab.util.paths`: FIBLAB_RUNS moves both)."""
    return os.path.join(paths.runs_dir(), "tensorboard")


KINDS = ("tensorboard",)


class ScalarSink(Protocol):
    """Where scalars go: ``scalars`` any number of times, then ``close``."""

    def scalars(
        self, step: int, values: Mapping[str, float], walltime: float | None = None
    ) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class LogSpec:
    """Where to log live: the kind (``KINDS``) and its folder (one subfolder per run)."""

    kind: str = "tensorboard"
    logdir: str = field(default_factory=default_logdir)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"log kind {self.kind!r} is unknown: use one of {', '.join(KINDS)}")
        if not isinstance(self.logdir, (str, os.PathLike)) or not os.fspath(self.logdir):
            raise ValueError(f"logdir {self.logdir!r} must be a folder path")

    def open(self, run: str, *, resume_step: int = 0) -> ScalarSink:
        """A sink for ``run``.  ``resume_step`` > 0: the run continues from that step, so what
        an earlier attempt logged after it is dropped; 0: a fresh run replaces what was there."""
        from lab.training.tblog import TensorBoardSink  # the only kind so far

        return TensorBoardSink(run_folder(self.logdir, run), resume_step=resume_step)


def open_sink(spec: LogSpec | None, run: str, *, resume_step: int = 0) -> ScalarSink | None:
    """``spec.open(run)``, or None without a spec (then nothing is imported or written)."""
    return None if spec is None else spec.open(run, resume_step=resume_step)


_UNSAFE = re.compile(r"[^A-Za-z0-9._@=+,-]")


def run_folder(logdir: str | os.PathLike, run: str) -> str:
    """The run's folder under ``logdir``: a probe key's ``/`` parts become nested folders (so
    TensorBoard shows them as one tree); other characters outside ``[A-Za-z0-9._@=+,-]`` and
    the parts ``.`` / ``..`` become ``_``, so no name leaves ``logdir``."""
    if not isinstance(run, str) or not run:
        raise ValueError(f"run name {run!r} must be a non-empty string")
    parts = [_UNSAFE.sub("_", p) for p in run.split("/")]
    parts = ["_" if p in ("", ".", "..") else p for p in parts]
    return os.path.join(os.fspath(logdir), *parts)


def alpha_scalars(alphas: Iterable[float]) -> dict[str, float]:
    """``{"alpha/layer_00": α₀, …}``; a layer without α (NaN / None: dense) is left out."""
    out = {}
    for layer, a in enumerate(alphas):
        if a is not None and not math.isnan(float(a)):
            out[f"alpha/layer_{layer:02d}"] = float(a)
    return out


def eval_tag(dataset: str, kind: str, context_len: int, train_len: int | None) -> str:
    """The tag of a held-out perplexity: the length is named when it is not the training one
    (or the training length is unknown)."""
    tag = f"ppl/{dataset}/{kind}"
    return tag if context_len == train_len else f"{tag}/T{context_len}"


def acc_scalars(acc: Mapping) -> dict[str, float]:
    """A probe's accuracy per distance, ``{"acc/<distance>": accuracy}``."""
    return {f"acc/{int(str(d))}": float(a) for d, a in acc.items()}
