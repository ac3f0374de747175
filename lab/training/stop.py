"""Stopping a run between two steps: a file named ``STOP`` in its folder.

``request_stop(run_dir)`` (or ``touch runs/<name>/STOP``) asks; the loop checks after each step
(`stop_requested`, agreed across torchrun ranks), writes a checkpoint of that step, records the
stop in the store (`mark_stopped`) and removes the file, so ``resume=True`` continues exactly.
A file rather than a signal: a notebook, a shell or a Ray task can all write one.  A probe grid
(`probes.live`) and a schedule search (`fiblab.jobs.search_launch`) are asked the same way, with
the same file.  torch is imported only to agree across torchrun ranks, so the launchers that
only write the file stay light."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.training.distributed import DistInfo

STOP_FILE = "STOP"


def request_stop(run_dir: str) -> str:
    """Ask the process writing to ``run_dir`` to stop (a run: after its current step); returns
    the file."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, STOP_FILE)
    with open(path, "w") as f:
        f.write(f"stop requested at {time.time():.3f}\n")
    return path


def stop_requested(run_dir: str, di: DistInfo | None = None) -> bool:
    """True when ``run_dir/STOP`` exists (under torchrun: on any rank, so all ranks agree)."""
    flag = os.path.exists(os.path.join(run_dir, STOP_FILE))
    if di is not None and di.world > 1:
        import torch
        import torch.distributed as dist

        t = torch.tensor([1.0 if flag else 0.0], device=di.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        flag = bool(t.item())
    return flag


def mark_stopped(store, name: str, step: int) -> None:
    """Record a requested stop: a 'stopped' event and status 'stopped'."""
    msg = f"stopped by request at step {step}; resume to continue"
    store.log_event(name, "stopped", msg)
    store.set_status(name, "stopped", msg)
