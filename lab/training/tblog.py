"""The TensorBoard sink of `lab.training.sinks`: one run's scalars as event files in its own folder.

``torch.utils.tensorboard.SummaryWriter`` writes them; it (and so `tensorboard`, an optional
extra) is imported only when a sink is opened.  A fresh run first removes the event files an
earlier run of the same name left in its folder (only those: nested runs' folders and other
files stay), so a folder holds one run, as the store holds one row per key.  A resumed run
keeps them and writes a purge marker at its first new step, so TensorBoard drops what the
earlier attempt logged after the checkpoint it resumes from.  TensorBoard reads a folder's files
in name order, and a file's name is its creation second, host, pid and a per-process counter
(``…9`` sorts after ``…10``), so a resumed sink waits, at most a second, until its name sorts
after every file it resumes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

__all__ = ["EVENT_PREFIX", "TensorBoardSink", "clear_events", "wait_to_sort_last"]

EVENT_PREFIX = "events.out.tfevents."


def clear_events(folder: str) -> int:
    """Remove the TensorBoard event files directly in ``folder``; returns how many."""
    if not os.path.isdir(folder):
        return 0
    gone = 0
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.startswith(EVENT_PREFIX) and os.path.isfile(path):
            os.remove(path)
            gone += 1
    return gone


def wait_to_sort_last(folder: str) -> float:
    """Sleep until the current second is later than every event file's in ``folder`` (whose
    names start with their creation second), so a file created now sorts after them all;
    returns the seconds slept (0 when none is from this second)."""
    stamps = [0]
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        head = name[len(EVENT_PREFIX) :].split(".", 1)[0]
        if name.startswith(EVENT_PREFIX) and head.isdigit():
            stamps.append(int(head))
    # at most a second (a file stamped later still — another host's clock — cannot be beaten)
    slept, due = 0.0, min(max(stamps) + 1, time.time() + 1.0)
    while (now := time.time()) < due:
        time.sleep(due - now)
        slept += due - now
    return slept


def _summary_writer():
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:  # tensorboard is an optional extra
        raise ValueError(
            f"TensorBoard logging needs the tensorboard package ({e}): "
            f"pip install 'fiblab[tensorboard]'"
        ) from None
    return SummaryWriter


class TensorBoardSink:
    """Scalars of one run into ``folder`` (created); ``resume_step`` as in `LogSpec.open`."""

    def __init__(self, folder: str, *, resume_step: int = 0, flush_secs: int = 10):
        writer = _summary_writer()
        if resume_step <= 0:
            clear_events(folder)
        else:
            wait_to_sort_last(folder)
        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        self._writer = writer(
            log_dir=folder,
            purge_step=resume_step + 1 if resume_step > 0 else None,
            flush_secs=flush_secs,
        )

    def scalars(
        self, step: int, values: Mapping[str, float], walltime: float | None = None
    ) -> None:
        """Each ``tag: value`` at ``step`` (``walltime``: seconds since the epoch; default now)."""
        for tag, value in values.items():
            self._writer.add_scalar(tag, float(value), int(step), walltime=walltime)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> TensorBoardSink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
