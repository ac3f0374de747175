"""One GPU-check run's state: the wall-clock budget, the JSON record and its error log."""

from __future__ import annotations

import json
import os
import time
import traceback

import torch


class Run:
    """Wall-clock budget and the JSON record of one run."""

    def __init__(self, budget_s: float, device: str):
        self.t0 = time.perf_counter()
        self.budget_s = budget_s
        self.device = torch.device(device)
        self.record: dict = {"errors": [], "skipped": []}

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.t0)

    def has_time(self, need_s: float, what: str) -> bool:
        """False (and the skip recorded) when fewer than need_s seconds are left."""
        if self.left() >= need_s:
            return True
        self.record["skipped"].append(what)
        print(f"  [budget] skipping {what} ({self.left():.0f} s left, ~{need_s:.0f} s needed)")
        return False

    def error(self, where: str, exc: BaseException) -> None:
        msg = f"{type(exc).__name__}: {exc}"
        self.record["errors"].append(
            {"where": where, "error": msg[:2000], "trace": traceback.format_exc()[-3000:]}
        )
        print(f"  [error] {where}: {msg[:500]}")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def write_record(run: Run, path: str) -> None:
    """Write the record to `path` (rewritten after each section: a cut-off run keeps its part)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(run.record, f, indent=1, default=str)
